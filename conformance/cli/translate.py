"""``conformance translate CONTRACT --to TOOL``: the integers and the config key a tool needs to
capture the contract's boundaries (:func:`conformance.engine_ids.boundaries_to_tool`)."""

from __future__ import annotations

import json

from conformance.cli.common import EXIT_OK, load_contract
from conformance.errors import UsageError


def add_parser(sub) -> None:
    t = sub.add_parser("translate", help="print the ids and config key a tool needs for a contract")
    t.add_argument("contract", metavar="CONTRACT")
    t.add_argument("--to", required=True, choices=["sglang", "vllm", "speculators", "specforge"])
    t.add_argument("--engine-version", metavar="V", help="tool release (SGLang default: installed)")
    t.add_argument("--json", action="store_true", help="print JSON")
    t.set_defaults(func=run)


def run(args) -> int:
    from conformance.engine_ids import TranslationError, boundaries_to_tool

    c = load_contract(args.contract)
    try:
        t = boundaries_to_tool(args.to, c.aux, c.L, architecture=c.target.architecture,
                               version=args.engine_version, verifier=c.verifier_last.parsed,
                               allow_embedding=c.capture.allow_embedding)
    except TranslationError as e:
        raise UsageError(f"{args.contract}: {args.to} cannot capture {c.capture.boundaries}: {e}") from None
    if args.json:
        out = {"contract": args.contract, "boundaries": c.capture.boundaries, "num_hidden_layers": c.L,
               **t.to_json()}
        print(json.dumps(out, indent=2))
        return EXIT_OK
    print(f"{c.name}: {args.to} ids for {c.capture.boundaries} (L = {c.L}, {c.target.architecture})")
    print(f"  ids:        {t.ids}")
    print(f"  key:        {t.key_path}")
    print(f"  convention: {t.convention}")
    print(f"  holds for:  {t.holds_for}")
    for k, v in t.extra.items():
        print(f"  {k}: {v}")
    for n in t.notes:
        print(f"  note: {n}")
    return EXIT_OK
