"""What the comparison is made of: the columns (:class:`Spec`), what one version captures for one
contract (:class:`Capture`, :class:`StepCapture`), where its code came from (:class:`Source`), and
the two conversions every tool shares: a contract's draft config (:func:`draft_config`) and a
capture loop's stored entries to boundaries (:func:`effective`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from eagle3_conformance.core.errors import UsageError

TOOLS = ("sglang", "vllm", "speculators", "specforge")
TRAINING_TOOLS = ("speculators", "specforge")
SAME, DIFFERENT, CANNOT, NOT_COMPARED = "same tensors", "different tensors", "cannot run", "not compared"
BOTH_REFUSE = "refused by both"
SHORT = "slots not captured"  # a version captures fewer slots than the contract declares
NOT_CONTRACT = "not the contract's tensors"  # both versions capture the same slots, and not the contract's
STEPS = ("extend", "verify/decode")
EAGLE_KEY = "eagle_aux_hidden_state_layer_ids"


@dataclass(frozen=True)
class Spec:
    """One column: ``tool==version`` and, for vLLM, the model ``runner`` (``v1``/``v2``)."""

    tool: str
    version: str
    runner: Optional[str] = None

    @property
    def label(self) -> str:
        return f"{self.tool}=={self.version}" + (f" ({self.runner})" if self.runner else "")


def parse_spec(text: str) -> list[Spec]:
    """``"sglang==0.5.12"`` -> one spec; ``"vllm==0.33.0"`` -> one per runner; ``"vllm==0.33.0:v2"``.

    Raises:
        UsageError: not ``TOOL==VERSION``, an unknown tool or runner.
    """
    from eagle3_conformance.released.vllm import RUNNERS

    tool, sep, rest = text.strip().partition("==")
    tool = tool.strip().lower()
    if not sep or not rest:
        raise UsageError(f"{text!r}: expected TOOL==VERSION, e.g. sglang==0.5.23 or vllm==0.33.0:v2")
    if tool not in TOOLS:
        raise UsageError(f"{text!r}: unknown tool {tool!r}; upgrade-check knows {', '.join(TOOLS)}")
    version, _, runner = rest.partition(":")
    if tool != "vllm":
        if runner:
            raise UsageError(f"{text!r}: only vLLM has model runners")
        return [Spec(tool, version.strip())]
    if runner and runner not in RUNNERS:
        raise UsageError(f"{text!r}: unknown vLLM model runner {runner!r}; expected {' or '.join(RUNNERS)}")
    return [Spec(tool, version.strip(), r) for r in ([runner] if runner else RUNNERS)]


@dataclass
class StepCapture:
    """What reaches the draft in one step: ``boundaries`` in concat order (``["F"]``: no aux
    states, the draft reads the final-norm output), the draft-config id behind each slot
    (None: a default), the ``rule`` that decided it (source lines), ``dropped`` entries."""

    boundaries: list[str]
    slot_ids: list[Optional[int]]
    rule: str
    dropped: list[str] = field(default_factory=list)


@dataclass
class Capture:
    """One contract under one version: status ``ok`` / ``cannot run`` / ``not compared`` /
    ``refused`` (the version's own code raises on this contract, ``error`` says how)."""

    column: str
    status: str
    reader: str = ""
    ids_read: Optional[list[int]] = None
    steps: dict[str, StepCapture] = field(default_factory=dict)
    error: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class Source:
    """A fetched version: where its code came from."""

    column: str
    wheel: str
    sha256: str
    files: int
    fetch_seconds: float
    error: str = ""


# --- from a contract to a draft config ----------------------------------------------------------


def draft_config(c) -> dict[str, Any]:
    """The draft ``config.json`` keys the contract declares (where the ids are and what they are)."""
    if c.method == "dflash":
        d = c.dflash
        if d.location == "dflash_config":
            return {"dflash_config": {"target_layer_ids": d.target_layer_ids}}
        return {"target_layer_ids": d.target_layer_ids} if d.location == "top_level" else {}
    li = c.draft.layer_ids
    if li.location == "nested":
        return {"eagle_config": {EAGLE_KEY: list(li.values), "use_aux_hidden_state": True}}
    if li.location == "top_level":
        return {EAGLE_KEY: list(li.values)}
    return {}


def effective(entries: list[int], ids: Optional[list[int]], deepest: int) -> tuple[list[str], list[Optional[int]],
                                                                                  list[str]]:
    """Boundaries a capture loop collects from stored entries (entry i = B_i): ascending, each
    once, entries outside ``0..deepest`` dropped. Returns ``(boundaries, id per slot, dropped)``."""
    src = dict(zip(entries, ids)) if ids is not None and len(ids) == len(entries) else {}
    kept = sorted({e for e in entries if 0 <= e <= deepest})
    dropped = [f"entry {e} (B_{e})" + (f" from id {src[e]}" if e in src else "") for e in entries
               if not 0 <= e <= deepest]
    return [f"B_{e}" for e in kept], [src.get(e) for e in kept], dropped


