"""The kill matrix, proven by injection (eagle3_conformance/faults/).

For random valid contracts (hypothesis draws L, target and draft widths, K, boundaries, vocab
and draft vocab sizes, batch sizes >= 1, lengths >= 1) and every fault operator, the suite must
flag the fault with a check meant for it, and must pass the unmutated input (no failure of any
check: no false positives). Under ``--hypothesis-profile conformance-dev`` the tests below draw more than
1000 examples in all.

Training examples build a random tiny target per drawn spec (seeded, cached) and write the data
per example; SGLang examples use two pre-built random pairs per session (harness builds are the
expensive part) and draw everything else per example: boundaries (applied through SGLang's own
resolver + setter), batches, lengths, verify layouts. Operators whose knob needs a harness
rebuild (K6 fc sizing, K12 engine dtype) record the drawn examples on the good harness and replay
them on the rebuilt one.
"""

from __future__ import annotations

import importlib.util
import json
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from eagle3_conformance import faults
from eagle3_conformance.faults import (
    OPERATORS,
    Apply,
    Example,
    HarnessPool,
    NoOp,
    ScenarioSpec,
    build_scenario,
    judge,
    run_path,
)

TRAIN_OPS = [op for op in OPERATORS if isinstance(op.paths["training"], Apply)]
SERVE_OPS = [op for op in OPERATORS
             if any(isinstance(op.paths[p], Apply) for p in ("sglang-extend", "sglang-decode"))]
COUNTS: dict[tuple[str, str], int] = {}


def _count(path: str, op) -> None:
    COUNTS[path, op.name] = COUNTS.get((path, op.name), 0) + 1


def _some_example_judged(path: str, op) -> None:
    """Every drawn example may be discarded (``assume``) or be a no-op: the test then judged nothing, and
    must say so instead of passing."""
    assert COUNTS.get((path, op.name), 0) > 0, f"{op.name} on {path}: no drawn example reached a verdict"


def _no_false_positive(findings, what):
    bad = [f for f in findings if f.status == "fail"]
    assert not bad, f"false positive on the unmutated {what}: " + "; ".join(
        f"{f.check} {f.slot}: {f.message}" for f in bad[:4])


# --------------------------------------------------------------------------------- training


@st.composite
def training_cases(draw, op):
    L = draw(st.integers(3, 8), label="L")
    d = draw(st.sampled_from([32, 48, 64]), label="d")
    vocab = draw(st.sampled_from([96, 160]), label="vocab")
    seed = draw(st.integers(0, 1), label="seed")
    K = draw(st.integers(1, min(4, L)), label="K")
    hi = L - 1 if op.name == "ids-shifted" else L
    if op.name == "last-slot-unreachable":
        rest = draw(st.lists(st.integers(1, L - 1), min_size=K - 1, max_size=K - 1, unique=True), label="aux")
        aux = tuple(sorted(rest)) + (L,)
    else:
        aux = tuple(sorted(draw(st.lists(st.integers(1, hi), min_size=min(K, hi), max_size=min(K, hi), unique=True),
                                label="aux")))
    draft_vocab = draw(st.integers(8, vocab), label="draft vocab")
    n = draw(st.integers(1, 4), label="samples")
    # lengths >= 1; one sample has >= 3 tokens so that some row survives the one-token shift
    # outside position 0 (which carries the massive activation and is never fingerprinted)
    samples = [[1] + draw(st.lists(st.integers(3, vocab - 1), min_size=2 if i == 0 else 0, max_size=11),
                          label=f"sample {i}") for i in range(n)]
    batch = draw(st.permutations(list(range(n))), label="batch order")
    spec = ScenarioSpec(f"t{L}-{d}-{vocab}-{seed}", layers=L, target_hidden=d, draft_hidden=d, boundaries=aux,
                        vocab=vocab, draft_vocab=draft_vocab, seed=seed)
    return spec, samples, [list(batch)]


