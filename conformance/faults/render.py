"""The kill matrix as a rich table and as JSON (``conformance faults [--json OUT]``)."""

from __future__ import annotations

from typing import Any

from conformance.faults.matrix import PATHS
from conformance.faults.operators import KIND_NAMES, KINDS, OPERATORS, NotApplicable


def matrix_json(m: dict[str, Any]) -> dict[str, Any]:
    return {
        "pair": m.get("pair"),
        "paths": list(m.get("paths", PATHS)),
        "cells": [{"kind": c.kind, "name": KIND_NAMES[c.kind], "path": c.path, "status": c.status,
                   "checks": c.checks,
                   "operators": [{"operator": n, "status": v.status, "check": v.check, "detail": v.detail}
                                 for n, v in c.operators]} for c in m["cells"]],
        "operators": [{"name": op.name, "kind": op.kind, "title": op.title, "checks": list(op.checks),
                       "paths": {p: ({"not_applicable": a.reason} if isinstance(a, NotApplicable) else
                                     {"how": a.how, "where": a.where}) for p, a in op.paths.items()}}
                      for op in OPERATORS],
        "false_positives": m["false_positives"],
        "timings": {k: round(v, 2) for k, v in m["timings"].items()},
    }


def render_matrix(m: dict[str, Any], console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    style = {"caught": "green", "n/a": "dim", "missed": "bold red", "not run": "yellow"}
    on = f"the real pair {m['pair']}" if m.get("pair") else "the synthetic scenarios"
    t = Table(title=f"EAGLE-3 kill matrix on {on}: fault kinds x paths (each caught cell names its catching check)")
    t.add_column("kind")
    t.add_column("fault")
    columns = m.get("paths", PATHS)
    for p in columns:
        t.add_column(p)
    by = {(c.kind, c.path): c for c in m["cells"]}
    for kind in KINDS:
        row = [kind, KIND_NAMES[kind]]
        for p in columns:
            c = by[(kind, p)]
            txt = c.status
            if c.status == "caught":
                txt += " (" + ", ".join(c.checks) + ")"
            elif c.status == "missed":
                txt += " (" + ", ".join(n for n, v in c.operators if v.status in ("missed", "noop")) + ")"
            row.append(f"[{style[c.status]}]{txt}[/]")
        t.add_row(*row)
    console.print(t)
    fp = m["false_positives"]
    if fp:
        console.print(f"[bold red]{len(fp)} baseline failures (false positives)[/]: "
                      + "; ".join(f"{f['scenario']} {f['path']} {f['check']}: {f['message']}" for f in fp[:5]))
    missed = [c for c in m["cells"] if c.status == "missed"]
    tm = m["timings"]
    console.print(f"{sum(c.status == 'caught' for c in m['cells'])} caught, "
                  f"{sum(c.status == 'n/a' for c in m['cells'])} not applicable, {len(missed)} missed; "
                  f"{m['harness_builds']} SGLang harness builds ({tm.get('harness builds', 0):.1f} s), "
                  f"total {tm['total']:.1f} s")
