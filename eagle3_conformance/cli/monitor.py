"""``eagle3-conformance monitor --server URL --baseline B.json [--contract C] [--duration S] ...``: watch a
running server's acceptance through its own Prometheus metrics (:mod:`eagle3_conformance.monitor`).

Exit 0: no alarm stands at the end (an alarm the canary cleared as a traffic-mix shift does not
stand). Exit 1: an alarm stands. Exit 3 (INCONCLUSIVE): no alarm, and no window was judged (the
server's ``/metrics`` lacks the verify-step counters while requests finish, or too few verify steps). Exit 2: input error: no ``/metrics`` (SGLang without
``--enable-metrics``), no speculative decoding, a baseline of another pair, contract, tool version or
prompt set, nothing answering at the URL; or, mid-run, a restart onto another pair.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from eagle3_conformance.cli.common import add_contract_arguments, check_output, load_contract, resolve_reference
from eagle3_conformance.core.errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("monitor", help="watch a running SGLang / vLLM server's acceptance through its own /metrics: "
                                       "a drift alarm against an accept baseline, with a canary and a diagnosis")
    p.add_argument("--server", required=True, metavar="URL", help="base URL of the running server (http://host:port)")
    p.add_argument("--baseline", required=True, metavar="B.json", help="an `accept --record` baseline of this pair")
    add_contract_arguments(p, required=False, what="the pair's contract: enables the canary (accept --baseline on "
                                                   "the held-out prompts) and the captures' diagnosis")
    p.add_argument("--duration", type=float, metavar="S", help="run S seconds, then exit 0 (no alarm), 1 (alarm) or 3 "
                                                               "(no window judged); default: until stopped "
                                                               "(SIGINT / SIGTERM)")
    p.add_argument("--window", type=float, default=30.0, metavar="S", help="window length (30 s)")
    p.add_argument("--interval", type=float, default=5.0, metavar="S", help="seconds between scrapes (5)")
    p.add_argument("--warmup", type=int, default=10, metavar="N", help="judged windows that calibrate the reference "
                                                                     "level and variance (10)")
    p.add_argument("--min-steps", type=float, default=50, metavar="N",
                   help="verify steps a window needs to be judged; fewer are carried into the next (50)")
    p.add_argument("--tolerance", type=float, default=0.05, help="the drop to detect, a fraction of the baseline's "
                                                                 "figure (0.05, accept's default)")
    p.add_argument("--false-alarms-per-day", type=float, default=0.1, metavar="R",
                   help="the false-alarm rate the threshold is set for (0.1: one per ten days)")
    p.add_argument("--scrape-timeout", type=float, default=10.0, metavar="S", help="seconds per scrape, and per request of the server's identity at start (10)")
    p.add_argument("--canary-every", type=float, metavar="S", help="also run the canary every S seconds (needs "
                                                                   "--contract)")
    p.add_argument("--canary-concurrency", type=int, default=4, metavar="N", help="canary requests in flight (4)")
    p.add_argument("--captures", metavar="DIR", help="the serve-hooks --out directory the server records into: on an "
                                                     "alarm its newest process's records are judged (check-captures)")
    p.add_argument("--conformance-reference", choices=("transformers", "engine"), default=None,
                   help="what judges the captures (default: the contract's `reference`)")
    p.add_argument("--reference", metavar="MODEL_DIR", help="the target for the transformers reference (default: "
                                                            "the contract's fixture or target.path)")
    p.add_argument("--max-captures", type=int, default=16, metavar="N", help="captures judged on an alarm (16)")
    p.add_argument("--prometheus-port", type=int, metavar="PORT", help="serve the verdict as Prometheus metrics "
                                                                       "on PORT (0: a free port, printed)")
    p.add_argument("--prometheus-host", default="127.0.0.1", metavar="ADDR", help="address to bind (127.0.0.1)")
    p.add_argument("--json", metavar="OUT", help="write the session (windows, alarms, canaries) as JSON")
    p.add_argument("--html", metavar="OUT", help="write the report with the acceptance timeline as one HTML page")
    p.add_argument("--quiet", action="store_true", help="no line per window")
    p.set_defaults(func=run)


def _check_args(a) -> None:
    if not a.server.startswith(("http://", "https://")):
        raise UsageError(f"--server {a.server}: give a URL (http://host:port)")
    for flag, lo in (("window", 1.0), ("interval", 0.1), ("scrape_timeout", 0.1)):
        if getattr(a, flag) < lo:
            raise UsageError(f"--{flag.replace('_', '-')} {getattr(a, flag)}: give seconds >= {lo:g}")
    if a.interval > a.window:
        raise UsageError(f"--interval {a.interval} is longer than --window {a.window}")
    if a.duration is not None and a.duration <= 0:
        raise UsageError(f"--duration {a.duration}: give seconds > 0")
    if a.warmup < 2:
        raise UsageError(f"--warmup {a.warmup}: a variance needs 2 windows or more")
    if not 0 < a.tolerance < 1:
        raise UsageError(f"--tolerance {a.tolerance}: a fraction of the baseline, 0 < t < 1")
    if not a.false_alarms_per_day > 0:
        raise UsageError(f"--false-alarms-per-day {a.false_alarms_per_day}: give a rate > 0")
    if (a.canary_every or a.captures) and not a.contract:
        raise UsageError("--canary-every / --captures need --contract (the canary and the captures are judged "
                         "against it)")
    outs = [(f, getattr(a, f.strip("-"))) for f in ("--json", "--html") if getattr(a, f.strip("-"))]
    if len({Path(o).resolve() for _, o in outs}) < len(outs):
        raise UsageError("--json and --html: give a different file to each")
    for flag, out in outs:
        check_output(out, flag, inputs=(a.contract, a.baseline))


def _build(a, c):
    from eagle3_conformance.monitor import metrics, session
    from eagle3_conformance.monitor.canary import run_canary
    from eagle3_conformance.monitor.captures import judge_recent
    from eagle3_conformance.server_accept import baseline

    ref = a.conformance_reference or (c.reference if c is not None else "transformers")
    opts = session.Options(server=a.server.rstrip("/"), baseline=a.baseline, duration=a.duration, window_s=a.window,
                           interval_s=a.interval, warmup=a.warmup, min_steps=a.min_steps, tolerance=a.tolerance,
                           false_alarms_per_day=a.false_alarms_per_day, scrape_timeout=a.scrape_timeout,
                           canary_every=a.canary_every, canary_concurrency=a.canary_concurrency, captures=a.captures,
                           captures_reference=ref, max_captures=a.max_captures)
    adapter, doc = session.connect(opts, c)
    info = adapter.info
    if a.captures and ref == "transformers":
        opts.reference_dir = resolve_reference(c, a)

    def identity():
        from eagle3_conformance import server_accept

        new = server_accept.connect(opts.server, timeout=30.0).info
        baseline.check_server(doc, opts.baseline, new)
        from eagle3_conformance import __version__

        return new, baseline.changes(doc, new, contract=c, draft=baseline.draft_identity(new, c),
                                     tool_version=__version__)

    canary = None if c is None else (lambda: run_canary(opts.server, opts.baseline, c, tolerance=opts.tolerance,
                                                        concurrency=opts.canary_concurrency))
    diag = None if not a.captures else (lambda: judge_recent(a.captures, c, reference=ref, max_captures=a.max_captures,
                                                             reference_dir=opts.reference_dir))

    def scrape():
        return metrics.scrape(opts.server, info.kind, info.k, opts.scrape_timeout)
    return opts, info, doc, scrape, canary, diag, identity


def run(a) -> int:
    from eagle3_conformance import report
    from eagle3_conformance.monitor import render
    from eagle3_conformance.monitor.exposition import Exposition
    from eagle3_conformance.monitor.session import Monitor

    _check_args(a)
    import prometheus_client  # noqa: F401  (the [monitor] extra, checked before the server is contacted)

    c = load_contract(a.contract) if a.contract else None
    opts, info, doc, scrape, canary, diag, identity = _build(a, c)
    expo = Exposition()
    expo.info.info({"server": opts.server, "kind": info.kind, "version": info.version, "model": info.model,
                    "draft": str(info.draft), "baseline": str(a.baseline)})
    if a.prometheus_port is not None:
        port = expo.serve(a.prometheus_port, a.prometheus_host)
        print(f"verdict metrics at http://{a.prometheus_host}:{port}/metrics", flush=True)
    stopping = {"now": False}

    def on_signal(signum, frame):
        stopping["now"] = True

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    log = (lambda s: None) if a.quiet else (lambda s: print(s, flush=True))
    try:
        o = Monitor(opts, info, doc, scrape=scrape, canary=canary, diagnose=diag, identity=identity, expo=expo,
                    stop=lambda: stopping["now"], log=log).run()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        expo.stop()
    d = render.document(o, a.baseline, doc)
    print(render.text(d))
    if a.json:
        report.write_document(a.json, d)
    if a.html:
        from eagle3_conformance.htmlreport import render_html

        render_html(d, a.html, name=Path(a.baseline).name)
    sys.stdout.flush()
    return o.exit_code
