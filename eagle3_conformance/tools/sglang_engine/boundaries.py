"""The target's residual stream B_k read from what SGLang 0.5.23's own modules hand on, per family.

These rules let the engine be its own reference (:mod:`eagle3_conformance.reference.engine`): the
``forward_hooks`` recorder (:mod:`.hooks`) applies them to the target's embedding, decoder layers and
final norm in the same forward that feeds the draft. They never read the engine's aux capture
(``layers_to_capture``, ``AuxHiddenStateList``): that is what is judged.

Rules (paths relative to ``sglang/srt/``, SGLang 0.5.23 as installed by the cpu-lock environment):

* ``B_0`` = the output of the target's ``embed_tokens`` module, as the model scales it:
  ``VocabParallelEmbedding`` (llama.py:432-437, qwen2/qwen3, deepseek_v2.py:3106, gpt_oss.py:697;
  its output is all-reduced over TP inside the module), Gemma3's ``Gemma3TextScaledWordEmbedding``
  multiplies by ``embed_scale = sqrt(hidden_size)`` inside its forward (gemma3_causal.py:547-548, 570).
* ``B_{k+1}`` from decoder layer k's output (forward hook on ``<prefix>.layers.<k>``), one of two
  layouts:

  - *residual stream* (llama.py:394-415, 485-495; qwen2.py:330-340, 455-465; qwen3.py:447-460,
    522-532; gpt_oss.py:616-625, 709-721; deepseek_v2.py:3176-3200, whose layer returns
    ``(hidden_states, topk_indices)``): the layer returns its contribution (possibly still owed an
    all-reduce under TP) and keeps the residual apart in ``forward_batch.residual_stream`` until
    the next fused add-norm. B_{k+1} = completed contribution + residual, computed by SGLang's
    own accessor ``layers/layer_boundary/residual/batch.py::snapshot`` ->
    ``residual/stream.py::ResidualStream.snapshot`` (clones; never consumes the pending update;
    an owed TP sum is completed on a copy, a collective every rank runs since every rank runs
    the hooks);
  - *(hidden, residual) pair* (Gemma3, gemma3_causal.py:383-411, layers called with keywords at
    gemma3_causal.py:640-665): B_{k+1} = hidden + residual (residual None: hidden).

* ``F`` = the output of the target's final ``norm`` module (its first element when the fused
  add-norm returns ``(normed, residual)``: ``residual/access.py::final_norm_pair``,
  gemma3_causal.py:674).

Families (architecture -> module prefix of the decoder stack, layout): see :data:`FAMILIES`.
A layer SGLang runs without calling the module (DeepSeek's two-batch-overlap stages,
``deepseek_v2.py:3203-3211`` ``model_forward_stages``; a fused finalize that bypasses the norm
module) fires no hook: that boundary is absent from the record (``ref_missing``) and the checks
say which boundaries they had, never guess one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Family:
    """Where the target's decoder stack lives and how a layer hands on the residual stream.

    Attributes:
        prefix: module path of the decoder stack (``<prefix>.embed_tokens``, ``<prefix>.layers.<k>``,
            ``<prefix>.norm``) in SGLang's model object.
        layout: ``"stream"`` (residual kept in ``forward_batch.residual_stream``) or ``"pair"``
            (the layer returns ``(hidden, residual)``).
        source: file:line in SGLang 0.5.23 where the layout is.
    """

    prefix: str
    layout: str
    source: str


FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family("model", "stream", "models/llama.py:394-415,485-498"),
    "MistralForCausalLM": Family("model", "stream", "models/llama.py (subclass)"),
    "Qwen2ForCausalLM": Family("model", "stream", "models/qwen2.py:330-340,455-468"),
    "Qwen3ForCausalLM": Family("model", "stream", "models/qwen3.py:447-460,522-535"),
    "Gemma3ForCausalLM": Family("model", "pair", "models/gemma3_causal.py:383-411,630-674"),
    "DeepseekV2ForCausalLM": Family("model", "stream", "models/deepseek_v2.py:3176-3200,3236-3241"),
    "DeepseekV3ForCausalLM": Family("model", "stream", "models/deepseek_v2.py:3176-3200,3236-3241"),
    "KimiK25ForConditionalGeneration": Family("language_model.model", "stream",
                                              "models/kimi_k25.py:691-693 -> models/deepseek_v2.py"),
    "GptOssForCausalLM": Family("model", "stream", "models/gpt_oss.py:616-625,709-733"),
}
"""Architectures whose boundary rules are read from SGLang 0.5.23's model code (module docstring)."""


