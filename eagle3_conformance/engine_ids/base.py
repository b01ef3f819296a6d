"""What every tool module of :mod:`eagle3_conformance.engine_ids` shares: the error, the config keys,
the engines' default ids, the two fixed id conventions and the result type.

Conventions (docs/REFERENCE.md sections 2.1, 2.3): ``"boundary"``, id i captures ``B_i`` (vLLM,
speculators >= 0.5, EAGLE official); ``"output_of"``, id i captures ``B_{i+1}`` (SGLang llama family
explicit ids, SpecForge, modelopt HF, TorchSpec, AngelSlim, speculators 0.3/0.4). These only *name*
a convention; where a tool's code can be asked, its module asks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from eagle3_conformance.core.notation import Boundary

TOOLS = ("sglang", "vllm", "speculators", "specforge")

SGLANG_KEY = "eagle_config.eagle_aux_hidden_state_layer_ids"
TOP_KEY = "eagle_aux_hidden_state_layer_ids"


class TranslationError(ValueError):
    """A tool cannot express the boundaries, or the mapping is ambiguous or unknown. The message
    is one line and says why. ``verifier`` is True when the verifier slot, not the aux list, is
    what the tool cannot store (speculators and F), so callers name the right part of a contract.
    ``not_installed`` is True when the tool's own code, which would answer, is not installed here: no
    verdict on the boundaries (callers say "cannot translate here", not "cannot capture")."""

    def __init__(self, message: str, *, verifier: bool = False, not_installed: bool = False) -> None:
        super().__init__(message)
        self.verifier = verifier
        self.not_installed = not_installed


def engine_default_aux_ids(num_layers: int) -> list[int]:
    """``[2, L//2, L-3]``: the aux ids the engines fall back to when a draft config gives none
    (SGLang's setters, ``llama.py:929-941``; vLLM's ``get_eagle3_default_aux_hidden_state_layers``,
    ``interfaces.py:1751-1772``; speculators' training default; EAGLE's ``modeling_llama_kv.py``),
    read by each of them as boundaries B_2, B_{L//2}, B_{L-3} (REFERENCE.md 2.1). As written: it
    may repeat an index for a tiny L, and which engine applies it is the engine's own code's answer
    (:mod:`eagle3_conformance.engine_ids.sglang`, :mod:`eagle3_conformance.released`); this is for naming
    and for fault injection, never instead of asking the engine. The one place this list is written
    (tests/test_structure.py checks it)."""
    return [2, num_layers // 2, num_layers - 3]


def version_key(v: str) -> tuple:
    """``Version(v).release``, e.g. ``(0, 5, 13)``.

    Raises:
        TranslationError: ``v`` is not a PEP 440 version.
    """
    from packaging.version import InvalidVersion, Version

    try:
        return Version(v).release
    except InvalidVersion:
        raise TranslationError(f"not a version: {v!r}") from None


# --- fixed id conventions -------------------------------------------------------------------
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


def read_listed_ids(tool: str, ids: Sequence[int], num_layers: int, *, output_of: bool,
                    exactly: Optional[int] = None, allow_embedding: bool = False) -> list[Boundary]:
    """The boundaries a tool with a fixed convention reads from explicit ``ids``, in list order.

    Raises:
        TranslationError: repeated or negative ids (output-of: ``exactly`` ids required when
            given), ids out of ``0..L`` (boundary), not ascending, beyond ``B_L``, or ``B_0``
            without ``allow_embedding`` (fault-kinds.md K2).
    """
    L = num_layers
    ids = [int(i) for i in ids]
    if output_of:
        if len(set(ids)) != len(ids) or min(ids) < 0:
            raise TranslationError(f"{tool}: ids {ids} must be unique and non-negative")
        if exactly is not None and len(ids) != exactly:
            raise TranslationError(f"{tool}: exactly {exactly} ids required, got {ids}")
        out = [Boundary(i + 1) for i in ids]
    else:
        if len(set(ids)) != len(ids) or min(ids) < 0 or max(ids) > L:
            raise TranslationError(f"{tool}: ids {ids} must be distinct and in [0, {L}]")
        out = [Boundary(i) for i in ids]
    if ids != sorted(ids):
        raise TranslationError(f"{tool}: ids {ids} are not ascending; the concat order would not follow "
                               "the list in every backend (REFERENCE.md 2.2)")
    if any(b.index > L for b in out):
        raise TranslationError(f"{tool}: ids {ids} reach beyond B_{L}")
    if any(b.index == 0 for b in out) and not allow_embedding:
        raise TranslationError(f"{tool}: ids {ids} capture B_0 (the embedding output) (fault-kinds.md K2)")
    return out

@dataclass
class ToolIds:
    """What one tool needs to capture a contract's boundaries.

    Attributes:
        tool: "sglang", "vllm", "speculators" or "specforge".
        holds_for: the release(s) the rule holds for, with its source.
        ids: the integers to write.
        key_path: where they go (config file and key path).
        convention: "output_of" (i -> B_{i+1}), "boundary" (i -> B_i), or an SGLang file rule.
        extra: tool-specific extras (e.g. speculators' data-generation list), name -> value.
        notes: caveats in words.
    """

    tool: str
    holds_for: str
    ids: list[int]
    key_path: str
    convention: str
    extra: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "holds_for": self.holds_for, "ids": self.ids,
                "key_path": self.key_path, "convention": self.convention, "extra": self.extra,
                "notes": self.notes}
