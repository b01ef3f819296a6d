"""The real ``sglang.Engine`` checked against itself on the real SmolLM2 pair (issue 45 item 1), slow tier:
each variation's rows equal the plain run's within the contract's noise (no false positive), and each
variation's fault, caused inside the engine through SGLang's ``forward_hooks`` the way its field report
describes (:mod:`eagle3_conformance.faults.invariance_column`), is caught.

Times on the shared 2-core machine (``pytest --durations``): the no-false-positive runs 128-176 s
(SmolLM2) and 106-125 s (the MLA + MoE pair), 3 engine starts each (base, chunked, TP 2); the kill-matrix
column 235-360 s (7 engine starts; the spread is the machine's load).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _pair(which: str = "smollm2"):
    """(contract, pair with ``target_dir`` / ``draft_dir``, 2 held-out prompts of 48 tokens): the real
    SmolLM2-135M pair with its trained draft, or the tiny DeepSeek-V3-structured pair (MLA attention +
    MoE, tools/sglang_engine/mla_pair.py, tests/test_engine_mla.py)."""
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft, eval_prompts

    pytest.importorskip("sglang")
    if which == "mla":
        from eagle3_conformance.tools.sglang_engine.mla_pair import ensure_mla_pair

        m = ensure_mla_pair()
        c = load_contract(ROOT / "tests" / "data" / "engine" / "tiny-deepseek-v3-mla.yaml")
        return c, m, eval_prompts(m.target_dir, 2, 48)
    t = ensure_trained_draft(RECIPE)
    return load_contract(ROOT / "contracts" / "smollm2-135m.yaml"), t, eval_prompts(t.target_dir, 2, 48)


@pytest.mark.parametrize("which", ["smollm2", "mla"])
def test_every_variation_equals_the_plain_run_on_the_real_pair(tmp_path, which):
    """All six variations (TP 2 included: gloo, one core per rank) on a conforming pair (the real
    SmolLM2 pair, 128-176 s; the MLA + MoE pair, 106-125 s): every variation happened (the engine's
    records show a chunked prefill in 3 chunks, a cache hit, a batch, logprobs, TP 2), every row of
    every extend and verify capture is within the float32 noise, and the ``engine_variations`` fact
    passes with each variation's cost."""
    from eagle3_conformance.paths.sglang_engine_invariance import NAME, observation
    from eagle3_conformance.suite.assess import assess
    from eagle3_conformance.tools.sglang_engine.variations import run_variations
    from eagle3_conformance.tools.shared.variations import VARIATIONS

    c, t, prompts = _pair(which)
    names = [v.name for v in VARIATIONS]
    vobs = run_variations(t.target_dir, t.draft_dir, prompts, names=names, path=NAME, workdir=tmp_path, log=print)
    print(vobs.cost)
    assert vobs.failed == {} and vobs.unavailable == {} and vobs.paired.notes == []

    def no_reference():
        raise AssertionError("the invariance checks need no reference model")

    found = assess(c, observation(vobs, names), no_reference, path=NAME)
    worst = {n: max(f.observed["max_relative_difference"] for f in found if f.where.startswith(f"{n}: ")
                    and isinstance(f.observed, dict) and "max_relative_difference" in f.observed) for n in names}
    print(f"{len(found)} findings; largest relative difference per variation: {worst}")
    assert [f for f in found if f.status != "pass"] == []
    for name in names:
        mine = [f for f in found if f.check == "engine_invariance" and f.where.startswith(f"{name}: ")]
        assert sum(f.slot == "variation" for f in mine) == vobs.paired.counts[name]["extend"] + \
            vobs.paired.counts[name]["verify"] > 0, name
        assert vobs.paired.counts[name]["extend"] == len(prompts), name
        assert {f.slot for f in mine if f.slot and f.slot.startswith("slot ")} == \
            {f"slot {i}" for i in range(c.num_slots)}, name
    chunks = {p[1].provenance["conditions"]["chunks"] for p in vobs.paired.pairs
              if p[1].provenance["variation"] == "chunked-prefill" and p[1].provenance.get("first_row") == 0
              and "extend" in p[1].where}
    assert chunks == {3}
    assert {n: vobs.cost[n]["engine_starts"] for n in names} == {
        "batch": 0, "input-logprobs": 0, "prefix-cache-repeat": 0, "prefix-cache-shared": 0,
        "chunked-prefill": 1, "tp2": 1}


@pytest.mark.soak  # 7 engine starts, 4-6 minutes: `tox -e soak`, not CI
def test_the_invariance_column_catches_every_variations_fault(tmp_path):
    """The kill matrix's invariance column, grouped (faults whose conditions never meet share a run):
    the baseline passes, every fault is caught by ``engine_invariance`` on its own variation (0 missed),
    and no fault leaks into another variation of its run."""
    from eagle3_conformance.faults.invariance_column import FAULTS, run_invariance_column

    c, t, prompts = _pair()
    res = run_invariance_column(c, t.target_dir, t.draft_dir, prompts, tmp_path, grouped=True, log=print)
    print(res["runs"])
    for name, v in res["verdicts"].items():
        print(f"{name}: {v.status} {v.check}: {v.detail}")
    assert res["baseline_failures"] == []
    assert {f.name: (res["verdicts"][f.name].status, res["verdicts"][f.name].check) for f in FAULTS} == \
        {f.name: ("caught", "engine_invariance") for f in FAULTS}
    assert res["spill"] == {k: [] for k in res["spill"]}
