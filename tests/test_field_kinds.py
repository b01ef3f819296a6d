"""Field kinds from 2026 (fault-kinds.md, the table of field reports; issue 23 item 7), each injected the
way a user causes it, caught by its check and named by its diagnosis, and the correct input still
passing:

- R41: a 4-slot draft whose slot count SGLang reads from another key than the ids (the ids at the
  top level, where speculators writes them): fc built for 3 slots (``fc_shape``, ``fc-slot-count``);
- R43 / R52: the draft extend after a partially accepted verify handed padded rows or the wrong
  verified rows (``verified_rows``, ``decode-rows-padded`` / ``decode-rows-misaligned``);
- R49: the MTP input (B_L or F) that a contract must state (an error naming the key when it is
  missing) and its mismatch diagnosed (``mtp-input-side``).
"""

from __future__ import annotations

import pytest

from eagle3_conformance.environment.torch_env import prepare

prepare()

from eagle3_conformance.diagnose import diagnose  # noqa: E402


def _failing(findings, check):
    return [f for f in findings if f.check == check and f.status == "fail"]


def _no_failure(findings, what):
    bad = [f for f in findings if f.status == "fail"]
    assert not bad, f"false positive on the correct {what}: " + "; ".join(f"{f.check}: {f.message}" for f in bad[:4])


# --- R41: fc built for 3 slots of a 4-slot draft ---------------------------------------------------------


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    """The kill matrix's 4-slot scenario (B_1, B_3, B_5, B_6 of the 8-layer target) on SGLang's harness."""
    pytest.importorskip("sglang")
    from eagle3_conformance.faults import HarnessPool, build_scenario, default_example
    from eagle3_conformance.faults.matrix import MATRIX_SCENARIOS

    scn = build_scenario(MATRIX_SCENARIOS["four"], tmp_path_factory.mktemp("four"), for_sglang=True)
    ex = default_example(scn)
    pool = HarnessPool()
    yield scn, scn.contract(extra_tokens=ex.tokens()), ex, pool
    pool.close()


@pytest.mark.parametrize("path", ["sglang-extend", "sglang-decode"])
def test_r41_fc_for_three_slots_caught_and_diagnosed(four, path):
    """The draft config's 4 ids at the top level: SGLang 0.5.23's real draft builds fc [64, 192]
    (its default count 3) where the contract needs [64, 256]; the correct config (ids under
    eagle_config) builds [64, 256] and passes every check."""
    from eagle3_conformance.faults import OPERATORS_BY_NAME, run_path

    scn, c, ex, pool = four
    assert c.num_slots == 4
    base = run_path(scn, c, ex, path, pool)
    _no_failure(base, f"4-slot draft config on {path}")
    k = OPERATORS_BY_NAME["aux-count-from-other-key"].paths[path].fn(scn, c, ex)
    mut = run_path(scn, c, ex, path, pool, k)
    bad = _failing(mut, "fc_shape")
    assert bad and {f.observed for f in bad} == {"in 192, out 64"}, [f.message for f in bad]
    assert {f.expected for f in bad} == {"in 256, out 64"}
    d = diagnose(c, mut)
    assert d and d[0].kind == "fc-slot-count" and d[0].fault == "K6", [x.label for x in d]
    assert "R41" in d[0].title and "3 slots of a 4-slot draft" in d[0].title
    assert any("eagle_config" in line for line in d[0].fix), d[0].fix
    assert not diagnose(c, base)


# --- R43 / R52: decode rows after a partial accept ---------------------------------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The kill matrix's base scenario: a verify step over 2 requests, 3 draft tokens, accepted [2, 3]."""
    pytest.importorskip("sglang")
    from eagle3_conformance.faults import HarnessPool, build_scenario, default_example
    from eagle3_conformance.faults.matrix import MATRIX_SCENARIOS

    scn = build_scenario(MATRIX_SCENARIOS["base"], tmp_path_factory.mktemp("base"), for_sglang=True)
    ex = default_example(scn)
    pool = HarnessPool()
    yield scn, scn.contract(extra_tokens=ex.tokens()), ex, pool
    pool.close()


@pytest.mark.parametrize("op, kind, fault, observed", [
    ("decode-rows-padded", "decode-rows-padded", "K13", {"padding": 1, "shifted": 1, "shift": -1}),
    ("wrong-verified-rows", "decode-rows-misaligned", "K9", {"padding": 0, "shifted": 2, "foreign": 1, "shift": -1}),
])
def test_r43_r52_decode_rows_after_partial_accept(base, op, kind, fault, observed):
    """Request 0 accepts 2 of 3 draft tokens. Padded (R43): its first accepted token gets a zero row,
    its second the first one's row. Compacted offsets into the uncompacted buffer (R52): request 1's
    rows start at row 2 of the batch, request 0's rejected row (matching no row of request 1), then
    its own rows one token early. ``verified_rows`` fails on the request it hits, passes on
    the correct input, and the diagnosis names the field kind."""
    from eagle3_conformance.faults import OPERATORS_BY_NAME, run_path

    scn, c, ex, pool = base
    good = run_path(scn, c, ex, "sglang-decode", pool)
    _no_failure(good, "decode rows")
    vr = [f for f in good if f.check == "verified_rows"]
    assert len(vr) == len(ex.prefixes) and all(f.status == "pass" for f in vr)
    assert [f.observed["accepted"] for f in vr] == ex.accepted
    k = OPERATORS_BY_NAME[op].paths["sglang-decode"].fn(scn, c, ex)
    mut = run_path(scn, c, ex, "sglang-decode", pool, k)
    bad = _failing(mut, "verified_rows")
    assert len(bad) == 1, [f.message for f in bad]
    assert all(bad[0].observed[key] == val for key, val in observed.items()), bad[0].observed
    d = diagnose(c, mut)
    assert d and d[0].kind == kind and d[0].fault == fault, [x.label for x in d]
    assert ("R43" if op == "decode-rows-padded" else "R52") in d[0].title
    assert "verified_rows" in d[0].checks


