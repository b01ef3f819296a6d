"""``conformance faults [--pair NAME] [--paths P,Q] [--json OUT] [--verbose]``: the kill matrix (:mod:`conformance.faults`)
on the synthetic scenarios (then the DFlash / MTP kill matrix, :mod:`conformance.faults.families`)
and on each real pair named.
Exit 1 on any missed cell or any failure on an unmutated baseline (a false positive)."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.cli.common import EXIT_OK, EXIT_VIOLATIONS, console


def add_parser(sub) -> None:
    p = sub.add_parser("faults", help="run the kill matrix: every fault kind injected on every path")
    p.add_argument("--json", metavar="OUT", help="write the matrix as JSON")
    p.add_argument("--verbose", action="store_true", help="one line per operator and path as it runs")
    p.add_argument("--pair", metavar="NAME", action="append",
                   help="where to inject: 'synthetic' (the default: the tiny scenarios) or a real trained pair "
                        "('smollm2-135m': its target is built from the pinned wheel at first use); repeat to run "
                        "several in one process, one matrix each")
    p.add_argument("--paths", metavar="P,Q", help="only these columns, comma-separated (default: every path)")
    p.set_defaults(func=run)


def run(args) -> int:
    from conformance.errors import DataError, UsageError
    from conformance.faults.families import render_families, run_families_matrix
    from conformance.faults.matrix import run_matrix
    from conformance.faults.render import matrix_json, render_matrix
    from conformance.faults.real_scenario import RealPairUnavailable

    con = console()
    log = (lambda s: con.print(f"[dim]{s}[/dim]")) if args.verbose else (lambda s: None)
    cols = [p.strip() for p in args.paths.split(",") if p.strip()] if args.paths else None
    matrices, fam = [], None
    for pair in dict.fromkeys(args.pair or ["synthetic"]):
        try:
            m = run_matrix(log=log, paths=cols, pair=None if pair == "synthetic" else pair)
        except ValueError as e:
            raise UsageError(f"--paths: {e}") from None
        except RealPairUnavailable as e:
            raise DataError(f"--pair {pair}: {e}") from None
        render_matrix(m, con)
        if pair == "synthetic" and cols is None:
            fam = run_families_matrix(log=log)  # DFlash / MTP fault kinds (issue 14)
            render_families(fam, con)
        matrices.append((m, fam if pair == "synthetic" else None))
    if args.json:
        out = [{**matrix_json(m), **({"families": f} if f is not None else {})} for m, f in matrices]
        Path(args.json).write_text(json.dumps(out[0] if len(out) == 1 else out, indent=1))
    bad = any(any(c.status == "missed" for c in m["cells"]) or m["false_positives"] for m, _ in matrices)
    if fam is not None:
        bad = bad or any(c["status"] == "missed" for c in fam["cells"]) or bool(fam["false_positives"])
    return EXIT_VIOLATIONS if bad else EXIT_OK
