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
``midlayer`` -> ``layers.0``; ``q/k/v_proj`` -> ``qkv_proj``, ``gate/up_proj`` -> ``gate_up_proj``;
:func:`eagle3_conformance.tools.shared.draft_runtime.eagle3_module_of`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.tools.shared.draft_runtime import quantization_fact, runtime_fact


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
    return runtime_fact(_model(records), [r for r in records if r.get("kind") == "logits" and r.get("role") == "draft"],
                        engine)


def _model(records: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    return next((r for r in records if r.get("kind") == "draft_model"), None)


def draft_quantization(records: list[dict[str, Any]], draft_dir, engine: str) -> Optional[dict[str, Any]]:
    """The ``draft_quantization`` fact (:func:`eagle3_conformance.checks.runtime.check_draft_quantization`)
    with SGLang's names (:func:`eagle3_conformance.tools.shared.draft_runtime.eagle3_module_of`). None when
    no draft model was recorded."""
    return quantization_fact(_model(records), draft_dir, engine)
