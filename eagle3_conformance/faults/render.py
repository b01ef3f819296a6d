"""The kill matrix as a rich table and as JSON (``eagle3-conformance faults [--json OUT]``)."""

from __future__ import annotations

from typing import Any

from eagle3_conformance.faults.matrix import PATHS
from eagle3_conformance.faults.operators import KIND_NAMES, KINDS, OPERATORS, NotApplicable


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
                      + "; ".join(f"{f['scenario']} {f['path']} {f['check']}: {f['message']}" for f in fp))
    missed = [c for c in m["cells"] if c.status == "missed"]
    tm = m["timings"]
    console.print(f"{sum(c.status == 'caught' for c in m['cells'])} caught, "
                  f"{sum(c.status == 'n/a' for c in m['cells'])} not applicable, {len(missed)} missed, "
                  f"{sum(c.status == 'not run' for c in m['cells'])} not run; "
                  f"{m['harness_builds']} SGLang harness builds ({tm.get('harness builds', 0):.1f} s), "
                  + (f"{m['vllm_harness_builds']} vLLM harness builds ({tm.get('vllm harness builds', 0):.1f} s), "
                     if m.get("vllm_harness_builds") else "")
                  + f"total {tm['total']:.1f} s")
    per_path = column_seconds(m)
    if per_path:
        console.print("seconds per column: " + ", ".join(f"{p} {t:.1f}" for p, t in per_path.items()))


def column_seconds(m: dict[str, Any]) -> dict[str, float]:
    """Seconds per column of a kill matrix (:func:`eagle3_conformance.faults.matrix.run_matrix`'s
    ``timings``: its ``"<scenario> <path>"`` groups, summed over scenarios), the slowest first."""
    out: dict[str, float] = {}
    for key, t in m["timings"].items():
        _, _, path = key.rpartition(" ")
        if path in m["paths"] and not key.startswith("build "):
            out[path] = out.get(path, 0.0) + t
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def acceptance_json(t: dict[str, Any]) -> dict[str, Any]:
    """The faults-vs-acceptance table (:func:`eagle3_conformance.faults.acceptance.run_table`) as JSON."""
    from dataclasses import asdict

    return {"setup": t["setup"], "rows": [asdict(r) for r in t["rows"]], "not_measured": t["not_measured"]}


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def render_acceptance(t: dict[str, Any], console=None) -> None:
    """One line per fault: kind, mean accept length, acceptance rate, lossless, the kill-matrix
    checks that catch it; then the faults not measured and why."""
    from rich.console import Console
    from rich.table import Table

    con = console or Console()
    s = t["setup"]
    tab = Table(title=f"accept length per fault: SmolLM2-135M + trained EAGLE-3 draft, {s['prompts']} held-out "
                      f"prompts x {s['max_new_tokens']} tokens, k = {s['num_draft_tokens']} (CPU, SGLang classes)")
    for col in ("fault", "kind", "accept length [95% CI]", "correct - fault [95% CI]", "acceptance",
                "per position 1..k", "lossless", "fc ran", "caught by (kill matrix)"):
        tab.add_column(col)
    for r in t["rows"]:
        acc = _fmt(r.mean_accept_length, ".2f") if not r.errors else f"crash ({r.errors[0]})"
        if r.interval is not None and not r.errors:
            acc += f" [{r.interval[0]:.2f}, {r.interval[1]:.2f}]"
        diff = "-" if r.vs_correct is None else f"[{r.vs_correct[0]:+.2f}, {r.vs_correct[1]:+.2f}]"
        tab.add_row(r.name, r.kind, acc, diff, _fmt(r.acceptance_rate, ".0%"),
                    " ".join(f"{p:.2f}" for p in r.per_position) or "-",
                    "-" if r.lossless is None else ("yes" if r.lossless else "NO"),
                    "yes" if r.fc_calls else "no", ", ".join(r.checks))
    con.print(tab)
    good = t["rows"][0]
    if good.histogram:
        con.print(f"correct pair: correct-drafts histogram (steps with 0..k drafts accepted) {good.histogram}")
    from eagle3_conformance.faults.acceptance import FREE

    for name, why in FREE.items():
        con.print(f"not required to be beaten: {name}: {why}")
    for name, why in t["not_measured"].items():
        con.print(f"not measured: {name}: {why}")


def render_estimate(est: dict[str, Any], console=None) -> None:
    """Loop vs engine-free estimate per draft position, per path, correct and with the decode-only
    fault; then the attribution findings."""
    from rich.console import Console
    from rich.table import Table

    con = console or Console()
    for label, r in (("correct wiring", est["correct"]), (est["fault_name"], est["fault"])):
        tab = Table(title=f"acceptance per draft position, {label}: the loop (SGLang classes) and the estimate "
                          f"(draft only, teacher-forced) on each path's tensors, {r['prompts']} prompts")
        for col in ("measured by", "mean accept length", *[f"position {i + 1}" for i in range(r["num_draft_tokens"])]):
            tab.add_column(col)
        rows = [("loop", r["loop"])] + [(f"estimate: {p}", e) for p, e in r["estimates"].items()]
        for name, e in rows:
            tab.add_row(name, f"{e['mean_accept_length']:.3f}", *[f"{p:.1%}" for p in e["per_position"]])
        con.print(tab)
        for f in r["findings"]:
            con.print(f"[red]path costs acceptance[/red]: {f['message']}")
        if not r["findings"]:
            con.print("no path's tensors cost acceptance against the training loader's")
