"""Issue 12: the trained draft, the greedy speculative loop on SGLang's CPU classes, the
accept-length gate (cpu-accept) and what each fault costs.

The slow tests take the shipped trained draft (fixtures/drafts/smollm2-135m-eagle3, checked against
its recipe) and run the loop on held-out corpus prompts."""

from __future__ import annotations

import json
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
    from eagle3_conformance.paths import Observation
    from eagle3_conformance.suite.assess import assess

    c = load_contract(SMOL)
    [f] = assess(c, Observation(facts={"avg_accept_length": 1.0}), lambda: None, "cpu-accept")
    assert (f.path, f.status) == ("cpu-accept", "fail")


def test_cpu_accept_skips_pairs_without_a_trained_draft():
    p = get("cpu-accept")
    s = p.prepare(load_contract(TINY), None)
    assert isinstance(s, Skipped) and "no trained draft" in s.reason
    bf16 = load_contract(REPO / "contracts" / "smollm2-135m-bf16.yaml")
    assert isinstance(p.prepare(bf16, None), Skipped)


def test_a_floor_with_uncalibrated_bands_is_allowed_for_every_pair():
    """Issue 41: a floor gates the engine's own accept counters, not a magnitude; it no longer needs
    calibrated norm bands (before: only the CPU-measured shipped pair could carry one)."""
    from eagle3_conformance.contract import semantic_problems

    c = load_contract(SMOL)
    assert c.norm_bands.status != "calibrated" and c.gates.min_accept_length is not None
    for pair in (c, c.model_copy(update={"fixture": "tiny-llama"})):
        assert not [e for e in semantic_problems(pair) if e[0] == ("gates", "min_accept_length")]


# ---------------------------------------------------------------------------------- slow: real


# the fixture `loop` (the trained pair's harness, 2 held-out prompts) is in tests/conftest.py


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
    from eagle3_conformance.testbed.trained_draft import eval_prompts

    prompts = eval_prompts(loop["td"].target_dir, cpu_accept.DEFAULT_PROMPTS, cpu_accept.PROMPT_TOKENS)
    fault = next(f for f in FAULTS if f.name == "embedding-prepended")
    good = measure(h, loop["ref"], prompts, None, loop["d2t"], k=3, max_new=cpu_accept.DEFAULT_TOKENS)
    assert check_accept_length(c, good.mean_accept_length, path="cpu-accept")[0].status == "pass"
    bad = measure(h, loop["ref"], prompts, fault, loop["d2t"], k=3, max_new=cpu_accept.DEFAULT_TOKENS)
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


# ------------------------------------------------- issue 26: intervals, per-position, estimate


def _row(name, per_prompt, errors=()):
    from eagle3_conformance.faults.acceptance import Row

    steps = sum(s for _, s in per_prompt)
    mean = sum(t for t, _ in per_prompt) / steps if steps else None
    return Row(name, "", (), "", mean, None, True, 1, list(errors), 0.0, per_prompt=list(per_prompt))


def test_a_fault_inside_the_noise_is_not_beaten_and_one_outside_is():
    from eagle3_conformance.faults.acceptance import FREE, add_intervals, not_beaten

    good = _row("correct pair", [(20 + i, 10) for i in range(8)])
    far = _row("embedding-prepended", [(11, 10)] * 8)
    near = _row("hidden-without-residual", [(20 + i + (3 if i % 2 else -3), 10) for i in range(8)])
    free = _row(next(iter(FREE)), [(30, 10)] * 8)
    crash = _row("last-slot-unreachable", [(0, 0)] * 8, errors=["RuntimeError: fc"])
    rows = [good, far, near, free, crash]
    add_intervals(rows)
    assert far.vs_correct[0] > 0 and near.vs_correct[0] <= 0 < near.vs_correct[1]
    assert good.interval[0] < good.mean_accept_length < good.interval[1]
    assert not_beaten(rows) == ["hidden-without-residual"]
    assert "with a verify step" in crash.interval_note


