"""Issue 41 item 1: one contract gate for every verb. A contract ``validate`` refuses is refused by every
door that takes one, with ``validate``'s own lines (file and line), exit 2, and nothing run; ``init`` never
writes one (it runs the same gate on the text it would write) and refuses a draft config whose two id lists
differ, naming both keys and which engine reads which. Item 6: the contract is positional or ``--contract``
in every verb (both spellings run through the gate here).

The refused contract is the project's SmolLM2 contract (contracts/smollm2-135m.yaml) pointed at the
project's trained SmolLM2 draft (fixtures/drafts/smollm2-135m-eagle3, the draft
eagle3_conformance/testbed/trained_draft.py builds and ships) whose config.json carries a second, different
id list at the top level, as an export that went through two writers does: SGLang reads the nested
[1, 14, 26], vLLM and speculators the top-level [2, 15, 27]. Before the gate, serve-hooks wrote its hooks
for it (exit 0) and check-captures judged the records made with it (CONFORMS, exit 0: SGLang read the
nested list), while validate refused it (exit 2)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from eagle3_conformance.cli import main

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "contracts" / "smollm2-135m.yaml"
TRAINED = ROOT / "fixtures" / "drafts" / "smollm2-135m-eagle3"


def _two_id_lists(d: Path) -> Path:
    """The trained draft's config.json with a second id list at the top level (its weights are not needed:
    nothing past the gate runs)."""
    d.mkdir(parents=True)
    cfg = json.loads((TRAINED / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [2, 15, 27]
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    return d


@pytest.fixture
def refused(tmp_path) -> Path:
    """contracts/smollm2-135m.yaml with ``draft.path`` at the trained draft (its draft_vocab_size 4096, the contract's)
    whose config holds two id lists that differ."""
    _two_id_lists(tmp_path / "draft")
    text = CONTRACT.read_text()
    text = text.replace("  name: fixtures/smollm2-135m/draft\n", "  name: fixtures/smollm2-135m/draft\n  path: draft\n")
    c = tmp_path / "pair.yaml"
    c.write_text(text)
    return c


def _validate_lines(c: Path, capsys) -> list[str]:
    assert main(["validate", str(c)]) == 2
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(str(c))]
    assert lines, "validate printed no problem"
    return lines


def test_validate_refuses_the_contract_with_the_draft_configs_keys_and_lines(refused, capsys):
    (line,) = _validate_lines(refused, capsys)
    n = refused.read_text().splitlines().index("  layer_ids:") + 2  # the values: line
    cfg = refused.parent / "draft" / "config.json"
    assert line.startswith(f"{refused}:{n}:5: draft.layer_ids.values: {cfg}:")
    assert "eagle_config.eagle_aux_hidden_state_layer_ids = [1, 14, 26]" in line
    assert "eagle_aux_hidden_state_layer_ids = [2, 15, 27] differ" in line
    assert re.search(rf"{re.escape(str(cfg))}:\d+: eagle_aux_hidden_state_layer_ids", line)


def _verbs(c: Path, tmp: Path, spelling: str) -> dict[str, list[str]]:
    """Each verb that takes a contract, on ``c`` in ``spelling`` (positional or --contract), with inputs
    that would run it were the contract accepted."""
    (tmp / "caps").mkdir()
    (tmp / "data").mkdir()
    (tmp / "files").mkdir()
    for i in (0, 1):
        (tmp / f"part{i}.json").write_text(json.dumps({"contract": str(c), "findings": [], "meta": {}}))
    k = [str(c)] if spelling == "positional" else ["--contract", str(c)]
    return {
        "serve-hooks": ["serve-hooks", *k, "--out", str(tmp / "new-caps")],
        "check-captures": ["check-captures", *k, str(tmp / "caps")],
        "check-data": ["check-data", *k, "--data", str(tmp / "data"), "--no-reference"],
        "check-offline": ["check-offline", *k, "--files", str(tmp / "files"), "--no-reference"],
        "accept": ["accept", *k, "--server", "http://127.0.0.1:9"],  # never contacted
        "calibrate": ["calibrate", *k, "--data", str(tmp / "data"), "--no-reference"],
        "translate": ["translate", *k, "--to", "sglang"],
        "monitor": ["monitor", *k, "--server", "http://127.0.0.1:9", "--baseline", str(tmp / "b.json")],
        "merge-reports": ["merge-reports", *k, str(tmp / "merged.json"), str(tmp / "part0.json"),
                          str(tmp / "part1.json")],
        "check-invariance": ["check-invariance", *k, "--server", "http://127.0.0.1:9",  # never contacted
                             "--captures", str(tmp / "caps")],
    }


VERBS = ("serve-hooks", "check-captures", "check-data", "check-offline", "accept", "calibrate", "translate",
         "merge-reports", "monitor", "check-invariance")


@pytest.mark.parametrize("spelling", ["positional", "--contract"])
@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_refuses_what_validate_refuses_with_validates_lines(refused, tmp_path, capsys, verb, spelling):
    want = _validate_lines(refused, capsys)
    (tmp_path / "run").mkdir()
    argv = _verbs(refused, tmp_path / "run", spelling)[verb]
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    for line in want:  # the same words as validate, file and line included
        assert line in err, err
    assert f"{refused}: refused by the contract checks every verb applies" in err
    assert not (tmp_path / "run" / "new-caps").exists() and not (tmp_path / "run" / "merged.json").exists()
    assert "CONFORMS" not in out


def test_upgrade_check_names_a_refused_contract_with_validates_lines(refused, tmp_path, capsys, monkeypatch):
    want = _validate_lines(refused, capsys)
    monkeypatch.setenv("CONFORMANCE_MODEL_CACHE", str(tmp_path / "cache"))  # offline: no release fetched
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    rc = main(["upgrade-check", "--contract", str(refused), "--from", "sglang==9.9.1", "--to", "sglang==9.9.2"])
    out = capsys.readouterr().out
    assert rc == 2 and f"{refused}: ERROR does not load (refused by validate's checks):" in out
    for line in want:
        assert f"  {line}" in out, out


def test_the_plugin_refuses_it_with_validates_lines_positional_or_contract(refused, pytester, capsys):
    want = _validate_lines(refused, capsys)
    for args in (["--contract", str(refused)], [str(refused)]):
        res = pytester.runpytest("-m", "conformance", *args, "-p", "no:cacheprovider", "--conformance-paths",
                                 "training")
        res.assert_outcomes(failed=1)
        text = "\n".join(res.stdout.lines)
        assert "pair.yaml::contract" in text and "INPUT ERROR" in text
        for line in want:
            assert line in text


def test_the_plugins_contract_fixture_refuses_it_too(refused, pytester, capsys):
    """A hand-written test's ``conformance_contracts`` fixture is a door too: the same gate, the same lines."""
    want = _validate_lines(refused, capsys)
    pytester.makepyfile(test_mine="def test_mine(conformance_contracts):\n    assert conformance_contracts\n")
    res = pytester.runpytest("--contract", str(refused), "-p", "no:cacheprovider", "-k", "test_mine")
    res.assert_outcomes(errors=1)
    text = "\n".join(res.stdout.lines)
    assert all(line in text for line in want), text


def test_a_contract_the_gate_accepts_runs_with_either_spelling(tmp_path, capsys):
    c = str(ROOT / "contracts" / "tiny-llama.yaml")
    outs = []
    for k in ([c], ["--contract", c]):
        assert main(["translate", *k, "--to", "speculators", "--json"]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0] == outs[1] and outs[0]["ids"] == [2, 4, 5]  # tiny-llama's B_2, B_4, B_5 as boundary ids
    out = tmp_path / "ids.json"
    assert main(["translate", c, "--to", "speculators", "--json", str(out)]) == 0  # --json OUT: the same, in a file
    assert json.loads(out.read_text()) == outs[0]
    assert main(["serve-hooks", "--contract", c, "--out", str(tmp_path / "a")]) == 0
    assert main(["serve-hooks", c, "--out", str(tmp_path / "b")]) == 0
    assert main(["validate", "--contract", c, str(ROOT / "contracts" / "tiny-llama-wide.yaml")]) == 0


@pytest.mark.parametrize("argv,words", [
    (["translate", "--to", "sglang"], "no contract given"),
    (["serve-hooks", "--out", "x"], "no contract given"),
    (["validate"], "no contract given"),
    (["translate", "contracts/tiny-llama.yaml", "--contract", "contracts/tiny-llama-wide.yaml", "--to", "sglang"],
     "name two contracts; give one"),
    (["check-captures", "contracts/tiny-llama.yaml", "caps", "--contract", "contracts/tiny-llama-wide.yaml"],
     "name two contracts; give one"),
    (["merge-reports", "contracts/tiny-llama.yaml", "o.json", "a.json", "b.json", "--contract",
      "contracts/tiny-llama-wide.yaml"], "name two contracts; give one"),
])
def test_no_contract_or_two_contracts_is_a_usage_error(argv, words, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(argv) == 2
    assert words in capsys.readouterr().err


# --- init: never writes what validate refuses -------------------------------------------------------


@pytest.fixture(scope="module")
def pair():
    """The project's trained SmolLM2 pair: the target converted into the model cache (about 20 s of CPU the
    first time on a machine), the shipped trained draft."""
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft

    return ensure_trained_draft(RECIPE)


def _draft_with(tmp: Path, change) -> Path:
    d = tmp / "draft"
    d.mkdir(parents=True)
    cfg = json.loads((TRAINED / "config.json").read_text())
    change(cfg)
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    return d


@pytest.mark.slow  # the real SmolLM2 target's config (model cache) and init asking SGLang's rule: ~5-30 s
@pytest.mark.parametrize("engine,reads", [("sglang", "the nested key"), ("vllm==0.33.0", "the top-level key"),
                                          ("speculators", "the top-level key"), ("specforge", "the nested key")])
def test_init_refuses_a_draft_config_with_two_id_lists_that_differ(pair, tmp_path, capsys, engine, reads):
    """Before: init wrote the contract from the nested list (exit 0), and validate refused that very file
    (exit 2)."""
    d = _draft_with(tmp_path, lambda cfg: cfg.update(eagle_aux_hidden_state_layer_ids=[2, 15, 27]))
    out = tmp_path / "pair.yaml"
    rc = main(["init", "--target", str(pair.target_dir), "--draft", str(d), "--engine", engine, "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists(), err
    cfg = d / "config.json"
    assert re.search(rf"{re.escape(str(cfg))}:\d+: eagle_config.eagle_aux_hidden_state_layer_ids = \[1, 14, 26\] and "
                     rf"{re.escape(str(cfg))}:\d+: eagle_aux_hidden_state_layer_ids = \[2, 15, 27\] differ", err), err
    assert "SGLang reads only the nested key (0.5.23 spec_aux_hidden_state.py:185-196), as SpecForge 0.2.0 does" in err
    assert "vLLM 0.33.0 and speculators 0.9.0 read the top-level one" in err
    assert f"--engine {engine} reads {reads}" in err and "Keep one list, the ids the draft was trained on" in err


@pytest.mark.slow  # as above
def test_init_never_writes_a_contract_validate_refuses(pair, tmp_path, capsys):
    """A draft config init derives a contract from but validate refuses (norm_before_fc only under eagle_config:
    SGLang applies it, speculators and SpecForge trained without it, R53). Before: init wrote it, exit 0, and
    validate refused the written file, exit 2. Now the gate runs on the text first: nothing is written, and the
    problem is validate's, at the line it would have had."""
    d = _draft_with(tmp_path, lambda cfg: cfg["eagle_config"].update(norm_before_fc=True))
    out = tmp_path / "pair.yaml"
    rc = main(["init", "--target", str(pair.target_dir), "--draft", str(d), "--engine", "sglang", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists(), err
    assert re.search(rf"{re.escape(str(out))}:\d+:\d+: draft.pre_fc_norm: {re.escape(str(d / 'config.json'))} sets "
                     "norm_before_fc only under eagle_config", err), err
    assert f"{out}: not written" in err
    # the same config with the key at the top level too is what validate accepts: init writes it, validate agrees
    d2 = _draft_with(tmp_path / "ok", lambda cfg: (cfg["eagle_config"].update(norm_before_fc=True),
                                                   cfg.update(norm_before_fc=True)))
    assert main(["init", "--target", str(pair.target_dir), "--draft", str(d2), "--engine", "sglang", "-o",
                 str(out)]) == 0
    capsys.readouterr()
    assert main(["validate", str(out)]) == 0


@pytest.mark.slow  # as above
@pytest.mark.parametrize("flag,serving", [([], "float16"), (["--serving-dtype", "float32"], "float32"),
                                          (["--serving-dtype", "bfloat16"], "bfloat16")])
def test_init_serving_dtype_is_the_launchs_dtype_default_sglangs_auto_rule(pair, tmp_path, flag, serving):
    """SmolLM2-135M's checkpoint is float32: SGLang 0.5.23's own dtype=auto rule (asked of its code,
    model_config._get_and_verify_dtype) serves it in float16; --serving-dtype states the launch's --dtype."""
    import yaml

    out = tmp_path / "pair.yaml"
    assert main(["init", "--target", str(pair.target_dir), "--draft", str(TRAINED), "--engine", "sglang", "-o",
                 str(out), *flag]) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["precision"]["serving"] == serving and doc["precision"]["training"] == "float16"
    line = next(ln for ln in out.read_text().splitlines() if ln.strip().startswith("serving:"))
    if flag:
        assert f"launched with --dtype {serving} (init --serving-dtype); its dtype=auto rule would serve float16" in line
    else:
        assert "dtype=auto serves a float32 checkpoint in float16" in line
    gates = next(ln for ln in out.read_text().splitlines() if ln.strip().startswith("slot_identity_min_cosine"))
    assert f"for serving ({serving})" in gates or (serving == "float16" and "for float16" in gates)
    assert main(["validate", str(out)]) == 0


def test_sglangs_own_auto_rule_answers_the_default():
    """The default is asked of the installed SGLang (not a copy of its rule): its function, on SmolLM2's
    float32 config and on a Gemma one."""
    from eagle3_conformance.authoring.precision import sglang_auto_dtype

    pytest.importorskip("sglang")
    assert sglang_auto_dtype({"model_type": "llama", "torch_dtype": "float32"}) == "float16"
    assert sglang_auto_dtype({"model_type": "gemma3_text", "torch_dtype": "float32"}) == "bfloat16"
    assert sglang_auto_dtype({"model_type": "llama", "torch_dtype": "bfloat16"}) == "bfloat16"


# --- the CLI's exit codes are the public enum -----------------------------------------------------


def test_no_verb_returns_a_bare_int():
    """Every ``return`` of a verb's module returns an ExitCode member or a call (exit_code(), another verb),
    never an integer literal (issue 41 item 6)."""
    bad = []
    for f in sorted((ROOT / "eagle3_conformance" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Constant) and isinstance(
                    node.value.value, int) and not isinstance(node.value.value, bool):
                bad.append(f"{f.name}:{node.lineno}: return {node.value.value}")
    assert bad == []
