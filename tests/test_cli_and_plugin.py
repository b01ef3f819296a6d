"""The `conformance` CLI (exit codes, JSON) and the pytest plugin (`pytest -m conformance`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from eagle3_conformance.cli import main
from eagle3_conformance.testbed.datagen import write_speculators_dataset
from eagle3_conformance.testbed.fixtures import sample_token_ids

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"

pytest_plugins = ["pytester"]


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def seed_incident_data(tmp_path_factory, tiny, tiny_ref):
    out = tmp_path_factory.mktemp("seed") / "data"
    samples = sample_token_ids(tiny.spec, 4, 3, 16, seed=11)
    return write_speculators_dataset(out, tiny_ref, samples, slots=["B_0", "B_2", "B_4", "B_5"])


def test_validate_ok_and_bad(tmp_path, capsys):
    assert main(["validate", str(TINY)]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(TINY.read_text().replace("feature_width: 192", "feature_width: 100"))
    assert main(["validate", str(bad)]) == 2
    out = capsys.readouterr().out
    assert f"{bad}:" in out and "feature_width" in out


def test_validate_warns_when_a_named_path_holds_no_config(tmp_path, capsys):
    """A typo in target.path / draft.path silently turned the config cross-check off ("ok", no word):
    validate still passes (a contract may be written on another machine) but says which path it could not
    check, on stderr (found by a new user)."""
    import yaml

    doc = yaml.safe_load(TINY.read_text())
    doc["target"]["path"] = "/nonexistent/model"
    doc["draft"]["path"] = str(tmp_path)  # a directory without config.json
    c = tmp_path / "c.yaml"
    c.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert main(["validate", str(c)]) == 0
    err = capsys.readouterr().err
    assert "target.path /nonexistent/model: no such directory" in err and "not checked against its config" in err
    assert f"draft.path {tmp_path}: no config.json in it" in err
    assert main(["validate", str(TINY)]) == 0 and "not checked against" not in capsys.readouterr().err


def test_check_data_conforming(tiny, tmp_path, capsys):
    before = _tree_hash(tiny.data_dir)
    out = tmp_path / "r.json"
    assert main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--reference", str(tiny.target_dir),
                 "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["contract"] == str(TINY)
    assert {f["status"] for f in doc["findings"]} <= {"pass", "skip"}
    assert set(doc["findings"][0]) >= {"check", "status", "path", "slot", "expected", "observed", "where"}
    assert "CONFORMS" in capsys.readouterr().out
    assert _tree_hash(tiny.data_dir) == before  # inputs are read-only


def test_check_data_seed_incident_exit_1(seed_incident_data, tiny, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["check-data", str(TINY), "--data", str(seed_incident_data), "--reference", str(tiny.target_dir),
               "--json", str(out)])
    assert rc == 1
    text = capsys.readouterr().out
    assert "slot 0 is B_0 (embedding output); contract says B_2" in text
    doc = json.loads(out.read_text())
    assert any(f["check"] == "slot_identity" and f["slot"] == "slot 0" and f["status"] == "fail"
               for f in doc["findings"])


def test_check_data_without_reference_says_so(seed_incident_data, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["check-data", str(TINY), "--data", str(seed_incident_data), "--no-reference", "--json", str(out)])
    assert rc == 0  # shapes are all right: without a reference nothing can see the wrong meaning
    text = capsys.readouterr().out
    assert "slot identity not checked" in text
    # the verdict itself must not read as a plain pass
    verdict = text.strip().splitlines()[-1]
    assert verdict.startswith("CONFORMS ON SHAPES ONLY: slot identity, order and alignment were not checked "
                              "(no reference model)"), verdict
    meta = json.loads(out.read_text())["meta"]
    assert meta["slot_identity_checked"] is False and meta["verdict"].startswith("CONFORMS ON SHAPES ONLY")


def test_verdict_plain_conforms_only_when_slot_identity_was_judged(tiny, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--reference", str(tiny.target_dir),
                 "--sample", "2", "--json", str(out)]) == 0
    verdict = capsys.readouterr().out.strip().splitlines()[-1]
    assert verdict.startswith("CONFORMS:") and "SHAPES ONLY" not in verdict
    meta = json.loads(out.read_text())["meta"]
    assert meta["slot_identity_checked"] is True and meta["verdict"] == "CONFORMS"
    # a reference but no fingerprinted sample: still shapes only, and says why
    assert main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--reference", str(tiny.target_dir),
                 "--sample", "0"]) == 0
    assert "CONFORMS ON SHAPES ONLY" in capsys.readouterr().out


def test_report_verdict_pure():
    from rich.console import Console

    from eagle3_conformance.core.findings import Finding
    from eagle3_conformance.report import render_table, verdict

    shape = Finding("feature_width", "pass", "training", "feature", 192, 192, "sample 0")
    ident = Finding("slot_identity", "pass", "training", "slot 0", "B_2", "B_2", "sample 0")
    skipped = Finding("slot_identity", "skip", "training", None, None, None, "sample 0")
    assert verdict([shape, skipped])[0] == "conforms on shapes only"
    assert verdict([shape, ident]) == ("conforms", "CONFORMS")
    assert verdict([shape, Finding("slot_identity", "fail", "training", "slot 0", "B_2", "B_0", "s")])[0] == \
        "violations"
    con = Console(record=True, width=300)
    render_table([shape], "t", con)
    assert "CONFORMS ON SHAPES ONLY" in con.export_text()


@pytest.mark.parametrize("args,words", [
    (["check-data", str(TINY), "--data", "/nonexistent"], "no such data directory"),
    (["check-data", "/nonexistent.yaml", "--data", "/tmp"], "cannot read contract"),
    (["check-data", str(TINY), "--data", "EMPTY"], "not a speculators Arrow dataset"),
])
def test_bad_input_exit_2_one_line(args, words, capsys, tmp_path):
    # an empty directory, not /tmp: a directory holding vLLM extraction files is valid input
    args = [str(tmp_path) if a == "EMPTY" else a for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_usage_error_exit_2():
    with pytest.raises(SystemExit) as e:
        main(["check-data"])
    assert e.value.code == 2


def test_an_abbreviated_option_is_a_usage_error_not_another_option(capsys):
    """``--dat`` must not silently mean ``--data`` (argparse's prefix matching is off, on every verb)."""
    contract = str(Path(__file__).resolve().parent.parent / "contracts" / "tiny-llama.yaml")
    with pytest.raises(SystemExit) as e:
        main(["check-data", contract, "--dat", "somewhere"])
    assert e.value.code == 2 and "required: --data" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["--deb", "validate", contract])
    assert e.value.code == 2


