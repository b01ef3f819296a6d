"""The ``vllm-extend`` column of the kill matrix: how each operator applies on vLLM 0.33.0 (draft
config re-read by its ``SpeculativeConfig`` and both model runners' id readers, the draft checkpoint
loaded by the real draft, harness rebuilds for what vLLM fixes at build time, capture faults in
memory after the engine), or why it cannot occur there. Kept in one module so the vLLM column is
read in one place; :mod:`eagle3_conformance.faults.operators` adds it to every operator and fails on an
operator without an entry.

vLLM's convention (eagle3_conformance.tools.vllm_cpu.harness): id k = B_k (0..L), top-level key read
first by V1 and V2, nested ``eagle_config`` key read by V1 only, ids sorted and de-duplicated by
the setter, B_L reachable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from eagle3_conformance.engine_ids import engine_default_aux_ids
from eagle3_conformance.faults.example import Knobs
from eagle3_conformance.faults.operators.base import Apply, NotApplicable, aux_indices
from eagle3_conformance.faults.scenario import draft_config

PATH = "vllm-extend"
TOP = "eagle_aux_hidden_state_layer_ids"


def _cfg(scn, ids=None, nested=None, use_aux=True):
    cfg = draft_config(scn.spec, [])
    cfg["eagle_config"] = {"use_aux_hidden_state": use_aux}
    if ids is not None:
        cfg[TOP] = list(ids)
    if nested is not None:
        cfg["eagle_config"][TOP] = list(nested)
    return cfg


def _embed(scn, c, ex):
    b = aux_indices(c)
    return Knobs(draft_config=_cfg(scn, [0] + b[:-1]))


def _output_of(scn, c, ex):
    return Knobs(draft_config=_cfg(scn, [b - 1 for b in aux_indices(c)]))  # SGLang/SpecForge ids read as B_k


def _nested_only(scn, c, ex):
    L = c.L
    if sorted(set(engine_default_aux_ids(L))) == aux_indices(c):
        return None
    return Knobs(draft_config=_cfg(scn, nested=aux_indices(c)))  # V1 reads them, V2 falls back to defaults


def _no_aux(scn, c, ex):
    return Knobs(variant={"draft": {"eagle_config": {"use_aux_hidden_state": False}}})


def _crossed(scn, c, ex):
    if scn.spec.target_hidden == scn.spec.draft_hidden:
        return None
    return Knobs(variant={"draft": {"target_hidden_size": None}})


@dataclass(frozen=True)
class SameKnob:
    """Applies on ``vllm-extend`` with the SGLang extend path's knob builder (a capture fault after
    the engine, a dtype rebuild, a template knob: nothing SGLang-specific in the knob itself);
    :mod:`eagle3_conformance.faults.operators` resolves it to an :class:`Apply` with that builder."""

    how: str
    where: str


COLUMN: dict[str, Union[Apply, NotApplicable, SameKnob]] = {
    "slots-swapped": NotApplicable(
        "vLLM's setter stores tuple(sorted(set(ids))) (interfaces.py:1616-1617) and LlamaModel.forward appends in "
        "layer order: no id order yields swapped blocks"),
    "embedding-prepended": Apply("draft config ids [0, ...]: vLLM's id 0 is B_0, the embedding", "engine knob (draft config)",
                                 _embed),
    "ids-shifted": Apply("draft config holds output-of ids b-1 (SGLang/SpecForge convention); vLLM reads id k as B_k",
                         "engine knob (draft config)", _output_of),
    "engine-default-layers": Apply("ids only under eagle_config: the V1 reader uses them, V2's "
                                   "get_eagle3_aux_layers_from_config ignores them and the model defaults apply",
                                   "engine knob (draft config)", _nested_only),
    "last-slot-unreachable": NotApplicable(
        "vLLM's LlamaModel.forward appends id L = B_L after the last layer (llama.py:406-457): B_L is reachable"),
    "final-norm-output-as-aux": Apply("draft built with eagle_config.use_aux_hidden_state false: the runner hands the "
                                      "draft the target's last hidden states F and combine_hidden_states passes them "
                                      "through", "engine rebuild (draft config)", _no_aux),
    "pre-post-norm-swapped": SameKnob("deepest aux slot handed over after its layer's input "
                                    "RMSNorm (capture site after the norm)", "in memory (capture site)"),
    "hidden-without-residual": SameKnob("deepest aux slot minus the residual entering its layer",
                                      "in memory (capture site)"),
    "hidden-sizes-crossed": Apply("draft config without target_hidden_size: vLLM sizes fc from hidden_size "
                                  "(llama_eagle3.py:216-219)", "engine rebuild (draft config)", _crossed),
    "aux-count-from-other-key": NotApplicable(
        "the SGLang wiring of R41 (ids at the top level, fc sized from the nested key) does not arise: vLLM 0.33.0 "
        "reads the top-level key first (this module's docstring). vLLM's own R41 report (vllm#54526, a speculators "
        "4-slot draft loaded into an fc for 3) is not reproduced here: vLLM is not in cpu-lock"),
    "decode-buffer-sized-d": NotApplicable("vllm-extend runs the prefill only; no decode-path buffer on this path"),
    "token-sharded-rows": SameKnob("rank 0's token shard handed on without the all-gather",
                                 "in memory (after the engine)"),
    "wrong-verified-rows": NotApplicable("vllm-extend runs the prefill only: no verify step, nothing accepted"),
    "decode-rows-padded": NotApplicable("vllm-extend runs the prefill only: no verify step, nothing accepted"),
    "draft-states-fed-back": NotApplicable("after prefill the draft always gets the target's prefill states"),
    "d2t-absolute": Apply("draft checkpoint d2t holds absolute ids (loaded as draft_id_to_target_id, used as offsets "
                          "at llama_eagle3.py:386)", "engine knob (checkpoint)", lambda s, c, e: Knobs(d2t="absolute")),
    "d2t-missing": Apply("draft checkpoint without d2t: draft_id_to_target_id stays the zeros it was built with "
                         "(llama_eagle3.py:339-343), an identity mapping", "engine knob (checkpoint)",
                         lambda s, c, e: Knobs(d2t="missing")),
    "chat-template-differs": SameKnob("the engine's template drops BOS",
                                    "engine tokenizer template"),
    "dtype-cast": SameKnob("engine built with ModelConfig.dtype bfloat16 (contract: float32)",
                         "engine rebuild (dtype)"),
    "fp8-read-as-file": NotApplicable("vllm-extend checks what the draft receives in memory; the FP8 files vLLM's "
                                      "connector writes are read by the training column"),
    "fp8-scale-outlier": NotApplicable("vllm-extend checks what the draft receives in memory; the FP8 files vLLM's "
                                       "connector writes are read by the training column"),
    "rows-permuted-across-requests": SameKnob("a connector splits the batch's flat rows "
                                            "in the wrong request order", "in memory (after the engine)"),
    "positions-not-advanced": SameKnob("worker hands the draft the first position for every "
                                     "row", "in memory (worker stand-in)"),
    "loss-mask-unshifted": NotApplicable("serving has no loss mask and no training-time shift (a SpecForge "
                                         "trainer fault, SpecForge#885/#895)"),
    "double-shift": NotApplicable("serving has no training-time shift (a SpecForge trainer fault, SpecForge#448)"),
    "slot-all-zero": SameKnob("deepest aux slot handed over as zeros (R66: extract_hidden_states read an empty KV "
                              "page of a hybrid verifier)", "in memory (after the engine)"),
    "final-ids-shifted": NotApplicable(
        "vLLM reads boundary ids and appends B_L after the last layer (llama.py:406-457): the R53 shift is a +1 "
        "engine meeting a boundary-id list; the same list one deeper given to vLLM is ids-shifted (K2)"),
    "slot-row-repeated": SameKnob("deepest aux slot handed over as its first row repeated over every token",
                                  "in memory (after the engine)"),
    "writers-mixed": NotApplicable("a training-data fault (R90): one engine captures every request with one rule"),
}
"""Operator name -> how it applies on ``vllm-extend`` (or why not, or :class:`SameKnob`)."""
