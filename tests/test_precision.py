"""Production precision (issue 23 item 1): the contract states the dtype hidden states were produced in,
per path, apart from the checkpoint's; ``init`` derives it by each engine's own ``dtype="auto"`` rule;
every precision-dependent gate follows it; data whose noise shows a lower precision than declared is
reported as exactly that (the contract key to change), not as a fault.

Data is written by the project's speculators writer (:func:`eagle3_conformance.testbed.datagen.write_speculators_dataset`,
speculators' own ``build_speculator_training_dataset``) from a bfloat16 forward of the float32 tiny-llama
target (:class:`eagle3_conformance.reference.ReferenceModel` with ``dtype="bfloat16"``: bf16 weights and
operands, as a GPU server computes), and judged against the float32 reference.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import contract_with

from eagle3_conformance.cli import main
from eagle3_conformance.core import gates

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"
SLOTS = ["B_2", "B_4", "B_5", "B_8"]


# --- the contract and the gates ----------------------------------------------------------------


def test_gates_follow_the_production_precision_of_the_path_not_the_checkpoint(tiny_contract):
    c = contract_with(tiny_contract, **{"precision.training": "bfloat16"})  # float32 checkpoint
    assert c.target.dtype == "float32" and c.serving_dtype == "float32" and c.training_dtype == "bfloat16"
    # stored training data (Capture.stored) follows precision.training, a serving capture precision.serving
    assert gates.identity_noise_deg(c, True) == 6.0 and gates.identity_noise_deg(c, False) == 1.0
    assert gates.row_min_cosine(c, True) == 0.85 and gates.row_min_cosine(c, False) == 0.99
    assert gates.fp8_max_relative_error(c) == 0.55 and gates.magnitude_max_ratio(c, True) == 3.0
    # a cross-path comparison is as noisy as its noisier side
    assert gates.cross_path_min_cosine(c, True, False) == 0.98
    assert gates.cross_path_min_cosine(c, False, False) == 0.999


def test_a_contract_without_the_block_keeps_the_checkpoint_dtype(tiny_contract):
    assert tiny_contract.precision.training is None and tiny_contract.precision.serving is None
    assert tiny_contract.training_dtype == tiny_contract.serving_dtype == tiny_contract.target.dtype == "float32"
    assert gates.row_min_cosine(tiny_contract, True) == 0.99


def test_an_unknown_precision_is_refused_naming_the_key(tmp_path):
    from eagle3_conformance.contract import ContractError, load_contract

    bad = tmp_path / "c.yaml"
    bad.write_text(TINY.read_text().replace("data_dtype: bfloat16", "precision:\n  serving: half\ndata_dtype: bfloat16"))
    with pytest.raises(ContractError) as e:
        load_contract(bad)
    assert "precision.serving" in str(e.value)


def test_serving_paths_run_the_target_in_the_serving_precision():
    """Every serving path builds its harness with precision.serving, never the checkpoint dtype."""
    for f in (REPO / "eagle3_conformance" / "paths").glob("*.py"):
        assert "torch_dtype(c.target.dtype)" not in f.read_text(), f.name


# --- init: each engine's own auto rule -------------------------------------------------------------


def _pair(tmp: Path, dtype: str, model_type: str = "llama") -> tuple[Path, Path]:
    (tmp / "t").mkdir()
    (tmp / "d").mkdir()
    (tmp / "t" / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLM"], "model_type": model_type, "num_hidden_layers": 8, "hidden_size": 64,
         "vocab_size": 512, "torch_dtype": dtype}))
    (tmp / "d" / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 64,
         "target_hidden_size": 64, "vocab_size": 512, "draft_vocab_size": 256,
         # top level as well as nested: vLLM 0.33's two runners then read the same ids (init refuses a draft
         # they read differently, which is not what these tests are about)
         "eagle_aux_hidden_state_layer_ids": [1, 3, 4],
         "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}}))
    return tmp / "t", tmp / "d"


@pytest.mark.parametrize("engine,dtype,model_type,training,serving", [
    # vLLM 0.33.0 vllm/config/model.py _resolve_auto_dtype: float32 -> the platform's first dtype (bf16, Ampere+)
    ("vllm", "float32", "llama", "bfloat16", "bfloat16"),
    ("vllm", "float16", "llama", "float16", "float16"),
    # SGLang 0.5.23 srt/configs/model_config.py:2304-2319: float32 -> float16, Gemma -> bfloat16
    ("sglang", "float32", "llama", "float16", "float16"),
    ("sglang", "float32", "gemma3_text", "bfloat16", "bfloat16"),
    ("sglang", "bfloat16", "llama", "bfloat16", "bfloat16"),
    # SpecForge 0.2.0 prepare_hidden_states.py captures in the checkpoint dtype (build_target_model); served by SGLang
    ("specforge", "float32", "llama", "float32", "float16"),
])
def test_init_derives_the_production_precision_by_the_engines_auto_rule(tmp_path, engine, dtype, model_type,
                                                                         training, serving):
    from eagle3_conformance.contract import load_contract

    t, d = _pair(tmp_path, dtype, model_type)
    o = tmp_path / "c.yaml"
    assert main(["init", "--target", str(t), "--draft", str(d), "--engine", engine, "-o", str(o)]) == 0
    c = load_contract(o)
    assert c.target.dtype == dtype  # the checkpoint's, as written
    assert (c.precision.training, c.precision.serving) == (training, serving)
    text = o.read_text()
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("serving:"))
    assert "dtype=auto" in line and ("vllm" if engine == "vllm" else "sglang") in line.lower()  # the rule, commented
    floor = next(ln for ln in text.splitlines() if ln.strip().startswith("slot_identity_min_cosine:"))
    assert f"null = {gates.ROW_MIN_COSINE[training]}" in floor  # the gate comments resolve by the precision


def test_the_vllm_stand_in_rule_matches_the_installed_vllm(monkeypatch):
    """The stand-in (vLLM is not installed in the CPU environment) against vLLM's own
    ``_resolve_auto_dtype`` where it is (``tox -e vllm``). There is no GPU here and
    ``vllm.platforms.cuda`` needs libcuda, so only the device is stood in: its ``supported_dtypes``
    are CUDA's lists for an Ampere (8.0+) and a Volta (6.0-7.x) device, as
    vllm-project/vllm ``vllm/platforms/cuda.py`` ``supported_dtypes`` gives them."""
    from eagle3_conformance.authoring.precision import VLLM_FLOAT16_NOT_SUPPORTED, VLLM_RULE_VERSION, vllm_auto_dtype

    vllm = pytest.importorskip("vllm")
    if vllm.__version__ != VLLM_RULE_VERSION:
        pytest.skip(f"vLLM {vllm.__version__} installed; the stand-in is for {VLLM_RULE_VERSION}")
    import torch
    import vllm.config.model as vllm_model

    assert set(VLLM_FLOAT16_NOT_SUPPORTED) == set(vllm_model._FLOAT16_NOT_SUPPORTED_MODELS)
    devices = {True: [torch.bfloat16, torch.float16, torch.float32], False: [torch.float16, torch.float32]}
    for ampere, supported in devices.items():
        class Device:
            supported_dtypes = supported

            @staticmethod
            def get_device_name(device_id=0):
                return "stand-in"

            @staticmethod
            def get_device_capability(device_id=0):
                return None

        monkeypatch.setattr(vllm_model, "current_platform", Device())
        for mt in ("llama", "gemma3_text", "gemma2"):
            for cd in (torch.float32, torch.bfloat16, torch.float16):
                want = str(vllm_model._resolve_auto_dtype(mt, cd, is_pooling_model=False)).replace("torch.", "")
                got = vllm_auto_dtype(mt, str(cd).replace("torch.", ""), ampere_or_later=ampere)
                assert got == want, (ampere, mt, cd)


def test_the_sglang_rule_is_the_installed_sglangs_own():
    import torch
    from sglang.srt.configs.model_config import _get_and_verify_dtype

    from eagle3_conformance.authoring.precision import sglang_auto_dtype

    for mt in ("llama", "gemma3_text", "qwen3"):
        for cd in ("float32", "bfloat16", "float16"):
            want = _get_and_verify_dtype({"model_type": mt, "dtype": cd}, "auto")
            assert sglang_auto_dtype({"model_type": mt, "torch_dtype": cd}) == str(want).replace("torch.", "")
    assert _get_and_verify_dtype({"model_type": "llama", "dtype": "float32"}, "auto") == torch.float16


# --- data produced in bfloat16 from a float32 checkpoint ------------------------------------------------


@pytest.fixture(scope="module")
def bf16_data(tiny, tmp_path_factory):
    from eagle3_conformance.reference import ReferenceModel
    from eagle3_conformance.testbed.datagen import write_speculators_dataset
    from eagle3_conformance.testbed.fixtures import sample_token_ids

    prompts = sample_token_ids(tiny.spec, 12, 16, 32, seed=5)
    b16 = ReferenceModel(tiny.target_dir, dtype="bfloat16")
    return write_speculators_dataset(tmp_path_factory.mktemp("bf16") / "ds", b16, prompts, slots=SLOTS)


def _check(tmp_path, contract: Path, data: Path, tiny):
    out = tmp_path / f"r{len(list(tmp_path.glob('r*.json')))}.json"
    rc = main(["check-data", str(contract), "--data", str(data), "--quiet", "--json", str(out),
               "--reference", str(tiny.target_dir), "--sample", "12"])
    return rc, json.loads(out.read_text())


def test_bf16_produced_data_conforms_when_the_contract_says_bfloat16(bf16_data, tiny, tmp_path):
    con = tmp_path / "bf16.yaml"
    con.write_text(TINY.read_text().replace("data_dtype: bfloat16", "precision:\n  training: bfloat16\ndata_dtype: bfloat16"))
    rc, doc = _check(tmp_path, con, bf16_data, tiny)
    assert rc == 0, [f for f in doc["findings"] if f["status"] == "fail"][:3]
    pp = [f for f in doc["findings"] if f["check"] == "production_precision"]
    assert pp and all(f["status"] == "pass" for f in pp)


def test_bf16_produced_data_under_a_float32_contract_names_the_precision_key(bf16_data, tiny, tmp_path):
    rc, doc = _check(tmp_path, TINY, bf16_data, tiny)
    assert rc == 1
    fails = [f for f in doc["findings"] if f["status"] == "fail"]
    assert fails and {f["check"] for f in fails} <= {"production_precision", "row_fingerprint", "magnitude",
                                                     "verifier_identity", "slot_identity", "feature_alignment"}
    kinds = [d["kind"] for d in doc["diagnoses"]]
    assert kinds == ["production-precision"], kinds
    d = doc["diagnoses"][0]
    assert "precision.training: float32" in d["title"] and any("precision.training: bfloat16" in x for x in d["fix"])
    assert d["fault"] == ""  # an input problem, not a fault-kinds.md kind


def test_float32_produced_data_passes_the_precision_check(tiny, tiny_contract, tiny_ref, good_caps):
    """The fixture's data (float32 forward, stored bf16) is float32 production: never flagged."""
    from eagle3_conformance.checks import check_production_precision

    fs = [f for cap in good_caps for f in check_production_precision(tiny_contract, cap, tiny_ref.capture(cap.token_ids))]
    assert fs and all(f.status == "pass" for f in fs), [f.message for f in fs if f.status != "pass"]
    assert max(f.observed["median_row_angle_deg"] for f in fs) < 0.15


