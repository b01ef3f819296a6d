"""SGLang 0.5.23's real DFlash capture and DFlashDraftModel, and the tensor it hands an MTP head,
in-process on CPU on the tiny-llama fixture target, judged by the same fingerprint checks as
EAGLE-3 (slot identity against the HF reference of the same tokens). Each DFlash / MTP fault
kind of issue 14 is injected and shown to fail."""

from __future__ import annotations

import pytest
import yaml

from conformance.torch_env import prepare

prepare()
pytest.importorskip("sglang")

from pathlib import Path  # noqa: E402

from conformance.checks import check_fc_ran, check_slot_identity  # noqa: E402
from conformance.contract import parse_contract  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

BATCH = [[5, 17, 99, 3, 250, 41, 77, 8, 130, 64, 12, 300], [9, 400, 23, 7, 88, 150, 6, 211, 19]]


@pytest.fixture(scope="module")
def pair():
    from conformance.fixtures import build_fixture
    from conformance.reference import load_reference_model
    from conformance.tools.sglang_cpu import shared_harness

    b = build_fixture("tiny-llama")
    h = shared_harness(b.target_dir, b.draft_dir)
    yield h, load_reference_model(b.target_dir)


def dflash_contract(path: str):
    return parse_contract((REPO / path).read_text(), path)


def draft_cfg(ids=(0, 3, 6), n=3, num_target_layers=None):
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
    from conformance.tools.sglang_cpu.families import DFlashCPU

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
    assert all(cap.fc_ran and cap.fc_input.shape[-1] == c.capture.feature_width for cap in caps)
    st = statuses(c, caps, ref)
    assert st and all(s == "pass" for s in st), st
    assert all(f.status == "pass" for cap in caps for f in check_fc_ran(c, cap))


def test_dflash_wrong_rule_fails(pair):
    """The EAGLE boundary rule applied to DFlash ids: every tap one layer early."""
    h, ref = pair
    c = dflash_contract("contracts/tiny-llama-dflash.yaml")
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


def test_dflash_tap_beyond_depth_refused_by_sglang(pair):
    from conformance.tools.sglang_cpu.families import DFlashConfigError

    h, _ = pair
    with pytest.raises(DFlashConfigError, match="out-of-range"):
        run(h, draft_cfg((0, 3, h.num_layers)))


@pytest.mark.parametrize("contract, want", [("contracts/tiny-llama-mtp-sglang.yaml", "pass"),
                                            ("tests/data/families/tiny-llama-mtp-speculators.yaml", "fail")])
def test_mtp_source_sglang_feeds_post_norm_F(pair, contract, want):
    """SGLang 0.5.23 hands an MTP head the LM head's input, F: a contract that says F passes, one
    that says B_L (what speculators trains MTP on) fails: the post-norm-F-fed-to-MTP fault."""
    from conformance.tools.sglang_cpu.families import mtp_source_extend

    h, ref = pair
    c = dflash_contract(contract)
    caps = mtp_source_extend(h, BATCH)
    st = []
    for cap in caps:
        r = ref.capture(cap.token_ids)
        st += [f.status for f in check_slot_identity(c, cap, r)]
    assert st and all(s == want for s in st if s != "skip") and want in st, st
