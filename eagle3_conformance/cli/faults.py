"""``eagle3-conformance faults [--pair NAME] [--paths P,Q] [--json OUT] [--verbose]``: the kill matrix (:mod:`eagle3_conformance.faults`)
on the synthetic scenarios (then the DFlash / MTP kill matrix, :mod:`eagle3_conformance.faults.families`)
and on each real pair named.
Exit 1 on any missed cell or any failure on an unmutated baseline (a false positive); exit 2 when no
cell ran at all (each is not run, e.g. its engine is not installed, or not applicable).

``eagle3-conformance faults --acceptance [--prompts N] [--tokens N] [--json OUT]``: what each fault
costs: the greedy speculative loop on the real pair with its trained draft, correct and with each
fault injected (:mod:`eagle3_conformance.faults.acceptance`). Exit 1 when speculation was not lossless
on a run that completed (the output differs from the target's greedy decode) or when the correct
pair does not beat every fault outside :data:`eagle3_conformance.faults.acceptance.FREE` (those
cost nothing measurable on this pair, or only at the edge of the noise)."""

from __future__ import annotations

import json
from pathlib import Path

from eagle3_conformance.cli.common import add_html_option, check_html, check_output, console, write_html
from eagle3_conformance.core.exit_codes import ExitCode


def add_parser(sub) -> None:
    p = sub.add_parser("faults", help="run the kill matrix: every fault kind injected on every path")
    p.add_argument("--json", metavar="OUT", help="write the matrix (or the acceptance table) as JSON")
    add_html_option(p)
    p.add_argument("--verbose", action="store_true", help="one line per operator and path as it runs")
    p.add_argument("--pair", metavar="NAME", action="append",
                   help="where to inject: 'synthetic' (the default: the tiny scenarios) or a real trained pair "
                        "('smollm2-135m': its target is built from the pinned wheel at first use); repeat to run "
                        "several in one process, one matrix each")
    p.add_argument("--paths", metavar="P,Q",
                   help="only these columns, comma-separated (default: every path); sglang-dflash / sglang-mtp / "
                        "contract are the DFlash / MTP matrix's columns (run once, on the synthetic scenarios)")
    p.add_argument("--acceptance", action="store_true",
                   help="instead of the matrix: accept length per fault on the real pair with its trained draft")
    p.add_argument("--estimate", action="store_true",
                   help="--acceptance: also the engine-free estimate against the loop, and which path's tensors "
                        "cost acceptance (with one decode-only fault)")
    p.add_argument("--prompts", type=int, default=8, help="--acceptance: held-out corpus prompts (default 8)")
    p.add_argument("--tokens", type=int, default=32, help="--acceptance: new tokens per prompt (default 32)")
    p.set_defaults(func=run)


