"""``eagle3-conformance accept --server URL --contract C [--record OUT | --baseline IN] [--json OUT]
[--markdown OUT] [-v]``: acceptance of a running speculative-decoding server (SGLang or vLLM), per request
and per draft position, on the shipped held-out prompt set (:mod:`eagle3_conformance.server_accept`).

Exit 0: the contract's ``gates.min_accept_length`` is met and, with ``--baseline``, no figure
dropped beyond its paired interval and the tolerance. Exit 1: one did. Exit 2: the server cannot be
reached, answers an error or drops a connection (the request and the server's words are named), runs
without speculative decoding, serves another model than the baseline's, the baseline comes from
another contract / prompt set / tool version (the field is named), or too few prompts give an interval.
"""

from __future__ import annotations

from pathlib import Path

from eagle3_conformance.cli.common import (
    add_contract_arguments,
    add_html_option,
    check_output,
    exit_code,
    load_contract,
    write_html,
)
from eagle3_conformance.core.errors import UsageError

UNCHECKED = ("accept measures acceptance only; what reaches the draft is checked by pytest -m conformance, "
             "sglang-engine path")


def add_parser(sub) -> None:
    p = sub.add_parser("accept", help="acceptance of a running SGLang / vLLM server per request and per position, "
                                      "against the contract's floor and a recorded baseline")
    p.add_argument("--server", required=True, metavar="URL", help="base URL of the running server (http://host:port)")
    add_contract_arguments(p, what="the pair's contract (gates.min_accept_length)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--record", metavar="OUT", help="write this run as a baseline (figures, per-prompt counters, "
                                                   "server version and flags, model and draft)")
    g.add_argument("--baseline", metavar="IN", help="compare with a recorded baseline on the same prompts")
    p.add_argument("--write-floor", metavar="OUT", help="write a copy of the contract with gates.min_accept_length "
                                                         "set from this run (the lower end of the 95%% interval over "
                                                         "prompts of its 1 + accepted drafts per verify step: on SGLang "
                                                         "the accept length less the prefill token); only from a run "
                                                         "that passes and whose counters agree")
    p.add_argument("--tolerance", type=float, default=0.05, help="allowed drop, as a fraction of each baseline "
                                                                  "figure (default 0.05: TensorRT-LLM's 95%% rule)")
    p.add_argument("--prompts", type=int, metavar="N", help="the first N prompts of the set, round-robin over its "
                                                            "domains (default: all 32; with --baseline: the baseline's)")
    p.add_argument("--max-tokens", type=int, metavar="N", help="new tokens per prompt (default 64; with --baseline: "
                                                               "the baseline's)")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    p.add_argument("--request-timeout", type=float, default=300.0, metavar="S", help="seconds per request (300)")
    p.add_argument("--run-timeout", type=float, default=1800.0, metavar="S", help="seconds for the whole run (1800)")
    p.add_argument("--json", metavar="OUT", help="write the report, figures and per-prompt counters as JSON")
    p.add_argument("--markdown", metavar="OUT", help="write the report as Markdown (CI job summaries)")
    p.add_argument("-v", "--verbose", action="store_true", help="list passing and skipped checks too")
    add_html_option(p)
    p.set_defaults(func=run)


def _check_args(args) -> None:
    if not args.server.startswith(("http://", "https://")):
        raise UsageError(f"--server {args.server}: give a URL (http://host:port)")
    if not 0 <= args.tolerance < 1:
        raise UsageError(f"--tolerance {args.tolerance}: a fraction of the baseline, 0 <= t < 1")
    if not 1 <= args.concurrency <= 256:
        raise UsageError(f"--concurrency {args.concurrency}: give 1..256")
    if args.max_tokens is not None and not 1 <= args.max_tokens <= 32768:
        raise UsageError(f"--max-tokens {args.max_tokens}: give 1..32768")
    for flag in ("request_timeout", "run_timeout"):
        if getattr(args, flag) <= 0:
            raise UsageError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: give seconds > 0")
    outs = [(f, getattr(args, f.strip("-").replace("-", "_")))
            for f in ("--record", "--json", "--markdown", "--html", "--write-floor")]
    outs = [(f, o) for f, o in outs if o]
    if len({Path(o).resolve() for _, o in outs}) < len(outs):
        raise UsageError(f"{', '.join(f for f, _ in outs)}: give a different file to each")
    for flag, out in outs:
        check_output(out, flag, inputs=(args.contract, args.baseline))


def _options(args):
    from eagle3_conformance.server_accept.session import Options

    return Options(server=args.server, baseline=args.baseline, prompts=args.prompts, max_tokens=args.max_tokens,
                   concurrency=args.concurrency, tolerance=args.tolerance, request_timeout=args.request_timeout,
                   run_timeout=args.run_timeout)


