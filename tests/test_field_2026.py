"""Issue 37 (the 2026 field reports R53-R82): the holes found on a held-out real model, bad-input
refusals of ``validate``, and the pure checks added for the reports.

Data is written by the real speculators 0.9.0 preprocessing (:func:`eagle3_conformance.testbed.datagen.
write_speculators_dataset`) from the tiny-llama fixture's reference forward; faults are injected the
way a user's writer causes them (the planes it stores); what a plane holds is judged against the
reference, never against the writer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3_conformance.cli import main
from eagle3_conformance.testbed.fixtures import sample_token_ids

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"
AUX = ["B_2", "B_4", "B_5"]  # contracts/tiny-llama.yaml; verifier_last B_8 (L = 8)


@pytest.fixture(scope="module")
def spec_write(tiny, tiny_ref, tmp_path_factory):
    """``spec_write(slots)``: a fresh speculators dataset of 5 samples whose planes hold ``slots``."""
    from eagle3_conformance.testbed.datagen import write_speculators_dataset

    samples = sample_token_ids(tiny.spec, 5, 6, 16, seed=37)

    def _w(slots):
        return write_speculators_dataset(tmp_path_factory.mktemp("spec") / "data", tiny_ref, samples, slots=slots)
    return _w


def _check_data(tmp_path, capsys, data, *extra):
    out = tmp_path / f"r{len(list(tmp_path.glob('r*.json')))}.json"
    rc = main(["check-data", str(TINY), "--data", str(data), "--quiet", "--json", str(out), *map(str, extra)])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err + cap.out
    return rc, json.loads(out.read_text()), cap


def test_speculators_data_without_the_verifier_plane_is_named_verifier_missing(spec_write, tiny, tmp_path, capsys):
    """N = K planes in speculators' layout (a writer without the verifier plane): speculators' reader
    takes the last aux plane (B_5) as the verifier and K - 1 aux slots. Before issue 37 the report said
    slot-count 2 and "the verifier is B_5" and never that the verifier was missing."""
    good = spec_write(AUX + ["B_8"])
    rc, doc, _ = _check_data(tmp_path, capsys, good, "--reference", tiny.target_dir, "--sample", 2)
    assert rc == 0 and not [f for f in doc["findings"] if f["check"] == "verifier_present"]
    rc, doc, cap = _check_data(tmp_path, capsys, spec_write(AUX), "--reference", tiny.target_dir, "--sample", 2)
    assert rc == 1
    vp = [f for f in doc["findings"] if f["check"] == "verifier_present" and f["status"] == "fail"]
    assert {f["path"] for f in vp} == {"training-disk", "training"}
    assert all("B_8" in f["message"] and "missing" in f["message"] for f in vp)
    assert [d["kind"] for d in doc["diagnoses"]] == ["verifier-missing"]
    d = doc["diagnoses"][0]
    assert set(d["paths"]) == {"training-disk", "training"} and "B_5" in d["title"]
    assert {"slot_count", "verifier_identity", "verifier_present"} <= set(d["checks"])


def test_speculators_data_missing_an_aux_plane_is_not_called_verifier_missing(spec_write, tiny):
    """N = K the other way round (B_4 dropped, B_8 stored last): the fingerprint sample finds the verifier
    slot is B_8, so the training path names slot-count / slot-off, never verifier-missing."""
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.diagnose import path_diagnoses
    from eagle3_conformance.scan import scan

    c = load_contract(TINY)
    res = scan(c, spec_write(["B_2", "B_5", "B_8"]), sample=2, reference_dir=tiny.target_dir)
    kinds = {d.kind for d in path_diagnoses(c, res.findings) if d.paths == ("training",)}
    assert "verifier-missing" not in kinds and kinds & {"slot-count", "slot-off"}


def test_final_norm_output_in_the_deepest_aux_slot_is_diagnosed(spec_write, tiny, tmp_path, capsys):
    """F (post final norm) written where the contract declares B_5 (a generator that stores
    output_hidden_states[L], which transformers ties to last_hidden_state): slot_identity names F in
    slot 2 and the diagnosis ``final-norm-in-aux`` says so (before: no diagnosis at all)."""
    rc, doc, _ = _check_data(tmp_path, capsys, spec_write(["B_2", "B_4", "F", "B_8"]), "--reference",
                             tiny.target_dir, "--sample", 2)
    assert rc == 1
    kinds = [d["kind"] for d in doc["diagnoses"]]
    assert kinds == ["final-norm-in-aux"], kinds
    d = doc["diagnoses"][0]
    assert d["slots"] == ["slot 2"] and "B_5" in d["title"] and "slot_identity" in d["checks"]


# --- R66: a slot with no hidden state -------------------------------------------------------------


def test_degenerate_rows_are_named_and_real_rows_pass(tiny_ref):
    import torch

    from eagle3_conformance.checks import degenerate

    ids = torch.tensor([5, 9, 11, 5])
    real = tiny_ref.capture(ids.tolist()).boundary("B_4")
    assert degenerate(real, ids) is None
    assert degenerate(torch.zeros_like(real), ids) == "all rows zero"
    assert degenerate(torch.full_like(real, 0.25), ids) == "every row constant"
    assert degenerate(real[:1].expand_as(real), ids) == "one row repeated"
    # the embedding of one repeated token is one row repeated, legitimately
    same = torch.tensor([7, 7, 7])
    assert degenerate(tiny_ref.capture(same.tolist()).boundary("B_0"), same) is None


def test_an_all_zero_slot_fails_every_sample_of_check_data(spec_write, tiny, tmp_path, capsys):
    """R66 through the real speculators writer: B_5's plane written as zeros (the state the hybrid
    verifier's empty KV page gave) fails ``slot_degenerate`` on every sample of the all-rows pass,
    with or without a reference, whatever the norm band."""
    from safetensors.torch import load_file, save_file

    d = spec_write(AUX + ["B_8"])
    n = 0
    for f in sorted((d / "hidden_states").glob("hs_*.safetensors")):
        t = load_file(str(f))
        t["hidden_states"][:, 2] = 0
        save_file(t, str(f))
        n += 1
    rc, doc, _ = _check_data(tmp_path, capsys, d)
    assert rc == 1
    bad = [f for f in doc["findings"] if f["check"] == "slot_degenerate" and f["status"] == "fail"]
    assert len([f for f in bad if f["path"] == "training-disk"]) == n
    assert {f["slot"] for f in bad} == {"slot 2"} and all("all rows zero" in f["message"] for f in bad)
    good = [f for f in doc["findings"] if f["check"] == "slot_degenerate" and f["slot"] != "slot 2"]
    assert good and all(f["status"] == "pass" for f in good)


# --- validate: bad ids in the draft config ----------------------------------------------------------


def _pair_contract(tmp_path):
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from test_authoring import dcfg, run_init, tcfg

    rc, o = run_init(tmp_path, tcfg(), dcfg("nested", [1, 3, 4]))  # L = 8; B_2, B_4, B_5 under SGLang's +1
    assert rc == 0
    return o, dcfg


@pytest.mark.parametrize("name,edit,words", [
    ("out of range (R64)", lambda d: d("nested", [1, 3, 12]),
     ["id 12 reads B_12", "at least 12 layers", "L = 8"]),
    ("negative", lambda d: d("nested", [-2, 3, 4]), ["negative id [-2]"]),
    ("-1 without B_0 declared", lambda d: d("nested", [-1, 3, 4]), ["negative id [-1]", "does not declare B_0"]),
    ("duplicate", lambda d: d("nested", [1, 3, 3]), ["repeated id [3]", "2 slots captured for a list of 3"]),
    ("nested and top-level differ", lambda d: {**d("nested", [1, 3, 4]), "eagle_aux_hidden_state_layer_ids": [2, 4, 5]},
     ["eagle_aux_hidden_state_layer_ids = [2, 4, 5] differ", "SGLang reads only the nested key"]),
    ("too many ids", lambda d: d("nested", [1, 3, 4, 5]), ["4 ids where the contract declares 3 aux slots"]),
])
def test_validate_refuses_bad_ids_in_the_draft_config_naming_key_and_line(tmp_path, capsys, name, edit, words):
    """Issue 37, bad input: validate exits 2, naming the config file, the key and its line; before, an id
    past L, a list of another length, and nested/top-level lists that differ all validated (exit 0)."""
    o, dcfg = _pair_contract(tmp_path)
    cfg = tmp_path / "draft" / "config.json"
    cfg.write_text(json.dumps(edit(dcfg), indent=2))
    before = cfg.read_text()
    capsys.readouterr()
    assert main(["validate", str(o)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    line = next(i for i, ln in enumerate(before.splitlines(), 1) if '"eagle_aux_hidden_state_layer_ids"' in ln)
    assert f"{cfg}:{line}: eagle_config.eagle_aux_hidden_state_layer_ids = " in out, out
    assert all(w in out for w in words), out
    assert "Traceback" not in out and cfg.read_text() == before


def test_validate_accepts_the_good_ids_in_both_keys(tmp_path, capsys):
    o, dcfg = _pair_contract(tmp_path)
    cfg = tmp_path / "draft" / "config.json"
    cfg.write_text(json.dumps({**dcfg("nested", [1, 3, 4]), "eagle_aux_hidden_state_layer_ids": [1, 3, 4]}))
    assert main(["validate", str(o)]) == 0


# --- DFlash: R58 fallbacks, R63 -------------------------------------------------------------------


def test_validate_names_each_engines_dflash_fallback_when_the_contract_has_no_ids(tmp_path, capsys):
    """R58: a DFlash contract without target_layer_ids is refused (exit 2) and validate says what each
    reader would tap instead, asked of its own code (SGLang 0.5.23 / SpecForge 0.2.0
    build_target_layer_ids(8, 3) = [1, 3, 5], worked from dflash_utils.py:348-385 by hand: B_2, B_4, B_6),
    against the declared B_1, B_4, B_7, with the ids to write."""
    import yaml

    doc = yaml.safe_load((REPO / "contracts" / "tiny-llama-dflash.yaml").read_text())
    doc["dflash"].update(target_layer_ids=None, location="absent")
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    assert main(["validate", str(p)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "sglang: build_target_layer_ids(L=8, num_draft_layers=3) = [1, 3, 5] -> taps B_2, B_4, B_6" in out, out
    assert "specforge: build_target_layer_ids(L=8, num_draft_layers=3) = [1, 3, 5]" in out
    assert "write dflash_config.target_layer_ids: [0, 3, 6]" in out and "Traceback" not in out


@pytest.mark.parametrize("edit,words", [
    (lambda ids: None, ["has no dflash_config.target_layer_ids", "[1, 3, 5] -> taps B_2, B_4, B_6", "R58"]),
    (lambda ids: ids + [8], ["id 8 needs the output of layer 8", "8 = L is the layer count", "R63"]),
    (lambda ids: [0, 3, 3], ["repeated id [3]"]),
])
def test_validate_reads_the_local_dflash_draft_config(tiny, tmp_path, capsys, edit, words):
    import yaml

    from eagle3_conformance.testbed.fixtures import build_fixture

    b = build_fixture("tiny-llama-dflash")
    cfg = json.loads((b.draft_dir / "config.json").read_text())
    (tmp_path / "draft").mkdir()
    doc = yaml.safe_load((REPO / "contracts" / "tiny-llama-dflash.yaml").read_text())
    doc["draft"]["path"] = "draft"
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(doc))
    f = tmp_path / "draft" / "config.json"
    f.write_text(json.dumps(cfg, indent=2))
    assert main(["validate", str(p)]) == 0  # the fixture's own config agrees
    ids = edit(list(cfg["dflash_config"]["target_layer_ids"]))
    if ids is None:
        cfg["dflash_config"].pop("target_layer_ids")
    else:
        cfg["dflash_config"]["target_layer_ids"] = ids
    f.write_text(json.dumps(cfg, indent=2))
    capsys.readouterr()
    assert main(["validate", str(p)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert all(w in out for w in words), out


# --- id = L (R53, R55) ------------------------------------------------------------------------------


def test_what_each_engine_does_with_an_id_naming_b_l():
    """Asked of SGLang 0.5.23's own setters: llama.py drops layers_to_capture entry L silently (its loop
    records the input of layers 0..L-1), deepseek_v2.py's B_i reading of id 8 = L raises and its id 7 is
    B_7, gpt_oss.py captures B_L at the final norm (sglang#32334); vLLM's DeepSeek files capture nothing (R55)."""
    from eagle3_conformance.engine_ids.final_boundary import at_final_boundary

    def by(arch):
        return {(a.engine.split(" (")[-1].rstrip(")") if a.engine.startswith("sglang") else a.engine, a.id): a
                for a in at_final_boundary(8, arch)}

    llama = by("LlamaForCausalLM")
    assert llama[("llama.py", 7)].drops and "dropped silently" in llama[("llama.py", 7)].captures
    assert llama[("vllm", 8)].captures.startswith("B_8") and not llama[("vllm", 8)].drops
    gpt = by("GptOssForCausalLM")
    assert gpt[("gpt_oss.py", 8)].captures == "B_8" and not gpt[("gpt_oss.py", 8)].drops
    ds = by("DeepseekV3ForCausalLM")
    assert ds[("deepseek_v2.py", 7)].captures.startswith("B_7") and ds[("deepseek_v2.py", 7)].drops
    assert ds[("deepseek_v2.py", 8)].drops and ds[("vllm", 8)].drops and "R55" in ds[("vllm", 8)].source


def test_validate_refuses_b_l_as_an_aux_slot_of_a_contract_served_by_sglang_llama(tmp_path, capsys):
    """A contract validated on SGLang 0.5.23 whose deepest aux slot is B_L on a llama target: SGLang never
    hands the draft B_L (R53, K3): exit 2."""
    text = (REPO / "contracts" / "tiny-llama.yaml").read_text().replace("boundaries: [B_2, B_4, B_5]",
                                                                        "boundaries: [B_2, B_4, B_8]")
    text = text.replace("values: [1, 3, 4]", "values: [1, 3, 7]")
    p = tmp_path / "c.yaml"
    p.write_text(text)
    capsys.readouterr()
    assert main(["validate", str(p)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "never captures B_8" in out and "Traceback" not in out, out


def test_init_names_what_each_engine_does_with_id_l(tmp_path, capsys):
    """init for a vLLM DeepSeek draft whose ids end in L (vLLM's extract_hidden_states default ends in L):
    the contract is written, and init and validate say, per engine, what id L captures: SGLang 0.5.23's
    deepseek_v2.py refuses it, vLLM's DeepSeek files capture nothing there (R55)."""
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from test_authoring import dcfg, run_init, tcfg

    rc, o = run_init(tmp_path, tcfg(arch="DeepseekV3ForCausalLM"), dcfg("top", [2, 4, 8]), "--engine", "vllm")
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 0 and "aux slot B_8 (id = L): vllm: id 8 -> nothing" in out and "R55" in out, out
    assert "deepseek_v2.py): id 8 -> nothing" in out
    assert main(["validate", str(o)]) == 0
    assert "note: aux slot B_8 (id = L): vllm: id 8 -> nothing" in " ".join(capsys.readouterr().out.split())


def test_validate_refuses_b_l_for_sglang_even_with_speculators_top_level_ids(tmp_path, capsys):
    """The same contract with speculators' top-level boundary ids [2, 4, 8] (the placement SGLang never
    reads): no id rule of the contract flags it, but the contract is validated on SGLang 0.5.23, whose
    llama.py drops B_8 whatever id names it: final_boundary_problems refuses it (before issue 37: exit 0)."""
    text = (REPO / "contracts" / "tiny-llama.yaml").read_text().replace("boundaries: [B_2, B_4, B_5]",
                                                                        "boundaries: [B_2, B_4, B_8]")
    text = text.replace("values: [1, 3, 4]", "values: [2, 4, 8]").replace("location: nested ", "location: top_level ")
    p = tmp_path / "c.yaml"
    p.write_text(text)
    capsys.readouterr()
    assert main(["validate", str(p)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "capture.boundaries: B_8 is an aux slot, but sglang 0.5.23 (llama.py): id 7 -> nothing" in out, out


# --- Eagle3.1 draft-side norms (R53, R70, R71, R72) ----------------------------------------------------


def test_draft_norm_readings_are_the_installed_code():
    """The stand-in readings of draft_norms.py name file:line of the installed SGLang / SpecForge; each
    line must still say what the module says it does (a release that moves or changes them fails here)."""
    import importlib.util

    from eagle3_conformance.draft_config.draft_norms import SOURCES

    for tool, rel, line, text in SOURCES:
        root = Path(importlib.util.find_spec(tool).origin).parent.parent
        got = (root / rel).read_text().splitlines()[line - 1]
        assert text in got, (tool, rel, line, got)


@pytest.mark.parametrize("extra,nested,words", [
    ({}, {"norm_before_fc": True}, ["sets norm_before_fc only under eagle_config", "R53", "'none' here, but SGLang "
                                                                                         "0.5.23 reads"]),
    ({"norm_before_fc": True, "fc_norm": True}, {}, ["speculators 0.9.0 refuses the pair", "'both'"]),
    ({"fc_norm": True}, {}, ["'none' here, but SGLang 0.5.23 reads", "as 'fc_norm'"]),
])
def test_validate_reads_the_draft_norms_as_each_tool_does(tmp_path, capsys, extra, nested, words):
    o, dcfg = _pair_contract(tmp_path)  # init wrote pre_fc_norm: none
    cfg = dcfg("nested", [1, 3, 4], **extra)
    cfg["eagle_config"].update(nested)
    (tmp_path / "draft" / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    assert main(["validate", str(o)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert all(w in out for w in words), out


def test_init_states_norm_output_and_notes_when_it_is_absent(tmp_path, capsys):
    import sys

    from eagle3_conformance.contract import load_contract

    sys.path.insert(0, str(REPO / "tests"))
    from test_authoring import dcfg, run_init, tcfg

    rc, o = run_init(tmp_path / "a", tcfg(), dcfg("nested", [1, 3, 4], norm_output=True, norm_before_fc=True))
    assert rc == 0 and load_contract(o).draft.norm_output is True
    assert load_contract(o).draft.pre_fc_norm == "norm_before_fc"
    capsys.readouterr()
    rc, o = run_init(tmp_path / "b", tcfg(), dcfg("nested", [1, 3, 4]))
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 0 and load_contract(o).draft.norm_output is None and "R71" in out and "default it to false" in out


def test_zlab_reference_reads_dflash_ids_output_of_like_sglang_and_specforge():
    """The z-lab reference package (PyPI dflash 0.1.0, optional: pip install --no-deps dflash==0.1.0) asked
    of its own code: extract_context_feature on index-tagged tensors taps B_{i+1} for id i, as SGLang 0.5.23
    and SpecForge 0.2.0 do; its build_target_layer_ids(64, 5) is the R58 thread's fallback
    [1, 16, 31, 46, 61] (z-lab/dflash#157)."""
    pytest.importorskip("dflash.model")
    from eagle3_conformance.engine_ids.dflash import dflash_tool_to_boundaries
    from eagle3_conformance.engine_ids.zlab import zlab_formula, zlab_taps

    assert zlab_taps([0, 3, 6], 8) == [1, 4, 7]
    for tool in ("sglang", "specforge"):
        assert [b.index for b in dflash_tool_to_boundaries(tool, [0, 3, 6], 8, num_draft_layers=3)] == [1, 4, 7]
    assert zlab_formula(64, 5) == [1, 16, 31, 46, 61]
