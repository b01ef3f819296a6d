"""The draft-runtime facts both engine tools build (issue 45 item 2; judged by
:mod:`eagle3_conformance.checks.runtime`), from the same two records each tool writes in its engine's
process: ``draft_model`` (``{"dtype": the draft's fc weight dtype, "layers": {module: {"method",
"module", "weight_dtype"}}}``) and ``logits`` summaries of the draft's forwards (``{"mode", "rows",
"nonfinite_rows", "dtype", "argmax"}``). Which draft module a checkpoint tensor loads into is the two
engines' own EAGLE-3 renames, which agree (:func:`eagle3_module_of`)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from eagle3_conformance.tools.shared.checkpoint import checkpoint_facts

STACKED = ((".q_proj", ".qkv_proj"), (".k_proj", ".qkv_proj"), (".v_proj", ".qkv_proj"),
           (".gate_proj", ".gate_up_proj"), (".up_proj", ".gate_up_proj"))
"""Checkpoint name -> the fused module it loads into: SGLang 0.5.23 ``models/llama_eagle3.py:328-335``
(``stacked_params_mapping``), vLLM 0.32.0 ``models/llama_eagle3.py:290-298`` (``orig_to_new_stacked``)."""
LEGACY = (("midlayer.", "layers.0."),)
"""SGLang 0.5.23 ``llama_eagle3.py:338-343`` ``legacy_name_map``; vLLM 0.32.0 ``llama_eagle3.py:291``
``orig_to_new_substr``."""


def eagle3_module_of(tensor: str) -> str:
    """The EAGLE-3 draft module a checkpoint tensor loads into, named as in the draft's ``model``
    (``midlayer.mlp.gate_proj.weight`` -> ``layers.0.mlp.gate_up_proj``), by both engines' renames."""
    name = tensor.removeprefix("model.")
    for old, new in LEGACY:
        name = name.replace(old, new)
    for old, new in STACKED:
        if old in name:
            name = name.replace(old, new)
            break
    return name.rpartition(".")[0]


def runtime_fact(model: Optional[dict[str, Any]], logits: list[dict[str, Any]], engine: str) -> Optional[dict[str, Any]]:
    """The ``draft_runtime`` fact, or None when neither record was written."""
    if model is None and not logits:
        return None
    bad = [(k, r) for k, r in enumerate(logits) if r["nonfinite_rows"]]
    first = None
    if bad:
        k, r = bad[0]
        first = {"mode": r["mode"], "forward": k, "argmax": r["argmax"]}
    return {"engine": engine, "dtype": model["dtype"] if model else None, "forwards": len(logits),
            "nonfinite_forwards": len(bad), "nonfinite_rows": sum(r["nonfinite_rows"] for _, r in bad),
            "rows": sum(r["rows"] for r in logits), "first_nonfinite": first,
            "logits_dtype": logits[0]["dtype"] if logits else None}


def quantization_fact(model: Optional[dict[str, Any]], draft_dir, engine: str,
                      module_of: Callable[[str], str] = eagle3_module_of) -> Optional[dict[str, Any]]:
    """The ``draft_quantization`` fact: the checkpoint's declaration and, per linear module the engine built
    with a ``quant_method``, that method and the dtypes of the checkpoint weights ``module_of`` loads into it.
    None when no draft model was recorded."""
    if model is None:
        return None
    ck = checkpoint_facts(draft_dir)
    stored: dict[str, list[str]] = {}
    for t, dt in ck["stored"].items():
        if t.endswith(".weight"):
            stored.setdefault(module_of(t), []).append(dt)
    layers = {m: {"method": v["method"], "stored": sorted(set(stored.get(m, [])))}
              for m, v in model["layers"].items() if "Linear" in v.get("module", "") + v["method"]}
    return {"engine": engine, "declared": ck["declared"], "source": ck["source"], "layers": layers}
