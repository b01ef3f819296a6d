"""``eagle3-conformance merge-reports [CONTRACT] OUT.json IN1.json IN2.json ...`` (or ``--contract CONTRACT``):
one report from sharded runs
(:func:`eagle3_conformance.report.merge.merge_reports`). Exit 0 if no finding failed, 1 if one did (a missing
shard included), 2 bad input (an existing OUT included, unless ``--force``: forgetting OUT makes
the first part the output, and overwriting it would destroy that part)."""

from __future__ import annotations

from pathlib import Path

from eagle3_conformance.cli.common import check_output, exit_code, load_contract
from eagle3_conformance.core.errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("merge-reports", help="merge JSON reports of sharded check-data runs")
    p.add_argument("out", metavar="[CONTRACT] OUT.json",
                   help="merged report to write (must not exist: an existing file is refused, exit 2, "
                        "unless --force)")
    p.add_argument("inputs", nargs="+", metavar="IN.json", help="reports to merge (same contract)")
    p.add_argument("--allow-missing", action="store_true",
                   help="missing shards are a skip, not a failure (default: exit 1 when a shard is missing)")
    p.add_argument("--contract", metavar="CONTRACT",
                   help="the contract the parts were judged against, for the diagnoses (default: the parts' "
                        "own contract path, when that file is here unchanged)")
    p.add_argument("--force", action="store_true",
                   help="overwrite OUT.json when it exists (never when it is one of the inputs)")
    p.add_argument("--quiet", action="store_true", help="no summary line")
    p.set_defaults(func=run)


def _positional_contract(args) -> None:
    """``merge-reports CONTRACT OUT IN...``: a first positional that is a contract (``.yaml`` / ``.yml``; reports
    are JSON) is the contract, as in every verb.

    Raises:
        UsageError: it names another contract than ``--contract``.
    """
    if Path(args.out).suffix.lower() not in (".yaml", ".yml") or len(args.inputs) < 2:
        return
    if args.contract and Path(args.contract).resolve() != Path(args.out).resolve():
        raise UsageError(f"CONTRACT {args.out} and --contract {args.contract} name two contracts; give one")
    args.contract, args.out, args.inputs = args.out, args.inputs[0], args.inputs[1:]


def run(args) -> int:
    from eagle3_conformance.report.merge import merge_reports, parts_contract

    _positional_contract(args)
    check_output(args.out, "OUT", inputs=tuple(args.inputs))
    if Path(args.out).exists() and not getattr(args, "force", False):
        raise UsageError(f"OUT {args.out}: exists; refusing to overwrite it (the merged report is the FIRST "
                         "argument: did you forget it? give a new file name, or --force to replace it)")
    given = load_contract(args.contract) if args.contract else None  # the contract gate, before any part is read
    cpath, why = parts_contract(args.inputs, args.contract)
    contract = given if given is not None else (load_contract(str(cpath)) if cpath is not None else None)
    merged = merge_reports(args.out, args.inputs, allow_missing=args.allow_missing, contract=contract)
    nf = sum(1 for f in merged.findings if f.status == "fail")
    if not args.quiet:
        missing = merged.meta.get("shards_missing")
        print(f"merged {len(args.inputs)} reports into {args.out}: {len(merged.findings)} findings, {nf} failed"
              + (f"; shards missing: {missing}" if missing else ""))
        if nf:
            if merged.diagnoses is None:
                print(why)
            for d in merged.diagnoses or []:
                print(f"  {d.label}: {d.title}")
                for fix in d.fix:
                    print(f"    fix: {fix}")
    return exit_code(merged.findings)
