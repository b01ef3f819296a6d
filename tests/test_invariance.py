"""The engine checked against itself (issue 45 item 1): the pure ``engine_invariance`` check and
``engine_variations`` fact on synthetic captures, the variations' prompts and pairing, the
in-engine faults' specs. The real-engine runs are in tests/test_invariance_engine.py (slow tier)."""

from __future__ import annotations

import math

import pytest
import torch

from eagle3_conformance.checks import registry
from eagle3_conformance.checks.invariance import (
    check_engine_invariance,
    check_engine_variations,
    max_relative_difference,
)
from eagle3_conformance.core.capture import Capture, join_rows
from eagle3_conformance.tools.shared import variations as V

D, K, T = 64, 3, 12


def _cap(tokens, rows, feature, rid="plain/p0", **prov) -> Capture:
    rows = torch.as_tensor(rows, dtype=torch.int64)
    tokens = torch.as_tensor(tokens, dtype=torch.int64)
    nxt = torch.tensor([int(tokens[r + 1]) if r + 1 < len(tokens) else -1 for r in rows.tolist()])
    return Capture(path="sglang-engine", where=f"request {rid}", token_ids=tokens, feature=feature.clone(), rows=rows,
                   draft_input_ids=nxt, position_ids=rows.clone(), fc_ran=True, draft_input_width=K * D,
                   provenance={"rid": rid, **prov})


@pytest.fixture()
def pair():
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 1000, (T,), generator=g)
    feature = torch.randn(T - 1, K * D, generator=g)
    plain = _cap(tokens, range(T - 1), feature)
    variant = _cap(tokens, range(T - 1), feature, rid="chunked-prefill/p0", variation="chunked-prefill")
    return plain, variant


def _status(findings, slot):
    return [f.status for f in findings if f.slot == slot]


def test_the_check_is_registered_for_variant_pairs_and_its_gate():
    spec = registry.REGISTRY["engine_invariance"]
    assert spec.judges == registry.VARIANT and "gates.cross_path_min_cosine" in spec.gates
    assert registry.fact_checks()["engine_variations"].fn is check_engine_variations


def test_row_gate_follows_the_contracts_precision(tiny_contract):
    floor = 0.999 if tiny_contract.serving_dtype == "float32" else 0.98
    c = tiny_contract.model_copy(update={"gates": tiny_contract.gates.model_copy(update={"cross_path_min_cosine": floor})})
    assert max_relative_difference(c) == pytest.approx(math.sqrt(2 * (1 - floor)))


def test_identical_runs_pass_every_slot(tiny_contract, pair):
    out = check_engine_invariance(tiny_contract, *pair)
    assert out and all(f.status == "pass" for f in out), [f.message for f in out if f.status != "pass"]
    assert {f.slot for f in out} >= {"rows", "token", "position", "slot 0", "slot 1", "slot 2"}


def test_noise_within_the_gate_passes_and_a_wrong_row_fails_naming_variation_row_and_slot(tiny_contract, pair):
    plain, variant = pair
    tol = max_relative_difference(tiny_contract)
    g = torch.Generator().manual_seed(1)
    noise = torch.randn(variant.feature.shape, generator=g)
    for i, x in enumerate(variant.feature.split(D, -1)):  # each row moved by 0.5 of the gate
        n = noise[:, i * D:(i + 1) * D]
        x += n / n.norm(dim=-1, keepdim=True) * x.norm(dim=-1, keepdim=True) * 0.5 * tol
    assert all(f.status == "pass" for f in check_engine_invariance(tiny_contract, plain, variant))
    variant.feature[7, D:2 * D] *= 2.0  # R87: a replicated state summed as partial over 2 ranks, one row, slot 1
    out = check_engine_invariance(tiny_contract, plain, variant)
    bad = [f for f in out if f.status == "fail"]
    assert [f.slot for f in bad] == ["slot 1"]
    assert "row 7" in bad[0].message and bad[0].where.startswith("chunked-prefill") and bad[0].observed["first_row"] == 7
    assert bad[0].gate == "gates.cross_path_min_cosine"


