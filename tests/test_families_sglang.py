"""SGLang's real DFlash capture and DFlashDraftModel, and the tensor it hands an MTP head,
in-process on CPU on the tiny-llama fixture target, judged by the same fingerprint checks as
EAGLE-3 (slot identity against the HF reference of the same tokens). Each DFlash / MTP fault
kind of issue 14 is injected and shown to fail. Runs on the installed release: 0.5.23 in the main
environment, 0.5.14 in ``tox -e sglang-0.5.14``."""

from __future__ import annotations

import pytest

from eagle3_conformance.environment.torch_env import prepare

prepare()
pytest.importorskip("sglang")

from pathlib import Path  # noqa: E402

from eagle3_conformance.checks import check_fc_ran, check_slot_identity  # noqa: E402
from eagle3_conformance.contract import parse_contract  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

BATCH = [[5, 17, 99, 3, 250, 41, 77, 8, 130, 64, 12, 300], [9, 400, 23, 7, 88, 150, 6, 211, 19]]


@pytest.fixture(scope="module")
def pair():
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.testbed.fixtures import build_fixture
    from eagle3_conformance.tools.sglang_cpu import shared_harness

    b = build_fixture("tiny-llama")
    h = shared_harness(b.target_dir, b.draft_dir)
    yield h, load_reference_model(b.target_dir)


def dflash_contract(path: str):
    return parse_contract((REPO / path).read_text(), path)


def draft_cfg(ids=(0, 3, 6), n=3, num_target_layers=8):
    c = {"architectures": ["DFlashDraftModel"], "num_hidden_layers": n, "hidden_size": 64,
         "dflash_config": {"block_size": 4}}
    if ids is not None:
        c["dflash_config"]["target_layer_ids"] = list(ids)
    if num_target_layers is not None:
        c["dflash_config"]["num_target_layers"] = num_target_layers
    return c


def statuses(c, caps, ref):
    out = []
    for cap in caps:
        r = ref.capture(cap.token_ids)
        out += [f.status for f in check_slot_identity(c, cap, r)]
    return out


def run(h, cfg, *, rule="sglang", decode=False):
    from eagle3_conformance.tools.sglang_cpu.families import DFlashCPU

    d = DFlashCPU(h, cfg, apply_rule=rule)
    try:
        if decode:
            return d.verify([x[:6] for x in BATCH], [x[6:9] for x in BATCH]), d
        return d.extend(BATCH), d
    finally:
        d.close()


@pytest.mark.parametrize("decode", [False, True], ids=["extend", "decode"])
def test_dflash_correct_passes(pair, decode):
    h, ref = pair
    c = dflash_contract("contracts/tiny-llama-dflash.yaml")
    caps, d = run(h, draft_cfg(c.dflash.target_layer_ids, c.dflash.num_draft_layers), decode=decode)
    assert d.captured_boundaries == c.capture.boundaries
    assert d.apply_site.startswith("sglang/srt/model_executor/")  # the installed release's own apply step
    assert all(cap.fc_ran and cap.fc_input.shape[-1] == c.capture.feature_width for cap in caps)
    st = statuses(c, caps, ref)
    assert st and all(s == "pass" for s in st), st
    assert all(f.status == "pass" for cap in caps for f in check_fc_ran(c, cap))


def test_dflash_wrong_rule_fails(pair):
    """The EAGLE boundary rule applied to DFlash ids: every tap one layer early. Id 0 then taps the
    embedding B_0, which 0.5.14's LlamaModel.forward cannot capture (it adds the layer-0 residual,
    None, at llama.py:409): loud there, silent and caught by slot identity on 0.5.23."""
    from eagle3_conformance.tools.sglang_cpu import TargetForwardError

    h, ref = pair
    c = dflash_contract("contracts/tiny-llama-dflash.yaml")
    if h.sglang_version == "0.5.14":
        with pytest.raises(TargetForwardError, match=r"llama\.py:409 \(layers_to_capture \[0, 3, 6\]\)"):
            run(h, draft_cfg(c.dflash.target_layer_ids), rule="boundary")
        return
    caps, d = run(h, draft_cfg(c.dflash.target_layer_ids), rule="boundary")
    assert d.captured_boundaries == [f"B_{i}" for i in c.dflash.target_layer_ids]
    assert "fail" in statuses(c, caps, ref)


def test_dflash_formula_fallback_fails(pair):
    """No target_layer_ids: SGLang's formula gives three taps, the load and the fc succeed, the
    taps are not the trained ones. (Without num_target_layers as well, SGLang 0.5.23's
    DFlashDraftModel sizes its fc from the formula over the draft's own depth, dflash.py:764-771,
    and raises for a draft of fewer than 4 layers.)"""
    h, ref = pair
    c = dflash_contract("contracts/tiny-llama-dflash.yaml")
    caps, d = run(h, draft_cfg(None, c.dflash.num_draft_layers, num_target_layers=c.L))
    assert d.ids_source.startswith("build_target_layer_ids")
    assert len(d.captured_boundaries) == c.num_slots and d.captured_boundaries != c.capture.boundaries
    assert all(cap.fc_ran for cap in caps)
    assert "fail" in statuses(c, caps, ref)


