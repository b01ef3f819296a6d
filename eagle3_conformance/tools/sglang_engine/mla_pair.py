"""Internal: the project's test bed, no stable API (docs/architecture.md, "The self-test wall").

A tiny target of the seeds' architecture (DeepSeek-V3 / Kimi-K2.5: MLA attention, MoE with a shared
expert, a dense first layer, YaRN RoPE) and a random-weight EAGLE-3 draft, for the real
``sglang.Engine`` on CPU (issue 33 item 4; docs/engine-reference.md, "DeepSeek-V3 / Kimi-K2.5
structure").

Built on first use into the model cache (``<cache>/models/tiny-deepseek-v3-mla-<digest>-float32-b1``,
:func:`eagle3_conformance.testbed.model_cache.model_cache_root`; never into the repository), deterministic
(seeded weights; the digest covers :data:`SPEC` and the builder version):

* ``target/``: ``DeepseekV3ForCausalLM`` written by transformers' own DeepseekV3 classes
  (``save_pretrained``; the routed experts come out per expert, ``mlp.experts.<e>.{gate,up,down}_proj``,
  as hub DeepSeek-V3 checkpoints and SGLang's loader have them), float32, L = 8, d = 128. The config
  carries the hub DeepSeek-V3 keys transformers 5 no longer writes but SGLang 0.5.23 reads
  (``moe_layer_freq``, ``scoring_func``, ``topk_method``: ``models/deepseek_v2.py:2791``), and YaRN
  RoPE: SGLang's CPU RoPE for DeepSeek accepts ``deepseek_yarn`` only
  (``layers/rotary_embedding/factory.py:478-481``). The tokenizer is SmolLM2-135M's (vocab 49152),
  copied from the model cache.
* ``draft/``: an SGLang ``LlamaForCausalLMEagle3`` config of the target's width with random float32
  weights (:func:`.random_draft.write_random_draft`), ids nested in ``eagle_config``:
  ``[2, 4, 5]``, the "input-to-layer" first-id-2 form of the TorchSpec Kimi-K2.5 MLA draft
  (``[2, 30, 58]`` at L = 61). SGLang 0.5.23's first-id rule reads them raw: B_2, B_4, B_5, the
  defaults ``[2, L//2, L-3]`` for L = 8.
* ``draft-mla/``: the Kimi-K2.5 draft's own kind, ``Eagle3DeepseekV2ForCausalLM``
  (``sglang/srt/models/kimi_k25_eagle3.py``: one MLA decoder layer whose fused q/kv down-projection
  reads ``[input_layernorm(embed), hidden_norm(fc(aux))]``, 2d wide), same ids, random float32 weights
  in the checkpoint layout that file's ``load_weights`` maps (:func:`write_mla_draft`).

Both drafts accept almost nothing (random weights); every capture check applies.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUILDER_VERSION = "2"

SPEC: dict[str, Any] = {
    "seed": 0,
    "target": {
        "architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 49152, "hidden_size": 128,
        "intermediate_size": 256, "moe_intermediate_size": 64, "num_hidden_layers": 8, "num_attention_heads": 4,
        "num_key_value_heads": 4, "n_shared_experts": 1, "n_routed_experts": 4, "num_experts_per_tok": 2,
        "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1, "moe_layer_freq": 1, "scoring_func": "sigmoid",
        "topk_method": "noaux_tc", "norm_topk_prob": True, "routed_scaling_factor": 2.5, "ep_size": 1,
        "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
        "head_dim": 16, "rope_interleave": True, "max_position_embeddings": 2048,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                            "original_max_position_embeddings": 512, "beta_fast": 32.0, "beta_slow": 1.0,
                            "mscale": 1.0, "mscale_all_dim": 1.0},
        "rms_norm_eps": 1e-6, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2,
        "tie_word_embeddings": False, "num_nextn_predict_layers": 0,
    },
    "draft": {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
        "hidden_size": 128, "target_hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 4, "head_dim": 32, "hidden_act": "silu", "vocab_size": 49152,
        "draft_vocab_size": 4096, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "torch_dtype": "float32",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 4, 5], "use_aux_hidden_state": True},
    },
    "draft_mla": {
        "architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2", "num_hidden_layers": 1,
        "hidden_size": 128, "target_hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 4, "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16, "v_head_dim": 32, "hidden_act": "silu", "vocab_size": 49152,
        "draft_vocab_size": 4096, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_interleave": True,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                            "original_max_position_embeddings": 512, "beta_fast": 32.0, "beta_slow": 1.0,
                            "mscale": 1.0, "mscale_all_dim": 1.0},
        "tie_word_embeddings": False, "torch_dtype": "float32",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 4, 5], "use_aux_hidden_state": True},
    },
}
"""What is built: the target's ``DeepseekV3Config`` keywords, the two draft ``config.json`` files, the weight seed."""

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")