@pytest.mark.slow
@pytest.mark.parametrize("op", TRAIN_OPS, ids=lambda o: f"{o.kind}-{o.name}")
def test_kill_training(op, tmp_path_factory):
    """Every training-path operator is caught by its check on random contracts and data, read
    through the real speculators loader; the unmutated data passes every check."""
    work = tmp_path_factory.mktemp(f"kill-train-{op.name}")

    @settings(settings.default)
    @given(training_cases(op))
    def prop(case):
        spec, samples, batches = case
        scn = build_scenario(spec, work, samples=samples)
        c = scn.contract()
        ex = Example(batches, [], [], [], [])
        ap = op.paths["training"]
        k = ap.fn(scn, c, ex)
        assume(k is not None)
        # the operator's own unmutated input where it has one (correct FP8 data for the FP8 faults)
        base = run_path(scn, c, ex, "training", None, *([ap.baseline(scn, c, ex)] if ap.baseline else []))
        _no_false_positive(base, f"training data ({spec})")
        try:
            mut = run_path(scn, c, ex, "training", None, k)
        except NoOp:
            assume(False)
        v = judge(op.checks, base, mut)
        assert v.status == "caught", f"{op.name} missed on {spec}: {v.detail}"
        _count("training", op)

    prop()
    _some_example_judged("training", op)


# --------------------------------------------------------------------------------- SGLang

# Two random pairs per session, drawn once (seeded): one with equal widths (fc-skip case), one
# with a narrower draft (K6 visible). Everything else is drawn per example.
_rng = random.Random(20260)
PAIRS = []
for i, (eq, K) in enumerate([(True, 3), (False, 2)]):
    L = _rng.randint(5, 8)
    d = _rng.choice([48, 64]) if eq else 96
    PAIRS.append(ScenarioSpec(f"pair{i}", layers=L, target_hidden=d, draft_hidden=d if eq else 64,
                              boundaries=tuple(sorted(_rng.sample(range(1, L - 1), K))),
                              vocab=_rng.choice([160, 256]), draft_vocab=_rng.choice([32, 64]), seed=100 + i))

POOL = HarnessPool()


@pytest.fixture(scope="module", params=PAIRS, ids=lambda s: s.name)
def pair(request, tmp_path_factory):
    pytest.importorskip("sglang")
    scn = build_scenario(request.param, tmp_path_factory.mktemp(request.param.name), for_sglang=True)
    yield scn
    POOL.close()


@st.composite
def serving_cases(draw, scn, op):
    s = scn.spec
    L, K = s.layers, len(s.boundaries)
    hi = L - 2 if op.name == "ids-shifted" else L - 1
    aux = tuple(sorted(draw(st.lists(st.integers(1, hi), min_size=K, max_size=K, unique=True), label="aux")))
    prompt = st.lists(st.integers(3, s.vocab - 1), min_size=0, max_size=9).map(lambda b: [1] + b)
    long_prompt = st.lists(st.integers(3, s.vocab - 1), min_size=1, max_size=9).map(lambda b: [1] + b)
    ext = draw(st.lists(prompt, min_size=0, max_size=2), label="extend batch")
    ext.insert(draw(st.integers(0, len(ext)), label="long prompt at"), draw(long_prompt, label="long prompt"))
    bs = draw(st.integers(1, 3), label="verify batch")
    n = draw(st.integers(1, 4), label="draft tokens")
    prefixes = [draw(prompt, label=f"prefix {i}") for i in range(bs)]
    fillers = [draw(st.lists(st.integers(3, s.vocab - 1), min_size=n, max_size=n), label=f"filler {i}") for i in range(bs)]
    accepted = [draw(st.integers(1, n), label=f"accepted {i}") for i in range(bs)]
    return aux, ext, prefixes, fillers, accepted


def _serving_example(scn, case):
    from eagle3_conformance.paths.sglang_decode import consistent_drafts

    aux, ext, prefixes, fillers, accepted = case
    n = len(fillers[0])
    drafts = [consistent_drafts(scn.ref, p, n, a, f) for p, f, a in zip(prefixes, fillers, accepted)]
    ex = Example([], ext, prefixes, drafts, accepted, boundaries=aux)
    return ex, scn.contract(aux, extra_tokens=ex.tokens())


