"""What ``eagle3-conformance init`` writes about the draft's own runtime and the target's streams, for every
draft method (issue 45 items 2, 3): ``draft.dtype`` (the dtype the draft was trained in: its config's
``torch_dtype`` / ``dtype``; R89), ``draft.quantization`` (its ``quantization_config.quant_method``, or
``none``; R94) and ``target.residual_streams`` (the target config's ``hc_mult``, R93). Each value gets its
comment and a provenance line naming the key it came from; a key that is absent is left out (null: not
stated), never guessed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from eagle3_conformance.authoring.yaml_doc import eol
from eagle3_conformance.core.errors import DataError

if TYPE_CHECKING:
    from ruamel.yaml.comments import CommentedMap

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16", "fp32": "float32", "bf16": "bfloat16",
          "fp16": "float16", "half": "float16", "float": "float32"}
"""Spellings of ``torch_dtype`` in config files -> the contract's dtype names."""


def config_dtype(cfg: dict[str, Any]) -> tuple[Optional[str], str]:
    """``(dtype, key)`` from a draft config's ``torch_dtype`` (transformers < 5) or ``dtype`` (>= 5), also
    under ``transformer_layer_config`` (speculators); ``(None, why)`` when absent or not a float dtype."""
    for where, d in (("", cfg), ("transformer_layer_config.", cfg.get("transformer_layer_config"))):
        if not isinstance(d, dict):
            continue
        for k in ("torch_dtype", "dtype"):
            v = d.get(k)
            if isinstance(v, str) and v.removeprefix("torch.") in DTYPES:
                return DTYPES[v.removeprefix("torch.")], f"{where}{k}"
    return None, "no torch_dtype / dtype key"


def config_quantization(cfg: dict[str, Any]) -> tuple[str, str]:
    """``(quant_method or "none", key)`` of a config's ``quantization_config``."""
    q = cfg.get("quantization_config")
    if isinstance(q, dict):
        return str(q.get("quant_method") or q.get("quant_algo") or "unnamed").lower(), "quantization_config.quant_method"
    return "none", "no quantization_config"


def hc_mult(tcfg: dict[str, Any], tfile: Path) -> int:
    """The target's residual streams: config.json ``hc_mult`` (also under ``text_config``), else 1.

    Raises:
        DataError: ``hc_mult`` is not a positive integer."""
    for d in (tcfg, tcfg.get("text_config")):
        if isinstance(d, dict) and "hc_mult" in d:
            v = d["hc_mult"]
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise DataError(f"{tfile}: hc_mult must be a positive integer (residual streams), got {v!r}")
            return v
    return 1


def annotate_runtime(doc: CommentedMap, tcfg: dict[str, Any], tfile: Path, dcfg: dict[str, Any], dfile: Path) -> None:
    """Write ``draft.dtype``, ``draft.quantization`` and ``target.residual_streams`` into ``doc`` (a
    ruamel map built by ``init``), before ``draft.layer_ids``, with comments and provenance."""
    draft = doc["draft"]
    pos = list(draft.keys()).index("layer_ids") if "layer_ids" in draft else len(draft)
    dt, dkey = config_dtype(dcfg)
    q, qkey = config_quantization(dcfg)
    if dt is not None:
        draft.insert(pos, "dtype", dt)
        eol(draft, f"{dfile.name}: {dkey} (the dtype the draft was trained in; R89)", "dtype")
        pos += 1
    draft.insert(pos, "quantization", q)
    eol(draft, f"{dfile.name}: {qkey} (R94)", "quantization")
    doc["provenance"]["draft_runtime"] = (
        f"{dfile}: {dkey}{'' if dt else ' (draft.dtype not stated)'}; {qkey}. The engine must run the draft in a "
        "dtype that holds draft.dtype's range (float16 cannot: R89) and build its layers as quantization says (R94)")
    n = hc_mult(tcfg, tfile)
    if n > 1:
        t = doc["target"]
        t.insert(list(t.keys()).index("final_norm") + 1 if "final_norm" in t else len(t), "residual_streams", n)
        eol(t, f"{tfile.name}: hc_mult (hyper-connection streams, each d wide; R93)", "residual_streams")