def test_reference_dir_without_weights_exit_2(tiny, tmp_path, capsys):
    empty = tmp_path / "model"
    empty.mkdir()
    (empty / "config.json").write_text((tiny.target_dir / "config.json").read_text())
    assert main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--reference", str(empty)]) == 2
    assert "no *.safetensors" in capsys.readouterr().err


# --- plugin --------------------------------------------------------------------------------------


def test_plugin_runs_contract_suite(pytester, tmp_path):
    res = pytester.runpytest("-m", "conformance", "--contract", str(TINY), "-p", "no:cacheprovider",
                             "--conformance-paths", "training", "--conformance-json", str(tmp_path / "f.json"))
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*conformance report*", "CONFORMS: tiny-llama-eagle3*", "passed: * findings in * checks*",
                              "CONFORMS: * findings, 0 failed*"])
    doc = json.loads((tmp_path / "f.json").read_text())
    assert doc["findings"]
    (rec,) = doc["meta"]["validated_on"]  # the run's validated-on block (issue 25)
    assert rec["passed"] and rec["paths"] == ["training"] and len(rec["contract_sha256"]) == 64
    assert rec["engines_update"] == {}  # the training path runs no engine: nothing to record for one


def test_plugin_fails_on_a_contract_the_data_violates(pytester, tmp_path):
    # the fixture data holds [B_2, B_4, B_5, B_8]; this contract claims [B_3, B_4, B_5]
    text = TINY.read_text().replace("boundaries: [B_2, B_4, B_5]", "boundaries: [B_3, B_4, B_5]").replace(
        "values: [1, 3, 4]", "values: [2, 3, 4]").replace("schema/contract", str(REPO / "contracts/schema/contract"))
    c = tmp_path / "contracts" / "wrong.yaml"
    c.parent.mkdir()
    c.write_text(text)
    res = pytester.runpytest("-m", "conformance", "--contract", str(c), "-p", "no:cacheprovider",
                             "--conformance-paths", "training")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*slot 0 is B_2 (entering layer 2); contract says B_3*"])


