"""The draft's own runtime in a real ``sglang.Engine`` run, from the records :mod:`.hooks` writes under
``records/runtime/`` (issue 45 item 2; judged by :mod:`eagle3_conformance.checks.runtime`):

- ``draft_model`` (once per process, on the draft's first forward): the dtype of its ``fc`` weight (the
  dtype SGLang runs the draft in: the server's ``--dtype``) and, per submodule with a ``quant_method``,
  that method's class and the weight's dtype (what SGLang built);
- ``logits`` (per forward of any model's ``logits_processor``): rows, non-finite rows, the first
  non-finite rows' argmax, and the role of the ``model`` forward just before it (draft or target).

:func:`draft_quantization` also reads the draft checkpoint's own ``config.json`` and safetensors headers
(:mod:`eagle3_conformance.tools.shared.checkpoint`) and maps each stored tensor onto the module SGLang
0.5.23 loads it into, with the draft's own loader's renames (``models/llama_eagle3.py:328-343``: legacy
``midlayer`` -> ``layers.0``; ``q/k/v_proj`` -> ``qkv_proj``, ``gate/up_proj`` -> ``gate_up_proj``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.tools.shared.checkpoint import checkpoint_facts

STACKED = ((".q_proj", ".qkv_proj"), (".k_proj", ".qkv_proj"), (".v_proj", ".qkv_proj"),
           (".gate_proj", ".gate_up_proj"), (".up_proj", ".gate_up_proj"))
"""SGLang 0.5.23 ``llama_eagle3.py:328-335`` ``stacked_params_mapping`` (checkpoint name -> module)."""
LEGACY = (("midlayer", "layers.0"),)
"""SGLang 0.5.23 ``llama_eagle3.py:338-343`` ``legacy_name_map`` (the layer's rename; the aux norms keep theirs)."""


def load_runtime(records_dir: Optional[Path]) -> list[dict[str, Any]]:
    """The runtime records in the order they were written (``[]`` when none)."""
    if records_dir is None:
        return []
    from eagle3_conformance.tools.sglang_engine.captures import load_records

    d = Path(records_dir) / "runtime"
    return load_records(d) if d.is_dir() else []


def draft_runtime(records: list[dict[str, Any]], engine: str) -> Optional[dict[str, Any]]:
    """The ``draft_runtime`` fact (:func:`eagle3_conformance.checks.runtime.check_draft_runtime`), or
    None when no draft model was recorded."""
    model = next((r for r in records if r.get("kind") == "draft_model"), None)
    logits = [r for r in records if r.get("kind") == "logits" and r.get("role") == "draft"]
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


def module_of(tensor: str) -> str:
    """The draft module a checkpoint tensor loads into, as SGLang 0.5.23's draft loader renames it
    (``midlayer.mlp.gate_proj.weight`` -> ``layers.0.mlp.gate_up_proj``)."""
    name = tensor.removeprefix("model.")
    for old, new in LEGACY:
        name = name.replace(old, new)
    for old, new in STACKED:
        if old in name:
            name = name.replace(old, new)
            break
    return name.rpartition(".")[0]


def draft_quantization(records: list[dict[str, Any]], draft_dir, engine: str) -> Optional[dict[str, Any]]:
    """The ``draft_quantization`` fact (:func:`eagle3_conformance.checks.runtime.check_draft_quantization`):
    the checkpoint's declaration and, per module SGLang built with a ``quant_method``, that method and the
    dtypes of the checkpoint weights it loads. None when no draft model was recorded."""
    model = next((r for r in records if r.get("kind") == "draft_model"), None)
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
