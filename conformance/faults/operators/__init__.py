"""Every fault operator, grouped by fault family (one module each), in matrix order.

A family module declares its ``KINDS`` (FAULTS.md kind -> the name the matrix prints) and its
``OPERATORS``, each :class:`~conformance.faults.operators.base.Operator` next to its knob
builders: which checks must catch it, which scenario it needs, and how it applies on each path
(or why it cannot occur there). Adding an operator is an entry in its family's list.
"""

from __future__ import annotations

from conformance.faults.operators import buffers, dtype, layers, rows, state, vocab
from conformance.faults.operators.base import Apply, NotApplicable, Operator

FAMILIES = (layers, state, buffers, vocab, dtype, rows)
"""The family modules, in the order their operators appear in the matrix JSON."""

OPERATORS: list[Operator] = [op for fam in FAMILIES for op in fam.OPERATORS]
OPERATORS_BY_NAME = {op.name: op for op in OPERATORS}
KIND_NAMES: dict[str, str] = dict(sorted(((k, v) for fam in FAMILIES for k, v in fam.KINDS.items()),
                                        key=lambda kv: int(kv[0][1:])))
KINDS = tuple(KIND_NAMES)
"""K1..K14, in order."""

__all__ = ["Apply", "FAMILIES", "KINDS", "KIND_NAMES", "NotApplicable", "OPERATORS", "OPERATORS_BY_NAME", "Operator"]