@pytest.mark.slow
@pytest.mark.parametrize("op", SERVE_OPS, ids=lambda o: f"{o.kind}-{o.name}")
def test_kill_sglang(op, pair):
    """Every SGLang-path operator is caught on the real SGLang classes (extend and decode) for
    random boundaries, batches and verify layouts; the unmutated input passes every check."""
    paths = [p for p in ("sglang-extend", "sglang-decode") if isinstance(op.paths[p], Apply)]
    replay = []

    @settings(settings.default)
    @given(serving_cases(pair, op))
    def prop(case):
        ex, c = _serving_example(pair, case)
        ks = {p: op.paths[p].fn(pair, c, ex) for p in paths}
        assume(any(k is not None for k in ks.values()))
        judged = 0
        for p, k in ks.items():
            if k is None:
                continue
            base = run_path(pair, c, ex, p, POOL)
            _no_false_positive(base, f"{p} input ({pair.spec.name}, aux {ex.boundaries})")
            if k.variant:  # needs a rebuilt harness: judged after the draw, on the same examples
                replay.append((p, c, ex, k, base))
                judged += 1
                continue
            try:
                mut = run_path(pair, c, ex, p, POOL, k)
            except NoOp:
                continue
            v = judge(op.checks, base, mut)
            assert v.status == "caught", f"{op.name} missed on {p} ({pair.spec.name}, aux {ex.boundaries}): {v.detail}"
            judged += 1
        assume(judged > 0)
        _count(f"sglang {pair.spec.name}", op)

    if op.name == "hidden-sizes-crossed" and pair.spec.draft_hidden == pair.spec.target_hidden:
        pytest.skip("K6 is masked when target and draft widths are equal (the wide pair covers it)")
    if op.name == "aux-count-from-other-key" and len(pair.spec.boundaries) == 3:
        pytest.skip("R41 is masked when the draft has 3 slots, SGLang's default count (the K = 2 pair covers it)")
    prop()
    _some_example_judged(f"sglang {pair.spec.name}", op)
    for p, c, ex, k, base in replay:
        v = judge(op.checks, base, run_path(pair, c, ex, p, POOL, k))
        assert v.status == "caught", f"{op.name} missed on {p} after rebuild ({pair.spec.name}): {v.detail}"


# --------------------------------------------------------------------------------- the matrix


def test_matrix_report_has_no_miss(tmp_path, capsys, monkeypatch):
    """``eagle3-conformance faults`` prints kinds x paths and exits 0: every cell caught or n/a, and no
    baseline failure. The SGLang CPU harness is built once per scenario and build variant (both SGLang paths
    of a scenario run on it), not once per path."""
    pytest.importorskip("sglang")
    from eagle3_conformance.cli import main
    from eagle3_conformance.faults.inject_sglang import HarnessPool

    asked, built = [], []
    real_get = HarnessPool.get

    def get(self, scn, variant=None):
        asked.append((str(scn.target_dir), json.dumps(variant or {}, sort_keys=True)))
        n = self.builds
        h = real_get(self, scn, variant)
        built.extend(asked[-1:] * (self.builds - n))
        return h

    monkeypatch.setattr(HarnessPool, "get", get)
    out = tmp_path / "matrix.json"
    rc = main(["faults", "--json", str(out)])
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert rc == 0, printed
    assert "missed" not in {c["status"] for c in doc["cells"]}, printed
    assert not doc["false_positives"]
    assert {c["kind"] for c in doc["cells"] if c["status"] == "caught"} == set(faults.KINDS)
    for c in doc["cells"]:
        if c["status"] == "caught":
            assert c["checks"], c
    assert "kill matrix" in printed
    # the grid is what it was before the restructuring (issue #11; tests/test_identity.py)
    from test_identity import _load, kill_matrix_grid

    assert kill_matrix_grid(doc) == _load("kill_matrix.json")
    assert sorted(built) == sorted(set(asked)) and len(built) < len(asked), built


