"""What benchmarks/bench_real_writers.py found on data written by the real writers (issue 23): the contract
``init`` writes for SpecForge states the dtype SpecForge stores, and ``check-offline`` diagnoses its
failures as ``check-data`` does (it reported failing checks with no diagnosis at all).

SpecForge samples are written by :func:`eagle3_conformance.tools.specforge_loader.write_dataset` (the layout
of ``scripts/prepare_hidden_states.py``, with SpecForge's own vocab mapping writer) from the tiny-llama
fixture's forward; which boundary a slot holds is judged against the float32 reference.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from eagle3_conformance.cli import main

REPO = Path(__file__).resolve().parent.parent
SF_TINY = REPO / "contracts" / "tiny-llama-specforge.yaml"
AUX = ["B_2", "B_4", "B_5"]


def _pair(tmp: Path, dtype: str) -> tuple[Path, Path]:
    for d in ("t", "d"):
        (tmp / d).mkdir()
    (tmp / "t" / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 8, "hidden_size": 64,
         "vocab_size": 512, "torch_dtype": dtype}))
    (tmp / "d" / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 64,
         "target_hidden_size": 64, "vocab_size": 512, "draft_vocab_size": 256,
         "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}}))
    return tmp / "t", tmp / "d"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_init_for_specforge_states_the_dtype_prepare_hidden_states_stores(tmp_path, dtype):
    """prepare_hidden_states.py saves the capture in the model's dtype (build_target_model:
    torch_dtype=model_config.dtype): a float32 checkpoint's samples are float32, and init said bfloat16,
    so SpecForge's correct output failed ``dtype`` on every sample."""
    t, d = _pair(tmp_path, dtype)
    out = tmp_path / "c.yaml"
    assert main(["init", "--target", str(t), "--draft", str(d), "--engine", "specforge", "-o", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["precision"]["training"] == dtype
    assert doc["data_dtype"] == dtype


def test_init_for_speculators_data_keeps_bf16_storage(tmp_path):
    t, d = _pair(tmp_path, "float32")
    out = tmp_path / "c.yaml"
    assert main(["init", "--target", str(t), "--draft", str(d), "--engine", "sglang", "-o", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["data_dtype"] == "bfloat16"


@pytest.fixture(scope="module")
def sf_samples(tiny):
    import datasets

    ds = datasets.load_from_disk(str(tiny.data_dir))
    ids = [list(map(int, r)) for r in ds["input_ids"] if len(r) >= 4][:5]
    return ids, [[1] * len(x) for x in ids]


def _offline(tmp_path, capsys, data: Path) -> tuple[int, dict, str]:
    out = tmp_path / "r.json"
    rc = main(["check-offline", str(SF_TINY), "--files", str(data), "--quiet", "--json", str(out)])
    return rc, json.loads(out.read_text()), capsys.readouterr().out


def test_check_offline_diagnoses_the_embedding_in_the_last_aux_slot(tiny_ref, sf_samples, tmp_path, capsys):
    from eagle3_conformance.tools import specforge_loader as sl

    data = sl.write_dataset(tmp_path / "data", tiny_ref.capture, *sf_samples, aux=["B_2", "B_4", "B_0"],
                            checkpoint=tiny_ref.model_dir)
    rc, doc, out = _offline(tmp_path, capsys, data)
    assert rc == 1
    assert {f["slot"] for f in doc["findings"] if f["status"] == "fail" and f["check"] == "slot_identity"} == {"slot 2"}
    kinds = [d["kind"] for d in doc["diagnoses"]]
    assert kinds == ["slot-off"], kinds
    assert doc["diagnoses"][0]["title"] in out  # printed with --quiet as check-data prints it


def test_check_offline_names_a_lower_production_precision_not_a_fault(tiny, sf_samples, tmp_path, capsys):
    from eagle3_conformance.reference import ReferenceModel
    from eagle3_conformance.tools import specforge_loader as sl

    b16 = ReferenceModel(tiny.target_dir, dtype="bfloat16")
    data = sl.write_dataset(tmp_path / "data", b16.capture, *sf_samples, aux=AUX, checkpoint=tiny.target_dir)
    rc, doc, _ = _offline(tmp_path, capsys, data)
    assert rc == 1
    assert [d["kind"] for d in doc["diagnoses"]] == ["production-precision"]
    assert doc["diagnoses"][0]["fault"] == ""


def test_check_offline_on_correct_samples_has_no_diagnosis(tiny_ref, sf_samples, tmp_path, capsys):
    from eagle3_conformance.tools import specforge_loader as sl

    data = sl.write_dataset(tmp_path / "data", tiny_ref.capture, *sf_samples, aux=AUX, checkpoint=tiny_ref.model_dir)
    rc, doc, out = _offline(tmp_path, capsys, data)
    assert rc == 0 and doc["diagnoses"] == []
    # --quiet and nothing to diagnose: the verdict line alone, as check-data --quiet prints it
    assert out == f"CONFORMS: {len(doc['findings'])} findings, 0 failed\n", out
