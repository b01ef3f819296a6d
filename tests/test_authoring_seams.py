"""Authoring seams a fresh user hit (newuser-findings 2026-12-05): each test repeats the user's action with
the fault injected the way the user caused it. Expected boundaries are worked by hand from REFERENCE.md
2.1-2.3 and 3.2 (Llama, L = 32: engine defaults [2, L//2, L-3] = B_2, B_16, B_29; SGLang llama.py reads a
nested id i as B_{i+1}; vLLM and speculators read a top-level id k as B_k), not taken from the code under
test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3_conformance.cli import main


def _target(L=32, d=64, arch="LlamaForCausalLM"):
    return {"architectures": [arch], "model_type": "llama", "num_hidden_layers": L, "hidden_size": d,
            "vocab_size": 512, "torch_dtype": "bfloat16"}


def _draft(top=None, nested=None, **extra):
    c = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 64,
         "target_hidden_size": 64, "vocab_size": 512, "draft_vocab_size": 256, **extra}
    if nested is not None:
        c["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": nested}
    if top is not None:
        c["eagle_aux_hidden_state_layer_ids"] = top
    return c


def _write(d: Path, cfg: dict) -> Path:
    """``d/config.json`` written one key a line (as exports are), so key lines are countable."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    return d


def _line(f: Path, key: str) -> int:
    return next(i for i, ln in enumerate(f.read_text().splitlines(), 1) if ln.strip().startswith(f'"{key}"'))


def _init(tmp: Path, *argv: str) -> int:
    return main(["init", *argv])


# --- #1: a top-level-only id list under an engine that reads the nested key -----------------------------


@pytest.mark.parametrize("engine,name", [("sglang", "SGLang"), ("specforge", "SpecForge")])
def test_init_refuses_a_top_level_list_the_engine_ignores(tmp_path, capsys, engine, name):
    t = _write(tmp_path / "target", _target())
    d = _write(tmp_path / "d_k1", _draft(top=[1, 15, 28]))  # the user's K1 draft: top-level ids only
    out = tmp_path / "k1.yaml"
    rc = _init(tmp_path, "--target", str(t), "--draft", str(d), "--engine", engine, "-o", str(out))
    err = capsys.readouterr().err
    cfg = d / "config.json"
    assert rc == 2 and not out.exists(), err
    assert f"{cfg}:{_line(cfg, 'eagle_aux_hidden_state_layer_ids')}: eagle_aux_hidden_state_layer_ids = [1, 15, 28]" in err
    assert f"{name} reads only eagle_config.eagle_aux_hidden_state_layer_ids" in err
    assert "['B_2', 'B_16', 'B_29']" in err and "vLLM and speculators read it (['B_1', 'B_15', 'B_28'])" in err
    # B_1, B_15, B_28 as SGLang / SpecForge output-of ids: 0, 14, 27
    assert '"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 14, 27]}' in err
    assert "Traceback" not in err and "internal error" not in err


@pytest.mark.parametrize("engine", ["sglang", "specforge"])
def test_a_top_level_list_that_is_the_engines_default_is_written_and_validates(tmp_path, capsys, engine):
    t = _write(tmp_path / "target", _target())
    d = _write(tmp_path / "d", _draft(top=[2, 16, 29]))  # B_2, B_16, B_29 under either reading of the key
    out = tmp_path / "ok.yaml"
    assert _init(tmp_path, "--target", str(t), "--draft", str(d), "--engine", engine, "-o", str(out)) == 0
    assert "aux ['B_2', 'B_16', 'B_29']" in capsys.readouterr().out
    assert main(["validate", str(out)]) == 0


@pytest.mark.parametrize("engine,name", [("sglang", "SGLang"), ("specforge", "SpecForge")])
def test_the_gate_refuses_a_contract_whose_draft_config_has_only_an_ignored_top_level_list(tmp_path, capsys,
                                                                                          engine, name):
    """The contract was derived where the lists coincided; the draft was then re-exported with its trained ids
    at the top level only (the user's k1 draft): validate and every verb refuse it with init's words."""
    t = _write(tmp_path / "target", _target())
    d = _write(tmp_path / "d", _draft(top=[2, 16, 29]))
    out = tmp_path / "c.yaml"
    assert _init(tmp_path, "--target", str(t), "--draft", str(d), "--engine", engine, "-o", str(out)) == 0
    _write(d, _draft(top=[1, 15, 28]))
    capsys.readouterr()
    assert main(["validate", str(out)]) == 2
    said = capsys.readouterr().out
    cfg = d / "config.json"
    n = out.read_text().splitlines().index("  layer_ids:") + 2
    assert f"{out}:{n}:5: draft.layer_ids.values: {cfg}:{_line(cfg, 'eagle_aux_hidden_state_layer_ids')}: " in said
    assert f"{name} reads only eagle_config.eagle_aux_hidden_state_layer_ids" in said and "[0, 14, 27]" in said
    assert main(["translate", str(out), "--to", "vllm"]) == 2
    assert f"{name} reads only" in capsys.readouterr().err