@pytest.mark.slow
def test_matrix_on_the_real_pair_catches_every_applicable_fault(tmp_path, capsys):
    """The kill matrix on the real SmolLM2-135M target (issue #10): the same operators, caught by
    the default gates on a model whose adjacent boundaries are far closer than the tiny ones', and
    no failure on the unmutated real baseline. K6 needs a draft narrower than its target: n/a."""
    pytest.importorskip("sglang")
    from eagle3_conformance.cli import main
    from eagle3_conformance.testbed.fixtures import build_fixture

    try:
        build_fixture("smollm2-135m")
    except Exception as e:  # noqa: BLE001 - the pinned wheel is absent here
        pytest.skip(f"the real pair cannot be built here: {e}")
    out = tmp_path / "matrix.json"
    rc = main(["faults", "--pair", "smollm2-135m", "--json", str(out)])
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert rc == 0, printed
    assert doc["pair"] == "smollm2-135m" and "real pair smollm2-135m" in printed
    assert not doc["false_positives"], doc["false_positives"]
    status = {(c["kind"], c["path"]): c["status"] for c in doc["cells"]}
    assert "missed" not in status.values()
    assert {k for (k, _), v in status.items() if v == "caught"} == set(faults.KINDS) - {"K6"}
    # K6 is n/a on every path that runs here (a column whose tool is absent, vLLM, reads "not run")
    assert any(v == "n/a" for (k, _), v in status.items() if k == "K6")
    assert all(v in ("n/a", "not run") for (k, _), v in status.items() if k == "K6")
    # every cell the synthetic matrix catches on a path is caught on the real pair too, K6 aside
    from test_identity import _load

    synthetic = {(c["kind"], c["path"]): c["status"] for c in _load("kill_matrix.json")["cells"]}
    assert all(status[kp] == "caught" for kp, v in synthetic.items() if v == "caught" and kp[0] != "K6")


def test_families_columns_alone_on_the_installed_release(tmp_path, capsys):
    """``faults --paths sglang-dflash,sglang-mtp,contract`` runs the DFlash / MTP matrix alone (what
    ``tox -e sglang-0.5.14`` runs there): M1, an MTP head handed the other side of the final norm,
    is caught by sglang-mtp on the installed release. D1 (DFlash ids read with the EAGLE rule)
    taps the embedding B_0 with the fixture's id 0: caught on 0.5.23, where SGLang captures B_0;
    refused loudly by 0.5.14's LlamaModel.forward (residual None at layer 0), so n/a there."""
    sglang = pytest.importorskip("sglang")
    from eagle3_conformance.cli import main

    out = tmp_path / "fam.json"
    rc = main(["faults", "--paths", "sglang-dflash,sglang-mtp,contract", "--json", str(out)])
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert rc == 0, printed
    assert "EAGLE-3 kill matrix" not in printed and set(doc) == {"families"}
    fam = doc["families"]
    assert fam["sglang"] == sglang.__version__ and f"SGLang {sglang.__version__}" in printed
    cell = {(c["kind"], c["path"]): c for c in fam["cells"]}
    assert cell[("M1", "sglang-mtp")]["status"] == "caught" and cell[("M1", "sglang-mtp")]["check"] == "slot_identity"
    d1 = cell[("D1", "sglang-dflash")]
    if sglang.__version__ == "0.5.14":
        assert d1["status"] == "n/a" and "llama.py:409" in d1["detail"], d1
    else:
        assert d1["status"] == "caught", d1
    assert not fam["false_positives"] and "missed" not in {c["status"] for c in fam["cells"]}
    assert main(["faults", "--paths", "sglang-mtp,nope"]) == 2
    assert "the DFlash / MTP matrix's: contract, sglang-dflash, sglang-mtp" in capsys.readouterr().err


