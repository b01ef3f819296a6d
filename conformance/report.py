"""Reporters: a rich terminal table (one row per check and slot) and the JSON findings file."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable, Optional

from conformance.findings import Finding

_STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow"}


def summarize(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    """Group findings by (path, check, slot): counts per status and the first message of the worst
    status, with its locator. Order of first appearance is kept."""
    groups: "OrderedDict[tuple, dict[str, Any]]" = OrderedDict()
    for f in findings:
        key = (f.path, f.check, f.slot)
        g = groups.setdefault(key, {"path": f.path, "check": f.check, "slot": f.slot, "fault": f.fault,
                                    "pass": 0, "fail": 0, "skip": 0, "example": None})
        g[f.status] += 1
        rank = {"fail": 2, "pass": 1, "skip": 0}  # show a failure, else a pass, else why skipped
        ex = g["example"]
        if ex is None or rank[f.status] > rank[ex.status]:
            g["example"] = f
    out = []
    for g in groups.values():
        g["status"] = "fail" if g["fail"] else ("skip" if not g["pass"] else "pass")
        out.append(g)
    return out


def _get(f, key: str):
    return f.get(key) if isinstance(f, dict) else getattr(f, key)


def slot_identity_checked(findings: Iterable) -> bool:
    """Whether any ``slot_identity`` finding passed or failed (findings or their JSON dicts):
    without one, slot identity, order and alignment were not judged at all."""
    return any(_get(f, "check") == "slot_identity" and _get(f, "status") in ("pass", "fail") for f in findings)


def verdict(findings: list, unchecked_reason: Optional[str] = None) -> tuple[str, str]:
    """The final verdict: ``(kind, text)``, kind one of ``"violations"``, ``"conforms"``,
    ``"conforms on shapes only"`` (nothing failed, but no slot identity was judged; the text
    names ``unchecked_reason``, default "no reference model")."""
    if any(_get(f, "status") == "fail" for f in findings):
        return "violations", "VIOLATIONS"
    if slot_identity_checked(findings):
        return "conforms", "CONFORMS"
    return ("conforms on shapes only", "CONFORMS ON SHAPES ONLY: slot identity, order and alignment were not "
            f"checked ({unchecked_reason or 'no reference model'})")


def render_table(findings: list[Finding], title: str, console=None, extra: Optional[dict[str, str]] = None,
                 unchecked_reason: Optional[str] = None) -> None:
    """Print the findings as a table: one row per path, check and slot, in words. The verdict
    reads "CONFORMS ON SHAPES ONLY" (with ``unchecked_reason``) when nothing failed but no slot
    identity was judged."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=title, show_lines=False, expand=False)
    table.add_column("path")
    table.add_column("check")
    table.add_column("slot")
    table.add_column("result")
    table.add_column("n", justify="right")
    table.add_column("detail", overflow="fold")
    for g in summarize(findings):
        ex: Finding = g["example"]
        n = f"{g['pass']}/{g['fail']}/{g['skip']}"
        detail = ex.message
        if g["status"] == "fail":
            detail += f"  [dim]({ex.where}; {ex.fault})[/dim]"
        table.add_row(g["path"], g["check"], g["slot"] or "", f"[{_STYLE[g['status']]}]{g['status']}[/]", n, detail)
    console.print(table)
    if extra:
        for k, v in extra.items():
            console.print(f"[bold]{k}[/bold]: {v}")
    nf = sum(1 for f in findings if f.status == "fail")
    ns = sum(1 for f in findings if f.status == "skip")
    kind, text = verdict(findings, unchecked_reason)
    style = {"violations": "bold red", "conforms": "bold green"}.get(kind, "bold yellow")
    sep = ": " if kind != "conforms on shapes only" else ". "
    console.print(f"[{style}]{text}[/]{sep}{len(findings)} findings, {nf} failed, {ns} skipped "
                  "(n = pass/fail/skip across samples)")


def _pass_counts(findings: list[Finding]) -> list[dict[str, Any]]:
    """Failing and skipped findings in full; passing ones folded into one entry per (path, check,
    slot) with ``count`` and the first pass's message."""
    out: list[dict[str, Any]] = []
    groups: "OrderedDict[tuple, dict[str, Any]]" = OrderedDict()
    for f in findings:
        if f.status != "pass":
            out.append(f.to_json())
            continue
        key = (f.path, f.check, f.slot)
        g = groups.get(key)
        if g is None:
            g = groups[key] = {**f.to_json(), "count": 0}
        g["count"] += 1
    for g in groups.values():
        g["where"] = g["observed"] = f"{g['count']} passing (folded)"
    return list(groups.values()) + out


def write_json(out: str | Path, contract: str, findings: list[Finding], meta: Optional[dict[str, Any]] = None,
               unchecked_reason: Optional[str] = None, passes: str = "all") -> None:
    """Write ``{"contract", "findings": [...], "meta": {...}}`` to ``out``. ``meta`` gains
    ``slot_identity_checked`` (bool) and ``verdict`` (the text :func:`render_table` ends with).

    ``passes="counts"`` folds passing findings into one entry per (path, check, slot) with a
    ``count`` (for datasets of 10^5+ samples); failures and skips are always written in full."""
    items = [f.to_json() for f in findings] if passes == "all" else _pass_counts(findings)
    doc: dict[str, Any] = {"contract": contract, "findings": items}
    meta = dict(meta or {})
    meta["json_passes"] = passes
    reason = unchecked_reason or (meta.get("slot_identity") or {}).get("reason")
    meta["slot_identity_checked"] = slot_identity_checked(findings)
    meta["verdict"] = verdict(findings, reason)[1]
    doc["meta"] = meta
    Path(out).write_text(json.dumps(doc, indent=1))
