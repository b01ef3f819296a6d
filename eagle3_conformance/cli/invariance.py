"""``eagle3-conformance check-invariance CONTRACT --server URL --captures DIR``: your own SGLang server (started
with ``serve-hooks``' ``--forward-hooks`` value recording into DIR) checked against itself.

The held-out prompts are sent plain and under each variation the server offers per request (a batch, input
logprobs, a prefix-cache hit: the prompt again and a shared prefix); the records are read back and each
variation compared row by row with the plain run (:mod:`eagle3_conformance.serving.invariance`; the same check
as the ``sglang-engine-invariance`` path). Chunked prefill and TP are fixed per server: the report says the
server's values and that they were not varied. Exit 0 conforms, 1 violations, 2 bad input (no server at URL,
a directory the server does not record into, the plain run failing).
"""

from __future__ import annotations

from eagle3_conformance.cli.common import (
    add_contract_arguments,
    check_output,
    error,
    exit_code,
    load_contract,
    resolve_reference,
)
from eagle3_conformance.core.errors import UsageError


def add_parser(sub) -> None:
    from eagle3_conformance.tools.shared.variations import VARIATIONS

    p = sub.add_parser("check-invariance", help="send the same prompts to your own SGLang server plain and under "
                                                "each request-level variation; compare what its draft was handed")
    add_contract_arguments(p, what="the contract given to serve-hooks")
    p.add_argument("--server", required=True, metavar="URL", help="base URL of the running server (http://host:port)")
    p.add_argument("--captures", required=True, metavar="DIR",
                   help="the serve-hooks --out directory the server records into (its --forward-hooks value)")
    p.add_argument("--variations", default="all", metavar="LIST",
                   help=f"comma list of {', '.join(v.name for v in VARIATIONS)} (default: all; chunked-prefill "
                        "and tp2 are fixed per server and reported with the server's values)")
    p.add_argument("--second-server", metavar="URL",
                   help="a second server launched like --server but with a --chunked-prefill-size below the prompts' "
                        "48 tokens, or another --tp-size: its plain run is compared as chunked-prefill / tp2")
    p.add_argument("--second-captures", metavar="DIR", help="the serve-hooks --out directory the second server "
                                                             "records into (with --second-server)")
    p.add_argument("--prompts", type=int, default=2, metavar="N", help="held-out prompts of 48 tokens (default 2)")
    p.add_argument("--max-new-tokens", type=int, default=8, metavar="N", help="tokens generated per request (8)")
    p.add_argument("--reference", metavar="MODEL_DIR",
                   help="the target whose tokenizer makes the held-out prompts (default: the contract's fixture or "
                        "target.path)")
    p.add_argument("--json", metavar="OUT", help="write findings as JSON")
    p.add_argument("--quiet", action="store_true", help="no report: the verdict only")
    p.add_argument("-v", "--verbose", action="store_true", help="list passing and skipped checks too")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from eagle3_conformance import report
    from eagle3_conformance.diagnose import diagnose
    from eagle3_conformance.serving.invariance import (
        check_server_invariance,
        check_tokenizer_fits,
        held_out_prompts,
        variation_names,
    )

    c = load_contract(args.contract)
    if args.prompts < 1 or args.max_new_tokens < 1:
        raise UsageError("--prompts and --max-new-tokens: 1 or more")
    names = variation_names(args.variations)
    if bool(args.second_server) != bool(args.second_captures):
        raise UsageError("--second-server and --second-captures: give both or neither")
    second = (args.second_server, Path(args.second_captures)) if args.second_server else None
    d = Path(args.captures)
    if args.json:
        check_output(args.json, "--json", inputs=(args.contract,), input_dirs=(d,))
    target = resolve_reference(c, args)
    if target is None:
        raise UsageError(f"{args.contract}: no target to make the held-out prompts with; pass --reference MODEL_DIR")
    prompts = held_out_prompts(target, args.prompts)
    check_tokenizer_fits(c, target, prompts)  # before any request: out-of-range ids crash the server
    findings, meta = check_server_invariance(c, args.server, d, prompts, names, args.max_new_tokens, second=second)
    title = f"{c.name}: your SGLang server against itself ({args.server}, records in {d})"
    extra = {"sglang": meta["sglang"], "seconds per variation": ", ".join(
        f"{k} {v:.1f} s" for k, v in meta["seconds_per_variation"].items()),
        "seconds": ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in meta["seconds"].items())}
    failing = [f"{f.where.split(': ')[-1]} ({f.message.split(': ', 1)[-1].split(';')[0]})" for f in findings
               if f.check == "engine_variations" and f.status == "fail"]
    if failing:  # the failing checks above show each check's first failure: every failing variation is named here
        extra["failing variations"] = "; ".join(failing)
    extra.update({f"not varied: {k}": v for k, v in meta["not_varied"].items()})
    if meta["second_server"]:
        sv = meta["second_server"]
        extra[f"{sv['variation']}: second server"] = (f"{sv['server']} (chunked_prefill_size {sv['chunked_prefill_size']}, "
                                                      f"tp_size {sv['tp_size']}), records in {sv['records']}")
    diagnoses = diagnose(c, findings)  # as check-captures: a served dtype other than the contract's is named
    if args.quiet:
        print(report.quiet_verdict(findings))
        for dg in diagnoses:
            print(f"  {dg.label}: {dg.title}")
    else:
        print(report.render_text(findings, diagnoses, title=title, extra=extra, verbose=bool(args.verbose)))
    if args.json:
        report.write_document(args.json, report.report_doc(args.contract, findings, meta, diagnoses=diagnoses))
    why = report.input_error(findings)
    if why:
        error(f"{d}: {why}")
    return exit_code(findings)
