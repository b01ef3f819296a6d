"""The stored dtype is what the generation server computes in (issue 38; docs/speculators-generator.md).

- ``init --generation-dtype`` derives ``precision.training`` and ``data_dtype`` from the producing engine's own
  dtype rule (``auto``) or the server's ``--dtype``, and records the assumption in ``provenance.data_dtype``;
- a stored dtype other than ``data_dtype`` with every slot intact fails ``dtype`` (the decision, with its
  rationale, in docs/speculators-generator.md) and is diagnosed ``generation-dtype`` with the one change;
  with a slot fault as well, the slot fault is what is diagnosed;
- the shipped contracts say which generation dtype they assume.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from eagle3_conformance.cli import main

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"
SLOTS = ["B_2", "B_4", "B_5", "B_8"]


def _pair(tmp: Path, dtype, engine: str = "speculators") -> tuple[Path, Path]:
    for d in ("t", "d"):
        (tmp / d).mkdir()
    t = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 8, "hidden_size": 64,
         "vocab_size": 512}
    if dtype is not None:
        t["torch_dtype"] = dtype
    (tmp / "t" / "config.json").write_text(json.dumps(t))
    (tmp / "d" / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 64,
         "target_hidden_size": 64, "vocab_size": 512, "draft_vocab_size": 256,
         # each tool's own key: SpecForge's nested output-of ids, speculators' top-level boundary ids (B_2, B_4, B_5)
         **({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}} if engine in ("specforge", "sglang")
            else {"eagle_aux_hidden_state_layer_ids": [2, 4, 5]})}))
    return tmp / "t", tmp / "d"


def _init(tmp: Path, engine: str, dtype, *extra: str) -> dict:
    t, d = _pair(tmp, dtype, engine)
    out = tmp / "c.yaml"
    assert main(["init", "--target", str(t), "--draft", str(d), "--engine", engine, "-o", str(out), *extra]) == 0
    return yaml.safe_load(out.read_text())


@pytest.mark.parametrize("engine,ckpt,flag,stored", [
    # speculators' generate-offline-data stores what its vLLM server computes in
    ("speculators", "float32", "float32", "float32"),
    ("speculators", "float32", "auto", "bfloat16"),   # vLLM dtype=auto: float32 -> bf16 (CUDA Ampere+ and x86 CPU)
    ("speculators", "float32", "bfloat16", "bfloat16"),
    ("speculators", "float16", "auto", "float16"),
    # SpecForge 0.2.0: build_target_model passes the config's dtype, which SGLang keeps ...
    ("specforge", "float32", "auto", "float32"),
    # ... and a config naming none gets SGLang's auto rule (model_config.py _get_and_verify_dtype): float16
    ("specforge", None, "auto", "float16"),
    ("specforge", "float32", "bfloat16", "bfloat16"),
])
def test_init_derives_data_dtype_from_the_generation_dtype(tmp_path, engine, ckpt, flag, stored):
    doc = _init(tmp_path, engine, ckpt, "--generation-dtype", flag)
    assert doc["data_dtype"] == stored and doc["precision"]["training"] == stored
    assert doc["provenance"]["data_dtype"].startswith(f"generation dtype {flag}: {stored}")


def test_init_refuses_an_unknown_generation_dtype(tmp_path, capsys):
    t, d = _pair(tmp_path, "float32")
    with pytest.raises(SystemExit) as e:
        main(["init", "--target", str(t), "--draft", str(d), "--engine", "speculators", "--generation-dtype", "fp8",
              "-o", str(tmp_path / "c.yaml")])
    assert e.value.code == 2 and "--generation-dtype" in capsys.readouterr().err
    assert not (tmp_path / "c.yaml").exists()


def test_the_sglang_engine_contract_keeps_speculators_bf16_unless_told(tmp_path):
    pytest.importorskip("sglang", reason="init --engine sglang asks the installed SGLang's id rule")
    assert _init(tmp_path, "sglang", "float32")["data_dtype"] == "bfloat16"
    for p in ("t", "d"):
        for f in (tmp_path / p).iterdir():
            f.unlink()
        (tmp_path / p).rmdir()
    (tmp_path / "c.yaml").unlink()
    assert _init(tmp_path, "sglang", "float32", "--generation-dtype", "float32")["data_dtype"] == "float32"


# --- the decision: a stored dtype other than data_dtype, every slot intact -------------------------------


@pytest.fixture(scope="module")
def f32_stored(tiny, tmp_path_factory):
    """The tiny pair's data written as speculators' layout, stored in float32 (a --dtype float32 server)."""
    from eagle3_conformance.reference import ReferenceModel
    from eagle3_conformance.testbed.datagen import write_speculators_dataset
    from eagle3_conformance.testbed.fixtures import sample_token_ids

    prompts = sample_token_ids(tiny.spec, 6, 16, 32, seed=3)
    ref = ReferenceModel(tiny.target_dir, dtype="float32")
    root = tmp_path_factory.mktemp("f32")
    good = write_speculators_dataset(root / "good", ref, prompts, slots=SLOTS, dtype="float32")
    bad = write_speculators_dataset(root / "bad", ref, prompts, slots=["B_2", "B_4", "B_0", "B_8"], dtype="float32")
    return good, bad


def _check(tmp_path, contract: Path, data: Path, tiny) -> tuple[int, dict]:
    out = tmp_path / f"r{len(list(tmp_path.glob('r*.json')))}.json"
    rc = main(["check-data", str(contract), "--data", str(data), "--quiet", "--json", str(out),
               "--reference", str(tiny.target_dir)])
    return rc, json.loads(out.read_text())


def test_float32_data_under_a_bf16_contract_fails_dtype_only_and_names_the_generation_dtype(f32_stored, tiny,
                                                                                            tmp_path):
    rc, doc = _check(tmp_path, TINY, f32_stored[0], tiny)  # tiny-llama.yaml: data_dtype bfloat16
    fails = [f for f in doc["findings"] if f["status"] == "fail"]
    assert rc == 1 and {f["check"] for f in fails} == {"dtype"}
    assert any("init --generation-dtype float32" in f["message"] for f in fails if f["slot"] == "on disk")
    assert [d["kind"] for d in doc["diagnoses"]] == ["generation-dtype"]
    d = doc["diagnoses"][0]
    assert d["fault"] == "" and "stored in float32" in d["title"] and "data_dtype: bfloat16" in d["title"]
    assert any("--generation-dtype float32" in x for x in d["fix"]) and any("--dtype bfloat16" in x for x in d["fix"])
    # the same data under the contract for a float32 server conforms
    con = tmp_path / "f32.yaml"
    con.write_text(TINY.read_text().replace("data_dtype: bfloat16", "data_dtype: float32"))
    rc, doc = _check(tmp_path, con, f32_stored[0], tiny)
    assert rc == 0, [f for f in doc["findings"] if f["status"] == "fail"][:3]


def test_a_slot_fault_is_diagnosed_as_such_not_as_the_generation_dtype(f32_stored, tiny, tmp_path):
    rc, doc = _check(tmp_path, TINY, f32_stored[1], tiny)
    kinds = [d["kind"] for d in doc["diagnoses"]]
    assert rc == 1 and "generation-dtype" not in kinds and kinds, kinds
    assert any("slot 2" in d["slots"] for d in doc["diagnoses"])


@pytest.mark.parametrize("name,dtype", [("smollm2-135m.yaml", "bfloat16"), ("smollm2-135m-bf16.yaml", "bfloat16"),
                                        ("specforge/smollm2-135m.yaml", "float32"),
                                        ("tiny-llama-specforge.yaml", "float32")])
def test_the_shipped_contracts_say_which_generation_dtype_they_assume(name, dtype):
    doc = yaml.safe_load((REPO / "contracts" / name).read_text())
    assert doc["data_dtype"] == dtype
    assert "generation dtype" in doc["provenance"]["data_dtype"], name
