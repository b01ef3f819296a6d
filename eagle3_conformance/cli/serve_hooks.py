"""``eagle3-conformance serve-hooks CONTRACT --out DIR`` (or ``--contract CONTRACT``): the ``--forward-hooks`` value for a user's
own ``python -m sglang.launch_server ...`` (any of their flags), recording into DIR.

Writes ``DIR/manifest.json`` (the contract's sha256, this tool's version, the SGLang release the hooks
know) so that ``check-captures`` refuses a directory recorded for another contract, and prints the
JSON value on stdout (with ``--command``: a ready ``--forward-hooks '<value>'`` argument). See
:mod:`eagle3_conformance.serving.captures` and docs/own-server.md. Exit 0, or 2 on bad input.
"""

from __future__ import annotations

import shlex

from eagle3_conformance.cli.common import add_contract_arguments, load_contract
from eagle3_conformance.core.exit_codes import ExitCode


def add_parser(sub) -> None:
    p = sub.add_parser("serve-hooks", help="print the --forward-hooks value that records what your own SGLang "
                                           "server hands its EAGLE-3 draft, for check-captures")
    add_contract_arguments(p, what="the contract the records will be judged against")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="where the server writes its records (created; must be empty or new; the server "
                        "process must be able to write there)")
    p.add_argument("--conformance-reference", choices=("transformers", "engine"), default=None,
                   help="engine: the hooks also record the target's boundaries (B_k of each slot and its "
                        "neighbours, B_0, B_L, F; at most 256 MiB per server process) so check-captures needs no "
                        "copy of the target; transformers: only what enters the draft (default: the contract's "
                        "`reference`)")
    p.add_argument("--command", action="store_true",
                   help="print a shell-quoted `--forward-hooks '<value>'` argument instead of the bare value")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from eagle3_conformance.serving.captures import hooks_value, write_manifest

    c = load_contract(args.contract)
    doc = write_manifest(args.out, args.contract, c, args.conformance_reference or c.reference)
    value = hooks_value(args.out, doc["reference"])
    print(f"--forward-hooks {shlex.quote(value)}" if args.command else value)
    print(f"eagle3-conformance: {args.out}/manifest.json written (contract {c.name}, SGLang "
          f"{doc['sglang_expected']}); after serving: eagle3-conformance check-captures {args.out} "
          f"--contract {args.contract}", file=sys.stderr)
    return ExitCode.CONFORMS
