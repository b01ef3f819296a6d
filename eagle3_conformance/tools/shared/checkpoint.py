"""What a draft checkpoint declares about how it is stored, read from its files without loading a
weight: the quantization its ``config.json`` declares (``quantization_config.quant_method``) and the
dtype of every tensor in its ``*.safetensors`` headers (R94: a checkpoint storing FP8 weights that an
engine builds unquantized reads them raw). The engine tools compare it with what the engine built."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCALE_SUFFIXES = ("weight_scale_inv", "weight_scale", "input_scale", "weight_scale_2")
"""Per-layer scale tensors of quantized checkpoints (FP8 per-tensor / block, ModelOpt)."""


def declared_quantization(draft_dir: str | Path) -> tuple[str, str]:
    """``(quant_method or "none", source words)`` of ``draft_dir/config.json``'s ``quantization_config``
    (also under ``text_config``); ``("none", ...)`` when the file or the key is missing."""
    f = Path(draft_dir) / "config.json"
    try:
        cfg = json.loads(f.read_text())
    except (OSError, ValueError):
        return "none", f"{f}: unreadable"
    for where, d in (("", cfg), ("text_config.", cfg.get("text_config") if isinstance(cfg, dict) else None)):
        q = d.get("quantization_config") if isinstance(d, dict) else None
        if isinstance(q, dict):
            return str(q.get("quant_method") or q.get("quant_algo") or "unnamed").lower(), \
                f"{f.name}: {where}quantization_config.quant_method"
    return "none", f"{f.name}: no quantization_config"


def stored_dtypes(draft_dir: str | Path) -> dict[str, str]:
    """Tensor name -> safetensors dtype (``"F8_E4M3"``, ``"BF16"``, ...) over the checkpoint's
    ``*.safetensors`` files, read from their headers only."""
    from safetensors import safe_open

    out: dict[str, str] = {}
    for p in sorted(Path(draft_dir).glob("*.safetensors")):
        with safe_open(str(p), framework="pt") as f:
            for k in f.keys():
                out[k] = str(f.get_slice(k).get_dtype())
    return out


def checkpoint_facts(draft_dir: str | Path) -> dict[str, Any]:
    """``{"declared", "source", "stored": {tensor: dtype}}`` of a draft directory."""
    declared, source = declared_quantization(draft_dir)
    return {"declared": declared, "source": source, "stored": stored_dtypes(draft_dir)}


def is_float8(safetensors_dtype: str) -> bool:
    """Whether a safetensors dtype name is a float8 format (``F8_E4M3``, ``F8_E5M2``, ...)."""
    return safetensors_dtype.upper().startswith("F8")
