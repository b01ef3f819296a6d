"""Draft checkpoints for the ``sglang-engine`` column's draft-runtime faults (issue 45 item 2), written
the way a user's checkpoint would be, from the baseline draft directory (read only; untouched tensors are
copied bit for bit):

- :func:`overflow_draft` (R89): the draft's final-norm gain multiplied by 2^17, a power of two, so every
  bfloat16 / float32 weight stays exact and the draft's drafts are unchanged in those dtypes (the gain
  scales the logits, whose argmax it keeps; the state fed back to the next draft step is taken before
  the norm, ``llama_eagle3.py`` with ``norm_output`` false), while its normed rows exceed float16's
  largest finite 65504: a checkpoint whose activations bfloat16 holds and float16 does not, as R89's
  bf16-trained DFlash2 draft's did (vllm-project/vllm#55250);
- :func:`fp8_raw_draft` (R94): the draft's MLP weights stored as ``float8_e4m3fn`` with a per-tensor
  ``weight_scale`` (SGLang's FP8 checkpoint layout, ``layers/quantization/fp8.py``), under a
  ``config.json`` that declares ``quantization_config: {quant_method: fp8}`` whose ``ignored_layers``
  leaves out every layer: the config's layer list does not cover the layers stored in FP8, as R94's
  ``modelopt_mixed`` list did not cover the MTP experts, so SGLang builds them unquantized and reads
  the FP8 values raw, the scales dropped (``llama_eagle3.py:370-378``: names with no parameter are skipped).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

#: the final-norm gain of :func:`overflow_draft`: 2^17 = 131072, twice float16's largest finite 65504
OVERFLOW_GAIN = 2.0 ** 17
FP8_TENSORS = ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
"""Checkpoint tensor suffixes :func:`fp8_raw_draft` stores in float8 (the MLP, R94's experts' kind)."""
PROJ = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
        "mlp.up_proj", "mlp.down_proj")


def ignored_layers(num_target_layers: int) -> list[str]:
    """The config's ``ignored_layers``: every linear module of the draft, by its checkpoint (unfused) name as
    HF FP8 configs list them, in the two spellings the engines match. SGLang 0.5.23 matches on dotted path
    boundaries and checks each shard of a fused module (``layers/quantization/utils.py:48-100``): the short
    names cover ``model.self_attn.qkv_proj`` and the fused copies ``model.qkv_proj`` it also builds. vLLM
    0.32.0 matches whole prefixes (``quantization/utils/quant_utils.py:617-646``, ``match_mode`` exact), and
    names the draft's layer after the target's depth (``models/llama_eagle3.py:202``: ``layers.{i + L}``)."""
    return ([p.rpartition(".")[2] for p in PROJ] + [f"model.layers.{num_target_layers}.{p}" for p in PROJ]
            + ["model.fc"])


def _copy_except(base: Path, out: Path, skip: tuple[str, ...]) -> None:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f in base.iterdir():
        if f.name not in skip and f.is_file():
            (out / f.name).symlink_to(f.resolve())


def overflow_draft(base: Path, target_dir: Path, out: Path) -> Path:
    """A copy of draft ``base`` with its final norm's gain times :data:`OVERFLOW_GAIN` (R89)."""
    from safetensors.torch import load_file, save_file

    _copy_except(base, out, ("model.safetensors",))
    t = load_file(str(base / "model.safetensors"))
    key = next(k for k in ("norm.weight", "model.norm.weight") if k in t)
    t[key] = (t[key].float() * OVERFLOW_GAIN).to(t[key].dtype)
    save_file(t, str(out / "model.safetensors"))
    return out


def fp8_raw_draft(base: Path, target_dir: Path, out: Path) -> Path:
    """A copy of draft ``base`` whose MLP weights are stored FP8 (per-tensor scale) under a config whose
    ``quantization_config`` declares fp8 but ignores every layer (R94)."""
    return fp8_draft(base, target_dir, out, raw=True)


def fp8_draft(base: Path, target_dir: Path, out: Path, raw: bool = False) -> Path:
    """A copy of draft ``base`` with FP8 weights (per-tensor ``weight_scale``) under ``quantization_config:
    {quant_method: fp8}``: ``raw`` the R94 checkpoint of :func:`fp8_raw_draft` (the MLP stored FP8, every
    layer ignored); else a correct FP8 checkpoint, every linear weight stored FP8 and none ignored (what an
    engine with FP8 kernels builds quantized: the GPU check's baseline, scripts/gpu_field_check.py)."""
    import torch
    from safetensors.torch import load_file, save_file

    _copy_except(base, out, ("model.safetensors", "config.json"))
    t = load_file(str(base / "model.safetensors"))
    fp8 = torch.float8_e4m3fn
    for k in [k for k in t if k.endswith(FP8_TENSORS if raw else tuple(p + ".weight" for p in PROJ))]:
        w = t[k].float()
        scale = w.abs().max().clamp_min(1e-12) / torch.finfo(fp8).max
        t[k] = (w / scale).to(fp8)
        t[k.removesuffix("weight") + "weight_scale"] = scale.reshape(1).float()
    save_file(t, str(out / "model.safetensors"))
    cfg = json.loads((base / "config.json").read_text())
    L = int(json.loads((Path(target_dir) / "config.json").read_text())["num_hidden_layers"])
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                  **({"ignored_layers": ignored_layers(L)} if raw else {})}
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out
