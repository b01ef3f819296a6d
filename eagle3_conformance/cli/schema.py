"""``eagle3-conformance schema [--write]``: the contract JSON Schema generated from the pydantic models."""

from __future__ import annotations

import sys

from eagle3_conformance.core.exit_codes import ExitCode


def add_parser(sub) -> None:
    s = sub.add_parser("schema", help="print the contract JSON Schema generated from the models")
    s.add_argument("--write", action="store_true", help="write contracts/schema/contract.schema.json")
    s.set_defaults(func=run)


def run(args) -> int:
    from eagle3_conformance.contract import SCHEMA_PATH, schema_text

    text = schema_text()
    if args.write:
        from eagle3_conformance.core.errors import UsageError
        from eagle3_conformance.environment.shipped import in_checkout

        if not in_checkout():
            raise UsageError("schema --write: writes the checkout's contracts/schema/contract.schema.json; this is an "
                             "installed package (print the schema without --write and redirect it)")
        SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
        SCHEMA_PATH.write_text(text)
        print(f"wrote {SCHEMA_PATH}")
    else:
        sys.stdout.write(text)
    return ExitCode.CONFORMS