def test_a_chunk_end_token_that_is_the_targets_guess_fails_the_token_slot(tiny_contract, pair):
    plain, variant = pair
    variant.draft_input_ids[5] = 999_999  # R84: the draft's input token at the chunk end is the target's guess
    out = check_engine_invariance(tiny_contract, plain, variant)
    tok = [f for f in out if f.slot == "token"]
    assert tok[0].status == "fail" and "row 5" in tok[0].message
    assert f"prompt's token at 6 is {int(plain.token_ids[6])}" in tok[0].message
    assert _status(out, "slot 0") == ["pass"]


def test_a_wrong_position_fails(tiny_contract, pair):
    plain, variant = pair
    variant.position_ids[3:] -= 3
    assert _status(check_engine_invariance(tiny_contract, plain, variant), "position") == ["fail"]


def test_rows_lost_or_added_fail_and_a_cache_hit_owes_only_the_recomputed_rows(tiny_contract, pair):
    plain, variant = pair
    last_chunk = _cap(plain.token_ids, range(8, T - 1), plain.feature[8:], variation="chunked-prefill")  # R85
    assert _status(check_engine_invariance(tiny_contract, plain, last_chunk), "rows") == ["fail"]
    hit = _cap(plain.token_ids, range(6, T - 1), plain.feature[6:], variation="prefix-cache-repeat", first_row=6)
    assert all(f.status == "pass" for f in check_engine_invariance(tiny_contract, plain, hit))
    beyond = _cap(torch.cat([plain.token_ids, torch.tensor([5, 6])]), range(T + 1),  # R105: rows beyond the batch
                  torch.cat([plain.feature, plain.feature[:2]]), variation="batch")
    out = check_engine_invariance(tiny_contract, plain, beyond)
    assert _status(out, "rows") == ["fail"] and "not in the plain run" in next(f.message for f in out if f.slot == "rows")


def test_other_tokens_are_not_compared_and_a_width_change_fails(tiny_contract, pair):
    plain, variant = pair
    other = _cap(plain.token_ids.flip(0), range(T - 1), plain.feature)
    assert [f.status for f in check_engine_invariance(tiny_contract, plain, other)] == ["skip"]
    narrow = _cap(plain.token_ids, range(T - 1), plain.feature[:, :D], variation="tp2")
    out = check_engine_invariance(tiny_contract, plain, narrow)
    assert [(f.slot, f.status) for f in out] == [("feature", "fail")]


def test_a_variation_the_engine_did_not_perform_is_a_skip_not_a_pass(tiny_contract, pair):
    plain, variant = pair
    variant.provenance.update(exercised=False, condition="chunked prefill", conditions={"chunks": 1})
    out = check_engine_invariance(tiny_contract, plain, variant)
    assert _status(out, "variation") == ["skip"]
    variant.provenance.update(exercised=True, conditions={"chunks": 3})
    assert _status(check_engine_invariance(tiny_contract, plain, variant), "variation") == ["pass"]


def test_variations_fact(tiny_contract):
    fig = {"engine": "sglang.Engine 0.5.23", "asked": ["batch", "input-logprobs", "tp2", "chunked-prefill"],
           "cost": {"batch": {"engine_starts": 0, "seconds": 3.0}},
           "counts": {"batch": {"extend": 2, "verify": 5}, "chunked-prefill": {"extend": 0}},
           "failed": {"input-logprobs": "IndexError in logits processor"}, "unavailable": {"tp2": "one core"},
           "notes": ["chunked-prefill: no request of this variation was captured"], "not_asked": {"prefix-cache-repeat": "why"}}
    by = {f.where.split(": ")[1]: f for f in check_engine_variations(tiny_contract, fig)}
    assert by["prefix-cache-repeat"].status == "skip" and "not asked for (why)" in by["prefix-cache-repeat"].message
    assert by["batch"].status == "pass" and "3 s" in by["batch"].message
    assert by["input-logprobs"].status == "fail" and "IndexError" in by["input-logprobs"].message  # R102 crashed
    assert by["tp2"].status == "skip"
    assert by["chunked-prefill"].status == "fail" and "no request" in by["chunked-prefill"].message


def test_join_rows_concatenates_a_chunked_prefills_captures(pair):
    plain, _ = pair
    a = _cap(plain.token_ids[:6], range(5), plain.feature[:5])
    b = _cap(plain.token_ids, range(5, T - 1), plain.feature[5:])
    j = join_rows([a, b])
    assert torch.equal(j.feature, plain.feature) and torch.equal(j.rows, plain.rows)
    assert torch.equal(j.token_ids, plain.token_ids) and j.provenance["parts"] == 2
    with pytest.raises(ValueError, match="no captures"):
        join_rows([])


