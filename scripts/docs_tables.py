"""Tables of docs/ printed from the code that defines them (checked blocks of scripts/docs_regen.py).

    python scripts/docs_tables.py deprecated-keys   the contract keys deprecated, from contract/deprecations.py
    python scripts/docs_tables.py moved-modules     the module paths that moved, from core/moved.py
    python scripts/docs_tables.py exit-codes        every exit status, from core/exit_codes.py
    python scripts/docs_tables.py acceptance-faults JSON     docs/acceptance.md's faults table, from the JSON
    python scripts/docs_tables.py acceptance-estimate JSON   ... and its estimate-vs-loop table; JSON is what
        `eagle3-conformance faults --acceptance --estimate --json JSON` wrote (docs/acceptance-table.json)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


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


def _ci(iv) -> str:
    return f"[{iv[0]:+.2f}, {iv[1]:+.2f}]" if iv else "-"


def acceptance_faults(path: str) -> str:
    """One row per fault of ``faults --acceptance``: accept length with its 95% bootstrap interval over
    prompts, the paired interval of correct - fault, acceptance rate, per-position acceptance, lossless,
    whether the draft's fc ran."""
    rows = ["| fault | kind | accept length [95% CI] | correct - fault [95% CI] | acceptance | per position 1..3 | "
            "lossless | `fc` ran |", "|---|---|---|---|---|---|---|---|"]
    for r in json.loads(Path(path).read_text())["rows"]:
        fc = "yes" if r["fc_calls"] else "no"
        if r["mean_accept_length"] is None:  # the run raised: the error is the row
            rows.append(f"| `{r['name']}` | {r['kind']} | crash: {r['errors'][0]} | - | - | - | - | {fc} |")
            continue
        lo, hi = r["interval"]
        pos = " / ".join(f"{x:.0%}" for x in r["per_position"])
        rows.append(f"| `{r['name']}` | {r['kind']} | {r['mean_accept_length']:.3f} [{lo:.2f}, {hi:.2f}] | "
                    f"{_ci(r['vs_correct'])} | {r['acceptance_rate']:.1%} | {pos} | "
                    f"{'yes' if r['lossless'] else 'no'} | {fc} |")
    return "\n".join(rows)


def acceptance_estimate(path: str) -> str:
    """The loop against the engine-free estimate (per path), correct wiring and the table's one fault."""
    est = json.loads(Path(path).read_text())["estimate"]
    rows = ["| wiring | measured by | mean accept length | position 1 | position 2 | position 3 |",
            "|---|---|---|---|---|---|"]
    for which, label in (("correct", "correct"), ("fault", f"`{est['fault_name']}`")):
        runs = [("loop (SGLang classes)" if which == "correct" else "loop", est[which]["loop"])]
        runs += [(f"estimate: {p}", e) for p, e in est[which]["estimates"].items()]
        for how, fig in runs:
            pos = " | ".join(f"{x:.1%}" for x in fig["per_position"])
            rows.append(f"| {label} | {how} | {fig['mean_accept_length']:.3f} | {pos} |")
    return "\n".join(rows)


TABLES = {"deprecated-keys": deprecated_keys, "moved-modules": moved_modules, "exit-codes": exit_codes}
FROM_FILE = {"acceptance-faults": acceptance_faults, "acceptance-estimate": acceptance_estimate}


def main(argv: list[str]) -> int:
    if len(argv) == 1 and argv[0] in TABLES:
        print(TABLES[argv[0]]())
        return 0
    if len(argv) == 2 and argv[0] in FROM_FILE:
        print(FROM_FILE[argv[0]](argv[1]))
        return 0
    print(f"usage: python scripts/docs_tables.py {{{'|'.join(TABLES)}}} | {{{'|'.join(FROM_FILE)}}} JSON",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