def test_plugin_reports_broken_contract_as_failure(pytester, tmp_path):
    c = tmp_path / "contracts" / "broken.yaml"
    c.parent.mkdir()
    c.write_text(TINY.read_text().replace("feature_width: 192", "feature_width: 7"))
    res = pytester.runpytest("-m", "conformance", "--contract", str(c), "-p", "no:cacheprovider")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*broken.yaml:*capture.feature_width*"])


def test_plain_pytest_does_not_run_the_conformance_suite(pytester):
    pytester.makeini("[pytest]\naddopts = -m 'not conformance and not gpu'\n")
    d = pytester.mkdir("contracts")
    (d / "tiny.yaml").write_text(TINY.read_text())
    res = pytester.runpytest("-p", "no:cacheprovider")
    res.assert_outcomes()  # collected and deselected, none run


def test_engine_path_skips_cleanly_without_a_trained_draft(pytester):
    res = pytester.runpytest("-m", "conformance", "--contract", str(TINY), "-p", "no:cacheprovider",
                             "--conformance-paths", "sglang-engine", "-rs")
    res.assert_outcomes(skipped=1)
    res.stdout.fnmatch_lines(["*sglang-engine: no trained draft for this pair*"])


def test_a_suite_that_checked_nothing_says_so_and_exits_5(pytester):
    """newuser finding 2: ``pytest -m conformance --contract ok.yaml`` where every path skipped printed
    "12 skipped", exit 0, no report; the reasons only with -rs. Now the report says NOTHING CHECKED with
    the reasons grouped (no -rs) and the exit status is pytest's NO_TESTS_COLLECTED (5): nothing was tested."""
    res = pytester.runpytest("-m", "conformance", "--contract", str(TINY), "-p", "no:cacheprovider",
                             "--conformance-paths", "sglang-engine")
    res.assert_outcomes(skipped=1)
    assert res.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    res.stdout.fnmatch_lines(["*conformance report*", "NOTHING CHECKED: every path skipped (1 item*",
                              "*no trained draft for this pair*", "*tiny-llama-eagle3::sglang-engine*"])
    assert "CONFORMS" not in res.stdout.str()
    # one path that ran is a check: the session's status is pytest's own
    ran = pytester.runpytest("-m", "conformance", "--contract", str(TINY), "-p", "no:cacheprovider",
                             "--conformance-paths", "training,sglang-engine")
    ran.assert_outcomes(passed=1, skipped=1)
    assert ran.ret == 0 and "NOTHING CHECKED" not in ran.stdout.str()


