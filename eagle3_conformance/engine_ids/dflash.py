"""DFlash ids of each tool, to and from canonical boundaries, asked of the tools' own code.

The EAGLE-3 rules are in the tool modules of :mod:`eagle3_conformance.engine_ids`; this module holds
the DFlash rules of every tool (issue 14), so that a DFlash id is never read with an EAGLE rule.

DFlash (``dflash_config.target_layer_ids``):

* SGLang (installed 0.5.23): the ids are resolved by SGLang's own
  ``parse_dflash_draft_config(...).resolve_target_layer_ids`` (``srt/speculative/dflash_utils.py:
  556-586``: a missing key falls back to ``build_target_layer_ids``, ``:348-385``; an id outside
  0..L-1 raises) and applied by the target class's own ``set_dflash_layers_to_capture`` (found
  through ``ModelRegistry``, called on the same stub :mod:`eagle3_conformance.engine_ids.sglang` uses);
  ``layers_to_capture`` entry i captures ``B_i`` (``llama.py:481-494``).
* SpecForge 0.2.0: ``specforge.modeling.draft.dflash.extract_context_feature`` is called on
  index-tagged tensors (HF ``hidden_states[k]`` = ``B_k``) and its own ``build_target_layer_ids``
  gives the fallback (``DFlashDraftModel.__init__`` uses it when the key is missing).
* speculators 0.9.0 (training): its DFlash config stores *boundary* ids
  (``aux_hidden_state_layer_ids``), converted from z-lab ids by ``i + 1``, dropping ``L`` (the
  verifier slot) (``convert/dflash/converter.py:110-126``).
* vLLM: output-of ids (``B_{i+1}``) since vllm-project/vllm#40727 (not installed here; that
  release is unconfirmed); its EAGLE-3 ids stay boundaries.

MTP / NextN has no layer ids: what the head reads is a tensor choice (B_L or F) and, for
multi-layer MTP, a per-layer source; see :mod:`eagle3_conformance.contract.families`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from eagle3_conformance.core.notation import Boundary
from eagle3_conformance.engine_ids.base import TranslationError
from eagle3_conformance.engine_ids.sglang import installed_sglang_version, registry_class, setter_stub

DFLASH_TOOLS = ("sglang", "vllm", "speculators", "specforge")
DFLASH_KEY = "dflash_config.target_layer_ids"


@dataclass(frozen=True)
class DFlashIds:
    """A tool's DFlash ids for some boundaries: ``ids`` under ``key``; ``source`` cites the code."""

    tool: str
    ids: list[int]
    key: str
    source: str
    notes: list[str] = field(default_factory=list)


def _sglang_resolve(cfg: dict, L: int, num_draft_layers: int) -> list[int]:
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

    try:
        dc = parse_dflash_draft_config(draft_hf_config=cfg)
        return list(dc.resolve_target_layer_ids(target_num_layers=L, draft_num_layers=num_draft_layers))
    except ValueError as e:
        raise TranslationError(f"sglang {installed_sglang_version()} dflash_utils.py refuses: {e}") from None


def _sglang_apply(architecture: str, L: int, ids: list[int]) -> list[int]:
    cls = registry_class(architecture)
    ver = installed_sglang_version()
    if cls is None:
        raise TranslationError(f"sglang {ver} has no model class registered for {architecture!r}")
    setter = getattr(cls, "set_dflash_layers_to_capture", None)
    if setter is None:
        raise TranslationError(f"sglang {ver}: {cls.__name__} has no set_dflash_layers_to_capture (no DFlash "
                               "support: attention_backend_setup.py:62-72 raises)")
    stub = setter_stub(L)
    try:
        setter(stub, list(ids))
    except AttributeError as e:
        raise TranslationError(f"sglang {ver}: {cls.__name__}.set_dflash_layers_to_capture needs attributes "
                               f"the stub lacks ({e}); no rule derived") from None
    except ValueError as e:
        raise TranslationError(f"sglang {ver}: {cls.__name__}.set_dflash_layers_to_capture refuses: {e}") from None
    ltc = stub.model.layers_to_capture
    if ltc is None:
        raise TranslationError(f"sglang {ver}: {cls.__name__}.set_dflash_layers_to_capture set no layers_to_capture")
    return list(ltc)


def _specforge_dflash():
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()  # specforge imports torchvision through transformers; prepare() makes that import work
    with torch_env.quiet_specforge_import():  # its draft package warns that flash_attn (unused here) is absent
        from specforge.modeling.draft import dflash

    return dflash


def _specforge_taps(ids: list[int], L: int) -> list[int]:
    import torch

    extract_context_feature = _specforge_dflash().extract_context_feature

    tagged = [torch.full((1, 1), float(k)) for k in range(L + 1)]  # HF hidden_states[k] = B_k
    try:
        got = extract_context_feature(tagged, list(ids))
    except IndexError:
        raise TranslationError(f"specforge: ids {list(ids)} index past hidden_states[{L}] (B_{L}): "
                               "extract_context_feature raises IndexError") from None
    return [int(v) for v in got.flatten().tolist()]


