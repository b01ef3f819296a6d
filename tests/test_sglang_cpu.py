"""SGLang CPU harness (0.5.23; 0.5.14 in ``tox -e sglang-0.5.14``): real target/draft classes, real
id resolution, hooks on the draft.

Every expectation about WHICH boundary a slot holds is checked against an independent
transformers forward (``output_hidden_states``: hs[k] = B_k for k < L, hs[L] = F), never against
a re-implementation of SGLang. Harnesses are built one at a time (module fixtures, closed on
teardown): SGLang keeps one runtime context and one set of process groups per process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3_conformance.environment.torch_env import prepare

prepare()

import torch  # noqa: E402

sglang = pytest.importorskip("sglang")

from eagle3_conformance.environment.engines import HARNESS_RELEASES  # noqa: E402
from eagle3_conformance.tools.sglang_cpu import DraftForwardError, SGLangCPUHarness, TargetForwardError  # noqa: E402

COS = 0.999
L = 7  # llama defaults [2, 3, 4] differ from the configured ids [1,3,4] -> [2, 4, 5]


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1).min())


def _llama_target(path: Path, hidden: int = 64, layers: int = L):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=128, vocab_size=256,
        max_position_embeddings=256, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(path)
    return model


def _eagle3_draft(path: Path, target_hidden: int = 64, ids=(1, 3, 4), **extra):
    path.mkdir(parents=True, exist_ok=True)
    cfg = dict(
        architectures=["LlamaForCausalLMEagle3"], model_type="llama", hidden_size=64,
        target_hidden_size=target_hidden, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=128, vocab_size=256, draft_vocab_size=128,
        max_position_embeddings=256, rms_norm_eps=1e-6, hidden_act="silu",
        tie_word_embeddings=False,
        eagle_config={"eagle_aux_hidden_state_layer_ids": list(ids), "use_aux_hidden_state": True},
    )
    cfg.update(extra)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def _hf_states(model, ids):
    with torch.no_grad():
        out = model(torch.tensor([list(ids)]), output_hidden_states=True)
    return [h[0] for h in out.hidden_states], out.logits[0]


def _assert_blocks(cap, hf_model, boundaries, width):
    """Each width-d block of the captured feature is the named B_k at the claimed rows."""
    hs, logits = _hf_states(hf_model, cap.token_ids.tolist())
    blocks = cap.slots(width)
    assert len(blocks) == len(boundaries)
    for blk, name in zip(blocks, boundaries):
        k = int(name.split("_")[1])
        ref = hs[k][cap.rows]
        assert _cos(blk, ref) > COS, (cap.where, name)
        # and it is NOT a neighbouring boundary (the mapping, not just "some layer")
        for nb in (k - 1, k + 1):
            if 0 <= nb < len(hs) - 1:
                assert _cos(blk, hs[nb][cap.rows]) < COS, (cap.where, name, nb)
    return hs, logits


# ------------------------------------------------------------------ llama, equal widths


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    root = tmp_path_factory.mktemp("llama")
    hf = _llama_target(root / "target")
    draft = _eagle3_draft(root / "draft")
    h = SGLangCPUHarness(root / "target", draft)
    yield h, hf, root
    h.close()


def test_ids_resolved_by_sglang(llama):
    h, _, _ = llama
    assert h.sglang_version in HARNESS_RELEASES
    assert h.release.SERVES == (h.sglang_version,)
    assert h.engine_ids == [1, 3, 4]  # read from the nested eagle_config key
    assert h.layers_to_capture == [2, 4, 5]  # llama.py setter: v + 1
    assert h.captured_boundaries == ["B_2", "B_4", "B_5"]


def test_extend_matches_reference_boundaries(llama):
    h, hf, _ = llama
    batch = [[5, 17, 33, 2, 99, 41], [7, 8, 9]]
    caps = h.extend(batch)
    assert len(caps) == 2
    for i, cap in enumerate(caps):
        T = len(batch[i])
        assert cap.path == "sglang-extend"
        assert cap.where == f"extend batch of 2, request {i}"
        assert cap.feature.shape == (T, 3 * 64) and cap.draft_input_width == 192
        assert cap.fc_ran is True
        assert cap.rows.tolist() == list(range(T))
        assert cap.position_ids.tolist() == list(range(T))
        _, logits = _assert_blocks(cap, hf, h.captured_boundaries, 64)
        # ids shifted left by one; the last slot is the target's greedy sampled token
        assert cap.draft_input_ids.tolist() == batch[i][1:] + [int(logits[-1].argmax())]
        assert cap.engine_boundaries == ["B_2", "B_4", "B_5"]
        assert cap.provenance["mode"] == "EXTEND" and cap.provenance["capture_hidden_mode"] == "FULL"


def test_verify_matches_reference_boundaries(llama):
    h, hf, _ = llama
    prefix, drafts, accepted = [[3, 4, 5, 6], [10, 11]], [[20, 21, 22], [30, 31, 32]], [2, 3]
    caps = h.verify(prefix, drafts, accepted)
    for i, cap in enumerate(caps):
        P = len(prefix[i])
        assert cap.path == "sglang-decode"
        assert cap.token_ids.tolist() == prefix[i] + drafts[i]
        assert cap.rows.tolist() == [P, P + 1, P + 2]
        assert cap.position_ids.tolist() == [P, P + 1, P + 2]
        assert cap.feature.shape == (3, 192) and cap.fc_ran is True
        _, logits = _assert_blocks(cap, hf, h.captured_boundaries, 64)
        # draft ids = predict, the target's greedy token per verify row
        assert cap.draft_input_ids.tolist() == logits[cap.rows].argmax(-1).tolist()
        # greedy verification: draft token j+1 is accepted while it is the target's argmax at
        # row j (these drafts are arbitrary, so usually only the bonus token is)
        pred = logits[cap.rows].argmax(-1).tolist()
        want = 1
        while want < accepted[i] and drafts[i][want] == pred[want - 1]:
            want += 1
        assert cap.provenance["accepted"] == want
        assert cap.provenance["select_row"] == want - 1
        assert cap.provenance["draft_mode"].endswith("DRAFT_EXTEND_V2")


def test_verify_accepts_what_the_target_predicts(llama):
    """Drafts made consistent with the target's greedy continuation are accepted as asked; a
    draft token the target would not predict ends the accepted run there."""
    from eagle3_conformance.paths.sglang_decode import consistent_drafts
    from eagle3_conformance.reference import ReferenceModel

    h, _, root = llama
    ref = ReferenceModel(root / "target")
    prefix = [3, 4, 5, 6]
    good = consistent_drafts(ref, prefix, 4, 3, [20, 21, 22, 23])
    assert h.verify([prefix], [good], [3])[0].provenance["accepted"] == 3
    bad = list(good)
    bad[2] = (bad[2] + 1) % 256
    assert h.verify([prefix], [bad], [3])[0].provenance["accepted"] == 2


def test_feed_final_hidden_skips_fc_silently(llama):
    h, hf, _ = llama
    caps = h.verify([[3, 4, 5]], [[20, 21]], [1], feed_final_hidden=True)
    cap = caps[0]
    assert cap.draft_input_width == 64 and cap.fc_ran is False  # real guard, no error
    hs, _ = _hf_states(hf, cap.token_ids.tolist())
    assert _cos(cap.feature, hs[L][cap.rows]) > COS  # it is F (HF hs[L] = post-norm)


def test_feed_draft_states_skips_fc(llama):
    h, _, _ = llama
    cap = h.verify([[3, 4, 5]], [[20, 21]], [2], feed_draft_states=True)[0]
    assert cap.draft_input_width == 64 and cap.fc_ran is False
    assert "K9" in cap.provenance["draft_fed"]


def test_capture_layers_override(llama):
    h, hf, _ = llama
    try:
        # -1 -> B_0 through llama's +1; reversed order is written as given ...
        assert h.set_capture_layers_override([4, 2, -1]) == [5, 3, 0]
        # ... but the capture loop is ascending
        assert h.captured_boundaries == ["B_0", "B_3", "B_5"]
        if h.sglang_version == "0.5.14":
            # 0.5.14's LlamaModel.forward captures `hidden_states + residual` at every listed layer
            # (llama.py:407-409) and residual is None before layer 0: it cannot capture B_0
            # (0.5.23's _prepare_attention captures the embedding there).
            with pytest.raises(TargetForwardError, match=r"SGLang 0\.5\.14.*NoneType.*sglang/srt/models/llama\.py:409"):
                h.extend([[9, 8, 7, 6]])
        else:
            cap = h.extend([[9, 8, 7, 6]])[0]
            hs, _ = _hf_states(hf, cap.token_ids.tolist())
            assert _cos(cap.slots(64)[0], hs[0]) > COS  # slot 0 is the embedding
            assert cap.engine_ids == [4, 2, -1]
        # duplicates collapse: 2 slots reach a 3-slot fc -> loud, capture still reported
        h.set_capture_layers_override([3, 3, 1])
        assert h.captured_boundaries == ["B_2", "B_4"]
        with pytest.raises(DraftForwardError) as ei:
            h.extend([[1, 2, 3]])
        assert ei.value.captures[0].draft_input_width == 128
        assert ei.value.captures[0].fc_ran is False
    finally:
        h.set_capture_layers_override(None)
    assert h.layers_to_capture == [2, 4, 5]


def test_draft_ids_key_top_level_falls_back_to_defaults(llama):
    # Runs after the other `llama` tests: building h2 closes the module harness (one per process).
    h, hf, root = llama
    with SGLangCPUHarness(root / "target", root / "draft", draft_ids_key="top_level") as h2:
        assert h.closed
        assert h2.engine_ids is None
        assert h2.layers_to_capture == [2, L // 2, L - 3]  # setter defaults, no +1
        assert h2.captured_boundaries == ["B_2", "B_3", "B_4"]
        cap = h2.extend([[5, 6, 7, 8]])[0]
        assert cap.draft_input_width == 192 and cap.fc_ran is True  # silent
        _assert_blocks(cap, hf, h2.captured_boundaries, 64)


# ------------------------------------------------------------------ unequal widths


def test_target_96_draft_64(tmp_path):
    hf = _llama_target(tmp_path / "target", hidden=96)
    draft = _eagle3_draft(tmp_path / "draft", target_hidden=96)
    with SGLangCPUHarness(tmp_path / "target", draft) as h:
        assert h.target_hidden == 96 and h.draft_hidden == 64
        cap = h.extend([[1, 2, 3, 4, 5]])[0]
        assert cap.draft_input_width == 288 and cap.fc_ran is True
        _assert_blocks(cap, hf, h.captured_boundaries, 96)
        cap = h.verify([[1, 2, 3]], [[4, 5]], [2])[0]
        assert cap.draft_input_width == 288 and cap.fc_ran is True
        _assert_blocks(cap, hf, h.captured_boundaries, 96)
        # F (96 wide) != embed width (64): the guard calls fc, which rejects it loudly
        with pytest.raises(DraftForwardError) as ei:
            h.verify([[1, 2, 3]], [[4, 5]], [2], feed_final_hidden=True)
        assert ei.value.captures[0].draft_input_width == 96


# ------------------------------------------------------------------ DeepSeek-V3 MLA


def _deepseek_target(path: Path):
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(0)
    cfg = DeepseekV3Config(
        num_hidden_layers=6, hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
        intermediate_size=128, moe_intermediate_size=32, q_lora_rank=32, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
        first_k_dense_replace=6, moe_layer_freq=1,  # dense: no MoE layer
        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, n_group=1, topk_group=1,
        vocab_size=256, max_position_embeddings=256, tie_word_embeddings=False,
        # SGLang rewrites any rope_scaling to deepseek_yarn (deepseek_v2.py:2065-2066); factor 1
        rope_scaling={"rope_type": "yarn", "type": "yarn", "factor": 1.0,
                      "original_max_position_embeddings": 256, "beta_fast": 32, "beta_slow": 1,
                      "mscale": 1.0, "mscale_all_dim": 1.0},
    )
    model = DeepseekV3ForCausalLM(cfg).eval()
    model.save_pretrained(path)
    return model


def test_deepseek_mla_extend_and_verify(tmp_path):
    hf = _deepseek_target(tmp_path / "target")
    rope = json.loads((tmp_path / "target" / "config.json").read_text())["rope_parameters"]
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps(dict(
        architectures=["Eagle3DeepseekV2ForCausalLM"], model_type="deepseek_v3",
        hidden_size=64, target_hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=4, intermediate_size=128, q_lora_rank=32, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, vocab_size=256,
        draft_vocab_size=128, max_position_embeddings=256, rms_norm_eps=1e-6,
        hidden_act="silu", tie_word_embeddings=False, rope_parameters=rope,
        first_k_dense_replace=1,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 4],
                      "use_aux_hidden_state": True},
    )))
    with SGLangCPUHarness(tmp_path / "target", draft) as h:
        assert type(h.target).__name__ == "DeepseekV3ForCausalLM"
        assert type(h.draft).__name__ == "Eagle3DeepseekV2ForCausalLM"
        # deepseek_v2.py:3470-3473: ids[0] == 1 -> +1
        assert h.layers_to_capture == [2, 4, 5]
        for cap in h.extend([[1, 2, 3, 4, 5], [7, 8, 9]]):
            assert cap.draft_input_width == 192 and cap.fc_ran is True
            _assert_blocks(cap, hf, h.captured_boundaries, 64)
        for cap in h.verify([[1, 2, 3, 4], [5, 6, 7]], [[9, 10, 11], [12, 13, 14]], [2, 3]):
            assert cap.draft_input_width == 192 and cap.fc_ran is True
            _assert_blocks(cap, hf, h.captured_boundaries, 64)
        cap = h.verify([[1, 2, 3]], [[4, 5]], [1], feed_final_hidden=True)[0]
        assert cap.draft_input_width == 64 and cap.fc_ran is False