def test_rows_of_other_tokens_stay_a_fault_under_the_right_precision(tiny, tiny_contract, tiny_ref, good_caps):
    """A minority of moved rows in float32 data is K13, not precision: the median angle stays float32's."""
    import dataclasses

    from eagle3_conformance.checks import run_checks
    from eagle3_conformance.diagnose import diagnose

    fs = []
    for cap in good_caps:
        feat = cap.feature.clone()
        feat[1] = feat[-1]  # one row of another token (every capture has >= 4 rows)
        fs += run_checks(tiny_contract, dataclasses.replace(cap, feature=feat), tiny_ref.capture(cap.token_ids))
    assert all(f.status == "pass" for f in fs if f.check == "production_precision")
    assert any(f.status == "fail" for f in fs if f.check == "row_fingerprint")
    kinds = [d.kind for d in diagnose(tiny_contract, fs)]
    assert kinds and "production-precision" not in kinds, kinds


# --- fix hints use the installed tool's own flag (issue 23 item 4) ------------------------------------


def test_the_data_generation_hint_names_the_installed_speculators_flag(tiny_contract):
    """The flag comes from speculators' own parser (0.9.0: --target-layer-ids), never 0.4's --layer-ids."""
    from speculators.train.config.resolution import build_parser

    from eagle3_conformance.diagnose import _Fixer, translate_ids

    want = next(a.option_strings for a in build_parser()._actions if a.dest == "target_layer_ids")
    lines = _Fixer(tiny_contract, translate_ids).data_generation(["B_2", "B_4", "B_5"], {})
    assert want == ["--target-layer-ids"] and "--target-layer-ids 2 4 5 " in lines[0], lines
    assert " --layer-ids" not in lines[0]