def dflash_formula(tool: str, L: int, num_draft_layers: int) -> list[int]:
    """The ids a tool derives when ``target_layer_ids`` is missing (its own function).

    Raises:
        TranslationError: the tool has no fallback (vLLM, speculators: refused here as unknown).
    """
    if tool == "sglang":
        return _sglang_resolve({}, L, num_draft_layers)
    if tool == "specforge":
        return list(_specforge_dflash().build_target_layer_ids(L, num_draft_layers))
    raise TranslationError(f"{tool}: no DFlash fallback for a missing target_layer_ids is known")


def dflash_tool_to_boundaries(tool: str, ids: Optional[Sequence[int]], num_layers: int, *,
                              architecture: str = "LlamaForCausalLM", num_draft_layers: int = 1) -> list[Boundary]:
    """What ``tool`` taps for DFlash ``ids`` (as written in ``dflash_config.target_layer_ids``;
    None: the key is missing and the tool's fallback applies), in concat order.

    Raises:
        TranslationError: the tool refuses the ids (out of range), has no fallback, or its code
            cannot be asked; an unknown tool.
    """
    L = num_layers
    if tool not in DFLASH_TOOLS:
        raise TranslationError(f"unknown tool {tool!r}: expected one of {', '.join(DFLASH_TOOLS)}")
    if tool == "sglang":
        cfg: dict[str, Any] = {} if ids is None else {"dflash_config": {"target_layer_ids": list(ids)}}
        resolved = _sglang_resolve(cfg, L, num_draft_layers)
        ltc = _sglang_apply(architecture, L, resolved)
        bad = [i for i in ltc if i < 0 or i > L]
        if bad:
            raise TranslationError(f"sglang: layers_to_capture {ltc} reaches beyond B_{L}")
        return [Boundary(i) for i in sorted(set(ltc))]  # the capture loop is ascending (llama.py:481-494)
    if ids is None:
        return [Boundary(i + 1) for i in dflash_formula(tool, L, num_draft_layers)]
    ids = [int(i) for i in ids]
    if min(ids) < 0:
        raise TranslationError(f"{tool}: negative DFlash ids {ids}")
    if tool == "specforge":
        taps = _specforge_taps(ids, L)
    else:  # vllm (output-of since vllm#40727), speculators' conversion of z-lab ids (i + 1)
        taps = [i + 1 for i in ids]
    if max(taps) > L:
        raise TranslationError(f"{tool}: DFlash ids {ids} tap B_{max(taps)}, beyond the target's L = {L}")
    return [Boundary(t) for t in taps]


def dflash_boundaries_to_tool(tool: str, boundaries: Sequence[str | Boundary], num_layers: int, *,
                              architecture: str = "LlamaForCausalLM") -> DFlashIds:
    """The DFlash ids (or, for speculators, its boundary ids) that make ``tool`` tap exactly
    ``boundaries``; the inverse of :func:`dflash_tool_to_boundaries`, checked through it.

    Raises:
        TranslationError: B_0 or F (no DFlash id taps them), beyond B_L, or no ids map back.
    """
    bs = [Boundary.parse(b) for b in boundaries]
    L = num_layers
    if any(b.final for b in bs):
        raise TranslationError("F has no DFlash id")
    if any(b.index == 0 for b in bs):
        raise TranslationError("B_0 (embedding) cannot be a DFlash tap: output-of id -1")
    if any(b.index > L for b in bs):
        raise TranslationError(f"boundaries {[str(b) for b in bs]} go beyond B_{L}")
    ids = [b.index - 1 for b in bs]
    if tool == "speculators":
        aux = [b.index for b in bs if b.index != L]
        notes = ["speculators' DFlash training config stores boundary ids (aux_hidden_state_layer_ids), "
                 "B_L dropped: it is the verifier slot (convert/dflash/converter.py:117-126)"]
        return DFlashIds("speculators", aux, "speculators config.json: aux_hidden_state_layer_ids",
                         "speculators 0.9.0 DFlashConverter (z-lab id i -> aux id i + 1)", notes)
    got = dflash_tool_to_boundaries(tool, ids, L, architecture=architecture, num_draft_layers=max(1, len(ids)))
    if got != bs:
        raise TranslationError(f"{tool}: ids {ids} tap {[str(b) for b in got]}, not {[str(b) for b in bs]}")
    src = {"sglang": f"sglang {installed_sglang_version()} set_dflash_layers_to_capture (+1), asked on a stub",
           "specforge": "specforge extract_context_feature (hidden_states[i + 1]), called",
           "vllm": "vLLM output-of DFlash ids (vllm-project/vllm#40727; release unconfirmed, not installed)"}[tool]
    notes = ["DFlash ids are output-of (id i = B_{i+1}); EAGLE-3 ids of the same engine may be boundaries "
             "(vLLM): never copy one into the other"]
    return DFlashIds(tool, ids, f"draft config.json: {DFLASH_KEY}", src, notes)