def _write_floor(args, results, code: int, k: int) -> None:
    """``--write-floor``: the floor from this run's per-prompt counters, from a run that passed only.

    Raises:
        UsageError: the run did not pass (exit 0), or its counters contradict each other.
    """
    from eagle3_conformance.acceptance.decision import floor_from_runs
    from eagle3_conformance.authoring.floor import write_floor
    from eagle3_conformance.server_accept.figures import counters_disagree, floor_pairs

    if code != 0:
        raise UsageError(f"--write-floor {args.write_floor}: not written: a floor comes from a good run, and this "
                         "run did not pass")
    if why := counters_disagree(results, k):
        raise UsageError(f"--write-floor {args.write_floor}: not written: {why}")
    fl = floor_from_runs(floor_pairs(results))
    print(write_floor(args.contract, args.write_floor, fl, f"accept --server {args.server}"))


def _offer_floor(results) -> None:
    """The floor a ``--write-floor`` would write, named by its own measure (newuser finding 15: it said
    "accept length" for a figure that is not the accept length printed above)."""
    from eagle3_conformance.acceptance.decision import floor_from_runs
    from eagle3_conformance.server_accept.figures import floor_pairs

    fl = floor_from_runs(floor_pairs(results))
    print(f"a floor from this run: gates.min_accept_length: {fl['floor']} (the lower end of its 1 + accepted drafts "
          f"per verify step, {fl['value']:.3f} [{fl['interval'][0]:.3f}, {fl['interval'][1]:.3f}]: on SGLang the "
          "accept length less its prefill token, so a run like this one meets it with that margin); --write-floor "
          "OUT writes it into a copy of the contract")


def run(args) -> int:
    from eagle3_conformance.server_accept.session import measure

    _check_args(args)
    c = load_contract(args.contract)
    o = measure(_options(args), c)
    _report(args, c, o)
    return exit_code(o.findings)


def _report(args, c, o) -> None:
    from eagle3_conformance import __version__, report
    from eagle3_conformance.server_accept import baseline, prompts, render

    info, res, fig, rows, findings, changes, plist = o.info, o.res, o.fig, o.rows, o.findings, o.changes, o.prompts
    title = f"{c.name}: {info.kind} {info.version} at {info.url}"
    extra = render.extra_lines(info, res, fig, changes)
    done = {"pass": "passed", "fail": "failed", "skip": "not judged"}
    for f in findings:  # the floor applied, in the text too (not only in --json)
        if f.check == "accept_length":
            extra["accept length gate"] = f"{f.message}: {done.get(f.status, f.status)}"
    print(render.figures_text(fig, rows))
    print(report.render_text(findings, [], title=title, extra=extra, width=report.WIDTH, unchecked_reason=UNCHECKED,
                             verbose=bool(getattr(args, "verbose", False))))
    from eagle3_conformance.server_accept.figures import counters_disagree

    if disagree := counters_disagree(res.results, info.k):
        print(f"warning: {disagree}")
    pset = {"version": prompts.PROMPT_SET_VERSION, "sha256": prompts.prompt_set_sha256(), "ids": [p.id for p in plist]}
    if args.record:
        doc = baseline.build(tool_version=__version__, contract=c, prompt_set=pset, max_tokens=res.max_tokens,
                             concurrency=res.concurrency, info=info, draft=o.draft or {}, figures=fig,
                             results=res.results)
        report.write_document(args.record, doc)
        print(f"baseline written to {args.record}")
        if not args.write_floor and not disagree:
            _offer_floor(res.results)
    if args.write_floor:
        _write_floor(args, res.results, exit_code(findings), info.k)
    if args.json or args.html:
        meta = {"server": info.to_json(), "figures": fig, "comparison": rows, "changes_from_baseline": changes,
                "prompt_set": pset, "max_tokens": res.max_tokens, "concurrency": res.concurrency,
                "per_prompt": [r.to_json() for r in res.results], "baseline": args.baseline,
                "counters_disagree": disagree,
                "acceptance": render.html_acceptance(fig, c.gates.min_accept_length, o.base,
                                                     f"{info.kind} {info.version}")}
        doc = report.report_doc(args.contract, findings, meta, unchecked_reason=UNCHECKED)
        if args.json:
            report.write_document(args.json, doc)
        write_html(args, doc)
    if args.markdown:
        md = report.render_markdown(findings, [], title=title, extra=extra, unchecked_reason=UNCHECKED)
        report.write_markdown(args.markdown, md + "\n" + render.figures_markdown(fig, rows) + "\n")
