"""The seeds' architecture (DeepSeek-V3 / Kimi-K2.5: MLA attention + MoE with a shared expert) through
SGLang's real engine on CPU, judged with the engine as its own reference (issue 33 item 4;
docs/engine-reference.md, "DeepSeek-V3 / Kimi-K2.5 structure (MLA + MoE)").

The pair: :mod:`eagle3_conformance.tools.sglang_engine.mla_pair` (a tiny DeepSeek-V3-structured target
written by transformers' own classes, a random-weight EAGLE-3 draft); the contract:
tests/data/engine/tiny-deepseek-v3-mla.yaml. Faults are caused the way a user causes them: a draft
directory whose ``config.json`` ids were changed (weights linked, :func:`fault_draft_dir`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "tests" / "data" / "engine" / "tiny-deepseek-v3-mla.yaml"


def test_mla_attention_on_torch_native_takes_sglangs_absorbed_mla_path(monkeypatch):
    """Patch #11 (tools/sglang_engine/patches.py): without it DeepSeek's dispatch falls back to the
    triton handler, which picks MHA for a prefill (the path whose K/V torch_native reads back from the
    latent pool); with it every mode takes SGLang's own absorbed MLA (as decode and verify already do)."""
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.models.deepseek_common import attention_backend_handler as h
    from sglang.srt.models.deepseek_common.attention_forward_methods.forward_methods import AttnForwardMethod

    from eagle3_conformance.tools.sglang_engine import patches

    reg = h.AttentionBackendRegistry
    monkeypatch.setattr(reg, "_handlers", dict(reg._handlers))  # the patch below is undone after the test
    monkeypatch.setattr(h, "get_exec", lambda: SimpleNamespace(deterministic=SimpleNamespace(
        enable_deterministic_inference=False)))  # no engine: SGLang's runtime context is not published
    prefill = SimpleNamespace(forward_mode=ForwardMode.EXTEND, extend_prefix_lens_cpu=[0], seq_lens_cpu=[48])
    verify = SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY, extend_prefix_lens_cpu=None)
    attn = SimpleNamespace()
    assert "torch_native" not in reg._handlers  # SGLang 0.5.23 has no handler: get_handler falls back
    assert reg.get_handler("torch_native")(attn, prefill) == AttnForwardMethod.MHA
    patches._patch_mla_dispatch(h)
    assert reg._handlers["torch_native"] is patches.handle_attention_torch_native
    assert reg.get_handler("torch_native")(attn, prefill) == AttnForwardMethod.MLA
    assert reg.get_handler("torch_native")(attn, verify) == AttnForwardMethod.MLA
    patches._patch_mla_dispatch(h)  # idempotent (every SGLang process installs it once per import)
    reg._handlers["torch_native"] = lambda a, f: None
    with pytest.raises(patches.PatchError, match="patch #11 is stale"):
        patches._patch_mla_dispatch(h)


def test_mla_draft_shares_the_embedding_on_cpu(monkeypatch):
    """Patch #12: SGLang 0.5.23's MLA draft hands over the target's embedding with
    ``torch.cuda.synchronize()`` (``kimi_k25_eagle3.py:404-423``), which fails on a CPU torch; the
    patched methods make the same assignments and settle through ``current_platform``."""
    import torch

    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    from sglang.srt.models import kimi_k25_eagle3 as k

    from eagle3_conformance.tools.sglang_engine import patches

    cls = k.Eagle3DeepseekV2ForCausalLM
    for name in ("set_embed", "set_embed_and_head"):
        monkeypatch.setattr(cls, name, getattr(cls, name))  # undone after the test

    def draft(target_hidden=8):
        d = SimpleNamespace(config=SimpleNamespace(hidden_size=8, target_hidden_size=target_hidden),
                            model=SimpleNamespace(embed_tokens=torch.nn.Embedding(4, 8)), lm_head=torch.nn.Linear(8, 4))
        return d

    embed, head = torch.nn.Parameter(torch.ones(4, 8)), torch.nn.Parameter(torch.zeros(4, 8))
    if not torch.cuda.is_available():
        with pytest.raises((AssertionError, RuntimeError), match="CUDA"):
            cls.set_embed(draft(), embed)
    patches._patch_mla_draft_embed(k)
    d = draft()
    cls.set_embed(d, embed)
    assert d.model.embed_tokens.weight is embed
    d = draft(target_hidden=16)  # another width: not shared (the original's rule)
    cls.set_embed(d, embed)
    assert d.model.embed_tokens.weight is not embed
    d = draft()
    cls.set_embed_and_head(d, embed, head)
    assert d.model.embed_tokens.weight is embed and d.lm_head.weight is head


