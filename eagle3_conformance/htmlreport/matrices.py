"""The two grids of the HTML report, as dictionaries (pure, tolerant like :mod:`.model`):
the kill matrix (fault x path, ``faults --json``) and the upgrade matrix (contracts x versions,
``upgrade-check --format json``)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

#: kill-matrix cell statuses, as ``faults`` prints them, and the words the page shows
STATUSES = {"caught": "caught", "n/a": "not applicable", "missed": "missed", "not run": "not run", "noop": "no-op"}


def _dicts(xs: Any) -> list[dict[str, Any]]:
    return [x for x in xs if isinstance(x, dict)] if isinstance(xs, list) else []


def kill_matrices(doc: Any, missing: list[str]) -> list[dict[str, Any]]:
    """Each matrix of a ``faults --json`` document (one, a list, and each one's ``families``):
    ``{"title", "paths", "rows": [{"kind", "name", "cells": [{"path", "status", "text", "detail"}]}],
    "counts", "false_positives"}``."""
    docs = doc if isinstance(doc, list) else [doc]
    out = []
    for d in _dicts(docs):
        if "cells" in d:
            on = f"the real pair {d['pair']}" if d.get("pair") else "the synthetic scenarios"
            out.append(_grid(d, f"EAGLE-3 kill matrix on {on}", missing))
        if isinstance(d.get("families"), dict):
            out.append(_grid(d["families"], "DFlash / MTP kill matrix (synthetic scenarios)", missing))
    return out


def _cell_text(c: dict[str, Any]) -> str:
    st = c.get("status")
    if st == "caught":
        checks = c.get("checks") or ([c["check"]] if c.get("check") else [])
        return ", ".join(str(x) for x in checks) or "(check not recorded)"
    if st == "missed":
        ops = [str(o.get("operator")) for o in _dicts(c.get("operators")) if o.get("status") in ("missed", "noop")]
        return ", ".join(ops) or str(c.get("operator") or "")
    return ""


def _grid(d: dict[str, Any], title: str, missing: list[str]) -> dict[str, Any]:
    cells = _dicts(d.get("cells"))
    paths = [str(p) for p in d.get("paths") or []] or list(OrderedDict.fromkeys(str(c.get("path")) for c in cells))
    if not d.get("paths"):
        missing.append(f"{title}: 'paths' not recorded; columns taken from the cells")
    rows: "OrderedDict[str, dict]" = OrderedDict()
    for c in cells:
        key = str(c.get("operator") or c.get("kind"))
        r = rows.setdefault(key, {"kind": str(c.get("kind") or ""), "name": str(c.get("name") or ""),
                                  "operator": str(c.get("operator") or ""), "cells": {}})
        detail = c.get("detail") or "; ".join(f"{o.get('operator')}: {o.get('status')} {o.get('detail') or ''}".strip()
                                              for o in _dicts(c.get("operators")))
        r["cells"][str(c.get("path"))] = {"path": str(c.get("path")), "status": str(c.get("status")),
                                          "words": STATUSES.get(str(c.get("status")), str(c.get("status"))),
                                          "text": _cell_text(c), "detail": str(detail or "")}
    for r in rows.values():
        r["cells"] = [r["cells"].get(p, {"path": p, "status": "absent", "words": "not in report", "text": "",
                                         "detail": ""}) for p in paths]
    counts = {s: sum(1 for c in cells if c.get("status") == s) for s in STATUSES}
    return {"title": title, "paths": paths, "rows": list(rows.values()), "counts": counts,
            "false_positives": [f"{f.get('scenario') or f.get('operator') or ''} {f.get('path')} {f.get('check')}: "
                                f"{f.get('message')}" for f in _dicts(d.get("false_positives"))]}


# --- upgrade ----------------------------------------------------------------------------------------


def upgrade(doc: dict[str, Any], missing: list[str]) -> dict[str, Any]:
    """``upgrade-check``'s report: per contract a grid of steps x version columns, each cell the
    boundaries per slot, the slots that differ from the baseline column flagged, and each
    cell's rule (the source lines that decided it)."""
    contracts = []
    for r in _dicts(doc.get("contracts")):
        caps = _dicts(r.get("captures"))
        base_cols = {str(v.get("base")) for v in _dicts(r.get("verdicts"))}
        base = next((c for c in caps if str(c.get("column")) in base_cols), caps[0] if caps else None)
        steps = list(OrderedDict.fromkeys(s for c in caps if isinstance(c.get("steps"), dict) for s in c["steps"]))
        grid = []
        for step in steps:
            ref = _step(base, step)
            cells = []
            for c in caps:
                s = _step(c, step)
                if s is None:
                    cells.append({"column": str(c.get("column")), "status": str(c.get("status") or "?"),
                                  "slots": [], "rule": "", "error": str(c.get("error") or ""), "differs": False})
                    continue
                b = [str(x) for x in s.get("boundaries") or []]
                rb = [str(x) for x in (ref or {}).get("boundaries") or []]
                slots = [{"slot": k, "boundary": x, "differs": ref is not None and (k >= len(rb) or rb[k] != x)}
                         for k, x in enumerate(b)]
                cells.append({"column": str(c.get("column")), "status": "ok", "slots": slots,
                              "rule": str(s.get("rule") or ""), "error": "",
                              "differs": any(x["differs"] for x in slots) or len(b) != len(rb)})
            grid.append({"step": step, "cells": cells})
        verdicts = [{"base": str(v.get("base")), "to": str(v.get("to")), "status": str(v.get("status")),
                     "reason": str(v.get("reason") or ""),
                     "changes": [{"step": ch.get("step"), "slot": ch.get("slot"), "from": ch.get("from_boundary"),
                                  "to": ch.get("to_boundary"), "from_rule": ch.get("from_rule"),
                                  "to_rule": ch.get("to_rule")} for ch in _dicts(v.get("changes"))]}
                    for v in _dicts(r.get("verdicts"))]
        contracts.append({"name": str(r.get("name") or r.get("contract")), "contract": str(r.get("contract") or ""),
                          "error": str(r.get("error") or ""), "L": r.get("num_hidden_layers"),
                          "columns": [str(c.get("column")) for c in caps],
                          "baseline": str(base.get("column")) if base else "", "grid": grid, "verdicts": verdicts})
    if not contracts:
        missing.append("upgrade report: no contracts")
    return {"baseline": str(doc.get("baseline") or ""), "candidates": [str(c) for c in doc.get("candidates") or []],
            "exit_code": doc.get("exit_code"), "contracts": contracts,
            "sources": [{"column": s.get("column"), "wheel": s.get("wheel"), "sha256": str(s.get("sha256") or "")[:16],
                         "error": s.get("error")} for s in _dicts(doc.get("sources"))]}


def _step(cap, step: str):
    if not isinstance(cap, dict) or cap.get("status") != "ok" or not isinstance(cap.get("steps"), dict):
        return None
    s = cap["steps"].get(step)
    return s if isinstance(s, dict) else None
