"""vLLM's EAGLE-3 id rule: id i = ``B_i`` (0..L in ``SupportsEagle3`` mixin models), top-level key
(newer releases also nested). With a pinned release (``vllm==0.33.0``) the installed vLLM's own
readers and setter are asked instead (:mod:`eagle3_conformance.tools.vllm_cpu.ids`; only in the
vLLM environment, ``tox -e vllm``); other releases' own code: :mod:`eagle3_conformance.released.vllm`.
"""

from __future__ import annotations

from typing import Optional, Sequence

from eagle3_conformance.core.notation import Boundary
from eagle3_conformance.engine_ids.base import (
    TOP_KEY,
    ToolIds,
    TranslationError,
    engine_default_aux_ids,
    read_listed_ids,
)


def _vllm_asked(bs: list[Boundary], L: int, architecture: str, version: str, allow_embedding: bool) -> ToolIds:
    """vLLM ``version``, asked of the installed code (:mod:`eagle3_conformance.tools.vllm_cpu.ids`): the
    boundary ids written at the top level must give ``bs`` on every model runner; the nested-only
    placement is asked too and reported when a runner ignores it."""
    from eagle3_conformance.tools.vllm_cpu.ids import READERS, RUNNERS, VLLMNotAsked, read_draft

    if any(b.index == 0 for b in bs) and not allow_embedding:
        raise TranslationError("B_0 (embedding) is an aux slot but embedding capture is not allowed")
    ids = [b.index for b in bs]
    want = tuple(str(b) for b in bs)
    base = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1}
    try:
        top = read_draft({**base, TOP_KEY: ids, "eagle_config": {"use_aux_hidden_state": True}}, L, architecture,
                         version)
        nested = read_draft({**base, "eagle_config": {TOP_KEY: ids, "use_aux_hidden_state": True}}, L, architecture,
                            version)
    except VLLMNotAsked as e:
        raise TranslationError(str(e), not_installed=e.not_installed) from None
    bad = {r: top[r].boundaries for r in RUNNERS if top[r].boundaries != want}
    if bad:
        raise TranslationError(f"vLLM {version}: top-level ids {ids} capture "
                               + "; ".join(f"{r}: {list(b)}" for r, b in bad.items()) + f", not {list(want)}")
    notes = [f"asked of vLLM {version}'s code: " + "; ".join(f"{r} {READERS[r]}" for r in RUNNERS),
             "the setter sorts and de-duplicates the ids (interfaces.py:1616-1617): the concat is ascending"]
    for r in RUNNERS:
        if nested[r].boundaries != want:
            notes.append(f"the same ids only under eagle_config: the {r} runner captures "
                         f"{list(nested[r].boundaries)} (its reader ignores the nested key; no warning, "
                         "vllm-project/vllm#50170)")
    notes.append("the draft's fc is sized from num_aux_hidden_states, else the NESTED ids' count, else 3 "
                 "(llama_eagle3.py:209-221): with K != 3 top-level ids set num_aux_hidden_states")
    return ToolIds("vllm", f"vllm=={version}, model runners v1 and v2 (asked of the installed code)", ids,
                   f"draft config.json: {TOP_KEY} (top level)", "boundary",
                   extra={"runners": {r: list(top[r].boundaries) for r in RUNNERS}}, notes=notes)


def to_tool_ids(bs: list[Boundary], L: int, *, architecture: str, version: Optional[str], verifier,
                allow_embedding: bool) -> ToolIds:
    """vLLM: boundary ids under the top-level key. With ``version`` the installed vLLM's own code is
    asked (:func:`_vllm_asked`); without, the convention REFERENCE.md 2.1 states."""
    if version is not None:
        return _vllm_asked(bs, L, architecture, version, allow_embedding)
    notes = ["vLLM reads the top-level key (newer releases also the nested one); a missing key falls "
             "back silently to (2, L//2, L-3) (vllm-project/vllm#50170)"]
    if any(b.index == 0 for b in bs):
        if not allow_embedding:
            raise TranslationError("B_0 (embedding) is an aux slot but embedding capture is not allowed")
        notes.append("id 0 (B_0) works only in SupportsEagle3 mixin models; old llama.py crashes")
    if any(b.index == L for b in bs):
        notes.append(f"id {L} (B_{L}) is reached by mixin models; older DeepSeek files stop at L-1 "
                     "(vllm-project/vllm#46788, #46973)")
    return ToolIds("vllm", "vLLM, boundary ids (REFERENCE.md 2.1; no release pinned there)",
                   [b.index for b in bs], f"draft config.json: {TOP_KEY} (top level)", "boundary",
                   notes=notes)


def to_boundaries(ids: Optional[Sequence[int]], L: int, *, architecture: str, version: Optional[str],
                  allow_embedding: bool) -> list[Boundary]:
    """What vLLM captures for top-level boundary ``ids`` (None: its defaults)."""
    if ids is None:
        return [Boundary(i) for i in engine_default_aux_ids(L)]
    return read_listed_ids("vllm", ids, L, output_of=False, allow_embedding=allow_embedding)