def test_prompt_set_shares_half_of_each_prompt():
    ps = V.prompt_set([list(range(10)), list(range(100, 110))])
    assert ps.shared == 5 and ps.s[0] == list(range(5)) + list(range(105, 110)) and ps.s[1][:5] == list(range(100, 105))
    assert ps.keys("p") == ["p0", "p1"] and ps.prompt("s1") == ps.s[1]
    with pytest.raises(ValueError):
        V.prompt_set([[1, 2]])


def test_requested_variations():
    assert V.requested(None, V.DEFAULT) == list(V.DEFAULT) and "tp2" not in V.DEFAULT
    assert V.requested("none", V.DEFAULT) == []
    assert V.requested("all", ("batch", "tp2")) == ["batch", "tp2"]
    with pytest.raises(ValueError, match="unknown variation"):
        V.requested("chunky", V.DEFAULT)
    with pytest.raises(ValueError, match="not offered"):
        V.requested("tp2", ("batch",))
    assert V.parse_rid("prefix-cache-shared/s1") == ("prefix-cache-shared", "s1")
    assert V.parse_rid("7b3f9e") == (None, None)


def test_pairing_joins_chunks_and_pairs_verify_steps_on_the_same_tokens(pair):
    plain, _ = pair
    p = _cap(plain.token_ids, range(T - 1), plain.feature, rid="plain/p0", conditions={"chunks": 1})
    c1 = _cap(plain.token_ids[:6], range(5), plain.feature[:5], rid="chunked-prefill/p0", conditions={"chunks": 2})
    c2 = _cap(plain.token_ids, range(5, T - 1), plain.feature[5:], rid="chunked-prefill/p0", conditions={"chunks": 2})
    step = _cap(plain.token_ids, [T - 1], plain.feature[:1], rid="plain/p0")
    vstep = _cap(plain.token_ids, [T - 1], plain.feature[:1], rid="chunked-prefill/p0")
    orphan = _cap(plain.token_ids, range(T - 1), plain.feature, rid="batch/p3")
    out = V.pair_captures([p, c2, c1, orphan], [step, vstep], V.variations(["chunked-prefill", "batch"]), "x")
    assert out.counts["chunked-prefill"] == {"extend": 1, "verify": 1, "verify_unpaired": 0}
    (a, b), (sa, sb) = out.pairs
    assert len(b.rows) == T - 1 and b.provenance["variation"] == "chunked-prefill" and b.provenance["exercised"]
    assert sa is step and sb is vstep
    assert any("p3" in n for n in out.notes) and out.counts["batch"]["extend"] == 0


def test_in_engine_faults_are_forward_hooks_entries():
    from eagle3_conformance.tools.sglang_engine import fault_hooks

    for name in fault_hooks.FAULTS:
        s = fault_hooks.spec(name)
        assert s["hook_factory"] == fault_hooks.FACTORY and s["config"] == {"fault": name}
    with pytest.raises(ValueError, match="unknown in-engine fault"):
        fault_hooks.spec("nope")