@dataclass(frozen=True)
class MlaPair:
    """The built pair: ``target_dir`` (HF DeepseekV3 directory), ``draft_dir`` (SGLang's Llama EAGLE-3
    draft), ``mla_draft_dir`` (SGLang's MLA EAGLE-3 draft, Kimi-K2.5's kind)."""

    root: Path
    target_dir: Path
    draft_dir: Path
    mla_draft_dir: Path


def pair_dir(spec: dict[str, Any] = SPEC) -> Path:
    """Where :func:`ensure_mla_pair` builds ``spec`` (it may not exist yet)."""
    from eagle3_conformance.testbed.model_cache import model_cache_root

    blob = json.dumps({"spec": spec, "builder": BUILDER_VERSION}, sort_keys=True).encode()
    return model_cache_root() / "models" / f"tiny-deepseek-v3-mla-{hashlib.sha256(blob).hexdigest()[:12]}-float32-b1"


def ensure_mla_pair(spec: dict[str, Any] = SPEC) -> MlaPair:
    """The pair, built on first use (a few seconds; the SmolLM2 tokenizer comes from the model
    cache, converted first when absent).

    Raises:
        FixtureError: the SmolLM2 model the tokenizer comes from cannot be built.
    """
    from eagle3_conformance.testbed.fixture_base import build_once

    root = pair_dir(spec)

    def build(stage: Path) -> None:
        stage.mkdir()
        write_target(spec, stage / "target", _tokenizer_dir())
        write_draft(spec, stage / "draft", stage / "draft-config")
        shutil.rmtree(stage / "draft-config")
        write_mla_draft(spec, stage / "draft-mla")
        (stage / "build.json").write_text(json.dumps({"builder": BUILDER_VERSION, "spec": spec}, indent=1) + "\n")

    build_once(root, build, marker="build.json")
    return MlaPair(root, root / "target", root / "draft", root / "draft-mla")


def _tokenizer_dir() -> Path:
    """SmolLM2-135M's converted directory (fixtures/smollm2-135m's model spec), for its tokenizer."""
    from eagle3_conformance.testbed.fixture_base import fixture_spec
    from eagle3_conformance.testbed.fixtures_real import resolve_spec
    from eagle3_conformance.testbed.model_cache import ensure_model

    name, raw = fixture_spec("smollm2-135m")
    return ensure_model(resolve_spec(name, raw)["model"], "float32")


def write_target(spec: dict[str, Any], out: Path, tokenizer_dir: Path) -> Path:
    """transformers' ``DeepseekV3ForCausalLM`` of ``spec["target"]`` with seeded weights, saved to ``out``.

    Weights: every matrix ~ N(0, 1/fan_in) (embedding N(0, 0.1^2)), every norm weight 1 + N(0, 0.1^2),
    the routing bias ``e_score_correction_bias`` N(0, 0.1^2) (so SGLang's noaux_tc routing correction
    is exercised), from one ``torch.Generator`` seeded with ``spec["seed"]``.
    """
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    kw = dict(spec["target"])
    arch = kw.pop("architectures")
    cfg = DeepseekV3Config(**kw)
    cfg.architectures = list(arch)
    torch.manual_seed(int(spec["seed"]))
    model = DeepseekV3ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(int(spec["seed"]))
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() == 1:
                base = 0.0 if "e_score_correction_bias" in name else 1.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            else:
                std = 0.1 if "embed_tokens" in name else p.shape[-1] ** -0.5
                p.copy_(torch.randn(p.shape, generator=g) * std)
        for name, b in model.named_buffers():
            if "e_score_correction_bias" in name:
                b.copy_(0.1 * torch.randn(b.shape, generator=g))
    model.config.dtype = "float32"
    model.save_pretrained(out, safe_serialization=True)
    for f in _TOKENIZER_FILES:
        if (tokenizer_dir / f).is_file():
            shutil.copyfile(tokenizer_dir / f, out / f)
    return out