def run(args) -> int:
    from eagle3_conformance.core.errors import DataError, UsageError
    from eagle3_conformance.faults.families import PATHS as FAMILY_PATHS
    from eagle3_conformance.faults.families import render_families, run_families_matrix
    from eagle3_conformance.faults.matrix import run_matrix
    from eagle3_conformance.faults.real_scenario import RealPairUnavailable
    from eagle3_conformance.faults.render import matrix_json, render_matrix

    con = console()
    log = (lambda s: con.print(f"[dim]{s}[/dim]")) if args.verbose else (lambda s: None)
    if args.json:
        check_output(args.json, "--json")
        if Path(args.json).exists() and Path(args.json).suffix.lower() != ".json":
            raise UsageError(f"--json {args.json}: exists and is not a .json file; refusing to overwrite it")
    check_html(args, others=("json",))
    if args.acceptance:
        if args.prompts < 1 or args.tokens < 1:
            raise UsageError(f"--prompts {args.prompts} / --tokens {args.tokens}: both must be at least 1")
        return _acceptance(args, con, log)
    if args.prompts != 8 or args.tokens != 32 or getattr(args, "estimate", False):
        raise UsageError("--prompts, --tokens and --estimate apply to --acceptance only")
    cols = [p.strip() for p in args.paths.split(",") if p.strip()] if args.paths else None
    fam_cols = FAMILY_PATHS if cols is None else tuple(p for p in cols if p in FAMILY_PATHS)
    cols = None if cols is None else [p for p in cols if p not in FAMILY_PATHS]
    matrices, fam = [], None
    for pair in dict.fromkeys(args.pair or ["synthetic"]):
        m = None
        if cols is None or cols or not fam_cols:
            try:
                m = run_matrix(log=log, paths=cols, pair=None if pair == "synthetic" else pair)
            except ValueError as e:
                raise UsageError(f"--paths: {e}; the DFlash / MTP matrix's: {', '.join(FAMILY_PATHS)}") from None
            except RealPairUnavailable as e:
                raise DataError(f"--pair {pair}: {e}") from None
            render_matrix(m, con)
        if pair == "synthetic" and fam_cols:
            fam = run_families_matrix(log=log, paths=fam_cols)  # DFlash / MTP fault kinds (issue 14)
            render_families(fam, con)
        elif m is None:
            con.print(f"--pair {pair}: nothing to run (the DFlash / MTP matrix runs on the synthetic scenarios only)")
        matrices.append((m, fam if pair == "synthetic" else None))
    if args.json or args.html:
        out = [{**(matrix_json(m) if m is not None else {}), **({"families": f} if f is not None else {})}
               for m, f in matrices]
        text = json.dumps(out[0] if len(out) == 1 else out, indent=1)
        if args.json:
            Path(args.json).write_text(text)
        write_html(args, json.loads(text))  # the JSON document, as written
    idle = _nothing_ran([m for m, _ in matrices if m], fam)
    if idle:
        con.print(f"[red]nothing ran[/red]: every cell is not run or not applicable ({idle})")
        return ExitCode.INPUT_ERROR
    bad = any(any(c.status == "missed" for c in m["cells"]) or m["false_positives"] for m, _ in matrices if m)
    if fam is not None:
        bad = bad or any(c["status"] == "missed" for c in fam["cells"]) or bool(fam["false_positives"])
    return ExitCode.VIOLATIONS if bad else ExitCode.CONFORMS


def _nothing_ran(matrices: list, fam) -> str:
    """The reasons the cells were not run, when no cell of any matrix ran (none caught or missed):
    a matrix that checked nothing must not pass; else ``""``."""
    cells = [(c.status, [v.detail for _, v in c.operators if v.status == "not run"]) for m in matrices
             for c in m["cells"]]
    cells += [(c["status"], [c.get("detail") or ""]) for c in (fam or {}).get("cells", [])]
    if any(st in ("caught", "missed") for st, _ in cells):
        return ""
    why = dict.fromkeys(d for st, ds in cells if st == "not run" for d in ds if d)
    return "; ".join(why) or "no cell to run"


def _acceptance(args, con, log) -> int:
    from eagle3_conformance.faults.acceptance import not_beaten as unbeaten
    from eagle3_conformance.faults.acceptance import run_table
    from eagle3_conformance.faults.render import acceptance_json, render_acceptance

    t = run_table(prompts_n=args.prompts, max_new=args.tokens, log=log)
    render_acceptance(t, con)
    est = None
    if getattr(args, "estimate", False):
        from eagle3_conformance.faults.acceptance import run_estimate
        from eagle3_conformance.faults.render import render_estimate

        est = run_estimate(prompts_n=args.prompts, max_new=args.tokens, log=log)
        render_estimate(est, con)
    if args.json or args.html:
        text = json.dumps({**acceptance_json(t), **({"estimate": est} if est else {})}, indent=1)
        if args.json:
            Path(args.json).write_text(text)
        write_html(args, json.loads(text))  # the JSON document, as written
    rows = t["rows"]
    lossy = [r.name for r in rows if r.lossless is False]
    not_beaten = unbeaten(rows)
    if rows[0].interval_note:
        con.print(f"[yellow]no interval[/yellow]: {rows[0].interval_note}; faults compared by their means only")
    for name in lossy:
        con.print(f"[red]NOT LOSSLESS[/red]: {name}: the output differs from the target's greedy decode")
    for name in not_beaten:
        con.print(f"[red]NOT BEATEN[/red]: {name}: the correct pair does not accept more than with this fault "
                  f"beyond the prompts' noise (paired 95% bootstrap interval of correct - fault reaches 0)")
    return ExitCode.VIOLATIONS if lossy or not_beaten else ExitCode.CONFORMS
