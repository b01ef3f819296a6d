"""Internal: the project's test bed, no stable API (docs/architecture.md, "The self-test wall").

A random-weight EAGLE-3 draft for a draft ``config.json`` that ships without weights, so that the real
``sglang.Engine`` can serve the pair (the held-out Gemma-3-270M fixture's draft is a config only).

The draft accepts nearly nothing (its weights are random), but the target forward, the aux capture
and the draft extend that receives it are SGLang's own: every capture check applies; acceptance does
not (a contract for such a pair sets no ``gates.min_accept_length``).

Weight names and shapes are those SGLang 0.5.23's ``models/llama_eagle3.py`` loads (the shipped
SmolLM2 draft's safetensors hold the same names): ``fc.weight`` [d, K*d_target],
``layers.0.{input_layernorm,hidden_norm,post_attention_layernorm}.weight`` [d],
``layers.0.self_attn.{q,k,v}_proj.weight`` [heads*head_dim | kv_heads*head_dim, 2d],
``layers.0.self_attn.o_proj.weight`` [d, heads*head_dim], ``layers.0.mlp.{gate,up}_proj.weight`` [I, d],
``layers.0.mlp.down_proj.weight`` [d, I], ``norm.weight`` [d], ``lm_head.weight`` [V_draft, d],
``d2t`` [V_draft] int64 (draft id i -> target id i + d2t[i]; zeros: the first V_draft target ids) and
``t2d`` [V_target] bool. The embedding is the target's (SGLang shares it).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def write_random_draft(config_dir: str | Path, out_dir: str | Path, *, seed: int = 0, std: float = 0.02) -> Path:
    """Copy ``config_dir/config.json`` to ``out_dir`` and write random float32 weights beside it.

    Returns ``out_dir``. Raises:
        ValueError: the config lacks a field the shapes need (the message names it and the file).
    """
    import torch
    from safetensors.torch import save_file

    src = Path(config_dir) / "config.json"
    cfg = json.loads(src.read_text())
    try:
        d, dt, inter = int(cfg["hidden_size"]), int(cfg.get("target_hidden_size") or cfg["hidden_size"]), \
            int(cfg["intermediate_size"])
        heads, kv = int(cfg["num_attention_heads"]), int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
        hd = int(cfg.get("head_dim") or d // heads)
        vd, vt = int(cfg.get("draft_vocab_size") or cfg["vocab_size"]), int(cfg["vocab_size"])
        k = len((cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0])
    except KeyError as e:
        raise ValueError(f"{src}: no {e.args[0]!r}: cannot size a random draft") from None
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g) * std

    w = {"fc.weight": r(d, k * dt), "norm.weight": torch.ones(d), "lm_head.weight": r(vd, d),
         "d2t": torch.zeros(vd, dtype=torch.int64), "t2d": torch.arange(vt) < vd}
    p = "layers.0."
    for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        w[f"{p}{n}.weight"] = torch.ones(d)
    w.update({f"{p}self_attn.q_proj.weight": r(heads * hd, 2 * d), f"{p}self_attn.k_proj.weight": r(kv * hd, 2 * d),
              f"{p}self_attn.v_proj.weight": r(kv * hd, 2 * d), f"{p}self_attn.o_proj.weight": r(d, heads * hd),
              f"{p}mlp.gate_proj.weight": r(inter, d), f"{p}mlp.up_proj.weight": r(inter, d),
              f"{p}mlp.down_proj.weight": r(d, inter)})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, out / "config.json")
    save_file({k2: v.contiguous() for k2, v in w.items()}, str(out / "model.safetensors"))
    return out
