"""``upgrade-check``: what each version of a tool captures for each contract, side by side
(:mod:`~eagle3_conformance.upgrade.gate`; its public names are re-exported here, so
``from eagle3_conformance import upgrade; upgrade.check(...)`` keeps working)."""

from eagle3_conformance.upgrade.gate import (
    ContractResult,
    Report,
    SlotChange,
    Verdict,
    check,
    compare,
    parse_spec,
)

__all__ = ["check", "compare", "parse_spec", "Report", "ContractResult", "Verdict", "SlotChange"]
