"""``eagle3-conformance check-captures CONTRACT DIR`` (or ``DIR --contract CONTRACT``; this module: the verb's): judge what a user's own
SGLang server recorded (``serve-hooks``' ``--forward-hooks`` value) while it served.

Rows are attributed from the records themselves (:mod:`eagle3_conformance.serving.captures`); every
capture check judges them against the reference forward of the contract's target (``target.path`` /
the fixture, or ``--reference``). The report lists the forward modes seen: with CUDA graphs on, decode
forwards run no hooks and only prefill/extend rows are observed (a skipped ``decode_observed``
finding says so). Unreadable records (a server killed mid-write) are named, the rest judged.
Exit 0 conforms, 1 violations, 2 bad input (a directory from another contract, pair, tool or SGLang
version; a server that never ran the hooks; nothing readable).
"""

from __future__ import annotations

from eagle3_conformance.cli.common import (
    add_contract_arguments,
    add_html_option,
    check_html,
    check_output,
    error,
    exit_code,
    load_contract,
    resolve_reference,
    write_html,
)
from eagle3_conformance.core.errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("check-captures", help="judge what your own SGLang server recorded with serve-hooks' "
                                              "--forward-hooks value")
    add_contract_arguments(p, what="the contract given to serve-hooks")
    p.add_argument("dir", metavar="DIR", help="the directory given to serve-hooks --out")
    p.add_argument("--reference", metavar="MODEL_DIR",
                   help="HF-format target directory of the reference forward (default: the contract's fixture or "
                        "target.path)")
    p.add_argument("--conformance-reference", choices=("transformers", "engine"), default=None,
                   help="what judges the rows: the transformers forward of the target (needs it on this machine), "
                        "or the boundaries the server recorded in the same forwards (serve-hooks "
                        "--conformance-reference engine); default: the contract's `reference`")
    p.add_argument("--max-captures", type=int, default=64, metavar="N",
                   help="captures judged (every extend and the decode steps the main job judges, then spread "
                        "evenly to at most N; default 64; -1: all). Each costs one reference forward")
    p.add_argument("--json", metavar="OUT", help="write findings as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the report as Markdown (for CI job summaries)")
    p.add_argument("--write-floor", metavar="OUT",
                   help="write a copy of the contract with gates.min_accept_length set from these records (the "
                        "lower end of their accept length's 95%% interval over requests); only from a run that "
                        "conforms")
    p.add_argument("--quiet", action="store_true", help="no report: the verdict and diagnoses only")
    p.add_argument("-v", "--verbose", action="store_true", help="list passing and skipped checks too")
    add_html_option(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from eagle3_conformance import report
    from eagle3_conformance.diagnose import diagnose
    from eagle3_conformance.reference import ReferenceError, load_reference_model
    from eagle3_conformance.serving.captures import judge, read_dir, reference_kind
    from eagle3_conformance.suite.assess import reference_loader

    c = load_contract(args.contract)
    if args.max_captures < -1 or args.max_captures == 0:
        raise UsageError(f"--max-captures {args.max_captures}: must be >= 1, or -1 for all")
    d = Path(args.dir)
    for flag in ("json", "markdown", "write_floor"):
        if getattr(args, flag, None):
            check_output(getattr(args, flag), f"--{flag.replace('_', '-')}", inputs=(args.contract,), input_dirs=(d,))
    check_html(args, inputs=(args.contract,), input_dirs=(d,))
    kind = reference_kind(d, args.conformance_reference, c)
    sd = read_dir(d, c, engine_reference=kind == "engine")
    if kind == "engine":
        from eagle3_conformance.reference.engine import final_norm_weight

        try:  # only the final norm's gamma is read from the target, when it is here (verifier checks)
            ref_dir = resolve_reference(c, args)
        except UsageError:
            ref_dir = None
        gamma = final_norm_weight(ref_dir) if ref_dir is not None and Path(ref_dir).is_dir() else None
        findings, meta = judge(c, sd, "engine", args.max_captures, final_norm_weight=gamma)
    else:
        ref_dir = resolve_reference(c, args)
        if ref_dir is None:
            raise UsageError(f"{args.contract}: no reference target (target.path or fixture); pass --reference "
                             "MODEL_DIR, or --conformance-reference engine")
        try:
            load_reference_model(ref_dir, c.target)
        except ReferenceError as e:
            raise UsageError(str(e)) from None
        findings, meta = judge(c, sd, reference_loader(c, ref_dir), args.max_captures)
        meta["reference"] = f"transformers forward of {ref_dir}"
    diagnoses = diagnose(c, findings)
    title = f"{c.name}: your SGLang server's records ({d})"
    extra = {k: str(meta[k]) for k in ("records", "sglang", "forward_modes", "judged", "decode", "reference",
                                       "accept_length_from_records", "contract_changes") if meta.get(k) is not None}
    if not args.quiet:
        print(report.render_text(findings, diagnoses, title=title, extra=extra, verbose=bool(args.verbose)))
    else:
        print(report.quiet_verdict(findings))
        for dg in diagnoses:
            print(f"  {dg.label}: {dg.title}")
    if args.markdown:
        report.write_markdown(args.markdown, report.render_markdown(findings, diagnoses, title=title, extra=extra))
    if args.json or args.html:
        doc = report.report_doc(args.contract, findings, meta, diagnoses=diagnoses)
        if args.json:
            report.write_document(args.json, doc)
        write_html(args, doc)
    why = report.input_error(findings)
    if why:
        error(f"{d}: {why}")
    code = exit_code(findings)
    if args.write_floor:
        _write_floor(args, meta, code)
    return code


def _write_floor(args, meta: dict, code: int) -> None:
    """``--write-floor``: the floor from the records' per-request acceptance, from a run that conforms only.

    Raises:
        UsageError: the run did not conform, or too few requests for an interval.
    """
    from eagle3_conformance.acceptance.decision import floor_from_runs
    from eagle3_conformance.acceptance.stats import TooFewPrompts
    from eagle3_conformance.authoring.floor import write_floor

    if code != 0:
        raise UsageError(f"--write-floor {args.write_floor}: not written: a floor comes from a good run, and these "
                         "records did not conform")
    try:
        fl = floor_from_runs(meta["per_request_acceptance"])
    except TooFewPrompts as e:
        raise UsageError(f"--write-floor {args.write_floor}: {e} (requests in the records); serve more requests") \
            from None
    print(write_floor(args.contract, args.write_floor, fl, f"check-captures {args.dir}"))