def test_chunk_end_fault_hands_the_draft_the_targets_guess_at_a_chunk_end_only():
    """R84 through forward hooks alone, on stand-in modules of the names SGLang's hook sees (the
    target's ``model`` with ``embed_tokens``, ``LogitsProcessor``, the draft's embedding): after a
    target EXTEND of two requests, the draft's input id at the end of the request whose tail token is
    not the target's guess (a chunk end inside the prompt) becomes the guess, and the draft embeds it;
    the final chunk (tail = guess), a verify forward and the draft's later forwards are untouched."""
    from types import SimpleNamespace

    from eagle3_conformance.tools.sglang_engine import fault_hooks

    class LogitsProcessor(torch.nn.Module):
        def forward(self, logits):
            return SimpleNamespace(next_token_logits=logits)

    class Target(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = torch.nn.Embedding(50, 4)

        def forward(self, ids, positions, fb):
            return self.embed_tokens(ids)

    fault_hooks._CHUNK_STATE.clear()
    hook = fault_hooks.fault({"fault": "chunk-end-target-guess"})
    target, lp, draft_embed = Target(), LogitsProcessor(), torch.nn.Embedding(50, 4)
    for m in (target, lp, draft_embed, target.embed_tokens):
        m.register_forward_hook(hook)

    def prefill(mode="EXTEND"):
        fb = SimpleNamespace(forward_mode=SimpleNamespace(name=mode), extend_seq_lens_cpu=[4, 3],
                             positions=torch.tensor([0, 1, 2, 3, 0, 1, 2]))
        target(torch.arange(7), fb.positions, fb)
        logits = torch.zeros(2, 50)
        logits[0, 11], logits[1, 22] = 1.0, 1.0  # the target's guesses: 11 (request 0), 22 (request 1)
        lp(logits)
        ids = torch.tensor([5, 6, 7, 30, 8, 9, 22])  # request 0: a chunk end (tail 30 = the prompt's next token)
        return ids, draft_embed(ids)

    ids, emb = prefill()
    assert ids.tolist() == [5, 6, 7, 11, 8, 9, 22]
    assert torch.equal(emb, draft_embed.weight[ids])
    again = torch.tensor([5, 6, 7, 30])  # a draft decode step after it: no target EXTEND before it
    draft_embed(again)
    assert again.tolist() == [5, 6, 7, 30]
    ids, _ = prefill("TARGET_VERIFY")
    assert ids.tolist() == [5, 6, 7, 30, 8, 9, 22]


@pytest.mark.parametrize("var,value,says", [("CONFORMANCE_ENGINE_VARIATIONS", "chunky", "CONFORMANCE_ENGINE_VARIATIONS=.chunky.: unknown variation"),
                                            ("CONFORMANCE_INVARIANCE_PROMPTS", "two", "CONFORMANCE_INVARIANCE_PROMPTS='two'")])
def test_a_bad_variations_setting_is_a_usage_error_naming_it(tiny_contract, monkeypatch, var, value, says):
    from eagle3_conformance.core.errors import UsageError
    from eagle3_conformance.paths import sglang_engine_invariance as P

    monkeypatch.setattr(P, "engine_pair", lambda c, pair, name: ("target", "draft"))
    monkeypatch.setenv(var, value)
    with pytest.raises(UsageError, match=says):
        P.prepare(tiny_contract, None)


def test_tp_size_is_read_off_the_ranks_that_wrote_records():
    from eagle3_conformance.tools.sglang_engine.variations import first_stream

    recs = [{"_file": "101-000000.pt", "x": 1}, {"_file": "100-000000.pt", "x": 2}, {"_file": "100-000001.pt", "x": 3}]
    one, ranks = first_stream(recs)
    assert ranks == 2 and [r["x"] for r in one] == [2, 3]
    assert first_stream(recs[1:]) == (recs[1:], 1)
    assert not V.BY_NAME["tp2"].shows({"tp_size": 1}) and V.BY_NAME["tp2"].shows({"tp_size": 2})


def test_every_entry_point_summarises_a_variation_with_failed_pairs_as_failed(tiny_contract, pair):
    """One verdict: the suite's invariance paths and check-invariance both go through ``assess``, which turns the
    ``engine_variations`` pass of a variation whose pairs failed into a fail (check-invariance alone did, once)."""
    from eagle3_conformance.paths.base import Observation
    from eagle3_conformance.suite.assess import assess

    plain, variant = pair
    variant.feature[3, :D] *= 2.0
    fig = {"engine": "sglang.Engine 0.5.23", "asked": ["chunked-prefill", "batch"],
           "cost": {"chunked-prefill": {"engine_starts": 1, "seconds": 2.0}, "batch": {"engine_starts": 0, "seconds": 1.0}},
           "counts": {"chunked-prefill": {"extend": 1}, "batch": {"extend": 1}}}

    def no_reference():
        raise AssertionError("no reference needed")

    out = assess(tiny_contract, Observation(variants=[(plain, variant)], facts={"engine_variations": fig}),
                 no_reference, "sglang-engine-invariance")
    by = {f.where.split(": ")[-1]: f for f in out if f.check == "engine_variations"}
    assert by["chunked-prefill"].status == "fail" and "engine_invariance finding(s) failed" in by["chunked-prefill"].message
    assert by["batch"].status == "pass"
