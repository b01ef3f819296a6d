"""Canonical boundary notation: ``B_k`` and ``F``.

``B_k`` (k = 0..L) is the residual stream *entering* decoder layer k: ``B_0`` is the embedding
output, ``B_L`` the last layer's output before the final norm. ``F = final_norm(B_L)`` is what
``lm_head`` consumes. Source of the convention: docs/REFERENCE.md section 1.

Engine and tool ids are translated to and from boundaries here and are never compared raw.
Where an engine is installed, the translation asks the engine's own code (see
``eagle3_conformance.engines``); the tables here only *name* the conventions.
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


def engine_default_aux_ids(num_layers: int) -> list[int]:
    """``[2, L//2, L-3]``: the aux ids the engines fall back to when a draft config gives none
    (SGLang's setters, ``llama.py:929-941``; vLLM's ``get_eagle3_default_aux_hidden_state_layers``,
    ``interfaces.py:1751-1772``; speculators' training default; EAGLE's ``modeling_llama_kv.py``),
    read by each of them as boundaries B_2, B_{L//2}, B_{L-3} (REFERENCE.md 2.1). As written: it
    may repeat an index for a tiny L, and which engine applies it is the engine's own code's answer
    (:mod:`eagle3_conformance.engine_ids`, :mod:`eagle3_conformance.released`); this is for naming
    and for fault injection, never instead of asking the engine."""
    return [2, num_layers // 2, num_layers - 3]


def all_boundaries(num_layers: int) -> list[Boundary]:
    """``[B_0, ..., B_L, F]`` for a target with ``num_layers`` = L decoder layers."""
    return [Boundary(k) for k in range(num_layers + 1)] + [Boundary(-1, final=True)]


def boundary_row(b: Boundary, num_layers: int) -> int:
    """Row of ``b`` in a reference stack ordered like :func:`all_boundaries` (F is row L+1)."""
    return num_layers + 1 if b.final else b.index


# --- id conventions -------------------------------------------------------------------------
# "boundary": id i captures B_i  (vLLM, speculators >= 0.5, EAGLE official).
# "output_of": id i captures B_{i+1} (SGLang llama family explicit ids, SpecForge, modelopt HF,
#              TorchSpec, AngelSlim, speculators 0.3/0.4).  REFERENCE.md section 2.1 / 2.3.
CONVENTIONS = ("boundary", "output_of")


def ids_to_boundaries(ids: list[int], convention: str) -> list[Boundary]:
    """Translate tool ids to boundaries under a fixed convention.

    Raises:
        ValueError: unknown convention.
    """
    if convention == "boundary":
        return [Boundary(i) for i in ids]
    if convention == "output_of":
        return [Boundary(i + 1) for i in ids]
    raise ValueError(f"unknown id convention {convention!r}; expected one of {CONVENTIONS}")


def boundaries_to_ids(boundaries: list[Boundary], convention: str) -> list[int]:
    """Inverse of :func:`ids_to_boundaries`.

    Raises:
        ValueError: unknown convention, ``F`` given, or ``B_0`` under ``output_of`` (cannot be
            expressed: REFERENCE.md section 2.3).
    """
    out = []
    for b in boundaries:
        if b.final:
            raise ValueError("F is not an aux boundary and has no layer id")
        if convention == "boundary":
            out.append(b.index)
        elif convention == "output_of":
            if b.index == 0:
                raise ValueError("B_0 cannot be expressed in output-of ids (it would be -1)")
            out.append(b.index - 1)
        else:
            raise ValueError(f"unknown id convention {convention!r}; expected one of {CONVENTIONS}")
    return out
