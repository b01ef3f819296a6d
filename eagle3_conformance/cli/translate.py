"""``eagle3-conformance translate CONTRACT --to TOOL``: the integers and the config key a tool needs to
capture the contract's boundaries (:func:`eagle3_conformance.engine_ids.boundaries_to_tool`; for a DFlash
contract :func:`eagle3_conformance.engine_ids.dflash.dflash_boundaries_to_tool`; an MTP contract has no ids)."""

from __future__ import annotations

import json

from eagle3_conformance.cli.common import add_contract_arguments, check_output, load_contract, print_or_write
from eagle3_conformance.core.errors import UsageError
from eagle3_conformance.core.exit_codes import ExitCode


def add_parser(sub) -> None:
    t = sub.add_parser("translate", help="print the ids and config key a tool needs for a contract")
    add_contract_arguments(t)
    t.add_argument("--to", required=True, choices=["sglang", "vllm", "speculators", "specforge"])
    t.add_argument("--engine-version", metavar="V", help="tool release (SGLang default: installed)")
    t.add_argument("--json", nargs="?", const="-", metavar="OUT",
                   help="the ids as JSON: on stdout (--json alone), or written to OUT")
    t.set_defaults(func=run)


def run(args) -> int:
    from eagle3_conformance.engine_ids import TranslationError, boundaries_to_tool

    c = load_contract(args.contract)
    if args.json and args.json != "-":
        check_output(args.json, "--json", inputs=(args.contract,))
    if c.method == "mtp":
        raise UsageError(f"{args.contract}: an MTP head reads no layer ids (it reads {c.capture.boundaries[0]}); "
                         "nothing to translate")
    if c.method == "dflash":
        return _dflash(args, c)
    try:
        t = boundaries_to_tool(args.to, c.aux, c.L, architecture=c.target.architecture,
                               version=args.engine_version, verifier=c.verifier_last.parsed,
                               allow_embedding=c.capture.allow_embedding)
    except TranslationError as e:
        if e.not_installed:  # no answer about the boundaries: the tool's own code is not here to ask
            raise UsageError(f"{args.contract}: cannot translate to {args.to} here: {e}") from None
        # name what the tool refuses: the verifier slot (speculators cannot store F) or the aux list
        what = (f"the verifier slot {c.verifier_last.parsed}" if e.verifier else c.capture.boundaries)
        raise UsageError(f"{args.contract}: {args.to} cannot capture {what}: {e}") from None
    if args.json:
        out = {"contract": args.contract, "boundaries": c.capture.boundaries, "num_hidden_layers": c.L,
               **t.to_json()}
        print_or_write(args.json, json.dumps(out, indent=2))
        return ExitCode.CONFORMS
    print(f"{c.name}: {args.to} ids for {c.capture.boundaries} (L = {c.L}, {c.target.architecture})")
    print(f"  ids:        {t.ids}")
    print(f"  key:        {t.key_path}")
    print(f"  convention: {t.convention}")
    print(f"  holds for:  {t.holds_for}")
    for k, v in t.extra.items():
        print(f"  {k}: {v}")
    for n in t.notes:
        print(f"  note: {n}")
    return ExitCode.CONFORMS


def _dflash(args, c) -> int:
    """DFlash: ``dflash_config.target_layer_ids`` for the tool (its own DFlash rule, never the EAGLE one)."""
    from eagle3_conformance.engine_ids import TranslationError
    from eagle3_conformance.engine_ids.dflash import dflash_boundaries_to_tool

    if args.engine_version:
        raise UsageError("--engine-version: DFlash rules are asked of the installed tools only")
    try:
        t = dflash_boundaries_to_tool(args.to, c.aux, c.L, architecture=c.target.architecture)
    except TranslationError as e:
        raise UsageError(f"{args.contract}: {args.to} cannot tap {c.capture.boundaries}: {e}") from None
    if args.json:
        print_or_write(args.json, json.dumps({"contract": args.contract, "method": "dflash",
                                              "boundaries": c.capture.boundaries, "num_hidden_layers": c.L,
                                              "tool": t.tool, "ids": t.ids, "key_path": t.key,
                                              "holds_for": t.source, "notes": t.notes}, indent=2))
        return ExitCode.CONFORMS
    print(f"{c.name}: {args.to} DFlash ids for {c.capture.boundaries} (L = {c.L}, {c.target.architecture})")
    print(f"  ids:        {t.ids}")
    print(f"  key:        {t.key}")
    print(f"  holds for:  {t.source}")
    for n in t.notes:
        print(f"  note: {n}")
    return ExitCode.CONFORMS
