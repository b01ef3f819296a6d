"""The draft's own runtime on an engine, not only what it is handed (issue 45 item 2): the dtype the
engine runs the draft in, whether the draft's logits are finite (R89), and whether the engine built the
draft's layers with the quantization its checkpoint declares (R94).

R89 (vllm-project/vllm#55250, #55294): a DFlash2 draft trained in bfloat16, served with ``--dtype float16``,
overflowed to NaN; its candidates were ids 0..15 (argmax of NaN logits) and 0 of 1,100+ drafts were
accepted, with a healthy server. R94 (mratsim/sglang-qwen38fn-sm120-turbo#3): a draft whose experts were
stored FP8 block-scaled was built as bf16 and loaded raw (the scales dropped): accept ~0.23, AL ~1.6.
Both are silent; both are facts of the engine's own draft model, observed through its extension point
(SGLang ``forward_hooks``, vLLM ``collective_rpc``), never inferred from the inputs.
"""

from __future__ import annotations

from typing import Any

from eagle3_conformance.checks.registry import FACT, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.core.served_dtype import MAX_EXP, MAX_FINITE  # noqa: F401 (MAX_FINITE re-exported)

UNQUANTIZED = ("UnquantizedLinearMethod", "UnquantizedEmbeddingMethod", "none")
"""Loaded-method names that mean "no quantization" (SGLang 0.5.23 ``layers/linear.py``; vLLM the same names)."""


def _float8(dtype: Any) -> bool:
    """A float8 dtype, in safetensors' names (``F8_E4M3``) or torch's (``torch.float8_e4m3fn``)."""
    return str(dtype).upper().startswith("F8") or "float8" in str(dtype)


def dtype_word(x: Any) -> str:
    """``"float16"`` for ``torch.float16`` / ``"torch.float16"`` / ``"float16"``."""
    return str(x).removeprefix("torch.")


@check(FACT, ("K12",), emits=("draft_dtype", "draft_logits_finite"), fact="draft_runtime")
def check_draft_runtime(c: Contract, fig: dict, path: str = "sglang-engine") -> list[Finding]:
    """K12 on the draft itself: the engine runs the draft in a dtype that holds the range of the dtype it
    was trained in (``draft.dtype``: float16 cannot hold a float32- or bfloat16-trained draft, R89), and
    every recorded draft forward's logits are finite (NaN logits sample ids 0..k, R89).

    Args:
        fig: ``{"engine": words, "dtype": the draft's parameter dtype as the engine holds it,
            "forwards": draft forwards whose logits were recorded, "nonfinite_forwards": n,
            "nonfinite_rows": n, "rows": n, "first_nonfinite": {"mode", "forward", "argmax"} | None}``
            (:func:`eagle3_conformance.tools.sglang_engine.runtime.draft_runtime`, vLLM's
            :func:`eagle3_conformance.tools.vllm_engine.captures.draft_runtime`).
    """
    return [_dtype_finding(c, fig, path), _finite_finding(fig, path)]


def _dtype_finding(c: Contract, fig: dict, path: str) -> Finding:
    run = dtype_word(fig.get("dtype")) if fig.get("dtype") else None
    want = c.draft.dtype
    where = f"{fig.get('engine', path)}: the draft's parameters"
    if run is None:
        return Finding("draft_dtype", "skip", path, None, want, None, where, "the engine's draft dtype was not recorded",
                       "K12")
    if want is None:
        return Finding("draft_dtype", "skip", path, None, None, run, where,
                       f"the engine runs the draft in {run}; the contract does not state the dtype it was trained in "
                       "(draft.dtype): not judged", "K12")
    if run not in MAX_EXP or MAX_EXP[run] >= MAX_EXP[want]:
        return Finding("draft_dtype", "pass", path, None, want, run, where,
                       f"the engine runs the draft in {run}, which holds the range of {want}, the dtype it was "
                       "trained in", "K12")
    return Finding("draft_dtype", "fail", path, None, want, run, where,
                   f"the engine runs the draft in {run} (largest finite {MAX_FINITE[run]:g}); it was trained in {want} "
                   f"(draft.dtype), whose activations {run} cannot hold: they overflow to inf/NaN and every draft is "
                   f"rejected (R89, vllm-project/vllm#55250). Serve with --dtype {want} (the draft runs in the "
                   "server's dtype)", "K12")


