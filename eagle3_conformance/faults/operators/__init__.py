"""Every fault operator, grouped by fault family (one module each), in matrix order.

A family module declares its ``KINDS`` (fault-kinds.md kind -> the name the matrix prints) and its
``OPERATORS``, each :class:`~eagle3_conformance.faults.operators.base.Operator` next to its knob
builders: which checks must catch it (finding names of checks in
:mod:`eagle3_conformance.checks.registry`, at least one declared for the operator's kind: checked
here at import), which scenario it needs, and how it applies on each path (or why it cannot
occur there). Adding an operator is an entry in its family's list.
"""

from __future__ import annotations

from eagle3_conformance.checks import registry
from eagle3_conformance.faults.operators import buffers, dtype, field, layers, rows, state, vllm, vocab
from eagle3_conformance.faults.operators.base import Apply, NotApplicable, Operator

FAMILIES = (layers, state, buffers, vocab, dtype, rows, field)
"""The family modules, in the order their operators appear in the matrix JSON."""

OPERATORS: list[Operator] = [op for fam in FAMILIES for op in fam.OPERATORS]
OPERATORS_BY_NAME = {op.name: op for op in OPERATORS}
_no_vllm = [op.name for op in OPERATORS if op.name not in vllm.COLUMN]
if _no_vllm or set(vllm.COLUMN) - set(OPERATORS_BY_NAME):
    raise RuntimeError(f"faults/operators/vllm.py: COLUMN must name every operator exactly; missing {_no_vllm}, "
                       f"unknown {sorted(set(vllm.COLUMN) - set(OPERATORS_BY_NAME))}")
for _op in OPERATORS:  # the vllm-extend column lives in one module (operators/vllm.py)
    _v = vllm.COLUMN[_op.name]
    _op.paths[vllm.PATH] = Apply(_v.how, _v.where, _op.apply_on("sglang-extend").fn) if isinstance(_v, vllm.SameKnob) else _v
_unregistered = [(op.name, ch) for op in OPERATORS for ch in op.checks if registry.emitting(ch) is None]
if _unregistered:  # the catching checks are the registry's (eagle3_conformance.checks.registry)
    raise RuntimeError(f"fault operators name checks no registered check emits: {_unregistered}")
_specs = [(op, [registry.emitting(ch) for ch in op.checks]) for op in OPERATORS]  # none is None (above)
_undeclared = [(op.name, op.kind) for op, specs in _specs if not any(s and op.kind in s.faults for s in specs)]
if _undeclared:  # a fault kind is caught by a check declared for it
    raise RuntimeError(f"fault operators whose catching checks are not declared for their kind: {_undeclared}")
KIND_NAMES: dict[str, str] = dict(sorted(((k, v) for fam in FAMILIES for k, v in fam.KINDS.items()),
                                        key=lambda kv: int(kv[0][1:])))
KINDS = tuple(KIND_NAMES)
"""K1..K14, in order."""

__all__ = ["Apply", "FAMILIES", "KINDS", "KIND_NAMES", "NotApplicable", "OPERATORS", "OPERATORS_BY_NAME", "Operator"]