# --- the writer numbers shards by the surviving Arrow rows (issue 23 item 5) ----------------------------


def test_an_all_zero_mask_row_is_dropped_and_the_shards_stay_in_step(tiny, tiny_contract, tiny_ref, tmp_path):
    """speculators' own preprocessing drops a row with no supervised token; hs_{i} numbers the surviving
    Arrow rows, so every shard's token_ids equal its Arrow row's and check-data conforms."""
    from datasets import load_from_disk
    from safetensors.torch import load_file

    from eagle3_conformance.testbed.datagen import write_speculators_dataset
    from eagle3_conformance.testbed.fixtures import sample_token_ids

    prompts = sample_token_ids(tiny.spec, 5, 8, 16, seed=9)
    masks = [[1] * len(p) for p in prompts]
    masks[1] = [0] * len(prompts[1])  # no supervised token: speculators drops this row
    d = write_speculators_dataset(tmp_path / "ds", tiny_ref, prompts, slots=SLOTS, loss_masks=masks)
    ds = load_from_disk(str(d))
    assert len(ds) == 4 and sorted(p.name for p in (d / "hidden_states").iterdir()) == [f"hs_{i}.safetensors" for i in range(4)]
    for i in range(4):
        assert load_file(str(d / "hidden_states" / f"hs_{i}.safetensors"))["token_ids"].tolist() == list(ds[i]["input_ids"])
    out = tmp_path / "r.json"
    assert main(["check-data", str(TINY), "--data", str(d), "--quiet", "--json", str(out),
                 "--reference", str(tiny.target_dir)]) == 0