def test_too_few_prompts_for_an_interval_is_said_and_means_decide():
    from eagle3_conformance.faults.acceptance import add_intervals, not_beaten

    rows = [_row("correct pair", [(20, 10)] * 3), _row("hidden-without-residual", [(21, 10)] * 3)]
    add_intervals(rows)
    assert rows[0].interval is None and "at least 5" in rows[0].interval_note
    assert not_beaten(rows) == ["hidden-without-residual"]


def test_accept_gate_reports_per_position_acceptance_from_the_histogram():
    from eagle3_conformance.acceptance.stats import per_position

    c = load_contract(SMOL)
    hist = [2, 3, 3, 2]
    fact = {"spec_accept_length": 2.2, "spec_correct_drafts_histogram": hist,
            "per_position_acceptance": per_position(hist, 3)}
    [f] = check_accept_length(c, fact, path="cpu-accept")
    assert f.observed == 2.2 and f.status == ("pass" if 2.2 >= c.gates.min_accept_length else "fail")
    assert "per-position acceptance [0.8, 0.5, 0.2]" in f.where and "[2, 3, 3, 2]" in f.where
    assert f.where.startswith("cpu-accept: mean tokens per verify step")


@pytest.mark.slow
def test_estimate_refuses_a_draft_that_does_not_fit_the_data(loop, tmp_path, capsys):
    """Exit 2 naming the mismatch: data with two aux slots for a three-slot draft; a draft whose
    d2t says 2,048 draft ids while its t2d and head say 4,096."""
    import shutil

    from safetensors.torch import load_file, save_file

    from eagle3_conformance.cli import main
    from eagle3_conformance.testbed.datagen import write_speculators_dataset

    td = loop["td"]
    data = tmp_path / "two-slots"
    write_speculators_dataset(data, loop["ref"], [list(range(100, 120))], slots=["B_2", "B_15", "B_30"],
                              dtype="float32")
    args = ["accept-estimate", "--draft", str(td.draft_dir), "--target", str(td.target_dir), "--data", str(data)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "1152-wide aux rows (2 slots of 576)" in err and "reads 1728 (3 slots)" in err
    bad = tmp_path / "draft"
    shutil.copytree(td.draft_dir, bad)
    sd = load_file(str(bad / "model.safetensors"))
    sd["d2t"], sd["t2d"] = sd["d2t"][:2048].clone(), sd["t2d"].clone()
    save_file(sd, str(bad / "model.safetensors"))
    assert main(["accept-estimate", "--draft", str(bad), "--target", str(td.target_dir), "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert "the draft vocabulary does not fit: d2t 2048, t2d ids set 4096, lm_head.weight rows 4096" in err


@pytest.mark.slow
def test_estimate_refuses_an_unreadable_or_non_finite_document(tmp_path, capsys):
    """Fresh report 4, 5: a truncated shard was an internal error naming no file; a NaN in one
    aux slot of one row was estimated through (mean accept length 1.337 vs 1.379 clean, exit 0).
    Both exit 2 naming the shard, and the NaN's document, row and slot; the clean copy runs."""
    import shutil

    from safetensors.torch import load_file, save_file

    from eagle3_conformance.cli import main
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.testbed.datagen import write_speculators_dataset
    from eagle3_conformance.testbed.trained_draft import ensure_trained_draft

    pytest.importorskip("speculators")
    td = ensure_trained_draft()
    good = tmp_path / "good"
    write_speculators_dataset(good, load_reference_model(td.target_dir),
                              [list(range(100 + 30 * j, 124 + 30 * j)) for j in range(3)],
                              slots=["B_2", "B_15", "B_27", "B_30"], dtype="float32")

    def estimate(data):
        rc = main(["accept-estimate", "--draft", str(td.draft_dir), "--target", str(td.target_dir), "--data",
                   str(data)])
        cap = capsys.readouterr()
        assert "internal error" not in cap.err and "Traceback" not in cap.err, cap.err
        return rc, cap.out, cap.err

    assert estimate(good)[0] == 0
    trunc, nan = tmp_path / "trunc", tmp_path / "nan"
    shutil.copytree(good, trunc)
    shard = trunc / "hidden_states" / "hs_1.safetensors"
    shard.write_bytes(shard.read_bytes()[:2000])
    rc, out, err = estimate(trunc)
    assert rc == 2 and f"{shard}: document 1 could not be read" in err and "mean accept length" not in out, err
    shutil.copytree(good, nan)
    shard = nan / "hidden_states" / "hs_1.safetensors"
    t = load_file(str(shard))
    t["hidden_states"] = t["hidden_states"].clone()
    t["hidden_states"][7, 1, 5] = float("nan")
    save_file(t, str(shard))
    rc, out, err = estimate(nan)
    assert rc == 2 and f"{shard}: document 1 row 7 aux slot 1 holds NaN or Inf" in err, err
    assert "mean accept length" not in out


@pytest.mark.slow
def test_estimate_tracks_the_loop_and_names_a_faulty_decode_path(loop):
    """The draft alone on stored data (speculators' forward) against the loop on the same tokens;
    with the deepest slot post-norm on decode only, the decode path's tensors are named."""
    from eagle3_conformance.acceptance.attribution import compare
    from eagle3_conformance.faults.acceptance import _post_norm_deepest
    from eagle3_conformance.tools.sglang_cpu.spec_loop import LoopKnobs

    td, prompts = loop["td"], loop["prompts"]
    good = compare(td, prompts, k=3, max_new=16)
    loop_al = good["loop"]["mean_accept_length"]
    ests = good["estimates"]
    assert abs(ests["training"]["mean_accept_length"] - loop_al) < 0.5
    # the same tokens on the three paths: float32 everywhere, the estimates agree
    assert abs(ests["sglang-extend"]["mean_accept_length"] - ests["training"]["mean_accept_length"]) < 0.05
    assert not good["findings"]
    bad = compare(td, prompts, k=3, max_new=16, knobs_fn=lambda h: LoopKnobs(decode_hidden=_post_norm_deepest(h)))
    names = [f["path"] for f in bad["findings"]]
    assert names == ["sglang-decode"], bad["findings"]
    assert "at least 5" in bad["findings"][0]["note"]  # two prompts: no interval, said


def test_shipped_continuations_fit_the_recipe_and_another_recipe_is_refused(tmp_path):
    from eagle3_conformance.testbed.fixture_base import FixtureError
    from eagle3_conformance.testbed.trained_draft import RECIPE, load_continuations

    seqs = load_continuations(RECIPE, None)
    assert len(seqs) == 268 and all(len(s) - RECIPE["regen_tokens"] in RECIPE["regen_cuts"] for s in seqs)
    with pytest.raises(FixtureError, match=r"made for another recipe or corpus \(regen_cuts: \[8, 24, 48, 80, 128\] != \[16\]\).*--regen"):
        load_continuations({**RECIPE, "regen_cuts": [16]}, None)
    with pytest.raises(FixtureError, match="cannot read the target's continuations"):
        load_continuations({**RECIPE, "regen_file": str(tmp_path / "missing.json")}, None)


def test_shipped_extra_sequences_fit_the_recipe_and_another_recipe_is_refused(tmp_path):
    from eagle3_conformance.testbed.fixture_base import FixtureError
    from eagle3_conformance.testbed.self_distill import load_extra_sequences
    from eagle3_conformance.testbed.trained_draft import RECIPE

    seqs = load_extra_sequences(RECIPE)
    x = RECIPE["extra"]
    assert len(seqs) > 700 and all(len(s) > x["new_tokens"] for s in seqs)
    other = {**RECIPE, "extra": {**x, "magpie": 8}}
    with pytest.raises(FixtureError, match=r"smollm2-135m-extra.json: made for another recipe or corpus \(extra: .*"
                                           r"trained_draft --write-extra"):
        load_extra_sequences(other)
    with pytest.raises(FixtureError, match="missing.json: cannot read the target's extra sequences"):
        load_extra_sequences({**RECIPE, "extra_file": str(tmp_path / "missing.json")})
    bad = tmp_path / "bad.json"
    data = json.loads((REPO / RECIPE["extra_file"]).read_text())
    bad.write_text(json.dumps({**data, "sequences": [[1, 2], []]}))
    with pytest.raises(FixtureError, match="bad.json: 'sequences' is not a list of non-empty token-id lists"):
        load_extra_sequences({**RECIPE, "extra_file": str(bad)})
    bad.write_text(json.dumps({**data, "limit": 2}))  # a benchmark's smoke set (--limit 2)
    with pytest.raises(FixtureError, match=r"bad.json: a smoke set \(only the first 2 training items\)"):
        load_extra_sequences({**RECIPE, "extra_file": str(bad)})
    bad.write_text("[1, 2]")
    with pytest.raises(FixtureError, match="bad.json: not a JSON object"):
        load_extra_sequences({**RECIPE, "extra_file": str(bad)})


def test_the_shipped_draft_is_the_recipe_s_and_a_changed_one_is_refused(tmp_path):
    """The shipped draft's train.json names the digest of today's recipe, data and fixture (a recipe
    change without `--ship` fails here), and its weights are the ones built: a stale digest or one
    changed tensor is refused naming the file and the rebuild command, before any forward."""
    import hashlib
    import shutil

    from eagle3_conformance.testbed.corpus import DEFAULT_CORPUS, corpus_digest
    from eagle3_conformance.testbed.fixture_base import FixtureError
    from eagle3_conformance.testbed.trained_draft import RECIPE, _digest, _spec, shipped_draft

    digest = _digest(RECIPE, corpus_digest(DEFAULT_CORPUS), _spec())
    d = REPO / RECIPE["shipped"]
    info = json.loads((d / "train.json").read_text())
    assert info["digest"] == digest, "the recipe changed since the draft was shipped: python -m eagle3_conformance.testbed.trained_draft --ship"
    assert info["weights_sha256"] == hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest()
    assert info["recipe"] == {k: v for k, v in RECIPE.items() if k != "shipped"}
    td = shipped_draft(RECIPE, digest, Path("/nonexistent-target"))
    assert td.draft_dir == d and td.info == info
    # a changed recipe (one more epoch) no longer matches the shipped draft
    with pytest.raises(FixtureError, match=r"train.json: the shipped draft was built from another recipe.*--ship"):
        shipped_draft(RECIPE, _digest({**RECIPE, "epochs": RECIPE["epochs"] + 1}, corpus_digest(DEFAULT_CORPUS),
                                      _spec()), Path("/nonexistent-target"))
    # one changed byte in the weights
    copy = tmp_path / "draft"
    shutil.copytree(d, copy)
    w = bytearray((copy / "model.safetensors").read_bytes())
    w[-1] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(w))
    with pytest.raises(FixtureError, match=r"model.safetensors: sha256 .* is not the built weights'.*--ship"):
        shipped_draft({**RECIPE, "shipped": str(copy)}, digest, Path("/nonexistent-target"))
    (copy / "train.json").unlink()
    with pytest.raises(FixtureError, match="the shipped draft is unreadable"):
        shipped_draft({**RECIPE, "shipped": str(copy)}, digest, Path("/nonexistent-target"))


def test_the_digest_covers_the_shipped_ids_and_a_missing_id_file_is_named(tmp_path):
    """One changed token in a copy of the extra file changes the digest (so the shipped draft is
    refused); a missing id file is named with the command that rewrites it, not reported as a
    different recipe."""
    from eagle3_conformance.testbed.corpus import DEFAULT_CORPUS, corpus_digest
    from eagle3_conformance.testbed.fixture_base import FixtureError
    from eagle3_conformance.testbed.trained_draft import RECIPE, _digest, _spec

    corpus, spec = corpus_digest(DEFAULT_CORPUS), _spec()
    base = _digest(RECIPE, corpus, spec)
    data = json.loads((REPO / RECIPE["extra_file"]).read_text())
    copy = tmp_path / "extra.json"
    copy.write_text((REPO / RECIPE["extra_file"]).read_text())
    same = _digest({**RECIPE, "extra_file": str(copy)}, corpus, spec)
    assert same == _digest({**RECIPE, "extra_file": str(copy)}, corpus, spec)
    data["sequences"][0][-1] += 1
    copy.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    assert _digest({**RECIPE, "extra_file": str(copy)}, corpus, spec) != same
    assert _digest({**RECIPE, "shipped": "elsewhere"}, corpus, spec) == base  # where it lives is not how it is made
    with pytest.raises(FixtureError, match=r"gone.json: the target's token ids .* missing .*'extra_file'.*--write-extra"):
        _digest({**RECIPE, "extra_file": str(tmp_path / "gone.json")}, corpus, spec)
    with pytest.raises(FixtureError, match=r"gone.json: .*'regen_file'.*--regen"):
        _digest({**RECIPE, "regen_file": str(tmp_path / "gone.json")}, corpus, spec)


def test_the_floor_is_derived_from_the_saved_faults_table():
    """contracts/smollm2-135m.yaml's floor is the midpoint (2 decimals) of the correct pair's 95% lower
    bound and the seed incident's upper bound in docs/acceptance-table.json, measured on the shipped
    draft: a new draft or table without a re-derived floor fails here."""
    table = json.loads((REPO / "docs" / "acceptance-table.json").read_text())
    rows = {r["name"]: r for r in table["rows"]}
    low, high = rows["correct pair"]["interval"][0], rows["embedding-prepended"]["interval"][1]
    assert high < low
    assert load_contract(SMOL).gates.min_accept_length == round((low + high) / 2, 2)
    assert table["setup"]["draft"] == "fixtures/drafts/smollm2-135m-eagle3"
    assert table["setup"]["weights_bytes"] == (REPO / table["setup"]["draft"] / "model.safetensors").stat().st_size


def test_held_out_prompts_load_the_tokenizer_once_per_process_and_again_when_it_changes(tmp_path, monkeypatch):
    """eval_prompts (the engine paths ask at warm and at prepare): the same ids each time, a list of their own,
    one tokenizer load; a tokenizer file rewritten since is loaded again (issue 42 item 4)."""
    import os
    import shutil

    from eagle3_conformance.testbed import fixtures_real, trained_draft
    from eagle3_conformance.testbed.trained_draft import ensure_trained_draft, eval_prompts

    target = tmp_path / "target"
    shutil.copytree(ensure_trained_draft().target_dir, target, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    loads: list = []
    real = fixtures_real.load_tokenizer
    monkeypatch.setattr(fixtures_real, "load_tokenizer", lambda d: loads.append(d) or real(d))
    monkeypatch.setattr(trained_draft, "_EVAL", {})
    first = eval_prompts(target, 2, 48)
    again = eval_prompts(target, 2, 48)
    assert first == again and len(first) == 2 and all(len(p) == 48 for p in first) and len(loads) == 1
    again[0].append(-1)
    assert eval_prompts(target, 2, 48) == first and len(loads) == 1  # the cache hands out copies
    assert eval_prompts(target, 3, 48)[:2] == first and len(loads) == 2  # other arguments: their own answer
    tok = target / "tokenizer.json"
    tok.write_text(tok.read_text())  # rewritten: a new modification time
    os.utime(tok, ns=(tok.stat().st_atime_ns, tok.stat().st_mtime_ns + 10**9))
    assert eval_prompts(target, 2, 48) == first and len(loads) == 3