def family(architectures: list[str]) -> Family:
    """The :class:`Family` of a target config's ``architectures`` (first known one).

    Raises:
        ValueError: no architecture of the list is known; the message lists the known ones.
    """
    for a in architectures or []:
        if a in FAMILIES:
            return FAMILIES[a]
    raise ValueError(f"architectures {architectures}: the engine reference knows the boundary rules of "
                     f"{', '.join(sorted(FAMILIES))} (SGLang 0.5.23's model code) only")


def target_modules(boundaries: list[str], prefix: str = "model") -> dict[str, str]:
    """The module names (exact: fnmatch patterns without wildcards) whose hooks give ``boundaries``.

    Returns {module name: boundary}: ``B_0`` -> ``<prefix>.embed_tokens``, ``B_k`` (k >= 1) ->
    ``<prefix>.layers.<k-1>``, ``F`` -> ``<prefix>.norm``. Exact names: SGLang's
    ``hook_manager.py`` matches ``target_modules`` with ``fnmatch``, where ``*`` also crosses dots
    (``model.layers.*`` would match every attention and MLP submodule too).
    """
    out = {}
    for b in boundaries:
        if b == "F":
            out[f"{prefix}.norm"] = b
        elif b == "B_0":
            out[f"{prefix}.embed_tokens"] = b
        else:
            out[f"{prefix}.layers.{int(b[2:]) - 1}"] = b
    return out


def layer_output(args: tuple, output: Any):
    """B_{k+1} [N, d] from decoder layer k's forward-hook ``args`` and ``output`` (module docstring).

    Raises:
        TypeError: neither layout fits (the caller records the message, never stops the engine).
    """
    fb = args[2] if len(args) > 2 else None
    stream = getattr(fb, "residual_stream", None)
    if stream is not None:  # residual-stream layout
        from sglang.srt.layers.layer_boundary.residual import batch as residual_batch

        out = output[0] if isinstance(output, tuple) else output
        return residual_batch.snapshot(out, fb)
    if isinstance(output, tuple) and len(output) == 2 and hasattr(output[0], "shape"):
        hidden, residual = output
        return hidden if residual is None else hidden + residual
    raise TypeError(f"a decoder layer output of type {type(output).__name__} with no residual stream on "
                    "its forward batch: no known layout")


def norm_output(output: Any):
    """F [N, d] from the final norm's forward-hook output (a tensor or ``(normed, residual)``)."""
    return output[0] if isinstance(output, tuple) else output


def recording_rank() -> dict[str, Any]:
    """This process's parallel ranks and whether it records (``records``).

    The rule: record where the attention-TP rank is 0 (``attn_tp_rank == 0``), which is TP rank 0
    without DP attention. Under TP every rank holds the full residual stream of every token after
    each layer's all-reduce (the snapshot above completes an owed sum), so rank 0's copy is the
    stream. With DP attention each attention-DP group serves its own requests and its attention-TP
    rank 0 records them (one file stream per group). Ranks that cannot be asked (no
    distributed state, e.g. a unit test): tp 0 of 1, records.
    """
    info: dict[str, Any] = {"tp_rank": 0, "tp_size": 1, "attn_tp_rank": 0, "attn_tp_size": 1,
                            "pp_rank": 0, "pp_size": 1}
    try:
        from sglang.srt.distributed import parallel_state as ps

        info.update(tp_rank=ps.get_tensor_model_parallel_rank(), tp_size=ps.get_tensor_model_parallel_world_size(),
                    attn_tp_rank=ps.get_attn_tensor_model_parallel_rank(),
                    attn_tp_size=ps.get_attn_tensor_model_parallel_world_size(),
                    pp_rank=ps.get_pipeline_model_parallel_rank(), pp_size=ps.get_pipeline_model_parallel_world_size())
    except Exception as e:  # noqa: BLE001 - no parallel state: a single process
        info["rank_error"] = f"{type(e).__name__}: {e}"
    info["records"] = should_record(info)
    return info


def should_record(info: dict[str, Any]) -> bool:
    """The rank rule of :func:`recording_rank` on a rank dict."""
    return int(info.get("attn_tp_rank", 0)) == 0 and int(info.get("pp_rank", 0)) == int(info.get("pp_size", 1)) - 1


def sample_rows(n: int, max_rows: Optional[int], window: int = 4) -> list[int]:
    """Which of a forward's ``n`` rows to record: all when ``n <= max_rows`` (or no budget); else
    windows of ``window`` consecutive rows spread evenly over the forward (consecutive rows keep
    the alignment check's neighbour offsets -1..+2 inside the recorded set). Deterministic."""
    if max_rows is None or n <= max_rows:
        return list(range(n))
    if max_rows <= 0:
        return []
    w = max(1, min(window, max_rows))
    k = max_rows // w
    starts = sorted({round(i * (n - w) / max(k - 1, 1)) for i in range(k)})
    rows = sorted({s + j for s in starts for j in range(w) if s + j < n})
    return rows[:max_rows]
