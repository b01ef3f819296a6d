"""``eagle3-conformance upgrade-contract OLD.yaml -o NEW.yaml``: rewrite a contract's deprecated keys
(docs/compatibility.md) keeping its comments (:func:`eagle3_conformance.authoring.upgrade_contract.upgrade_text`).

Without ``-o`` the upgraded contract goes to stdout; ``--in-place`` writes over OLD (only when asked). The
changes are listed on stderr, each with its line in OLD. Exit 0 (upgraded, or already current), 2 (OLD does
not load, or an output that would overwrite it without ``--in-place``)."""

from __future__ import annotations

import sys
from pathlib import Path

from eagle3_conformance.cli.common import EXIT_OK
from eagle3_conformance.core.errors import UsageError


def add_parser(sub) -> None:
    u = sub.add_parser("upgrade-contract", help="rewrite a contract's deprecated keys for this release (comments kept)")
    u.add_argument("contract", metavar="OLD", help="the contract file (read only, unless --in-place)")
    out = u.add_mutually_exclusive_group()
    out.add_argument("-o", "--out", metavar="NEW", help="write the upgraded contract here (default: stdout)")
    out.add_argument("--in-place", action="store_true", help="write the upgraded contract over OLD")
    u.set_defaults(func=run)


def run(args) -> int:
    from eagle3_conformance.authoring.upgrade_contract import upgrade_text
    from eagle3_conformance.cli.common import check_output
    from eagle3_conformance.contract import ContractError

    src = Path(args.contract)
    out = None
    if args.out:
        out = check_output(args.out, "-o", inputs=(src,))
    try:
        text = src.read_text(encoding="utf-8")
        new, changes = upgrade_text(text, str(src))
    except OSError as e:
        raise UsageError(f"{src}: cannot read: {e.strerror or e}") from None
    except (UnicodeDecodeError, ContractError) as e:
        raise UsageError(str(e)) from None
    for ch in changes:
        print(f"upgrade-contract: {ch.format(str(src))}", file=sys.stderr)
    if not changes:
        print(f"upgrade-contract: {src}: no deprecated key; the contract is current", file=sys.stderr)
    if args.in_place:
        if changes:
            src.write_text(new, encoding="utf-8")
    elif out is not None:
        out.write_text(new, encoding="utf-8")
    else:
        sys.stdout.write(new)
    return EXIT_OK
