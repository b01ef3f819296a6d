"""``eagle3-conformance serve [--device auto|cpu|cuda] -- ARGS``: SGLang's real HTTP server
(``sglang.launch_server ARGS``, the user's own flags unchanged) with the project's CPU recipe on a host
without CUDA (:mod:`eagle3_conformance.serving.serve`; ``python -m eagle3_conformance.serving.serve -- ARGS``
is the same launcher). Exit status: the server's; 2 on bad use of this verb."""

from __future__ import annotations

import argparse

from eagle3_conformance.core.errors import UsageError


def add_parser(sub) -> None:
    from eagle3_conformance.serving.serve import DEVICE_HELP, DEVICES

    p = sub.add_parser("serve", help="start SGLang's real HTTP server (sglang.launch_server) with the CPU recipe "
                                     "where there is no GPU: serve -- <launch_server args>",
                       description="Everything after '--' is passed to sglang.launch_server unchanged.")
    p.add_argument("--device", choices=DEVICES, default="auto", help=DEVICE_HELP)
    p.add_argument("server_args", nargs=argparse.REMAINDER, metavar="-- ARGS",
                   help="sglang.launch_server arguments (--model-path, --speculative-*, --forward-hooks, ...)")
    p.set_defaults(func=run)


def run(args) -> int:
    from eagle3_conformance.serving.serve import NO_ARGS, serve

    rest = list(args.server_args)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if not rest:
        raise UsageError(f"serve: {NO_ARGS}")
    return serve(rest, args.device)