def _finite_finding(fig: dict, path: str) -> Finding:
    n, bad = int(fig.get("forwards") or 0), int(fig.get("nonfinite_forwards") or 0)
    where = f"{fig.get('engine', path)}: the draft's logits, {n} forwards"
    if n == 0:
        return Finding("draft_logits_finite", "skip", path, None, "finite logits", None, where,
                       "no draft forward's logits were recorded", "K12")
    if not bad:
        return Finding("draft_logits_finite", "pass", path, None, "finite logits", f"{n} of {n} finite", where,
                       f"every draft forward's logits are finite ({n} forwards, {fig.get('rows', 0)} rows)", "K12")
    first = fig.get("first_nonfinite") or {}
    return Finding("draft_logits_finite", "fail", path, None, "finite logits", f"{bad} of {n} non-finite",
                   f"{where}; first: {first.get('mode')} forward {first.get('forward')}",
                   f"{bad} of {n} draft forwards produced non-finite logits ({fig.get('nonfinite_rows')} of "
                   f"{fig.get('rows')} rows); the first ({first.get('mode')}) drafts ids "
                   f"{first.get('argmax')} (the argmax of NaN logits): a draft run in a dtype that cannot hold its "
                   "activations (R89) or broken weights", "K12")


@check(FACT, ("K12",), fact="draft_quantization")
def check_draft_quantization(c: Contract, fig: dict, path: str = "sglang-engine") -> list[Finding]:
    """R94: the engine builds the draft's linear layers with the quantization its checkpoint declares
    (``draft.quantization``, else the checkpoint's ``config.json`` ``quantization_config.quant_method``),
    and no layer whose weights are stored in a float8 dtype is built unquantized (its bytes would be read
    raw, the scales dropped).

    Args:
        fig: ``{"engine": words, "declared": "fp8" | "none" (the checkpoint's config.json), "source": words,
            "layers": {module: {"method": loaded quant method class, "stored": [dtypes of the checkpoint
            tensors it loads]}}}``.
    """
    declared_ckpt = fig.get("declared") or "none"
    declared = c.draft.quantization or declared_ckpt
    layers: dict[str, dict] = fig.get("layers") or {}
    where = f"{fig.get('engine', path)}: the draft's {len(layers)} linear layers"
    if not layers:
        return [Finding("draft_quantization", "skip", path, None, declared, None, where,
                        "the engine's draft layers were not recorded", "K12")]
    quantized = {m: v["method"] for m, v in layers.items() if v.get("method") not in UNQUANTIZED}
    raw = [m for m, v in layers.items() if v.get("method") in UNQUANTIZED and any(_float8(s) for s in v.get("stored") or [])]
    src = f"declared by {'draft.quantization' if c.draft.quantization else fig.get('source', 'config.json')}"
    out = []
    if raw:
        out.append(Finding("draft_quantization", "fail", path, None, "float8 weights built quantized",
                           f"{len(raw)} built unquantized", where,
                           f"{len(raw)} of the draft's layers hold float8 weights in the checkpoint but the engine built "
                           f"them unquantized ({', '.join(sorted(raw)[:4])}): their FP8 values are read raw, the scales "
                           "dropped (R94); the checkpoint's quantization_config must cover them", "K12"))
    out += _declared_vs_loaded(c, declared, declared_ckpt, quantized, layers, src, where, path)
    if not out:
        how = ", ".join(sorted(set(quantized.values()))) or "unquantized"
        out.append(Finding("draft_quantization", "pass", path, None, declared, how, where,
                           f"the engine built the draft's layers {how}, as the checkpoint declares ({declared}; {src})",
                           "K12"))
    return out


def _declared_vs_loaded(c: Contract, declared: str, declared_ckpt: str, quantized: dict, layers: dict, src: str,
                        where: str, path: str) -> list[Finding]:
    out: list[Finding] = []
    if declared != "none" and not quantized:
        out.append(Finding("draft_quantization", "fail", path, None, declared, "unquantized", where,
                           f"the draft checkpoint declares {declared} ({src}) but the engine built all {len(layers)} of "
                           "its linear layers unquantized: stored quantized weights are read raw (R94)", "K12"))
    elif declared == "none" and quantized:
        m, how = next(iter(sorted(quantized.items())))
        out.append(Finding("draft_quantization", "fail", path, None, "none", how, where,
                           f"the draft checkpoint declares no quantization ({src}) but the engine built {len(quantized)} "
                           f"of its layers quantized ({m}: {how}): SGLang's speculative_draft_model_quantization "
                           "defaults to the target's --quantization", "K12"))
    if c.draft.quantization and c.draft.quantization != declared_ckpt:
        out.append(Finding("draft_quantization", "fail", path, None, c.draft.quantization, declared_ckpt, where,
                           f"the contract says the draft checkpoint declares {c.draft.quantization} (draft.quantization); "
                           f"the checkpoint served declares {declared_ckpt}", "K12"))
    return out