def test_dflash_without_num_target_layers_per_release(pair):
    """The fixture's ids [0, 3, 6] on a 3-layer draft without num_target_layers: SGLang 0.5.23's
    DFlashDraftModel checks them against max(id) + 1 and loads; 0.5.14's checks them against the
    draft's own depth (dflash.py:333-342) and refuses id 3 at load, which the path reports as
    SGLang refusing the config."""
    from eagle3_conformance.tools.sglang_cpu.families import DFlashConfigError

    h, _ = pair
    target = (h.target.capture_aux_hidden_states, list(h.target.model.layers_to_capture))
    if h.sglang_version == "0.5.14":
        with pytest.raises(DFlashConfigError, match=r"DFlashDraftModel.*target_layer_ids\[1\]=3, target_num_layers=3"):
            run(h, draft_cfg(num_target_layers=None))
        assert (h.target.capture_aux_hidden_states, h.target.model.layers_to_capture) == (target[0], target[1])
    else:
        caps, d = run(h, draft_cfg(num_target_layers=None))
        assert d.fc_in == 3 * 64 and all(cap.fc_ran for cap in caps)


def test_dflash_tap_beyond_depth_refused_by_sglang(pair):
    from eagle3_conformance.tools.sglang_cpu.families import DFlashConfigError

    h, _ = pair
    with pytest.raises(DFlashConfigError, match="out-of-range"):
        run(h, draft_cfg((0, 3, h.num_layers)))


@pytest.mark.parametrize("contract, want", [("contracts/tiny-llama-mtp-sglang.yaml", "pass"),
                                            ("tests/data/families/tiny-llama-mtp-speculators.yaml", "fail")])
def test_mtp_source_sglang_feeds_post_norm_F(pair, contract, want):
    """SGLang (the installed release, 0.5.23 or 0.5.14) hands an MTP head the LM head's input, F: a
    contract that says F passes, one that says B_L (what speculators trains MTP on) fails: the
    post-norm-F-fed-to-MTP fault. The capture names the logits-processor line of the installed file."""
    from eagle3_conformance.tools.sglang_cpu.families import mtp_source_extend

    h, ref = pair
    c = dflash_contract(contract)
    caps = mtp_source_extend(h, BATCH)
    line = {"0.5.23": 871, "0.5.14": 602}[h.sglang_version]
    assert caps[0].provenance["source"].startswith(f"sglang/srt/layers/logits_processor.py:{line} ")
    st = []
    for cap in caps:
        r = ref.capture(cap.token_ids)
        st += [f.status for f in check_slot_identity(c, cap, r)]
    assert st and all(s == want for s in st if s != "skip") and want in st, st


# --- the real-model target (SmolLM2-135M-Instruct, L = 30, d = 576) ------------------------------


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.testbed.corpus import prompt_pool
    from eagle3_conformance.testbed.fixtures import build_fixture
    from eagle3_conformance.tools.sglang_cpu.families import runtime_harness

    b = build_fixture("smollm2-135m")
    pool = prompt_pool(b.target_dir)
    yield b.target_dir, runtime_harness(b.target_dir), load_reference_model(b.target_dir), pool


def _smollm2_dflash_contract(tmp_path, target_dir, ids):
    """The contract `eagle3-conformance init` writes for the real target and a 5-tap DFlash draft config."""
    import json

    from eagle3_conformance.cli import main
    from eagle3_conformance.contract import load_contract

    d = tmp_path / "dflash-draft"
    d.mkdir(exist_ok=True)
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 576,
           "intermediate_size": 1536, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
           "vocab_size": 49152, "rms_norm_eps": 1e-5, "block_size": 4,
           "dflash_config": {"target_layer_ids": list(ids), "num_target_layers": 30}}
    (d / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "smollm2-dflash.yaml"
    if out.exists():
        out.unlink()
    assert main(["init", "--target", str(target_dir), "--draft", str(d), "-o", str(out),
                 "--dflash-sample-from-anchor", "false"]) == 0  # z-lab's convention, the one SGLang 0.5.23 samples
    return load_contract(out), cfg


def test_smollm2_dflash_real_target(tmp_path, smollm2):
    """Five taps on the trained target, real prompts: SGLang's DFlash capture passes the contract
    init wrote; the EAGLE rule applied to the same ids fails it on extend and on verify."""
    from eagle3_conformance.tools.sglang_cpu.families import DFlashCPU

    target_dir, h, ref, pool = smollm2
    c, cfg = _smollm2_dflash_contract(tmp_path, target_dir, [1, 8, 15, 22, 28])
    assert c.capture.boundaries == ["B_2", "B_9", "B_16", "B_23", "B_29"]
    batch = [p[:40] for p in pool[:2]]
    prefix, drafts = [p[:30] for p in pool[2:4]], [p[30:34] for p in pool[2:4]]
    for rule, want in (("sglang", "pass"), ("boundary", "fail")):
        d = DFlashCPU(h, cfg, apply_rule=rule)
        try:
            caps = d.extend(batch) + d.verify(prefix, drafts)
        finally:
            d.close()
        st = statuses(c, caps, ref)
        if want == "pass":
            assert st and all(s == "pass" for s in st), st
        else:
            assert st.count("fail") >= len(caps), st


def test_smollm2_mtp_source_is_F(smollm2):
    """On the trained target too, SGLang hands an MTP head F: slot identity names F, not B_30."""
    from eagle3_conformance.checks import identify
    from eagle3_conformance.tools.sglang_cpu.families import mtp_source_extend

    _target_dir, h, ref, pool = smollm2
    for cap in mtp_source_extend(h, [p[:40] for p in pool[:2]]):
        r = ref.capture(cap.token_ids)
        keep = cap.rows > 0
        best, cos, _ = identify(cap.feature.float(), cap.rows, r, keep)
        assert str(best) == "F" and cos > 0.999, (best, cos)
