"""``conformance faults [--json OUT] [--verbose]``: the kill matrix (:mod:`conformance.faults`), then the
DFlash / MTP kill matrix (:mod:`conformance.faults.families`).
Exit 1 on any missed cell or any failure on an unmutated baseline (a false positive)."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.cli.common import EXIT_OK, EXIT_VIOLATIONS, console


def add_parser(sub) -> None:
    p = sub.add_parser("faults", help="run the kill matrix: every fault kind injected on every path")
    p.add_argument("--json", metavar="OUT", help="write the matrix as JSON")
    p.add_argument("--verbose", action="store_true", help="one line per operator and path as it runs")
    p.set_defaults(func=run)


def run(args) -> int:
    from conformance.faults.families import render_families, run_families_matrix
    from conformance.faults.matrix import run_matrix
    from conformance.faults.render import matrix_json, render_matrix

    con = console()
    log = (lambda s: con.print(f"[dim]{s}[/dim]")) if args.verbose else (lambda s: None)
    m = run_matrix(log=log)
    render_matrix(m, con)
    fam = run_families_matrix(log=log)  # DFlash / MTP fault kinds (issue 14)
    render_families(fam, con)
    if args.json:
        Path(args.json).write_text(json.dumps({**matrix_json(m), "families": fam}, indent=1))
    bad = any(c.status == "missed" for c in m["cells"]) or m["false_positives"]
    bad = bad or any(c["status"] == "missed" for c in fam["cells"]) or fam["false_positives"]
    return EXIT_VIOLATIONS if bad else EXIT_OK
