"""``conformance faults [--json OUT] [--verbose]``: the kill matrix (:mod:`conformance.faults`).
Exit 1 on any missed cell or any failure on an unmutated baseline (a false positive)."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.cli.common import EXIT_OK, EXIT_VIOLATIONS, console


def add_parser(sub) -> None:
    p = sub.add_parser("faults", help="run the kill matrix: every fault kind injected on every path")
    p.add_argument("--json", metavar="OUT", help="write the matrix as JSON")
    p.add_argument("--verbose", action="store_true", help="one line per operator and path as it runs")
    p.add_argument("--paths", metavar="P,Q", help="only these columns, comma-separated (default: every path)")
    p.set_defaults(func=run)


def run(args) -> int:
    from conformance.faults.matrix import run_matrix
    from conformance.faults.render import matrix_json, render_matrix

    from conformance.errors import UsageError

    con = console()
    cols = [p.strip() for p in args.paths.split(",") if p.strip()] if args.paths else None
    try:
        m = run_matrix(log=(lambda s: con.print(f"[dim]{s}[/dim]")) if args.verbose else (lambda s: None), paths=cols)
    except ValueError as e:
        raise UsageError(f"--paths: {e}") from None
    render_matrix(m, con)
    if args.json:
        Path(args.json).write_text(json.dumps(matrix_json(m), indent=1))
    bad = any(c.status == "missed" for c in m["cells"]) or m["false_positives"]
    return EXIT_VIOLATIONS if bad else EXIT_OK
