"""What the kill matrix computes once and reuses: reference forwards of one target shared by the scenarios
built on it, and the real pair's boundaries cached on disk like the suite's. Inputs only (the target's own
forward on given tokens), never a path's result: every operator still runs every path it lives on."""

from __future__ import annotations

import pytest

from eagle3_conformance.faults import build_scenario
from eagle3_conformance.faults.example import default_example
from eagle3_conformance.faults.matrix import MATRIX_SCENARIOS


def test_scenarios_on_one_target_share_its_reference_and_greedy_forwards(tmp_path):
    """``base`` and ``final`` are one target (same seed and shape): the second scenario's example and
    contract run no new reference forward; a changed token sequence misses the memo and is computed."""
    import torch

    base = build_scenario(MATRIX_SCENARIOS["base"], tmp_path / "base")
    final = build_scenario(MATRIX_SCENARIOS["final"], tmp_path / "final")
    ref = base.ref
    assert final.ref is ref
    ex = default_example(base)
    base.contract(extra_tokens=ex.tokens())
    greedy, forwards = ref.greedy_forwards, ref.forwards
    assert greedy > 0 and forwards > 0
    ex_final = default_example(final)
    final.contract(extra_tokens=ex_final.tokens())
    assert ex_final.drafts == ex.drafts
    assert (ref.greedy_forwards, ref.forwards) == (greedy, forwards)  # all read back
    seq = list(ex.prefixes[0]) + [200]  # asked by no scenario
    got = ref.greedy_next(seq)
    assert ref.greedy_forwards == greedy + 1  # a new input is a miss: computed
    with torch.no_grad():
        want = int(ref.model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].argmax())
    assert got == want
    assert ref.greedy_next(seq[:-1] + [201]) is not None and ref.greedy_forwards == greedy + 2
    other = build_scenario(MATRIX_SCENARIOS["wide"], tmp_path / "wide")  # another target: its own reference
    assert other.ref is not ref
    from eagle3_conformance.faults.scenario import ScenarioSpec, build_scenario_target, scenario_reference

    swapped = scenario_reference(build_scenario_target(ScenarioSpec("x", 8, 64, 64, (3, 5, 6), seed=99)))
    n = getattr(swapped, "greedy_forwards", 0)
    swapped.greedy_next(seq)
    swapped.model = ref.model  # another model in the same object: its continuations are not the old ones
    assert swapped.greedy_next(seq) == got and swapped.greedy_forwards == n + 2


@pytest.mark.slow
def test_the_real_pair_reads_its_boundaries_from_the_suites_disk_cache(tmp_path, monkeypatch):
    """The real pair's reference caches boundaries where the suite's does (keyed by the model's files, dtype,
    versions, the reference's code and the token ids); ``CONFORMANCE_REFERENCE_CACHE=0``: memory only."""
    from eagle3_conformance.faults.real_scenario import RealPairUnavailable, build_real_scenario
    from eagle3_conformance.reference import default_cache_dir

    try:
        scn = build_real_scenario("smollm2-135m", "smollm2-135m-base", False, tmp_path / "a", for_sglang=False)
    except RealPairUnavailable as e:
        pytest.skip(f"the real pair cannot be built here: {e}")
    assert scn.ref.cache_dir == default_cache_dir()
    first = scn.ref.capture(scn.samples[0])
    path = scn.ref._cache_file(first.token_ids)
    assert path is not None and path.is_file()
    monkeypatch.setenv("CONFORMANCE_REFERENCE_CACHE", "0")
    off = build_real_scenario("smollm2-135m", "smollm2-135m-base", False, tmp_path / "b", for_sglang=False)
    assert off.ref.cache_dir is None and off.ref is not scn.ref


def test_greedy_continuations_are_cached_on_disk_beside_the_boundaries(tmp_path):
    """A reference with a ``cache_dir`` stores each greedy continuation; a fresh reference of the same model
    reads it back without a forward, a different token sequence (or a file stored for other ids) is computed."""
    import json

    from eagle3_conformance.reference import ReferenceModel

    scn = build_scenario(MATRIX_SCENARIOS["base"], tmp_path / "s", for_sglang=True)
    seq = list(scn.samples[0])
    first = ReferenceModel(scn.target_dir, cache_dir=tmp_path / "cache")
    want = first.greedy_next(seq)
    assert first.greedy_forwards == 1 and want == scn.ref.greedy_next(seq)
    stored = list((tmp_path / "cache").rglob("greedy-*.json"))
    assert len(stored) == 1 and json.loads(stored[0].read_text()) == {"token_ids": seq, "next": want}
    again = ReferenceModel(scn.target_dir, cache_dir=tmp_path / "cache")
    assert again.greedy_next(seq) == want and getattr(again, "greedy_forwards", 0) == 0
    assert again.__dict__.get("_model") is None  # read back: the model was never loaded
    again.greedy_next(seq + [5])
    assert again.greedy_forwards == 1  # another input misses
    stored[0].write_text(json.dumps({"token_ids": seq + [9], "next": 3}))  # stored for other ids: not trusted
    third = ReferenceModel(scn.target_dir, cache_dir=tmp_path / "cache")
    assert third.greedy_next(seq) == want and third.greedy_forwards == 1


def test_cache_entries_are_written_whole_and_a_read_only_cache_is_left_as_it_is(tmp_path):
    """``environment.cache.write_json_atomically`` (the greedy caches' writer): the file appears whole, with
    no temporary file left beside it; a folder that cannot be written raises nothing and gains nothing."""
    import json
    import os

    from eagle3_conformance.environment.cache import write_json_atomically

    target = tmp_path / "sub" / "greedy-x.json"
    write_json_atomically(target, {"token_ids": [1, 2], "next": 3})
    assert json.loads(target.read_text()) == {"token_ids": [1, 2], "next": 3}
    assert sorted(p.name for p in target.parent.iterdir()) == ["greedy-x.json"]
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o500)
    try:
        if os.access(locked, os.W_OK):  # root ignores the mode: a file in its place makes the folder unmakeable
            blocker = tmp_path / "blocker"
            blocker.write_text("")
            dest = blocker / "greedy-y.json"
        else:
            dest = locked / "greedy-y.json"
        write_json_atomically(dest, {"next": 1})
        assert not dest.exists()
    finally:
        os.chmod(locked, 0o700)
