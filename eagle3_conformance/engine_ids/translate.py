"""Boundaries <-> any tool's ids: one entry point per direction, dispatching to the tool's module
(:mod:`.sglang`, :mod:`.vllm`, :mod:`.speculators`, :mod:`.specforge`), after refusing a tool or a
release no rule is known for. The library behind ``eagle3-conformance translate``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import eagle3_conformance.engine_ids.sglang as sglang
import eagle3_conformance.engine_ids.specforge as specforge
import eagle3_conformance.engine_ids.speculators as speculators
import eagle3_conformance.engine_ids.vllm as vllm
from eagle3_conformance.core.notation import Boundary
from eagle3_conformance.engine_ids.base import TOOLS, ToolIds, TranslationError, version_key

_MODULES = {"sglang": sglang, "vllm": vllm, "speculators": speculators, "specforge": specforge}


def _check_tool(tool: str) -> None:
    if tool not in TOOLS:
        raise TranslationError(f"unknown tool {tool!r}; expected one of {', '.join(TOOLS)}")


# The releases whose id rule this tool knows without asking an installed copy (REFERENCE.md 5.3:
# speculators 0.3/0.4 output-of ids, boundary ids from 0.5 to 0.9.0, the pinned release; REFERENCE.md
# 6: SpecForge 0.2.0, the PyPI wheel). SGLang's range is checked by :func:`sglang_rule`, vLLM's by
# asking the installed code (:mod:`eagle3_conformance.tools.vllm_cpu.ids`).
_KNOWN_RELEASES = {"speculators": ((0, 3), (0, 9, 0), "0.3.0 to 0.9.0"),
                   "specforge": ((0, 2, 0), (0, 2, 0), "0.2.0")}


def check_tool_version(tool: str, version: Optional[str]) -> None:
    """Refuse a release the tool cannot speak for, before any rule is applied.

    Args:
        tool: one of :data:`TOOLS`.
        version: the release asked for (``"0.9.0"``); None: the tool's default, always accepted.

    Raises:
        TranslationError: ``version`` is not a PEP 440 version, or (speculators, SpecForge) it is
            outside the releases whose rule is recorded; the message names the known ones.
    """
    if version is None:
        return
    vk = version_key(version)
    known = _KNOWN_RELEASES.get(tool)
    if known is None:
        return
    lo, hi, words = known
    pad = lambda k: k + (0,) * (3 - len(k))  # noqa: E731 - (0, 9) == (0, 9, 0)
    if not pad(lo) <= pad(vk) <= pad(hi):
        raise TranslationError(f"{tool} {version}: no id rule is known for this release (known: {words}; "
                               "docs/REFERENCE.md)")


def boundaries_to_tool(tool: str, boundaries: Sequence[Boundary | str], num_layers: int, *,
                       architecture: str = "LlamaForCausalLM", version: Optional[str] = None,
                       verifier: Boundary | str | None = None,
                       allow_embedding: bool = False) -> ToolIds:
    """Translate aux boundaries into ``tool``'s integers.

    Args:
        tool: one of :data:`TOOLS`.
        boundaries: aux slots, ascending, e.g. ``["B_2", "B_16", "B_29"]``.
        num_layers: L.
        architecture: target ``architectures[0]`` (SGLang rules are per model file).
        version: tool release (SGLang: default installed; speculators: default 0.9.0).
        verifier: the contract's ``verifier_last`` (``B_L`` or ``F``), for speculators' data
            generation list.
        allow_embedding: whether B_0 may be an aux slot.

    Raises:
        TranslationError: the tool cannot express a boundary (B_0 in output-of ids, F as an aux
            id, K != 3 for SpecForge, F as speculators' verifier), or no rule is known.
    """
    _check_tool(tool)
    check_tool_version(tool, version)
    bs = [Boundary.parse(b) for b in boundaries]
    L = num_layers
    if any(b.final for b in bs):
        raise TranslationError("F is not an aux boundary and has no layer id in any tool")
    if any(b.index > L for b in bs):
        raise TranslationError(f"boundaries {[str(b) for b in bs]} go beyond B_{L}")
    return _MODULES[tool].to_tool_ids(bs, L, architecture=architecture, version=version, verifier=verifier,
                          allow_embedding=allow_embedding)


def tool_to_boundaries(tool: str, ids: Optional[Sequence[int]], num_layers: int, *,
                       architecture: str = "LlamaForCausalLM", version: Optional[str] = None,
                       allow_embedding: bool = False) -> list[Boundary]:
    """Inverse of :func:`boundaries_to_tool`: what ``tool`` captures for ``ids`` (None: the
    tool's default).

    Raises:
        TranslationError: the ids cannot be read unambiguously by the tool (see
            :meth:`SGLangRule.boundaries`), or an unknown tool.
    """
    _check_tool(tool)
    check_tool_version(tool, version)
    return _MODULES[tool].to_boundaries(ids, num_layers, architecture=architecture, version=version,
                                        allow_embedding=allow_embedding)