def write_draft(spec: dict[str, Any], out: Path, config_dir: Path) -> Path:
    """The draft ``config.json`` of ``spec["draft"]`` with random weights (:func:`.random_draft.write_random_draft`)."""
    from eagle3_conformance.tools.sglang_engine.random_draft import write_random_draft

    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.json").write_text(json.dumps(spec["draft"], indent=2) + "\n")
    return write_random_draft(config_dir, out, seed=int(spec["seed"]))


def write_mla_draft(spec: dict[str, Any], out: Path, *, std: float = 0.02) -> Path:
    """``spec["draft_mla"]`` as ``config.json`` and random float32 weights, named as the checkpoints
    ``Eagle3DeepseekV2ForCausalLM.load_weights`` maps (``sglang/srt/models/kimi_k25_eagle3.py:428-497``:
    ``layers.0.*`` -> ``model.midlayer.*``; ``q_a_proj`` and ``kv_a_proj_with_mqa`` [.., 2d] fused into
    ``fused_qkv_a_proj_with_mqa``), ``fc.weight`` [d, K*d_target], ``norm``, ``lm_head`` [V_draft, d],
    ``d2t`` [V_draft] int64 zeros and ``t2d`` [V] bool. The embedding is the target's (``set_embed``).

    Raises:
        KeyError: a field the shapes need is missing from ``spec["draft_mla"]``.
    """
    import torch
    from safetensors.torch import save_file

    cfg = spec["draft_mla"]
    d, dt, heads = int(cfg["hidden_size"]), int(cfg["target_hidden_size"]), int(cfg["num_attention_heads"])
    qr, kr, inter = int(cfg["q_lora_rank"]), int(cfg["kv_lora_rank"]), int(cfg["intermediate_size"])
    nope, rope, vh = int(cfg["qk_nope_head_dim"]), int(cfg["qk_rope_head_dim"]), int(cfg["v_head_dim"])
    vd, vt = int(cfg["draft_vocab_size"]), int(cfg["vocab_size"])
    k = len(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    g = torch.Generator().manual_seed(int(spec["seed"]))

    def r(*shape):
        return torch.randn(*shape, generator=g) * std

    a, m = "layers.0.self_attn.", "layers.0.mlp."
    w = {"fc.weight": r(d, k * dt), "norm.weight": torch.ones(d), "lm_head.weight": r(vd, d),
         "d2t": torch.zeros(vd, dtype=torch.int64), "t2d": torch.arange(vt) < vd,
         a + "q_a_proj.weight": r(qr, 2 * d), a + "q_a_layernorm.weight": torch.ones(qr),
         a + "q_b_proj.weight": r(heads * (nope + rope), qr), a + "kv_a_proj_with_mqa.weight": r(kr + rope, 2 * d),
         a + "kv_a_layernorm.weight": torch.ones(kr), a + "kv_b_proj.weight": r(heads * (nope + vh), kr),
         a + "o_proj.weight": r(d, heads * vh), m + "gate_proj.weight": r(inter, d), m + "up_proj.weight": r(inter, d),
         m + "down_proj.weight": r(d, inter)}
    for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        w[f"layers.0.{n}.weight"] = torch.ones(d)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    save_file({n: t.contiguous() for n, t in w.items()}, str(out / "model.safetensors"))
    return out
