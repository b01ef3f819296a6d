"""Tables of docs/ printed from the code that defines them (checked blocks of scripts/docs_regen.py).

    python scripts/docs_tables.py deprecated-keys   the contract keys deprecated, from contract/deprecations.py
    python scripts/docs_tables.py moved-modules     the module paths that moved, from core/moved.py
    python scripts/docs_tables.py exit-codes        every exit status, from core/exit_codes.py
"""

from __future__ import annotations

import sys


def deprecated_keys() -> str:
    from eagle3_conformance.contract import DEPRECATED_KEYS

    rows = ["| key | deprecated in | may be refused from | why | `upgrade-contract` |", "|---|---|---|---|---|"]
    for k in DEPRECATED_KEYS:
        what = f"renames it to `{'.'.join(k.rename_to)}`" if k.rename_to else "removes it"
        rows.append(f"| `{k.dotted}` | {k.since} | {k.removal} | {k.why} | {what} |")
    return "\n".join(rows)


def moved_modules() -> str:
    from eagle3_conformance.core.moved import MOVED, REMOVAL

    rows = [f"| old path (works until {REMOVAL}, with a DeprecationWarning) | new path |", "|---|---|"]
    rows += [f"| `{old}` | `{new}` |" for old, new in sorted(MOVED.items())]
    return "\n".join(rows)


def exit_codes() -> str:
    from eagle3_conformance.core.exit_codes import ExitCode

    rows = ["| exit | name |", "|---|---|"]
    rows += [f"| {int(e)} | `{e.name}` |" for e in ExitCode]
    return "\n".join(rows)


TABLES = {"deprecated-keys": deprecated_keys, "moved-modules": moved_modules, "exit-codes": exit_codes}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in TABLES:
        print(f"usage: python scripts/docs_tables.py {{{'|'.join(TABLES)}}}", file=sys.stderr)
        return 2
    print(TABLES[argv[0]]())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
