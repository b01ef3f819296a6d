"""What lies after the boundary, as part of the serving verdict (issue 41): the draft's own acceptance
(``draft_acceptance``), its checkpoint's vocabulary read statically (``draft_vocab``, on the project's
shipped trained draft and on copies broken the way an export breaks them), the diagnoses they lead to
(``draft-accepts-nothing``, ``draft-vocab-mapping``), and the served dtype's one diagnosis in every
direction (``serving-dtype``), the same words on every serving path. The real servers and engines run in
tests/test_own_server_live.py and tests/test_sglang_engine.py (slow)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from eagle3_conformance.checks import USELESS_MAX_DRAFTS_PER_STEP, check_draft_acceptance, check_draft_vocab
from eagle3_conformance.checks.shape import check_dtype
from eagle3_conformance.contract import load_contract
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.core.served_dtype import served_dtype_words
from eagle3_conformance.diagnose import diagnose
from eagle3_conformance.draft_config.checkpoint import draft_digest, read_draft_vocab

ROOT = Path(__file__).resolve().parents[1]
C = load_contract(ROOT / "contracts" / "smollm2-135m.yaml")

# correct-drafts histograms measured on SGLang's real server, CI subset (docs/accept.md): the trained draft,
# and an untrained draft (benchmarks/bench_accept_decision.py)
TRAINED_HIST = [109, 39, 11, 8]
UNTRAINED_HIST = [248]


@pytest.fixture(scope="module")
def trained():
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft

    return Path(ensure_trained_draft(RECIPE).draft_dir)


def _broken(src: Path, dst: Path, edit) -> Path:
    """A copy of the draft export with its tensors changed by ``edit(dict) -> dict``."""
    from safetensors.torch import load_file, save_file

    dst.mkdir(parents=True)
    shutil.copy(src / "config.json", dst / "config.json")
    save_file(edit(load_file(str(src / "model.safetensors"))), str(dst / "model.safetensors"))
    return dst


# --- draft_acceptance --------------------------------------------------------------------------------


def test_a_draft_that_accepts_nothing_fails_and_a_trained_one_passes():
    bad = check_draft_acceptance(C, {"histogram": UNTRAINED_HIST, "source": "records", "requests": 8})[0]
    assert bad.status == "fail" and "accepts almost nothing" in bad.message
    assert bad.observed["interval"][1] < USELESS_MAX_DRAFTS_PER_STEP
    good = check_draft_acceptance(C, {"histogram": TRAINED_HIST, "source": "records"})[0]
    assert good.status == "pass" and good.observed["interval"][0] >= USELESS_MAX_DRAFTS_PER_STEP


def test_too_few_verify_steps_or_an_interval_on_the_threshold_are_not_judged():
    few = check_draft_acceptance(C, {"histogram": [20, 0, 0, 0]})[0]
    assert few.status == "skip" and "too few" in few.message
    on = check_draft_acceptance(C, {"histogram": [90, 10, 0, 0]})[0]  # 0.1 drafts per step, interval around it
    assert on.status == "skip" and "straddles" in on.message
    assert check_draft_acceptance(C, {"skip": "no verify step"})[0].status == "skip"


# --- draft_vocab: the checkpoint as SGLang loads it --------------------------------------------------


def test_the_shipped_draft_vocabulary_passes(trained):
    f = check_draft_vocab(C, read_draft_vocab(trained))[0]
    assert f.status == "pass" and "4096 of 49152" in f.message, f.message


def test_a_scrambled_d2t_fails_statically(trained, tmp_path):
    def scramble(w):
        g = torch.Generator().manual_seed(0)
        w["d2t"] = w["d2t"][torch.randperm(w["d2t"].numel(), generator=g)].contiguous()
        return w
    f = check_draft_vocab(C, read_draft_vocab(_broken(trained, tmp_path / "d", scramble)))[0]
    assert f.status == "fail" and "not strictly increasing" in f.message, f.message


def test_a_reduced_vocabulary_without_d2t_and_a_missing_head_fail(trained, tmp_path):
    def drop(w):
        del w["d2t"], w["t2d"], w["lm_head.weight"]
        return w
    f = check_draft_vocab(C, read_draft_vocab(_broken(trained, tmp_path / "d", drop)))[0]
    assert f.status == "fail"
    assert "has no d2t: SGLang reads draft id i as target id i" in f.message
    assert "no lm_head.weight in the checkpoint" in f.message


def test_the_contracts_vocab_section_is_checked_against_the_checkpoint(trained):
    c = C.model_copy(update={"vocab": C.model_validate({**C.model_dump(), "vocab": {
        "size": 49152, "draft_size": 8192, "mapping_sha256": "0" * 64}}).vocab})
    f = check_draft_vocab(c, read_draft_vocab(trained))[0]
    assert f.status == "fail" and "not the contract's vocab.draft_size 8192" in f.message


def test_the_contracts_draft_vocab_size_is_checked_against_the_served_draft(trained):
    # the fault a fresh user met: the contract said 8192, the served draft's config.json 4096, and the check
    # said "consistent with the contract" (it compared only a vocab: section the contract has not)
    c = C.model_copy(update={"draft": C.draft.model_copy(update={"draft_vocab_size": 8192})})
    f = check_draft_vocab(c, read_draft_vocab(trained))[0]
    assert f.status == "fail", f.message
    assert "draft_vocab_size 4096" in f.message and f"{trained}" in f.message, f.message
    assert "draft.draft_vocab_size 8192" in f.message and "contract" in f.message, f.message


def test_the_shipped_contract_states_the_shipped_drafts_vocabulary(trained):
    served = json.loads((ROOT / "fixtures" / "drafts" / "smollm2-135m-eagle3" / "config.json").read_text())
    assert C.draft.draft_vocab_size == served["draft_vocab_size"]
    f = check_draft_vocab(C, read_draft_vocab(trained))[0]
    assert f.status == "pass" and "the contract's draft.draft_vocab_size" in f.message, f.message


def test_a_directory_without_weights_is_not_judged(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"draft_vocab_size": 10}))
    f = check_draft_vocab(C, read_draft_vocab(tmp_path))[0]
    assert f.status == "skip" and "no *.safetensors" in f.message


def test_the_draft_digest_is_the_content_not_the_path(trained, tmp_path):
    a = tmp_path / "a"
    shutil.copytree(trained, a)
    assert draft_digest(a) == draft_digest(trained) and draft_digest(tmp_path / "nope") is None
    (a / "train.json").write_text("{}")  # not what SGLang reads: the same draft
    assert draft_digest(a) == draft_digest(trained)


# --- the diagnoses -----------------------------------------------------------------------------------


def _identity(path: str, status: str = "pass") -> list[Finding]:
    return [Finding("slot_identity", status, path, f"slot {i}", f"B_{b}", f"B_{b}" if status == "pass" else "B_0",
                    "capture 0", "", "K2") for i, b in enumerate((2, 15, 27))]


def test_a_conforming_boundary_with_no_acceptance_is_diagnosed_after_the_boundary(trained, tmp_path):
    path = "sglang-server"
    fs = _identity(path) + check_draft_acceptance(C, {"histogram": UNTRAINED_HIST, "source": "records"}, path=path)
    fs += check_draft_vocab(C, read_draft_vocab(trained), path=path)
    (d,) = diagnose(C, fs)
    assert d.kind == "draft-accepts-nothing" and "cause lies after the boundary" in d.title
    text = " ".join(d.evidence + d.fix)
    for words in ("slot_identity passed 3 of 3", "d2t/t2d and lm_head are well-formed", "the draft's weights",
                  "the shared embedding / lm_head", "set_embed"):
        assert words in text, words
    # with the mapping broken, the fix starts with it
    scr = _broken(trained, tmp_path / "s", lambda w: {**w, "d2t": w["d2t"].flip(0).contiguous()})
    fs2 = fs[:-1] + check_draft_vocab(C, read_draft_vocab(scr), path=path)
    (d2,) = diagnose(C, fs2)
    assert d2.kind == "draft-accepts-nothing" and d2.fix[0].startswith("fix the draft's vocabulary mapping first")
    assert "draft_vocab" in d2.checks


def test_a_boundary_fault_is_not_blamed_on_the_draft():
    fs = _identity("sglang-server", "fail") + check_draft_acceptance(C, {"histogram": UNTRAINED_HIST},
                                                                       path="sglang-server")
    assert "draft-accepts-nothing" not in {d.kind for d in diagnose(C, fs)}


def _dtype_findings(path: str, served: str, contract) -> list[Finding]:
    cap = Capture(path=path, where="capture 0", token_ids=torch.arange(4), rows=torch.arange(4),
                  feature=torch.zeros(4, 1728, dtype=getattr(torch, served)))
    return [f for f in check_dtype(contract, cap) if f.check == "dtype"] + _identity(path)


@pytest.mark.parametrize("declared,served", [("float16", "float32"), ("float32", "bfloat16"), ("bfloat16", "float32"),
                                             ("float16", "bfloat16")])
def test_a_served_dtype_gets_one_diagnosis_in_every_direction_with_the_same_words_on_every_path(declared, served):
    c = C.model_validate({**C.model_dump(), "precision": {"serving": declared}})
    got = []
    for path in ("sglang-server", "sglang-engine", "vllm-engine"):
        (d,) = diagnose(c, _dtype_findings(path, served, c))
        assert d.kind == "serving-dtype" and d.paths == (path,)
        got.append((d.title, d.evidence, d.fix))
    assert got[0] == got[1] == got[2]
    w = served_dtype_words(declared, served)
    assert got[0] == (w.title, w.evidence, w.fix)
    assert f"served in {served}; the contract declares precision.serving: {declared}" in w.title
    assert w.fix[0].startswith(f"if {served} is what you deploy: set precision.serving: {served}")
    assert f"--serving-dtype {served}" in w.fix[0] and f"launch the server with --dtype {declared}" in w.fix[1]


def test_lower_precision_served_claims_the_precision_noise_instead_of_a_second_diagnosis():
    path = "sglang-server"
    fs = _dtype_findings(path, "bfloat16", C)
    fs.append(Finding("production_precision", "fail", path, "feature", "float32",
                      {"median_row_angle_deg": 0.7, "declared": "float32", "key": "precision.serving"}, "capture 0",
                      "", "K12", "precision.serving"))
    (d,) = diagnose(C, fs)
    assert d.kind == "serving-dtype" and d.checks == ("dtype", "production_precision")


def test_a_dtype_the_path_chose_is_not_served_and_says_so_in_the_same_words():
    c = C.model_validate({**C.model_dump(), "precision": {"serving": "float16"}})
    cap = Capture(path="sglang-engine", where="capture 0", token_ids=torch.arange(4), rows=torch.arange(4),
                  feature=torch.zeros(4, 1728), provenance={"run_dtype": "float32"})
    (f,) = [x for x in check_dtype(c, cap) if x.check == "dtype"]
    assert f.status == "skip" and "float16 NOT served here" in f.message
    assert served_dtype_words("float16", "float32").title in f.message


def test_a_floor_is_not_judged_where_no_verify_step_was_recorded():
    """A GPU server with CUDA graphs records no decode: its records carry no acceptance, and the floor says
    so (skip), never "no accept length was measured" as a failure."""
    from eagle3_conformance.checks.facts import check_accept_length
    from eagle3_conformance.serving.captures import acceptance_facts

    facts = acceptance_facts(C, [])
    (f,) = check_accept_length(C, facts["avg_accept_length"], path="sglang-server")
    assert f.status == "skip" and "no verify step was recorded" in f.message
    assert check_draft_acceptance(C, facts["draft_acceptance"])[0].status == "skip"