def test_the_suite_asked_for_without_a_contract_names_contract(pytester):
    """newuser finding 17: ``pytest -m conformance`` with no contract said only "no tests ran" (exit 5)."""
    pytester.makeini("[pytest]\n")
    res = pytester.runpytest("-m", "conformance", "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    res.stdout.fnmatch_lines(["NOTHING CHECKED: no contract was collected*--contract PATH*"])


def test_accept_length_gate():
    from conftest import contract_with

    from eagle3_conformance.checks import check_accept_length
    from eagle3_conformance.contract import load_contract

    c = contract_with(load_contract(TINY), **{"gates.min_accept_length": 2.0})
    assert check_accept_length(c, 2.4)[0].status == "pass"
    assert check_accept_length(c, 1.0)[0].status == "fail"
    assert check_accept_length(c, None)[0].status == "fail"
    assert check_accept_length(load_contract(TINY), 1.0)[0].status == "skip"


def test_bands_calibrated_on_data_pass_that_data_on_every_path(tiny, tmp_path, capsys):
    """Regression: the all-rows disk scan paired the verifier row of token t with position t+1,
    so the massive-activation start token escaped exclusion and failed its band."""
    cal = tmp_path / "cal.yaml"
    assert main(["calibrate", str(TINY), "--data", str(tiny.data_dir), "--reference", str(tiny.target_dir),
                 "-o", str(cal)]) == 0
    out = tmp_path / "r.json"
    assert main(["check-data", str(cal), "--data", str(tiny.data_dir), "--reference", str(tiny.target_dir),
                 "--json", str(out), "--quiet"]) == 0
    bands = [f for f in json.loads(out.read_text())["findings"] if f["check"] == "norm_band"]
    assert {f["path"] for f in bands} == {"training", "training-disk"}
    assert "fail" not in {f["status"] for f in bands}
    assert sum(f["status"] == "pass" and f["slot"] == "verifier" and f["path"] == "training-disk" for f in bands) >= 10


def test_reference_of_another_target_is_bad_input(tiny, tmp_path, capsys):
    from eagle3_conformance.testbed.fixtures import build_fixture

    wide = build_fixture("tiny-llama-wide")
    rc = main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--reference", str(wide.target_dir), "--quiet"])
    assert rc == 2
    assert "hidden_size 96 != contract target.hidden_size 64" in capsys.readouterr().err


def test_plugin_leaves_unrelated_yaml_alone(pytester):
    pytester.makeini("[pytest]\n")
    d = pytester.mkdir("contracts")
    (d / "deploy.yaml").write_text("replicas: 3\nimage: nginx\n")
    res = pytester.runpytest("-m", "conformance", "-p", "no:cacheprovider")
    res.assert_outcomes()
    assert "deploy.yaml" not in res.stdout.str()


# --- regressions from the second user test --------------------------------------------------------


def test_init_refuses_to_write_over_its_inputs_even_with_force(tiny, tmp_path, capsys):
    import shutil

    t, d = tmp_path / "target", tmp_path / "draft"
    shutil.copytree(tiny.target_dir, t)
    shutil.copytree(tiny.draft_dir, d)
    before = (t / "config.json").read_bytes()
    rc = main(["init", "--target", str(t / "config.json"), "--draft", str(d), "--engine", "sglang==0.5.23",
               "-o", str(t / "config.json"), "--force"])
    assert rc == 2 and "refusing" in capsys.readouterr().err
    assert (t / "config.json").read_bytes() == before


def test_init_from_config_paths_records_the_model_dirs(tiny, tmp_path):
    from eagle3_conformance.contract import load_contract

    out = tmp_path / "c.yaml"
    assert main(["init", "--target", str(tiny.target_dir / "config.json"), "--draft",
                 str(tiny.draft_dir / "config.json"), "--engine", "sglang==0.5.23", "-o", str(out)]) == 0
    c = load_contract(out)
    assert (out.parent / c.target.path).resolve() == tiny.target_dir.resolve()


def test_calibrate_plot_must_not_land_in_the_data(tiny, tmp_path, capsys):
    assert main(["calibrate", str(TINY), "--data", str(tiny.data_dir), "--plot",
                 str(tiny.data_dir / "p.png")]) == 2
    assert not (tiny.data_dir / "p.png").exists()
    assert main(["calibrate", str(TINY), "--data", str(tiny.data_dir), "--plot", str(tmp_path / "p.yaml")]) == 2
    assert "give a .png" in capsys.readouterr().err


def test_reference_of_another_architecture_is_bad_input(tiny, capsys):
    from eagle3_conformance.testbed.fixtures import build_fixture

    ds = build_fixture("tiny-deepseek")  # same L, d and vocab as tiny-llama, another model
    rc = main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--reference", str(ds.target_dir), "--quiet"])
    assert rc == 2
    assert "architecture DeepseekV3ForCausalLM != contract target.architecture LlamaForCausalLM" in capsys.readouterr().err


def test_plugin_json_must_not_overwrite_the_contract(pytester, tmp_path):
    c = tmp_path / "c.yaml"
    c.write_text(TINY.read_text())
    res = pytester.runpytest("-m", "conformance", "--contract", str(c), "--conformance-json", str(c),
                             "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert c.read_text() == TINY.read_text()


def test_plugin_fails_on_a_misspelled_fixture(pytester, tmp_path):
    c = tmp_path / "contracts" / "typo.yaml"
    c.parent.mkdir()
    c.write_text(TINY.read_text().replace("fixture: tiny-llama", "fixture: tiny-lama"))
    res = pytester.runpytest("-m", "conformance", "--contract", str(c), "-p", "no:cacheprovider",
                             "--conformance-paths", "training")
    res.assert_outcomes(failed=1)  # refused by the contract gate, as `validate` refuses it (issue 41)
    res.stdout.fnmatch_lines(["*typo.yaml:*: fixture: fixture 'tiny-lama' is not a known fixture*"])


@pytest.mark.parametrize("kind,words", [("dir", "is a directory; give a contract YAML file"),
                                        ("missing", "no such file")])
def test_plugin_refuses_a_contract_that_is_not_a_file(pytester, tmp_path, kind, words):
    p = tmp_path / "contracts"
    if kind == "dir":
        p.mkdir()
        (p / "c.yaml").write_text(TINY.read_text())
    res = pytester.runpytest("-m", "conformance", "--contract", str(p), "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"*--contract {p}: {words}*"])


@pytest.mark.parametrize("paths", ["training,foo", "sglang_extend"])
def test_plugin_refuses_an_unknown_conformance_path(pytester, paths):
    res = pytester.runpytest("-m", "conformance", "--contract", str(TINY), "-p", "no:cacheprovider",
                             "--conformance-paths", paths)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    bad = paths.split(",")[-1]
    res.stderr.fnmatch_lines([f"*unknown path {bad}; valid: training*sglang-extend*"])


def test_plugin_skips_engine_paths_on_a_target_without_weights(pytester, tmp_path):
    """A target.path with config.json but no weights (a config-only dir made for init): each path
    skips with one line naming the directory, never an engine's traceback."""
    from eagle3_conformance.testbed.fixtures import build_fixture

    tgt = tmp_path / "config-only"
    tgt.mkdir()
    (tgt / "config.json").write_text((build_fixture("tiny-llama").target_dir / "config.json").read_text())
    c = tmp_path / "c.yaml"
    c.write_text(TINY.read_text().replace("fixture: tiny-llama\n", "")
                 .replace("  name: fixtures/tiny-llama\n", f"  name: fixtures/tiny-llama\n  path: {tgt}\n", 1))
    res = pytester.runpytest("-m", "conformance", "--contract", str(c), "-p", "no:cacheprovider", "-rs",
                             "--conformance-paths", "sglang-extend,sglang-decode,cross-path")
    res.assert_outcomes(skipped=3)
    res.stdout.fnmatch_lines([f"SKIPPED [[]3[]] *: {tgt}: no [*].safetensors weights"])
    assert "Traceback" not in res.stdout.str()


def test_plugin_contract_contradicting_its_target_is_one_line_and_not_judged(pytester, tmp_path):
    """A contract whose pair holds another model (hidden size 64, contract 32): each path
    fails with the reference's one-line refusal (contract file, path, both sizes), no traceback
    through pytest and hypothesis, and the report says NOT JUDGED, not CONFORMS (a fresh user's
    report: 2,500 lines, then "CONFORMS ON SHAPES ONLY ... 0 failed"). The pair is the contract's
    fixture: a target.path with its config.json is refused before any path runs, as ``validate``
    refuses it (test_plugin_contract_contradicting_its_target_path_is_an_input_error)."""
    pytest.importorskip("sglang")

    c = tmp_path / "c.yaml"
    text = TINY.read_text()
    # the contract stays consistent with itself (widths follow its d = 32); only the target disagrees
    text = text.replace("  hidden_size: 64\n", "  hidden_size: 32\n", 1).replace(
        "target_hidden_size: 64", "target_hidden_size: 32").replace("feature_width: 192", "feature_width: 96")
    c.write_text(text)
    out = tmp_path / "r.json"
    # a subprocess: SGLang's process-wide parallel state from other in-process runs must not leak in
    res = pytester.runpytest_subprocess("-m", "conformance", "--contract", str(c), "-p", "no:cacheprovider", "-rs",
                                        "--conformance-paths", "sglang-extend,sglang-decode",
                                        "--conformance-json", str(out))
    res.assert_outcomes(failed=2)
    res.stdout.fnmatch_lines([f"{c}: sglang-extend: *not the contract's target: hidden_size 64 != contract "
                              "target.hidden_size 32*", "NOT JUDGED: bad input stopped 2 path(s): sglang-extend, "
                              "sglang-decode*"])
    text_out = res.stdout.str()
    assert "Traceback" not in text_out and "site-packages/hypothesis" not in text_out and "CONFORMS" not in text_out
    doc = json.loads(out.read_text())
    assert doc["meta"]["verdict"].startswith("NOT JUDGED") and len(doc["meta"]["errors"]) == 2
    assert [r["passed"] for r in doc["meta"]["validated_on"]] == [False]


def test_plugin_applies_validates_local_config_checks(pytester, tmp_path, capsys):
    """Issue 33, tried as a new user: a pair's draft config edited to the seed's embedding fix,
    ids [-1, 1, 3] (SGLang's +1 rule reads -1 as B_0). ``validate`` exits 2 naming the config;
    ``pytest -m conformance --contract`` on the same contract ran the paths, which skipped on this
    config-only pair, and exited 0. Now its one ``contract`` item fails with validate's message and
    the report and JSON say INPUT ERROR."""
    from test_authoring import dcfg, tcfg, write_pair

    t, d = write_pair(tmp_path, tcfg(), dcfg("nested", [1, 3, 4]))
    c = tmp_path / "contracts" / "c.yaml"
    c.parent.mkdir()  # init writes into an existing directory only
    assert main(["init", "--target", str(t), "--draft", str(d), "-o", str(c)]) == 0
    ok = pytester.runpytest("-m", "conformance", "--contract", str(c), "-p", "no:cacheprovider",
                            "--conformance-paths", "training")
    # the pair as init wrote it: no contract item, its path skips (no data here): nothing checked, exit 5
    assert ok.ret == pytest.ExitCode.NO_TESTS_COLLECTED and "NOTHING CHECKED" in ok.stdout.str()
    cfg = json.loads((d / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [-1, 1, 3]
    (d / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    assert main(["validate", str(c)]) == 2
    problem = next(ln for ln in capsys.readouterr().out.splitlines() if "[-1, 1, 3]" in ln)  # h-field: the negative id is named first (R-reports)
    assert "[-1, 1, 3]" in problem and str(d / "config.json") in problem, problem
    before = c.read_bytes()
    out = tmp_path / "r.json"
    res = pytester.runpytest("-m", "conformance", "--contract", str(c), "-p", "no:cacheprovider",
                             "--conformance-json", str(out))
    res.assert_outcomes(failed=1)
    text = res.stdout.str()
    assert "c.yaml::contract" in text and problem in text and "Traceback" not in text
    assert f"INPUT ERROR: {c}: the contract does not load" in text and "CONFORMS" not in text
    doc = json.loads(out.read_text())
    assert doc["meta"]["verdict"].startswith("INPUT ERROR") and doc["meta"]["errors"][0]["error"] == problem
    assert c.read_bytes() == before  # the input is left as it was


def test_plugin_contract_contradicting_its_target_path_is_an_input_error(pytester, tmp_path):
    """The same contradiction with the pair at target.path / draft.path: the plugin loads the
    contract with validate's local-config checks, so its one ``contract`` item fails naming the
    target's config.json and its hidden_size, and no path runs (no engine is started)."""
    from eagle3_conformance.testbed.fixtures import build_fixture

    b = build_fixture("tiny-llama")
    c = tmp_path / "c.yaml"
    text = (TINY.read_text().replace("fixture: tiny-llama\n", "")
            .replace("  name: fixtures/tiny-llama\n", f"  name: fixtures/tiny-llama\n  path: {b.target_dir}\n", 1)
            .replace("  name: fixtures/tiny-llama/draft\n", f"  name: fixtures/tiny-llama/draft\n  path: {b.draft_dir}\n"))
    text = text.replace("  hidden_size: 64\n", "  hidden_size: 32\n", 1).replace(
        "target_hidden_size: 64", "target_hidden_size: 32").replace("feature_width: 192", "feature_width: 96")
    c.write_text(text)
    res = pytester.runpytest("-m", "conformance", "--contract", str(c), "-p", "no:cacheprovider",
                             "--conformance-paths", "sglang-extend,sglang-decode")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines([f"*{c}:*: target.hidden_size: 32 here, but the target config "
                              f"{b.target_dir / 'config.json'} has hidden_size = 64*"])
    assert "CONFORMS" not in res.stdout.str() and "Traceback" not in res.stdout.str()


def test_version_and_debug_after_the_verb(capsys, tmp_path):
    """newuser finding 16: no ``--version`` (``__version__`` existed), and errors said "run with --debug"
    while ``validate X --debug`` was refused as an unknown argument."""
    from eagle3_conformance import __version__

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"eagle3-conformance {__version__}"
    missing = str(tmp_path / "nope.yaml")
    assert main(["validate", missing]) == main(["validate", missing, "--debug"]) == 2
    assert "unrecognized arguments" not in capsys.readouterr().err
    from eagle3_conformance.cli import build_parser

    assert build_parser().parse_args(["validate", missing, "--debug"]).debug is True
    assert build_parser().parse_args(["--debug", "validate", missing]).debug is True
    assert build_parser().parse_args(["validate", missing]).debug is False


def test_readme_names_every_verb_and_only_real_report_options():
    """newuser finding 16: the README's verb list lacked monitor and upgrade-contract, and said translate
    takes --markdown (it takes --json only)."""
    import re

    from eagle3_conformance.cli import build_parser

    readme = (REPO / "README.md").read_text()
    listed = readme.split("`eagle3-conformance --help` lists the verbs:", 1)[1].split("One convention", 1)[0]
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(re.findall(r"`([a-z][a-z-]*)`", listed)) == set(sub.choices)
    translate = sub.choices["translate"].format_help()
    assert "--markdown" not in translate and "`translate` takes `--json` only" in readme
    assert "| `[html]` |" in readme and "| `[monitor]` |" in readme


def test_plugin_diagnoses_an_engine_default_capture_on_the_first_drawn_example(pytester, tmp_path, capsys):
    """newuser finding 9: ``pytest -m conformance --contract k1s.yaml -k sglang-extend`` on a K1 pair (the
    draft's trained ids at the top level only: speculators reads them, SGLang ignores them and captures its
    defaults) failed on engine_mapping, but the first drawn example was a 1-token prompt, every row at an
    excluded position: slot_identity, slot_order and row_fingerprint skipped, no DIAGNOSIS and no fix.
    The paths now draw prompts long enough to fingerprint (``paths.base.min_prompt_len``). Shown failing
    before (the report had no DIAGNOSIS block; slot_identity said "every row is at an excluded position").
    Its fix then named the top-level list the draft already had (vLLM's key, from the contract's location);
    an engine-default diagnosis on an SGLang path now names SGLang's nested key.
    Expected boundaries by hand: speculators reads top-level [1, 3, 4] as B_1, B_3, B_4; SGLang's defaults
    for L = 8 are B_2, B_4, B_5 (REFERENCE.md 2.1-2.3)."""
    pytest.importorskip("sglang")
    from eagle3_conformance.testbed.fixtures import build_fixture

    fx = build_fixture("tiny-llama")
    cfg = json.loads((fx.draft_dir / "config.json").read_text())
    cfg.pop("eagle_config")
    cfg["eagle_aux_hidden_state_layer_ids"] = [1, 3, 4]
    draft = tmp_path / "d_k1"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps(cfg, indent=1))
    c = tmp_path / "k1s.yaml"
    assert main(["init", "--target", str(fx.target_dir), "--draft", str(draft), "--engine", "speculators",
                 "-o", str(c)]) == 0
    assert "aux ['B_1', 'B_3', 'B_4']" in capsys.readouterr().out
    res = pytester.runpytest_subprocess("-m", "conformance", "--contract", str(c), "-p", "no:cacheprovider", "-v",
                                        "-k", "sglang-extend")
    res.assert_outcomes(failed=1)
    out = res.stdout.str()
    assert "every row is at an excluded position" not in out, out
    res.stdout.fnmatch_lines(["DIAGNOSIS 1/1: K1 engine-default, on sglang-extend*",
                              "*slots hold [[]B_2, B_4, B_5[]]: the default layers (2, L//2, L-3) for*",
                              "*fix:*SGLang reads only the nested key*",
                              # in SGLang's key and convention (nested id i captures B_{i+1}), not the top-level
                              # list the draft already holds
                              "*draft config.json, eagle_config.eagle_aux_hidden_state_layer_ids:*", "*[[]0, 2, 3[]]*",
                              "*1 slot_identity   slot 0 *slot 0 is B_2", "*contract says B_1*"])


def test_conformance_json_of_a_suite_that_checked_nothing_says_nothing_checked(pytester, tmp_path):
    """``--conformance-json`` when every path skipped: the terminal said NOTHING CHECKED (exit 5) while the
    JSON a CI job reads said "CONFORMS ON SHAPES ONLY" for contract "" (the verdict of no findings). Now the
    file holds the terminal's verdict, the contract, and each item with its reason; a file left by an earlier
    run is replaced. Shown failing before (the verdict was CONFORMS ON SHAPES ONLY)."""
    out = tmp_path / "r.json"
    out.write_text('{"meta": {"verdict": "CONFORMS"}}')  # a stale report of an earlier run
    res = pytester.runpytest("-m", "conformance", "--contract", str(TINY), "-p", "no:cacheprovider",
                             "--conformance-paths", "sglang-engine", "--conformance-json", str(out))
    assert res.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    doc = json.loads(out.read_text())
    assert doc["meta"]["verdict"].startswith("NOTHING CHECKED: every path skipped (1 item(s))"), doc["meta"]
    assert doc["contract"] == "tiny-llama-eagle3" and doc["findings"] == []
    [skip] = doc["meta"]["skipped"]
    assert skip["item"] == "tiny-llama-eagle3::sglang-engine" and "no trained draft for this pair" in skip["reason"]
    res.stdout.fnmatch_lines([doc["meta"]["verdict"] + "*"])  # the terminal's words


def test_reports_name_the_reference_by_its_absolute_path(tiny, tmp_path, monkeypatch, capsys):
    """newuser finding 17: a contract written by ``init`` holds ``target.path`` relative to itself; named from
    its own directory (``check-data c.yaml``), the report's reference read ``../../../root/.cache/...``. Now the
    pair is resolved against the contract's absolute directory: the report names the directory itself.
    Shown failing before (``reference: ../..`` in the report)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["init", "--target", str(tiny.target_dir), "--draft", str(tiny.draft_dir), "-o", "c.yaml"]) == 0
    assert "path: ../" in (work / "c.yaml").read_text()  # init writes it relative to the contract
    capsys.readouterr()
    main(["check-data", "c.yaml", "--data", str(tiny.data_dir), "--json", "r.json"])
    out = capsys.readouterr().out
    assert f"reference: {tiny.target_dir}" in out and "reference: ../" not in out, out
    assert json.loads((work / "r.json").read_text())["meta"]["reference"] == str(tiny.target_dir)


@pytest.mark.parametrize("excluded,shortest", [([0], 3), ([], 2), ([1], 3), ([0, 1], 4), ([0, 2], 4), ([5], 2)])
def test_the_shortest_drawn_prompt_holds_two_positions_not_excluded(tiny_contract, excluded, shortest):
    """``min_prompt_len``: two kept positions (one to fingerprint, a second for the shift checks), worked by
    hand: [0] keeps 1, 2 -> 3 tokens; [0, 2] keeps 1, 3 -> 4; [5] keeps 0, 1 -> 2."""
    from eagle3_conformance.paths.base import min_prompt_len

    c = tiny_contract.model_copy(update={"norm_bands": tiny_contract.norm_bands.model_copy(
        update={"exclude_positions": excluded})})
    assert min_prompt_len(c) == shortest