# --- #6: the gate applies init's capture checks to the configs at target.path / draft.path --------------


def _contract(tmp: Path, capsys, draft: dict, *engine: str) -> tuple[Path, Path, Path]:
    t = _write(tmp / "target", _target())
    d = _write(tmp / "d", draft)
    out = tmp / "c.yaml"
    assert _init(tmp, "--target", str(t), "--draft", str(d), *engine, "-o", str(out)) == 0
    capsys.readouterr()
    return t, d, out


def test_init_and_the_gate_refuse_num_aux_hidden_states_that_is_not_k(tmp_path, capsys):
    """The user's draft config says num_aux_hidden_states 4 next to 3 ids (a 4-slot fc): init refused it,
    validate on a contract pointing at that config said ok."""
    t, d, out = _contract(tmp_path, capsys, _draft(nested=[1, 15, 28]))
    _write(d, _draft(nested=[1, 15, 28], num_aux_hidden_states=4))
    cfg = d / "config.json"
    where = f"{cfg}:{_line(cfg, 'num_aux_hidden_states')}: num_aux_hidden_states = 4 but "
    assert main(["validate", str(out)]) == 2
    said = capsys.readouterr().out
    assert where in said and "3 slots ['B_2', 'B_16', 'B_29']: fc width mismatch" in said, said
    assert _init(tmp_path, "--target", str(t), "--draft", str(d), "-o", str(tmp_path / "new.yaml")) == 2
    err = capsys.readouterr().err
    assert where in err and "fc width mismatch" in err and not (tmp_path / "new.yaml").exists()


def test_init_and_the_gate_refuse_a_full_model_as_the_draft(tmp_path, capsys):
    """The user ran init --target target --draft target (a 32-layer LlamaForCausalLM as its own EAGLE-3
    draft): a contract was written and validate said ok."""
    t = _write(tmp_path / "target", _target())
    out = tmp_path / "self.yaml"
    assert _init(tmp_path, "--target", str(t), "--draft", str(t), "--engine", "vllm", "-o", str(out)) == 2
    err = capsys.readouterr().err
    assert f"{t / 'config.json'}: not an EAGLE-3 draft: a full LlamaForCausalLM with num_hidden_layers = 32" in err
    assert not out.exists()
    _, d, c = _contract(tmp_path / "pair", capsys, _draft(nested=[1, 15, 28]))
    text = c.read_text()
    assert "\n  path: d\n" in text
    c.write_text(text.replace("\n  path: d\n", "\n  path: target\n"))  # the draft's path at the target model
    assert main(["validate", str(c)]) == 2
    said = capsys.readouterr().out
    assert "draft.path: " in said and "not an EAGLE-3 draft: a full LlamaForCausalLM" in said, said


# --- #13: non-integer ids: init gives validate's file:line error, exit 2 ---------------------------------