def test_verified_rows_judges_only_verify_captures(base):
    """An extend capture (no accept count) gives no verified_rows finding."""
    from eagle3_conformance.faults import run_path

    scn, c, ex, pool = base
    assert not [f for f in run_path(scn, c, ex, "sglang-extend", pool) if f.check == "verified_rows"]


# --- R49: the MTP input (B_L or F) is stated, never defaulted ----------------------------------------------


@pytest.mark.parametrize("drop", [("verifier_last",), ("capture", "boundaries")])
def test_r49_mtp_contract_without_its_input_names_the_key(tmp_path, capsys, drop):
    """An MTP contract that leaves out which tensor the head reads: validate exits 2 naming the file,
    line and key, and says that the side is never defaulted (fault-kinds.md R49)."""
    import yaml

    from eagle3_conformance.cli import main
    from eagle3_conformance.faults.families import MTP_CONTRACT

    doc = yaml.safe_load(MTP_CONTRACT.read_text())
    parent = doc
    for k in drop[:-1]:
        parent = parent[k]
    parent.pop(drop[-1])
    f = tmp_path / "mtp.yaml"
    f.write_text(yaml.safe_dump(doc, sort_keys=False))
    before = f.read_text()
    assert main(["validate", str(f)]) == 2
    cap = capsys.readouterr()
    err = " ".join((cap.out + cap.err).split())
    assert f"{f}:" in err and ".".join(drop) in err and "R49" in err and "never defaulted" in err, err
    assert f.read_text() == before


def test_r49_families_matrix_catches_the_unstated_input():
    """The DFlash / MTP kill matrix's contract column: the unstated MTP input is caught (M2)."""
    from eagle3_conformance.faults.families import DFLASH_CONTRACT, MTP_CONTRACT, OPERATORS, World, _load_doc
    from eagle3_conformance.faults.matrix import judge

    op = next(o for o in OPERATORS if o.kind == "M2")
    base, mut = op.paths["contract"](World(_load_doc(DFLASH_CONTRACT), _load_doc(MTP_CONTRACT)))
    v = judge(op.checks, base, mut)
    assert v.status == "caught", v.detail
    assert {f.observed for f in mut if f.status == "fail"} == {"verifier_last", "capture.boundaries"}


@pytest.fixture(scope="module")
def mtp_world():
    pytest.importorskip("sglang")
    from eagle3_conformance.faults import families as F
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.testbed.fixtures import build_fixture
    from eagle3_conformance.tools.sglang_cpu.families import runtime_harness

    w = F.World(F._load_doc(F.DFLASH_CONTRACT), F._load_doc(F.MTP_CONTRACT))
    b = build_fixture("tiny-llama")
    w.harness = runtime_harness(b.target_dir)
    w.ref = load_reference_model(b.target_dir)
    return w


@pytest.mark.parametrize("contract, fed_pre_norm, got", [
    ("contracts/tiny-llama-mtp-sglang.yaml", True, "B_8"),               # F stated, B_L fed
    ("tests/data/families/tiny-llama-mtp-speculators.yaml", False, "F"),  # B_L stated, SGLang feeds F
])
def test_r49_mtp_input_mismatch_caught_and_diagnosed(mtp_world, contract, fed_pre_norm, got):
    """What SGLang 0.5.23 hands an MTP head, against a contract stating the other side: slot
    identity fails on every request and the diagnosis names R49 and both fixes; the matching side
    passes with no diagnosis."""
    from pathlib import Path

    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.faults.families import mtp_findings

    c = load_contract(Path(__file__).resolve().parent.parent / contract)
    good = mtp_findings(mtp_world, c, feed_pre_norm=not fed_pre_norm)
    _no_failure(good, f"MTP input under {contract}")
    assert not diagnose(c, good)
    bad = mtp_findings(mtp_world, c, feed_pre_norm=fed_pre_norm)
    fails = _failing(bad, "slot_identity")
    assert fails and {f.observed for f in fails} == {got}
    d = diagnose(c, bad)
    assert [x.kind for x in d] == ["mtp-input-side"] and d[0].fault == "K4" and "R49" in d[0].title
    assert any("capture.boundaries" in line for line in d[0].fix)


def test_verified_rows_does_not_read_a_boundary_fault_as_a_row_fault(base):
    """Ids under the other convention (every slot one boundary deeper, K2): the rows are in place,
    so verified_rows passes (counting rows that match no token's declared boundaries) and slot
    identity names the fault."""
    from eagle3_conformance.faults import OPERATORS_BY_NAME, run_path

    scn, c, ex, pool = base
    mut = run_path(scn, c, ex, "sglang-decode", pool,
                   OPERATORS_BY_NAME["ids-shifted"].paths["sglang-decode"].fn(scn, c, ex))
    vr = [f for f in mut if f.check == "verified_rows"]
    assert vr and all(f.status == "pass" for f in vr), vr
    assert sum(f.observed["foreign"] for f in vr) >= 1 and not any(f.observed["shifted"] for f in vr)
    assert [d.kind for d in diagnose(c, mut)] == ["convention-shift"]
