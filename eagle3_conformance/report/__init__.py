"""Reporters: the text report (verdict and diagnoses first, failing checks one line each, passes
folded), the Markdown summary for CI, the JSON findings file, pytest's short failure text, and the
rich table (one row per check and slot). Pure: every renderer returns a string or a dict; nothing
here imports the CLI."""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from eagle3_conformance.core.findings import DiagnosisLike, Finding, FindingLike, Report, as_finding
from eagle3_conformance.report.acceptance import inconclusive as inconclusive

if TYPE_CHECKING:
    from rich.console import Console

_STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow"}


def summarize(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    """Group findings by (path, check, slot): counts per status and the first message of the worst
    status, with its locator. Order of first appearance is kept."""
    groups: "OrderedDict[tuple[str, str, Optional[str]], dict[str, Any]]" = OrderedDict()
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


def _get(f: FindingLike, key: str) -> Any:
    return f.get(key) if isinstance(f, dict) else getattr(f, key)


def slot_identity_checked(findings: Iterable[FindingLike]) -> bool:
    """Whether any ``slot_identity`` finding passed or failed (findings or their JSON dicts):
    without one, slot identity, order and alignment were not judged at all."""
    return any(_get(f, "check") == "slot_identity" and _get(f, "status") in ("pass", "fail") for f in findings)


def input_error(findings: Iterable[FindingLike]) -> Optional[str]:
    """Why the input could not be checked at all, read from the findings (objects or JSON dicts):
    every ``sample_available`` finding failed (no sample could be read), or the reference model
    given for the data could not be loaded (a failed ``reference`` finding on the ``data`` path,
    as ``check-offline`` records it). None when the data was read and checked: a data set where
    only some samples cannot be read is a violation (those samples' ``sample_available`` failures),
    not an input error. The CLI exits 2 on an input error, as on any other bad input."""
    findings = list(findings)
    ref = [f for f in findings if _get(f, "check") == "reference" and _get(f, "path") == "data"
           and _get(f, "status") == "fail"]
    if ref:
        return f"the reference model could not be used ({_get(ref[0], 'observed')})"
    avail = [f for f in findings if _get(f, "check") == "sample_available"]
    if avail and all(_get(f, "status") == "fail" for f in avail):
        n = len({_get(f, "where") for f in avail if _get(f, "path") == _get(avail[0], "path")})
        return f"none of the {n} samples could be read"
    return None


VERDICT_TONE = {"conforms": "good", "acceptance met": "good", "violations": "bad", "input error": "bad",
                "inconclusive": "caveat"}
"""How a verdict kind (:func:`verdict`) reads: ``good``, ``bad``, any other kind a caveat (shapes only,
not judged, not gated). The renderers draw the tone: the table's colour, the Markdown icon, the HTML
page's class."""


ACCEPTANCE_CHECKS = frozenset({"accept_length", "accept_regression", "draft_acceptance", "draft_vocab"})
"""The checks of an acceptance-only run (``accept``): a floor, a baseline, the draft's own acceptance
(a draft that accepts almost nothing) and its checkpoint's vocabulary, no tensor at the draft boundary,
so its verdict speaks of acceptance, never of shapes."""

_GATING = ("accept_length", "accept_regression")
"""The acceptance checks whose pass means "acceptance met" (a floor or a baseline judged the figures);
``draft_acceptance`` passing alone says only that the draft accepts more than almost nothing."""


def verdict(findings: Sequence[FindingLike], unchecked_reason: Optional[str] = None,
            errors: Sequence[str] = ()) -> tuple[str, str]:
    """The final verdict: ``(kind, text)``, kind one of ``"input error"`` (:func:`input_error`:
    the data could not be checked at all), ``"violations"``, ``"not judged"`` (nothing failed, but
    ``errors`` lists paths that stopped on bad input: "path: why"), ``"conforms"``,
    ``"conforms on shapes only"`` (nothing failed, but no slot identity was judged; the text
    names ``unchecked_reason``, by default the reason read from the findings: a skipped
    slot-identity finding's message, or the paths run when none of them judges identity), and for
    an acceptance-only run (every finding one of :data:`ACCEPTANCE_CHECKS`, the ``accept`` verb)
    ``"acceptance met"`` (a floor or a baseline passed) or ``"not gated"`` (nothing judged the
    figures: no floor in the contract, no baseline); ``"inconclusive"`` (nothing failed, but a gated
    acceptance figure's baseline comparison could not decide: :func:`inconclusive`)."""
    why = input_error(findings)
    if why:
        return "input error", f"INPUT ERROR: {why}"
    if any(_get(f, "status") == "fail" for f in findings):
        return "violations", "VIOLATIONS"
    if errors:
        paths = ", ".join(dict.fromkeys(e.split(":", 1)[0] for e in errors))
        return "not judged", f"NOT JUDGED: bad input stopped {len(errors)} path(s): {paths}"
    undecided = inconclusive(findings)
    if undecided:
        return "inconclusive", f"INCONCLUSIVE: {undecided}"
    if slot_identity_checked(findings):
        return "conforms", "CONFORMS"
    if findings and all(_get(f, "check") in ACCEPTANCE_CHECKS for f in findings):  # `accept`: no tensor was read
        if any(_get(f, "status") == "pass" and _get(f, "check") in _GATING for f in findings):
            return "acceptance met", "ACCEPTANCE MET"
        return "not gated", ("NOT GATED: acceptance was measured, nothing judged it (the contract sets no "
                             "gates.min_accept_length and no --baseline was given)")
    return ("conforms on shapes only", "CONFORMS ON SHAPES ONLY: slot identity, order and alignment were not "
            f"checked ({unchecked_reason or _unchecked_why(findings)})")


def quiet_verdict(findings: Sequence[FindingLike], unchecked_reason: Optional[str] = None) -> str:
    """The one line ``--quiet`` still prints: the verdict, the number of findings and of failures."""
    nf = sum(1 for f in findings if _get(f, "status") == "fail")
    return f"{verdict(findings, unchecked_reason)[1]}: {len(findings)} findings, {nf} failed"


def _unchecked_why(findings: Sequence[FindingLike]) -> str:
    """Why no slot identity was judged, from the findings themselves: a skipped slot_identity
    finding's own message, else the paths that ran, none of which judges slot identity (e.g. a
    run of ``cpu-accept`` alone, which measures acceptance)."""
    for f in findings:
        if _get(f, "check") == "slot_identity" and _get(f, "status") == "skip":
            # the verdict already says what was not checked: keep only why ("no reference model")
            return str(_get(f, "message") or "slot identity skipped").removesuffix(
                ": slot identity, order and alignment not checked")
    paths = sorted({str(_get(f, "path")) for f in findings} - {"contract", "data"})
    if paths:
        return f"the paths run here do not judge slot identity: {', '.join(paths)}"
    return "no path judged slot identity"


def render_table(findings: list[Finding], title: str, console: Optional[Console] = None,
                 extra: Optional[dict[str, str]] = None,
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
    style = {"good": "bold green", "bad": "bold red"}.get(VERDICT_TONE.get(kind, ""), "bold yellow")
    sep = ": " if kind != "conforms on shapes only" else ". "
    console.print(f"[{style}]{text}[/]{sep}{len(findings)} findings, {nf} failed, {ns} skipped "
                  "(n = pass/fail/skip across samples)")


def _pass_counts(findings: list[Finding]) -> list[Finding]:
    """Failing and skipped findings in full; passing ones folded into one entry per (path, check,
    slot) with ``count`` and the first pass's message."""
    out: list[Finding] = []
    groups: "OrderedDict[tuple[str, str, Optional[str]], list[Any]]" = OrderedDict()  # [first pass, count]
    for f in findings:
        if f.status != "pass":
            out.append(f)
            continue
        groups.setdefault((f.path, f.check, f.slot), [f, 0])[1] += 1
    folded = [replace(f, where=f"{n} passing (folded)", observed=f"{n} passing (folded)", count=n)
              for f, n in groups.values()]
    return folded + out


def report_doc(contract: str, findings: list[Finding], meta: Optional[dict[str, Any]] = None,
               unchecked_reason: Optional[str] = None, passes: str = "all",
               diagnoses: Optional[Iterable[DiagnosisLike]] = None) -> dict[str, Any]:
    """The JSON report: ``{"contract", "diagnoses": [...], "findings": [...], "meta": {...}}``
    (see :func:`write_json`)."""
    items = list(findings) if passes == "all" else _pass_counts(findings)
    meta = dict(meta or {})
    meta["json_passes"] = passes
    reason = unchecked_reason or (meta.get("slot_identity") or {}).get("reason")
    meta["slot_identity_checked"] = slot_identity_checked(findings)
    errors = [f"{e['path']}: {e['error']}" if isinstance(e, dict) else str(e) for e in meta.get("errors") or ()]
    meta["verdict"] = verdict(findings, reason, errors)[1]
    return Report(contract, items, meta, list(diagnoses or [])).to_json()


def write_json(out: str | Path, contract: str, findings: list[Finding], meta: Optional[dict[str, Any]] = None,
               unchecked_reason: Optional[str] = None, passes: str = "all",
               diagnoses: Optional[Iterable[DiagnosisLike]] = None) -> None:
    """Write ``{"contract", "diagnoses": [...], "findings": [...], "meta": {...}}`` to ``out``.
    ``diagnoses`` are :class:`eagle3_conformance.diagnose.Diagnosis` (or their dicts), ``[]`` when none.
    ``meta`` gains ``slot_identity_checked`` (bool) and ``verdict`` (the verdict line's text).

    ``passes="counts"`` folds passing findings into one entry per (path, check, slot) with a
    ``count`` (for datasets of 10^5+ samples); failures and skips are always written in full."""
    write_document(out, report_doc(contract, findings, meta, unchecked_reason, passes, diagnoses))


def write_document(out: str | Path, doc: dict[str, Any]) -> None:
    """Write a report document (:meth:`eagle3_conformance.core.findings.Report.to_json`) as the JSON file
    every command writes (one space of indent)."""
    Path(out).write_text(json.dumps(doc, indent=1))


# --- the report people read: verdict and diagnoses first ---------------------------------------------
#
# Pure renderers (strings and dicts); the CLI and the pytest plugin only print or write them.

#: the width the text report is laid out for
WIDTH = 100
#: failing-check lines shown before "... and N more" (-v shows all); a failure's own text is never cut:
#: it wraps (issue 41), and the groups past the limit are counted, never half shown
MAX_FAILING_LINES = 24


def _one(text: Any) -> str:
    return " ".join(str(text).split())


def _clip(text: str, width: int, collapse: bool = True) -> str:
    """One line of at most ``width`` characters (inner whitespace collapsed unless ``collapse``
    is False, indentation kept)."""
    s = str(text)
    indent = s[: len(s) - len(s.lstrip(" "))]
    text = indent + _one(s) if collapse else s.replace("\n", " ")
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _wrap(text: str, width: int, first: str, rest: str) -> list[str]:
    import textwrap

    return textwrap.wrap(" ".join(str(text).split()), width=width, initial_indent=first, subsequent_indent=rest,
                         break_on_hyphens=False, break_long_words=True) or [first.rstrip()]


def _short_where(where: Any) -> str:
    """``"sample 0 (batch position 0)"`` -> ``"sample 0"``: the first failing sample, compactly."""
    w = str(where or "")
    return w.split(" (")[0] if w.startswith("sample ") else w


def _counts(findings: Sequence[FindingLike]) -> tuple[int, int, int]:
    st = [_get(f, "status") for f in findings]
    return st.count("pass"), st.count("fail"), st.count("skip")


def _diag_dicts(diagnoses: Optional[Iterable[DiagnosisLike]]) -> list[dict[str, Any]]:
    return [dict(d) if isinstance(d, Mapping) else d.to_json() for d in (diagnoses or [])]


def _on(d: dict[str, Any]) -> str:
    sup = d.get("support") or {}
    return ", ".join(f"{p} ({sup[p]})" if sup.get(p) else p for p in d.get("paths", []))


def _marker(diags: list[dict[str, Any]], path: str, check: str) -> str:
    for i, d in enumerate(diags, 1):
        if path in d.get("paths", []) and check in d.get("checks", []):
            return str(i)
    return "-"


def _groups(findings: Sequence[FindingLike], statuses: tuple[str, ...]) -> list[dict[str, Any]]:
    """Findings grouped by (check, slot) across paths, in order of first appearance: counts per
    status, the paths, and the first finding of the worst status (a failure, else a pass)."""
    rank = {"fail": 2, "pass": 1, "skip": 0}
    groups: "OrderedDict[tuple[str, Optional[str]], dict[str, Any]]" = OrderedDict()
    for f in findings:
        f = as_finding(f)
        g = groups.setdefault((f.check, f.slot), {"check": f.check, "slot": f.slot, "pass": 0, "fail": 0, "skip": 0,
                                                  "paths": [], "example": None})
        g[f.status] += 1
        if f.path not in g["paths"]:
            g["paths"].append(f.path)
        if g["example"] is None or rank[f.status] > rank[g["example"].status]:
            g["example"] = f
    out = []
    for g in groups.values():
        g["status"] = "fail" if g["fail"] else ("skip" if not g["pass"] else "pass")
        if g["status"] in statuses:
            out.append(g)
    return out


def group_lines(findings: Sequence[FindingLike], diags: list[dict[str, Any]], statuses: tuple[str, ...], width: int,
                limit: Optional[int] = None) -> list[str]:
    """One line per (check, slot) group whose status is in ``statuses``:
    ``  N check slot  failed/judged  [path] first-sample: message`` (N: the diagnosis that accounts
    for it, "-" for none; the path is named when the groups span several paths, else once above
    them); a failing group's message wraps whole onto as many lines as it needs (a failure's text is
    never cut), passing and skipped lines are cut to ``width``. At most ``limit`` lines, whole groups, then
    "... and K more"."""
    groups = _groups(findings, statuses)
    paths = list(OrderedDict.fromkeys(p for g in groups for p in g["paths"]))
    out: list[str] = [f"  on {paths[0]}:"] if len(paths) == 1 else []
    cw = min(max((len(g["check"]) for g in groups), default=0), 22)
    sw = min(max((len(g["slot"] or "") for g in groups), default=0), 9)
    shown = 0
    for g in groups:
        ex = g["example"]
        n = g["pass"] + g["fail"] + g["skip"]
        where = _short_where(ex.where)
        lead = f"{ex.path} {where}: " if len(paths) > 1 else f"{where}: "
        if g["status"] == "fail":
            cnt = f"{g['fail']}/{n}"
            tag = next((str(i) for i, d in enumerate(diags, 1) if ex.check in d.get("checks", [])
                        and set(g["paths"]) & set(d.get("paths", []))), "-")
        else:
            cnt, tag = (f"{g['pass']}/{n} ok" if g["status"] == "pass" else f"{g['skip']}/{n} skip"), " "
            lead = f"{ex.path}: " if len(paths) > 1 else ""
        head = f"  {tag} {g['check']:<{cw}} {g['slot'] or '':<{sw}} {cnt:>5}  "
        if g["status"] == "fail":  # a failure's text is never cut: wrapped whole
            rows = _wrap(lead + ex.message, width, head, "        ")
        else:
            rows = [_clip(head + _one(lead + ex.message), width, collapse=False)]
        if limit is not None and len(out) + len(rows) > limit + (1 if len(paths) == 1 else 0):
            break
        out += rows
        shown += 1
    if shown < len(groups):
        out.append(f"  ... and {len(groups) - shown} more (-v lists them)")
    return out


def render_text(findings: Sequence[FindingLike], diagnoses: Optional[Iterable[DiagnosisLike]] = None, *,
                title: str = "", extra: Optional[dict[str, str]] = None, unchecked_reason: Optional[str] = None,
                verbose: bool = False, width: int = WIDTH, errors: Sequence[str] = ()) -> str:
    """The report as plain text laid out for ``width`` columns: the verdict, the diagnoses (what
    happened, the evidence, the fix), the failing checks grouped one line each (diagnosis number,
    check, slot, failed/judged, first failing sample and its message), skipped and passing
    findings folded into counts (``verbose``: listed one line per group), ``extra`` facts, and the
    verdict again as the last line. ``errors``: "path: why" for each path stopped by bad input
    (listed after the counts; the verdict is then NOT JUDGED unless something failed)."""
    findings = list(findings)
    diags = _diag_dicts(diagnoses)
    kind, text = verdict(findings, unchecked_reason, errors)
    npass, nfail, nskip = _counts(findings)
    fail_checks = {_get(f, "check") for f in findings if _get(f, "status") == "fail"}
    lines = _wrap(f"{text}" + (f": {title}" if title else ""), width, "", "  ")
    lines.append(f"{len(findings)} findings: {nfail} failed" + (f" ({len(fail_checks)} checks)" if nfail else "")
                 + f", {nskip} skipped, {npass} passed")
    for e in errors:
        lines += _wrap(f"stopped by bad input: {e}", width, "", "  ")
    for i, d in enumerate(diags, 1):
        lines.append("")
        lines += _wrap(f"DIAGNOSIS {i}/{len(diags)}: {d['fault'] or 'input'} {d['kind']}, on {_on(d)}", width, "",
                       "    ")
        lines += _wrap(d["title"], width, "  ", "  ")
        for j, e in enumerate(d.get("evidence", [])):
            lines += _wrap(e, width, "  evidence: " if j == 0 else "            ", "            ")
        for j, e in enumerate(d.get("fix", [])):
            lines += _wrap(e, width, "  fix:      " if j == 0 else "            ", "              ")
    if nfail:
        lines.append("")
        lines.append(f"FAILING CHECKS ({len(fail_checks)}; # = diagnosis, failed/judged, first failure)")
        lines += group_lines(findings, diags, ("fail",), width, None if verbose else MAX_FAILING_LINES)
    if verbose and (npass or nskip):
        lines.append("")
        lines.append("PASSED AND SKIPPED")
        for path in OrderedDict.fromkeys(_get(f, "path") for f in findings):
            lines += group_lines([f for f in findings if _get(f, "path") == path], diags, ("pass", "skip"), width)
    else:
        skipped = summarize_counts(findings, "skip")
        if skipped:
            uncal = {_get(f, "check") for f in findings if _get(f, "status") == "skip"
                     and _get(f, "observed") == "uncalibrated"}
            skipped.sort(key=lambda t: (t[0] not in uncal, -t[1]))  # uncalibrated first, then the most skipped
            lines.append("")  # counts, not a failure's text: one line (-v lists every skip with its reason)
            lines.append(_clip("skipped (-v says why): " + ", ".join(
                f"{c} {n}" + (" (uncalibrated)" if c in uncal else "") for c, n, _ in skipped), width))
        if npass:
            if not skipped:
                lines.append("")
            checks = {_get(f, "check") for f in findings if _get(f, "status") == "pass"}
            lines.append(f"passed: {npass} findings in {len(checks)} checks (-v lists them)")
    if extra:
        for k, v in extra.items():
            lines += _wrap(f"{k}: {v}", width, "", "  ")
    sep = ": " if kind in ("violations", "conforms", "acceptance met") else ". "
    lines.append(f"{text}{sep}{len(findings)} findings, {nfail} failed, {nskip} skipped")
    return "\n".join(lines)


def summarize_counts(findings: Sequence[FindingLike], status: str) -> list[tuple[str, int, str]]:
    """``(check, count, first message)`` of the findings with ``status``, by check, in order."""
    out: "OrderedDict[str, list[Any]]" = OrderedDict()  # [count, first message]
    for f in findings:
        if _get(f, "status") != status:
            continue
        c = _get(f, "check")
        if c not in out:
            out[c] = [0, _get(f, "message") or ""]
        out[c][0] += 1
    return [(c, n, msg) for c, (n, msg) in out.items()]


def failure_text(name: str, path: str, findings: Sequence[FindingLike],
                 diagnoses: Optional[Iterable[DiagnosisLike]] = None,
                 width: int = WIDTH) -> str:
    """The short failure text of one contract on one path (pytest's failure section): a header
    naming the failing checks and pointing at the full report, then each diagnosis (or, without one,
    the first failing check's message), all wrapped to ``width``, never cut."""
    diags = _diag_dicts(diagnoses)
    bad = [f for f in findings if _get(f, "status") == "fail"]
    checks = list(OrderedDict.fromkeys(_get(f, "check") for f in bad))
    lines = _wrap(f"{name} on {path}: VIOLATIONS (report at the end), {len(bad)} failed findings in "
                  f"{len(checks)} checks: {', '.join(checks)}", width, "", "  ")
    for i, d in enumerate(diags, 1):
        lines += _wrap(f"[{i}] {d['fault'] or 'input'} {d['kind']}: {d['title']}", width, "  ", "      ")
    if not diags and bad:
        f = bad[0]
        lines += _wrap(f"first failure: {_get(f, 'check')} {_get(f, 'slot') or ''} "
                       f"({_short_where(_get(f, 'where'))}): {_get(f, 'message')}", width, "  ", "      ")
    return "\n".join(lines)


def _md(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render_markdown(findings: Sequence[FindingLike], diagnoses: Optional[Iterable[DiagnosisLike]] = None, *,
                    title: str = "", extra: Optional[dict[str, str]] = None,
                    unchecked_reason: Optional[str] = None) -> str:
    """The report as GitHub-flavoured Markdown for CI job summaries: verdict, diagnoses (evidence
    and fix), a table of failing checks, passing and skipped findings folded in a ``<details>``."""
    findings = list(findings)
    diags = _diag_dicts(diagnoses)
    kind, text = verdict(findings, unchecked_reason)
    npass, nfail, nskip = _counts(findings)
    icon = {"good": "✅", "bad": "❌"}.get(VERDICT_TONE.get(kind, ""), "⚠️")
    out = [f"## {icon} {_md(text)}" + (f": {_md(title)}" if title else ""), "",
           f"{len(findings)} findings: **{nfail} failed**, {nskip} skipped, {npass} passed", ""]
    for i, d in enumerate(diags, 1):
        out += [f"### Diagnosis {i}: {d['fault'] or 'input'} `{d['kind']}` on {_md(_on(d))}", "",
                f"**{_md(d['title'])}**", ""]
        if d.get("evidence"):
            out.append("Evidence:")
            out += [f"- {_md(e)}" for e in d["evidence"]]
            out.append("")
        if d.get("fix"):
            out.append("Fix:")
            out += [f"- {_md(e)}" for e in d["fix"]]
            out.append("")
    groups = summarize([as_finding(f) for f in findings])
    bad = [g for g in groups if g["status"] == "fail"]
    if bad:
        out += ["### Failing checks", "", "| # | path | check | slot | failed | first failure |",
                "|---|---|---|---|---|---|"]
        for g in bad:
            ex = g["example"]
            n = g["pass"] + g["fail"] + g["skip"]
            out.append(f"| {_marker(diags, g['path'], g['check'])} | {_md(g['path'])} | {_md(g['check'])} | "
                       f"{_md(g['slot'] or '')} | {g['fail']}/{n} | {_md(ex.where)}: {_md(ex.message)} |")
        out.append("")
    rest = [g for g in groups if g["status"] != "fail"]
    if rest:
        out += [f"<details><summary>{npass} passing and {nskip} skipped findings in {len(rest)} groups</summary>", "",
                "| path | check | slot | pass | skip | detail |", "|---|---|---|---|---|---|"]
        for g in rest:
            out.append(f"| {_md(g['path'])} | {_md(g['check'])} | {_md(g['slot'] or '')} | {g['pass']} | "
                       f"{g['skip']} | {_md(g['example'].message)} |")
        out += ["", "</details>", ""]
    if extra:
        out += [f"- {_md(k)}: {_md(v)}" for k, v in extra.items()] + [""]
    return "\n".join(out)


def write_markdown(out: str | Path, text: str) -> None:
    """Write a Markdown report (:func:`render_markdown`)."""
    Path(out).write_text(text, encoding="utf-8")