@pytest.mark.parametrize("ids,why", [
    ("2,16,29", "= 2,16,29: not a list of layer ids (str)"),     # the user's string
    ([2.0, 16, 29], "= [2.0, 16, 29]: 2.0 is not an integer layer id"),
    ([1, None, 28], "= [1, None, 28]: None is not an integer layer id"),
])
def test_init_names_non_integer_ids_with_validates_file_and_line(tmp_path, capsys, ids, why):
    t, d, out = _contract(tmp_path, capsys, _draft(nested=[1, 15, 28]))
    bad = _draft(nested=[1, 15, 28])
    bad["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    _write(d, bad)
    cfg = d / "config.json"
    said = f"{cfg}:{_line(cfg, 'eagle_aux_hidden_state_layer_ids')}: eagle_config.eagle_aux_hidden_state_layer_ids {why}"
    assert main(["validate", str(out)]) == 2
    assert said in capsys.readouterr().out
    assert _init(tmp_path, "--target", str(t), "--draft", str(d), "-o", str(tmp_path / "n.yaml")) == 2
    err = capsys.readouterr().err
    assert said in err and "internal error" not in err and not (tmp_path / "n.yaml").exists(), err


# --- #4 / #5: init's output path -----------------------------------------------------------------------


def test_init_into_a_directory_that_does_not_exist_refuses_and_creates_none(tmp_path, capsys):
    """The user's `init -o /nonexistent/x.yaml` created /nonexistent; check-offline refuses the same path."""
    t = _write(tmp_path / "target", _target())
    d = _write(tmp_path / "d", _draft(nested=[1, 15, 28]))
    out = tmp_path / "nonexistent" / "x.yaml"
    assert _init(tmp_path, "--target", str(t), "--draft", str(d), "-o", str(out)) == 2
    err = capsys.readouterr().err
    assert f"-o {out}: parent directory {out.parent} does not exist" in err, err
    assert not out.parent.exists()


def test_init_from_config_files_in_the_working_directory_writes_next_to_them(tmp_path, capsys, monkeypatch):
    """The user's `init --target tcfg.json --draft d_ok/config.json -o z.yaml` (configs given as files in the
    cwd) was refused as "-o lies inside the input directory ."."""
    monkeypatch.chdir(tmp_path)
    Path("tcfg.json").write_text(json.dumps(_target(), indent=1))
    _write(tmp_path / "d_ok", _draft(nested=[1, 15, 28]))
    assert _init(tmp_path, "--target", "tcfg.json", "--draft", "d_ok/config.json", "-o", "z.yaml") == 0, \
        capsys.readouterr().err
    Path("config.json").write_text(json.dumps(_target(), indent=1))  # a bare config.json in the cwd
    assert _init(tmp_path, "--target", "config.json", "--draft", "d_ok", "-o", "y.yaml") == 0
    assert Path("z.yaml").is_file() and Path("y.yaml").is_file()


def test_init_never_writes_into_a_model_directory_given_by_its_config(tmp_path, capsys, monkeypatch):
    """The protection -o's input-directory check exists for (f72caed): a config.json next to the model's
    weights names the model directory, and nothing is written into it."""
    monkeypatch.chdir(tmp_path)
    Path("config.json").write_text(json.dumps(_target(), indent=1))
    Path("model.safetensors").write_bytes(b"")
    _write(tmp_path / "d_ok", _draft(nested=[1, 15, 28]))
    assert _init(tmp_path, "--target", "config.json", "--draft", "d_ok", "-o", "c.yaml") == 2
    assert "lies inside the input directory" in capsys.readouterr().err and not Path("c.yaml").exists()


def test_init_reports_a_malformed_input_before_the_output_path(tmp_path, capsys, monkeypatch):
    """The user's malformed --target badcfg.json was hidden behind the -o refusal."""
    monkeypatch.chdir(tmp_path)
    Path("badcfg.json").write_text('{\n "num_hidden_layers": 32,\n oops\n}')
    _write(tmp_path / "d_ok", _draft(nested=[1, 15, 28]))
    assert _init(tmp_path, "--target", "badcfg.json", "--draft", "d_ok", "-o", "d_ok/z.yaml") == 2
    err = capsys.readouterr().err
    assert "badcfg.json:3:" in err and "invalid JSON" in err and "-o" not in err, err


# --- #12: calibrate's --reference defaults to the contract's reference, as its help says -------------------


def test_calibrate_with_neither_data_nor_reference_uses_the_contracts_reference(tmp_path, capsys):
    """The user's `calibrate s.yaml -o cal.yaml`: the help says --reference defaults to the contract's fixture
    or target.path; it said "calibrate needs --data DIR or --reference MODEL_DIR" (exit 2)."""
    from eagle3_conformance.testbed.fixtures import build_fixture

    build_fixture("tiny-llama")  # the contract's fixture: its target is the default reference
    src = tmp_path / "s.yaml"
    src.write_text((Path(__file__).resolve().parents[1] / "contracts" / "tiny-llama.yaml").read_text())
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", str(src), "-o", str(out)]) == 0, capsys.readouterr().err
    said = capsys.readouterr().out
    assert "B_0 (embedding output)" in said, said  # the profile of every boundary: a reference forward ran
    assert f"wrote {out}: norm bands calibrated" in said.replace("\n", "")
    assert "status: calibrated" in out.read_text()
    assert main(["calibrate", str(src), "--no-reference", "-o", str(tmp_path / "x.yaml")]) == 2
    assert "calibrate needs --data DIR or --reference MODEL_DIR" in capsys.readouterr().err


# --- #14: --target and --draft swapped ------------------------------------------------------------------


def test_swapped_target_and_draft_are_named_as_swapped(tmp_path, capsys):
    """The user's swapped init said "target/config.json: the ids capture B_0"."""
    t = _write(tmp_path / "target", _target())
    d = _write(tmp_path / "draft", _draft(nested=[1, 15, 28], num_hidden_layers=1))
    out = tmp_path / "c.yaml"
    assert _init(tmp_path, "--target", str(d), "--draft", str(t), "--engine", "sglang", "-o", str(out)) == 2
    err = capsys.readouterr().err
    assert f"{d / 'config.json'} (--target) is a draft (eagle_config, architectures ['LlamaForCausalLMEagle3']; " \
           "num_hidden_layers = 1)" in err, err
    assert f"{t / 'config.json'} (--draft) is a full model (LlamaForCausalLM, num_hidden_layers = 32" in err
    assert "swapped?" in err and "B_0" not in err and not out.exists()
    # a contract whose two paths were swapped by hand: the gate says the same
    assert _init(tmp_path, "--target", str(t), "--draft", str(d), "--engine", "sglang", "-o", str(out)) == 0
    capsys.readouterr()
    text = out.read_text()
    assert "\n  path: target " in text and "\n  path: draft\n" in text
    out.write_text(text.replace("\n  path: target ", "\n  path: @T@ ").replace("\n  path: draft\n", "\n  path: target\n")
                   .replace("\n  path: @T@ ", "\n  path: draft "))
    assert main(["validate", str(out)]) == 2
    said = capsys.readouterr().out
    assert "target.path: " in said and "(target.path) is a draft" in said and "swapped?" in said, said