def test_mla_pair_spec_is_the_seeds_structure():
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.tools.sglang_engine.mla_pair import SPEC

    t = SPEC["target"]
    assert t["architectures"] == ["DeepseekV3ForCausalLM"] and t["first_k_dense_replace"] == 1
    assert t["q_lora_rank"] and t["kv_lora_rank"] and t["n_shared_experts"] == 1 and t["n_routed_experts"] == 4
    c = load_contract(CONTRACT)
    assert (c.L, c.target.hidden_size, c.reference) == (t["num_hidden_layers"], t["hidden_size"], "engine")
    for key in ("draft", "draft_mla"):
        assert SPEC[key]["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == c.draft.layer_ids.values
    assert SPEC["draft_mla"]["architectures"] == ["Eagle3DeepseekV2ForCausalLM"]


def _statuses(fs) -> list:
    return [(f.check, f.where, f.slot, f.status) for f in fs]


@pytest.mark.slow
def test_deepseek_v3_mla_moe_through_the_real_engine_judged_by_its_own_records(tmp_path):
    """Four engine runs of 2 prompts x 8 new tokens (~20 s each here, ~100 s in all; 470 s at load 11-13):

    * the correct pair, with the Llama-style draft and with the MLA draft (Kimi-K2.5's kind): lossless
      against transformers' greedy decode, every recorded boundary equal to transformers' forward (MLA
      attention and the MoE layers alike), no failing finding with the engine as reference, and the same
      verdict as the transformers reference finding for finding, the draft's runtime (dtype, finite logits,
      quantization, issue 45) judged and passing; the faults below with the MLA draft;
    * the seed's embedding fault through the draft config (the embedding prepended: DeepSeek's
      first-id rule reads id 0 as B_0, ``deepseek_v2.py:3458-3473``): caught, naming slot 0 = B_0;
    * the ids read by SGLang 0.5.12's rule (+1 always): the draft config that makes 0.5.23 capture
      what 0.5.12 captures for this pair's ids (``engine_ids``' known 0.5.12 rule): caught, slot by slot.
    """
    from eagle3_conformance.checks.facts import check_reference
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.engine_ids.sglang import sglang_ids_for, sglang_rule
    from eagle3_conformance.faults.engine_column import (
        EngineFault,
        _engine_findings,
        _findings,
        _ids,
        _with_ids,
        fault_draft_dir,
        numeric_agreement,
    )
    from eagle3_conformance.paths.sglang_engine import reference_builder, reference_config, reference_fact
    from eagle3_conformance.testbed.trained_draft import eval_prompts
    from eagle3_conformance.tools.sglang_engine import observe_engine
    from eagle3_conformance.tools.sglang_engine.mla_pair import ensure_mla_pair

    pair = ensure_mla_pair()
    c = load_contract(CONTRACT)
    ref = reference_config(c, pair.target_dir)
    prompts = eval_prompts(pair.target_dir, 2, 48)
    arch, ids = c.target.architecture, list(c.draft.layer_ids.values)
    old = sglang_rule(arch, "0.5.12").boundaries(c.L, ids)
    old_ids, _ = sglang_ids_for(sglang_rule(arch), c.L, old)
    assert [str(b) for b in old] == ["B_3", "B_5", "B_6"] and old_ids == [3, 5, 6]

    def run(name, base, fault=None):
        d = base if fault is None else fault_draft_dir(base, fault, tmp_path / "drafts", pair.target_dir)
        return observe_engine(pair.target_dir, d, prompts, max_new_tokens=8, workdir=tmp_path / name, reference=ref,
                             reference_builder=reference_builder(ref, pair.target_dir))

    cm = c.model_copy(update={"draft": c.draft.model_copy(update={"architecture": "Eagle3DeepseekV2ForCausalLM"})})
    for name, base, cc in (("ok-llama-draft", pair.draft_dir, c), ("ok-mla-draft", pair.mla_draft_dir, cm)):
        ok = run(name, base)
        assert ok.extend[0].engine_boundaries == ["B_2", "B_4", "B_5"] and ok.extend[0].fc_ran, name
        assert ok.lossless["engine"] == ok.lossless["reference"], name
        st = ok.engine_reference.stats
        assert not st["missing"] and not st["errors"] and not st["dropped"] and st["rows"] > 0
        (fact,) = check_reference(cc, reference_fact(cc, ok.engine_reference, 0))
        assert fact.status == "pass", fact.message
        num = numeric_agreement(cc, ok)
        assert set(num) == set(ref["boundaries"]) and all(v["max_rel_err"] < 1e-4 for v in num.values()), num
        ef, tf = _engine_findings(cc, ok), _findings(cc, ok)
        assert not [f for f in ef if f.status == "fail"], [f.message for f in ef if f.status == "fail"][:3]
        assert _statuses(ef) == _statuses(tf) and any(f.check == "slot_identity" and f.status == "pass" for f in ef)
        # issue 45 item 2: the draft's own runtime is judged on both drafts (no skip) and passes
        rt = {f.check: f.status for f in ef if f.check in ("draft_dtype", "draft_logits_finite", "draft_quantization")}
        assert rt == dict.fromkeys(("draft_dtype", "draft_logits_finite", "draft_quantization"), "pass"), (name, rt)

    emb = run("embedding", pair.mla_draft_dir, EngineFault(
        "embedding-prepended", "K2", "draft config ids [0, a, b]", (),
        config=lambda cfg: _with_ids(cfg, [0] + _ids(cfg)[:-1])))
    assert emb.extend[0].engine_boundaries == ["B_0", "B_2", "B_4"]
    fs = _engine_findings(cm, emb)
    s0 = [f for f in fs if f.check == "slot_identity" and f.slot == "slot 0"]
    assert s0 and all(f.status == "fail" and "slot 0 is B_0 (embedding output)" in f.message for f in s0), s0[0]
    assert any(f.check == "no_embedding" and f.status == "fail" and "B_0" in f.message for f in fs)
    assert all("scanned the engine" in f.message for f in s0)

    v12 = run("v0512", pair.mla_draft_dir, EngineFault(
        "ids-0.5.12-rule", "K2", "ids read by SGLang 0.5.12's rule", (), config=lambda cfg: _with_ids(cfg, old_ids)))
    assert v12.extend[0].engine_boundaries == [str(b) for b in old]
    fs = _engine_findings(cm, v12)
    for i, (got, want) in enumerate(zip(old, cm.aux)):
        si = [f for f in fs if f.check == "slot_identity" and f.slot == f"slot {i}"]
        assert si and all(f.status == "fail" and f"is {got}" in f.message and f"contract says {want}" in f.message
                          for f in si), si[0].message