def test_faults_refuses_bad_options_before_any_work(tmp_path, capsys):
    """A --json path that is an existing non-JSON file (a contract, say) is never overwritten;
    --prompts / --tokens must be positive and apply to --acceptance only: exit 2, the reason."""
    from eagle3_conformance.cli import main

    contract = tmp_path / "c.yaml"
    contract.write_text("name: x\n")
    assert main(["faults", "--json", str(contract)]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err and contract.read_text() == "name: x\n"
    assert main(["faults", "--acceptance", "--prompts", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err
    assert main(["faults", "--tokens", "8"]) == 2
    assert "--acceptance only" in capsys.readouterr().err


def test_unknown_real_pair_is_a_usage_error(capsys):
    from eagle3_conformance.cli import main

    assert main(["faults", "--pair", "no-such-pair"]) == 2
    assert "no real pair 'no-such-pair'" in capsys.readouterr().err


# --------------------------------------------------------------------------------- new checks


def _vocab_contract(tiny_contract, **vocab):
    from conftest import contract_with

    v = {"size": tiny_contract.target.vocab_size, "draft_size": 4, **vocab}
    return contract_with(tiny_contract, **{"draft.draft_vocab_size": 4, "vocab": v})


def test_vocab_mapping_check_with_speculators_mapping(tiny_contract):
    """K10: speculators' own mapping passes; absolute ids, a missing d2t, a wrong dtype, a bad t2d
    and a hash mismatch each fail (REFERENCE 5.3 example: {7,3,11,0,19}, size 4)."""
    import torch
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

    from eagle3_conformance.checks import check_vocab_mapping, mapping_sha256

    freq = {7: 5, 3: 4, 11: 3, 0: 2, 19: 1}
    d2t, t2d = build_vocab_mappings_from_distribution(freq, 4, tiny_contract.target.vocab_size)
    assert d2t.tolist() == [0, 2, 5, 8] and t2d.nonzero().flatten().tolist() == [0, 3, 7, 11]
    sha = mapping_sha256(torch.arange(4) + d2t)
    c = _vocab_contract(tiny_contract, mapping_sha256=sha)

    def st(d, t):
        return {f.status for f in check_vocab_mapping(c, d, t)}

    assert st(d2t, t2d) == {"pass"}
    assert st(d2t + torch.arange(4), t2d) == {"fail"}  # absolute ids read as offsets
    assert st(None, None) == {"fail"}  # missing: an identity mapping would be used silently
    assert st(d2t.to(torch.int32), t2d) == {"fail"}
    bad_t2d = t2d.clone()
    bad_t2d[5] = True
    assert st(d2t, bad_t2d) == {"fail"}
    assert st(torch.tensor([0, 2, 1, 8]), t2d) == {"fail"}  # not strictly increasing
    other = _vocab_contract(tiny_contract, mapping_sha256="0" * 64)
    assert {f.status for f in check_vocab_mapping(other, d2t, t2d)} == {"fail"}
    assert {f.status for f in check_vocab_mapping(tiny_contract, d2t, t2d)} == {"skip"}  # not declared


def test_golden_tokens_and_template_hash(tiny_contract):
    """K11: a template that injects a think block in training mode, or one that drops BOS, changes
    the golden ids; the template hash tells the templates apart."""
    import hashlib

    from conftest import contract_with

    from eagle3_conformance.checks import check_chat_template, check_golden_tokens

    good = faults.render_ids(faults.GOOD_TEMPLATE)
    assert good[0] == 1  # BOS
    c = contract_with(tiny_contract, tokenizer={
        "chat_template_sha256": hashlib.sha256(faults.GOOD_TEMPLATE.encode()).hexdigest(), "add_bos": True,
        "golden": {"messages": faults.GOLDEN_MESSAGES, "ids": good}})
    assert {f.status for f in check_golden_tokens(c, good, good)} == {"pass"}
    think = faults.render_ids(faults.THINK_TEMPLATE)
    assert len(think) == len(good) + 2
    fs = check_golden_tokens(c, think, good)
    assert {(f.slot, f.status) for f in fs} == {("training", "fail"), ("serving", "pass")}
    assert {f.status for f in check_golden_tokens(c, None, faults.render_ids(faults.NO_BOS_TEMPLATE))} == {"fail"}
    assert {f.status for f in check_chat_template(c, faults.GOOD_TEMPLATE)} == {"pass"}
    assert {f.status for f in check_chat_template(c, faults.THINK_TEMPLATE)} == {"fail"}
    assert {f.status for f in check_golden_tokens(tiny_contract, good, good)} == {"skip"}


def test_row_fingerprint_catches_one_moved_row(tiny_contract, good_caps, tiny_ref):
    """K13: one row taken from another sample fails the per-row fingerprint."""
    from dataclasses import replace

    from eagle3_conformance.checks import check_row_fingerprint

    a, b = sorted(good_caps, key=lambda x: -len(x.rows))[:2]
    ra = tiny_ref.capture(a.token_ids)
    assert {f.status for f in check_row_fingerprint(tiny_contract, a, ra)} == {"pass"}
    feat = a.feature.clone()
    feat[3] = b.feature[3]
    assert {f.status for f in check_row_fingerprint(tiny_contract, replace(a, feature=feat), ra)} == {"fail"}


def test_tensor_dtypes_and_new_sections(tiny_contract, good_caps):
    """K12: int32 positions or ids fail ``check_tensor_dtypes``; the new contract sections are
    optional (existing contracts stay valid) and cross-checked when given."""
    from dataclasses import replace

    import pytest as _pt
    from conftest import contract_with
    from pydantic import ValidationError

    from eagle3_conformance.checks import check_tensor_dtypes
    from eagle3_conformance.contract import semantic_problems

    cap = good_caps[0]
    assert {f.status for f in check_tensor_dtypes(tiny_contract, cap)} == {"pass"}
    bad = replace(cap, position_ids=cap.position_ids.int())
    assert "fail" in {f.status for f in check_tensor_dtypes(tiny_contract, bad)}
    c = contract_with(tiny_contract, **{"dtypes": {"hidden": "float32"}})
    assert "fail" in {f.status for f in check_tensor_dtypes(c, cap)}  # the loader hands bf16
    assert tiny_contract.vocab is None and tiny_contract.tokenizer is None
    wrong = contract_with(tiny_contract, vocab={"size": 999, "draft_size": 256})
    assert any(loc == ("vocab", "size") for loc, _ in semantic_problems(wrong))
    win = contract_with(tiny_contract, positions={"draft_max_position_embeddings": 2048, "serving_max_len": 4096})
    assert any(loc == ("positions", "serving_max_len") for loc, _ in semantic_problems(win))
    with _pt.raises(ValidationError):
        contract_with(tiny_contract, vocab={"size": 512, "draft_size": 256, "d2t_convention": "relative"})


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed: its column runs")
def test_faults_that_ran_nothing_does_not_pass(capsys):
    """Every cell not run (vLLM missing) or n/a: exit 2 with the reason, and the summary counts not-run cells."""
    from eagle3_conformance.cli import main

    assert main(["faults", "--paths", "vllm-extend"]) == 2
    out = capsys.readouterr().out
    assert "0 caught, 2 not applicable, 0 missed, 12 not run;" in out  # K3, K9 n/a; K7 has R66's vLLM operator
    line = next(ln for ln in out.splitlines() if ln.startswith("nothing ran"))
    assert "vllm is not installed" in line.lower(), out


def test_writers_mixed_applies_only_where_both_writers_samples_are_fingerprinted(tmp_path):
    """R90's operator needs a fingerprinted row in an even and an odd sample: a 2-token sample has none (position
    0 excluded, then the one-token shift), so on [[1, 3, 3], [1, 3]] the mix is unobservable and the operator
    does not apply (a draw of that data was reported as a miss); on [[1, 3, 3], [1, 4, 5]] it is caught."""
    op = next(o for o in TRAIN_OPS if o.name == "writers-mixed")
    spec = ScenarioSpec("t4-32-96-0", layers=4, target_hidden=32, draft_hidden=32, boundaries=(2, 4), vocab=96,
                        draft_vocab=64, seed=0)
    ex = Example([[0, 1]], [], [], [], [])
    short = build_scenario(spec, tmp_path / "short", samples=[[1, 3, 3], [1, 3]])
    assert op.paths["training"].fn(short, short.contract(), ex) is None
    # what makes it unobservable: the 2-token sample's slots are never identified (skip), whatever it holds
    base = run_path(short, short.contract(), ex, "training", None)
    second = [f for f in base if f.check == "slot_identity" and f.where.startswith("sample 1 ")]
    assert second and all(f.status == "skip" for f in second), [(f.status, f.message) for f in second]
    assert any(f.status == "pass" for f in base if f.check == "slot_identity" and f.where.startswith("sample 0 "))
    ok = build_scenario(spec, tmp_path / "ok", samples=[[1, 3, 3], [1, 4, 5]])
    c = ok.contract()
    knobs = op.paths["training"].fn(ok, c, ex)
    assert knobs is not None
    v = judge(op.checks, run_path(ok, c, ex, "training", None), run_path(ok, c, ex, "training", None, knobs))
    assert v.status == "caught", v.detail
