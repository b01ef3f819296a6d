"""Which dtype the hidden states are in (K12): stored or served in another dtype than the
contract's."""

from __future__ import annotations

from conformance.faults.example import Knobs
from conformance.faults.operators.base import Apply, Operator, both

KINDS = {
    "K12": "dtype",
}
"""The fault kinds (FAULTS.md) of this family, as the matrix names them."""


def _t_dtype(scn, c, ex):
    return Knobs(disk_dtype="float32" if c.data_dtype != "float32" else "bfloat16")


def _s_dtype(scn, c, ex):
    return Knobs(variant={"dtype": "bfloat16" if c.target.dtype != "bfloat16" else "float32"})


OPERATORS: list[Operator] = [
    Operator("dtype-cast", "K12", "hidden states in the wrong dtype", ("dtype", "tensor_dtype"), {
        "training": Apply("hidden states stored as float32 (contract: bfloat16)", "data files", _t_dtype),
        "specforge": Apply("aux_hidden_state / hidden_state stored as float32 (contract: bfloat16)", "data files",
                           _t_dtype),
        **both("engine built with ServerArgs.dtype bfloat16 (contract: float32)", "engine rebuild (dtype)",
                _s_dtype)}),
]
