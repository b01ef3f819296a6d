"""Issue 12: the trained draft, the greedy speculative loop on SGLang's CPU classes, the
accept-length gate (cpu-accept) and what each fault costs.

The slow tests build the trained draft on first use (about 10 minutes on 2 busy cores, then
cached in the model cache) and run the loop on held-out corpus prompts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from eagle3_conformance.checks import check_accept_length
from eagle3_conformance.contract import load_contract
from eagle3_conformance.paths import Skipped, get

REPO = Path(__file__).resolve().parent.parent
SMOL = REPO / "contracts" / "smollm2-135m.yaml"
TINY = REPO / "contracts" / "tiny-llama.yaml"


def test_accept_gate_names_the_path_that_measured_it():
    c = load_contract(SMOL)
    assert c.gates.min_accept_length is not None
    floor = c.gates.min_accept_length
    [ok] = check_accept_length(c, floor + 0.5, path="cpu-accept")
    [bad] = check_accept_length(c, floor - 0.5, path="cpu-accept")
    [eng] = check_accept_length(c, floor - 0.5)
    assert (ok.status, ok.path) == ("pass", "cpu-accept")
    assert (bad.status, bad.path) == ("fail", "cpu-accept")
    assert (eng.status, eng.path) == ("fail", "sglang-engine")
    [none] = check_accept_length(c, None, path="cpu-accept")
    assert none.status == "fail" and "no accept length" in none.message


def test_assess_hands_the_path_name_to_the_accept_gate():
    from eagle3_conformance.assess import assess
    from eagle3_conformance.paths import Observation

    c = load_contract(SMOL)
    [f] = assess(c, Observation(facts={"avg_accept_length": 1.0}), lambda: None, "cpu-accept")
    assert (f.path, f.status) == ("cpu-accept", "fail")


def test_cpu_accept_skips_pairs_without_a_trained_draft():
    p = get("cpu-accept")
    s = p.prepare(load_contract(TINY), None)
    assert isinstance(s, Skipped) and "no trained draft" in s.reason
    bf16 = load_contract(REPO / "contracts" / "smollm2-135m-bf16.yaml")
    assert isinstance(p.prepare(bf16, None), Skipped)


def test_floor_with_uncalibrated_bands_allowed_only_for_a_cpu_measured_pair():
    from eagle3_conformance.contract import semantic_problems

    c = load_contract(SMOL)
    assert c.norm_bands.status != "calibrated" and c.gates.min_accept_length is not None
    assert not [e for e in semantic_problems(c) if e[0] == ("gates", "min_accept_length")]
    other = c.model_copy(update={"fixture": "tiny-llama"})
    assert [e for e in semantic_problems(other) if e[0] == ("gates", "min_accept_length")]


# ---------------------------------------------------------------------------------- slow: real


@pytest.fixture(scope="module")
def loop():
    pytest.importorskip("sglang")
    pytest.importorskip("speculators")
    import torch

    from eagle3_conformance.faults.acceptance import checkpoint_d2t
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.tools.sglang_cpu import SGLangCPUHarness
    from eagle3_conformance.trained_draft import ensure_trained_draft, eval_prompts

    td = ensure_trained_draft()
    h = SGLangCPUHarness(td.target_dir, td.draft_dir, dtype=torch.float32)
    yield dict(td=td, h=h, ref=load_reference_model(td.target_dir), prompts=eval_prompts(td.target_dir, 2, 48),
               d2t=checkpoint_d2t(td.draft_dir))
    h.close()


@pytest.mark.slow
def test_trained_draft_is_what_sglang_loads(loop):
    td, h = loop["td"], loop["h"]
    assert h.draft_weights == "checkpoint"
    assert h.captured_boundaries == ["B_2", "B_15", "B_27"]
    info = td.info
    assert info["seed"] == td.info["recipe"]["seed"] and len(info["data_sha256"]) == 64
    # the checkpoint's d2t is what SGLang's load_weights turned into hot_token_id
    import torch

    hot = h.draft.get_hot_token_id()
    assert torch.equal(hot.cpu(), loop["d2t"] + torch.arange(loop["d2t"].shape[0]))
    assert (td.draft_dir / "model.safetensors").stat().st_size < 64 << 20


@pytest.mark.slow
def test_speculation_is_lossless_and_the_lossless_check_can_fail(loop):
    from eagle3_conformance.faults.acceptance import greedy_matches
    from eagle3_conformance.tools.sglang_cpu.spec_loop import speculative_decode

    res = speculative_decode(loop["h"], loop["prompts"], num_draft_tokens=3, max_new_tokens=16)
    assert not res.errors
    assert all(len(r.output) == 16 for r in res.runs)
    # the output is the target's greedy decode (HF transformers' forward, not SGLang's)
    assert all(greedy_matches(loop["ref"], r) for r in res.runs)
    # and the comparison fails when one token differs
    r = res.runs[0]
    bad = replace(r, output=r.output[:5] + [(r.output[5] + 1) % 49152] + r.output[6:])
    assert not greedy_matches(loop["ref"], bad)
    # a trained draft gets drafts accepted; every verify step commits 1..k+1 tokens
    assert res.mean_accept_length > 1.0
    assert all(1 <= a <= 4 for run in res.runs for a in run.accept_lengths)


@pytest.mark.slow
def test_gate_fails_on_a_fault_that_passes_every_shape_check(loop):
    """embedding-prepended (the seed incident's shape): SGLang captures B_0, B_2, B_15; three
    576-wide slots as before (widths, counts and fc all as declared), and the contract's
    accept-length floor fails. Measured on the cpu-accept path's own prompts and lengths."""
    from eagle3_conformance.faults.acceptance import FAULTS, measure

    c = load_contract(SMOL)
    h = loop["h"]
    from eagle3_conformance.paths import cpu_accept
    from eagle3_conformance.trained_draft import eval_prompts

    prompts = eval_prompts(loop["td"].target_dir, 3, cpu_accept.PROMPT_TOKENS)
    fault = next(f for f in FAULTS if f.name == "embedding-prepended")
    good = measure(h, loop["ref"], prompts, None, loop["d2t"], k=3, max_new=24)
    assert check_accept_length(c, good.mean_accept_length, path="cpu-accept")[0].status == "pass"
    bad = measure(h, loop["ref"], prompts, fault, loop["d2t"], k=3, max_new=24)
    assert not bad.errors and bad.fc_calls > 0 and bad.lossless
    assert check_accept_length(c, bad.mean_accept_length, path="cpu-accept")[0].status == "fail"
    # the shapes were right: same slot count and width reached the draft
    from eagle3_conformance.faults.acceptance import apply, restore

    apply(h, fault, loop["d2t"])
    try:
        caps = h.extend([loop["prompts"][0]])
    finally:
        restore(h, loop["d2t"])
    assert len(h.captured_boundaries) == 3 and caps[0].feature.shape[-1] == c.capture.feature_width
    assert caps[0].fc_ran