@pytest.mark.parametrize("inst,version,words", [
    (None, None, "SGLang is not installed, so its dtype=auto rule cannot be asked"),
    ("0.5.23", "0.5.12", "SGLang 0.5.12 is not the installed release (0.5.23), so"),
])
def test_precision_comment_without_the_asked_sglang_is_a_clean_sentence(monkeypatch, inst, version, words):
    """A core-only install wrote `SGLang ? is not installed (installed: None)` into the contract."""
    import eagle3_conformance.engine_ids as ei
    from eagle3_conformance.authoring import precision

    monkeypatch.setattr(ei, "installed_sglang_version", lambda: inst)
    got = precision._sglang({"torch_dtype": "bfloat16", "model_type": "llama"}, version)
    text = got.why
    assert words in text and "None" not in text and " ? " not in text, text


# --- FP8 data (hs-connectors) produced in bfloat16 from a float32 checkpoint (issue 23, left item 1) -----


@pytest.fixture(scope="module")
def fp8_connector():
    """hs-connectors 0.9.0's own ``FP8HiddenStatesConnector`` class, its module loaded from the installed
    file. The module subclasses vLLM's ``ExampleHiddenStatesConnector`` and vLLM is not in the CPU
    environment, so only that base class is stood in, for the import alone: ``_write_tensors`` (a
    staticmethod, fp8_hidden_states_connector.py:41-56) uses nothing of it. ``sys.modules`` is restored after."""
    import importlib.util
    import sys
    import types

    import hs_connectors
    from hs_connectors.version import version

    assert version == "0.9.0", f"the stand-in base class is for hs-connectors 0.9.0, found {version}"
    names = ["vllm", "vllm.distributed", "vllm.distributed.kv_transfer", "vllm.distributed.kv_transfer.kv_connector",
             "vllm.distributed.kv_transfer.kv_connector.v1",
             "vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector"]
    saved = {n: sys.modules.get(n) for n in names}
    mods = {n: types.ModuleType(n) for n in names}
    mods[names[-1]].ExampleHiddenStatesConnector = type("ExampleHiddenStatesConnector", (), {})
    mods[names[-2]].example_hidden_states_connector = mods[names[-1]]
    sys.modules.update(mods)
    try:
        path = Path(hs_connectors.__file__).parent / "fp8_hidden_states_connector.py"
        spec = importlib.util.spec_from_file_location("_hsc_fp8_connector", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
    return mod.FP8HiddenStatesConnector


class _Done:
    """The CUDA event ``_write_tensors`` waits on: the copy is already on the CPU."""

    def synchronize(self) -> None:
        return None


def _through_connector(connector, d: Path) -> Path:
    """Rewrite every ``hs_{i}.safetensors`` of ``d`` with the connector's own ``_write_tensors`` (what it is
    handed: the file's ``hidden_states`` in the dtype they were written, and ``token_ids``)."""
    from safetensors.torch import load_file

    for p in sorted((d / "hidden_states").glob("hs_*.safetensors")):
        t = load_file(str(p))
        connector._write_tensors({"hidden_states": t["hidden_states"], "token_ids": t["token_ids"]}, _Done(), str(p), None)
    return d


def test_the_projects_fp8_payload_is_the_connectors_own_file(fp8_connector, tiny_ref, tmp_path):
    """``datagen.hs_payload`` (used where the connector's module cannot be loaded) writes byte for byte
    the file ``FP8HiddenStatesConnector._write_tensors`` writes."""
    import torch
    from safetensors.torch import save_file

    from eagle3_conformance.testbed.datagen import hs_payload

    ids = list(range(3, 19))
    r = tiny_ref.capture(ids)
    hs = torch.stack([r.boundary(b) for b in SLOTS], dim=1).to(torch.bfloat16)
    tok = torch.tensor(ids, dtype=torch.long)
    fp8_connector._write_tensors({"hidden_states": hs, "token_ids": tok}, _Done(), str(tmp_path / "a.safetensors"), None)
    save_file(hs_payload(hs, tok, "fp8"), str(tmp_path / "b.safetensors"))
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()


@pytest.fixture(scope="module")
def plain_sets(tiny, tmp_path_factory):
    """Plain datasets as a server hands them to the connector: a float32 forward in float32 (vLLM serving
    the float32 checkpoint in float32) and a bfloat16 forward in bfloat16 (dtype=auto)."""
    from eagle3_conformance.reference import ReferenceModel
    from eagle3_conformance.testbed.datagen import write_speculators_dataset
    from eagle3_conformance.testbed.fixtures import sample_token_ids

    prompts = sample_token_ids(tiny.spec, 12, 16, 32, seed=5)
    root = tmp_path_factory.mktemp("plainsets")
    return {dtype: write_speculators_dataset(root / dtype, ReferenceModel(tiny.target_dir, dtype=dtype), prompts,
                                             slots=SLOTS, dtype=dtype) for dtype in ("float32", "bfloat16")}


@pytest.fixture(scope="module")
def fp8_sets(plain_sets, fp8_connector, tmp_path_factory):
    """The plain sets written through the real connector."""
    import shutil

    root = tmp_path_factory.mktemp("fp8sets")
    out = {}
    for name, d in plain_sets.items():
        shutil.copytree(d, root / name)
        out[name] = _through_connector(fp8_connector, root / name)
    return out


def _fp8_contract(tmp_path: Path, training: str) -> Path:
    p = tmp_path / f"fp8-{training}.yaml"
    text = TINY.read_text()
    assert "\ntraining:" not in text
    p.write_text(text.replace("data_dtype: bfloat16", f"precision:\n  training: {training}\ndata_dtype: bfloat16")
                 + "training:\n  transfer: fp8\n")
    return p


def test_fp8_data_from_float32_serving_conforms(fp8_sets, tiny, tmp_path):
    rc, doc = _check(tmp_path, _fp8_contract(tmp_path, "float32"), fp8_sets["float32"], tiny)
    assert rc == 0, [f["message"] for f in doc["findings"] if f["status"] == "fail"][:3]
    pp = [f for f in doc["findings"] if f["check"] == "production_precision"]
    assert len(pp) == 12 and all(f["status"] == "pass" for f in pp)
    assert max(f["observed"]["median_row_angle_deg"] for f in pp) < 0.05  # the same FP8 codes
    assert all("hs-connectors FP8" in f["observed"]["against"] for f in pp)


def test_fp8_data_from_bf16_serving_under_a_float32_contract_names_the_precision_key(fp8_sets, tiny, tmp_path):
    """FP8's own noise (~1.5 deg) no longer masks the precision signal: the data is compared with the
    reference through the same FP8 quantisation."""
    rc, doc = _check(tmp_path, _fp8_contract(tmp_path, "float32"), fp8_sets["bfloat16"], tiny)
    assert rc == 1
    assert [d["kind"] for d in doc["diagnoses"]] == ["production-precision"]
    d = doc["diagnoses"][0]
    assert "precision.training: float32" in d["title"] and any("precision.training: bfloat16" in x for x in d["fix"])
    assert "hs-connectors FP8" in d["evidence"][0]
    pp = [f for f in doc["findings"] if f["check"] == "production_precision"]
    assert len(pp) == 12 and all(f["status"] == "fail" for f in pp)


def test_fp8_data_from_bf16_serving_conforms_under_a_bf16_contract(fp8_sets, tiny, tmp_path):
    rc, doc = _check(tmp_path, _fp8_contract(tmp_path, "bfloat16"), fp8_sets["bfloat16"], tiny)
    assert rc == 0, [f["message"] for f in doc["findings"] if f["status"] == "fail"][:3]


@pytest.mark.parametrize("tokens", ["one", "every"])
def test_an_fp8_scale_fault_stays_an_fp8_diagnosis(plain_sets, fp8_connector, tiny, tmp_path, tokens):
    """The fault ``fp8_scale_error`` exists for (a massive value in B_L coarsening the small slots through the
    shared per-token scale, faults/operators/dtype.py), at one middle token or at every token, written
    through the connector from float32 data: diagnosed FP8, never precision."""
    import shutil

    from safetensors.torch import load_file

    from eagle3_conformance.faults.operators.dtype import OUTLIER_RATIO

    d = tmp_path / "data"
    shutil.copytree(plain_sets["float32"], d)
    for p in sorted((d / "hidden_states").glob("hs_*.safetensors")):
        t = load_file(str(p))
        hs = t["hidden_states"].clone()
        for k in ([hs.shape[0] // 2] if tokens == "one" else range(1, hs.shape[0])):
            hs[k, -1, 0] = OUTLIER_RATIO * float(hs[k, 0].pow(2).mean().sqrt())
        fp8_connector._write_tensors({"hidden_states": hs, "token_ids": t["token_ids"]}, _Done(), str(p), None)
    rc, doc = _check(tmp_path, _fp8_contract(tmp_path, "float32"), d, tiny)
    assert rc == 1
    kinds = [x["kind"] for x in doc["diagnoses"]]
    # (the verifier rows holding the stray value, and slot 0 flushed at every token, get their own diagnoses too)
    assert "fp8-transport" in kinds and "production-precision" not in kinds, kinds
    assert not [f for f in doc["findings"] if f["check"] == "production_precision" and f["status"] == "fail"]


def test_fp8_vllm_extraction_files_from_bf16_serving_name_the_precision_key(fp8_connector, tiny, tmp_path):
    """The same on vLLM extraction files (the connector's own layout, read by the project's vLLM reader):
    bf16-served FP8 files under a float32 contract -> production-precision; from float32 serving -> conform."""
    import torch
    from safetensors.torch import load_file

    from eagle3_conformance.reference import ReferenceModel
    from eagle3_conformance.testbed.datagen import write_vllm_extraction
    from eagle3_conformance.testbed.fixtures import sample_token_ids

    prompts = sample_token_ids(tiny.spec, 6, 16, 32, seed=7)
    con = _fp8_contract(tmp_path, "float32")
    got = {}
    for dtype in ("float32", "bfloat16"):
        d = write_vllm_extraction(tmp_path / dtype, ReferenceModel(tiny.target_dir, dtype=dtype), prompts, slots=SLOTS,
                                  dtype=dtype)
        for p in sorted(d.glob("*.safetensors")):
            t = load_file(str(p))
            fp8_connector._write_tensors({"hidden_states": t["hidden_states"], "token_ids": t["token_ids"]}, _Done(),
                                         str(p), None)
        assert load_file(str(d / "req-0.safetensors"))["hidden_states"].dtype == torch.float8_e4m3fn
        got[dtype] = _check(tmp_path, con, d, tiny)
    rc, doc = got["float32"]
    assert rc == 0, [f["message"] for f in doc["findings"] if f["status"] == "fail"][:3]
    rc, doc = got["bfloat16"]
    assert rc == 1 and [d["kind"] for d in doc["diagnoses"]] == ["production-precision"]
    assert "precision.training: float32" in doc["diagnoses"][0]["title"]


@pytest.mark.slow  # two check-data runs on SmolLM2-135M, 8 samples each: ~1-3 min on the shared 2-core machine
def test_smollm2_bf16_produced_data_is_named_precision_and_conforms_under_bfloat16(tmp_path):
    """The real-model check (benchmarks/bench_precision_real.py runs all 23 samples and FP8): the
    float32 SmolLM2-135M checkpoint's data produced by a bf16 forward (the smollm2-135m-bf16 fixture's)
    under the float32 contract -> exactly one diagnosis, production-precision; with
    precision.training: bfloat16 -> conforms, 0 failures."""
    from eagle3_conformance.testbed.fixtures import build_fixture

    f32, b16 = build_fixture("smollm2-135m"), build_fixture("smollm2-135m-bf16")
    base = (REPO / "contracts" / "smollm2-135m.yaml").read_text()
    assert "\nprecision:" not in base
    out = {}
    for prec in ("float32", "bfloat16"):
        con = tmp_path / f"{prec}.yaml"
        con.write_text(base.replace("\ndata_dtype:", f"\nprecision:\n  training: {prec}\ndata_dtype:", 1))
        rep = tmp_path / f"{prec}.json"
        rc = main(["check-data", str(con), "--data", str(b16.data_dir), "--quiet", "--json", str(rep),
                   "--reference", str(f32.target_dir), "--sample", "8"])
        out[prec] = rc, json.loads(rep.read_text())
    rc, doc = out["float32"]
    assert rc == 1 and [d["kind"] for d in doc["diagnoses"]] == ["production-precision"]
    assert "precision.training: float32" in doc["diagnoses"][0]["title"]
    rc, doc = out["bfloat16"]
    assert rc == 0 and not [f for f in doc["findings"] if f["status"] == "fail"]
