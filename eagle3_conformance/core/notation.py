"""Canonical boundary notation: ``B_k`` and ``F``.

``B_k`` (k = 0..L) is the residual stream *entering* decoder layer k: ``B_0`` is the embedding
output, ``B_L`` the last layer's output before the final norm. ``F = final_norm(B_L)`` is what
``lm_head`` consumes. Source of the convention: docs/REFERENCE.md section 1.

Engine and tool ids are translated to and from boundaries by :mod:`eagle3_conformance.engine_ids`
(each tool's own code where it can be asked) and are never compared raw.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

_B_RE = re.compile(r"^B_(\d+)$")


@dataclass(frozen=True, order=True)
class Boundary:
    """One tensor of the target's forward pass in canonical notation.

    ``index`` is k for ``B_k``; ``F`` is represented with ``final=True`` and ``index=-1`` so that
    sorting puts it after every ``B_k`` only through :func:`sort_key`.
    """

    index: int
    final: bool = False

    @classmethod
    def parse(cls, text: Union[str, "Boundary"]) -> "Boundary":
        """Parse ``"B_12"`` or ``"F"``.

        Raises:
            ValueError: text is neither ``B_<k>`` with k >= 0 nor ``F``.
        """
        if isinstance(text, Boundary):
            return text
        if not isinstance(text, str):
            raise ValueError(f"expected a boundary like 'B_3' or 'F', got {text!r}")
        t = text.strip()
        if t == "F":
            return cls(index=-1, final=True)
        m = _B_RE.match(t)
        if not m:
            raise ValueError(f"expected a boundary like 'B_3' or 'F', got {text!r}")
        return cls(index=int(m.group(1)))

    def __str__(self) -> str:
        return "F" if self.final else f"B_{self.index}"

    def describe(self, num_layers: int | None = None) -> str:
        """Words for reports: ``"B_0 (embedding output)"``, ``"F (post final norm)"``."""
        if self.final:
            return "F (final-norm output)"
        if self.index == 0:
            return "B_0 (embedding output)"
        if num_layers is not None and self.index == num_layers:
            return f"B_{self.index} (last layer output, pre final norm)"
        return f"B_{self.index} (entering layer {self.index})"

    def sort_key(self) -> tuple[int, int]:
        return (1, 0) if self.final else (0, self.index)


def all_boundaries(num_layers: int) -> list[Boundary]:
    """``[B_0, ..., B_L, F]`` for a target with ``num_layers`` = L decoder layers."""
    return [Boundary(k) for k in range(num_layers + 1)] + [Boundary(-1, final=True)]


def boundary_row(b: Boundary, num_layers: int) -> int:
    """Row of ``b`` in a reference stack ordered like :func:`all_boundaries` (F is row L+1)."""
    return num_layers + 1 if b.final else b.index
