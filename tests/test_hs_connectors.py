"""hs-connectors 0.9.0 transport of training data (issue 13 item 3): the ``file`` and ``fp8``
backends read through hs-connectors' own readers (``FileTransfer``, ``FP8Transfer``), FP8 data
read as plain files caught, FP8's shared per-token scale error gated, bad FP8 files reported.

FP8 files are written exactly as ``FP8HiddenStatesConnector._write_tensors`` writes them
(hs_connectors/fp8_hidden_states_connector.py:49-56; the module imports vLLM, so its two steps are
called through :func:`eagle3_conformance.testbed.datagen.hs_payload`: ``quantize_tensor_to_fp8`` then ``save_file``),
from the embedded tiny pair's bf16 data (what the connector is handed).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import contract_with

from eagle3_conformance import checks
from eagle3_conformance.cli import main
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.scan import DISK_PATH, LOADER_PATH, scan

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"


def _hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p).encode() + p.read_bytes())
    return h.hexdigest()


def _shard(d: Path, i: int) -> Path:
    return d / "hidden_states" / f"hs_{i}.safetensors"


def _to_fp8(d: Path, mutate=None) -> None:
    """Rewrite every shard of ``d`` as hs-connectors' fp8 backend writes it (``mutate(i, hs)``
    may change the bf16 stack first, as the connector would receive it)."""
    from safetensors.torch import load_file, save_file

    from eagle3_conformance.testbed.datagen import hs_payload

    for p in sorted((d / "hidden_states").glob("hs_*.safetensors")):
        t = load_file(str(p))
        hs = t["hidden_states"]
        if mutate is not None:
            hs = mutate(int(p.stem.split("_")[1]), hs.clone())
        save_file(hs_payload(hs, t["token_ids"], "fp8"), str(p))


@pytest.fixture(scope="module")
def fp8_data(tiny, tmp_path_factory):
    d = tmp_path_factory.mktemp("fp8") / "data"
    shutil.copytree(tiny.data_dir, d)
    _to_fp8(d)
    return d


@pytest.fixture()
def fp8_copy(fp8_data, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(fp8_data, d)
    return d


def _fp8_contract(tmp_path: Path, transfer: str = "fp8") -> Path:
    text = TINY.read_text()
    assert "\ndata_dtype:" in text
    p = tmp_path / f"tiny-{transfer}.yaml"
    p.write_text(text + f"training:\n  transfer: {transfer}\n" if "\ntraining:" not in text else
                 text.replace("\ntraining:\n", f"\ntraining:\n  transfer: {transfer}\n", 1))
    return p


def _check_data(contract: Path, d: Path, tiny, tmp_path, capsys, *extra):
    out = tmp_path / "r.json"
    rc = main(["check-data", str(contract), "--data", str(d), "--reference", str(tiny.target_dir), "--quiet",
               "--json", str(out), *extra])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err + cap.out
    fs = json.loads(out.read_text())["findings"] if out.exists() else []
    return rc, fs, cap.out + cap.err


# --- the writer and the readers -----------------------------------------------------------------


def test_datagen_writes_what_the_fp8_connector_writes(tiny, tiny_ref, tiny_contract, tmp_path):
    from hs_connectors.transfer import FileTransfer, FP8Transfer
    from safetensors import safe_open

    from eagle3_conformance.testbed.datagen import write_speculators_dataset

    slots = tiny_contract.capture.boundaries + [tiny_contract.verifier_last.tensor]
    ids = [[1, 5, 9, 13, 17, 21], [2, 4, 6, 8]]
    plain = write_speculators_dataset(tmp_path / "plain", tiny_ref, ids, slots=slots)
    fp8 = write_speculators_dataset(tmp_path / "fp8", tiny_ref, ids, slots=slots, transfer="fp8")
    with safe_open(str(_shard(fp8, 0)), framework="pt") as f:
        assert set(f.keys()) == {"hidden_states", "hidden_states_scales", "token_ids"}
        assert f.get_tensor("hidden_states").dtype == torch.float8_e4m3fn
        sc = f.get_tensor("hidden_states_scales")
        assert sc.dtype == torch.float32 and list(sc.shape) == [6, 1, 1]
    want = FileTransfer(plain / "hidden_states").get_cached(0)["hidden_states"].float()
    got = FP8Transfer(fp8 / "hidden_states").get_cached(0)
    assert got["hidden_states"].dtype == torch.bfloat16 and "hidden_states_scales" not in got
    err = (got["hidden_states"].float() - want).norm(dim=-1) / want.norm(dim=-1)
    assert float(err.max()) < 0.1  # e4m3: 3 mantissa bits
    raw = FileTransfer(fp8 / "hidden_states").get_cached(0)["hidden_states"]
    assert raw.dtype == torch.float8_e4m3fn  # the file backend hands the codes over as they are
    with pytest.raises(ValueError, match="unknown hs-connectors backend"):
        write_speculators_dataset(tmp_path / "x", tiny_ref, ids, slots=slots, transfer="mooncake")


def test_correct_fp8_data_conforms_through_fp8transfer(fp8_data, tiny, tiny_contract):
    c = contract_with(tiny_contract, **{"training.transfer": "fp8"})
    res = scan(c, fp8_data, sample=-1, reference_dir=tiny.target_dir)
    assert not [f for f in res.findings if f.status == "fail"], [f.message for f in res.findings if f.status == "fail"]
    tb = [f for f in res.findings if f.check == "transfer_backend"]
    assert {f.path for f in tb} == {DISK_PATH, LOADER_PATH} and all(f.status == "pass" for f in tb)
    fe = [f for f in res.findings if f.check == "fp8_scale_error" and f.status == "pass"]
    assert fe and {f.slot for f in fe} == {"slot 0", "slot 1", "slot 2", "verifier"}
    assert all(0 < f.observed["max"] <= 0.1 for f in fe)
    # the disk scan's per-row RMS is of the dequantised values: the plain data's RMS to FP8 precision
    plain = scan(tiny_contract, tiny.data_dir, sample=0)
    for slot, s in plain.meta["slot_stats"].items():
        q = res.meta["slot_stats"][slot]
        assert abs(q["rms_mean"] / s["rms_mean"] - 1) < 0.05, (slot, q, s)


# --- FP8 read as plain files ---------------------------------------------------------------------


def test_fp8_read_as_file_fails_naming_sample_and_file(fp8_data, tiny, tmp_path, capsys):
    before = _hash(fp8_data)
    rc, fs, out = _check_data(TINY, fp8_data, tiny, tmp_path, capsys, "--sample", "-1")
    assert rc == 1
    bad = [f for f in fs if f["check"] == "transfer_backend" and f["status"] == "fail"]
    assert {f["path"] for f in bad} == {DISK_PATH, LOADER_PATH}
    assert len([f for f in bad if f["path"] == DISK_PATH]) == 12  # every sample, on the all-rows scan
    for f in bad:
        i = int(f["where"].split()[1])
        assert "FP8 data read as plain files: values never rescaled" in f["message"]
        assert f"hidden_states/hs_{i}.safetensors" in f["message"]
    assert "fp8-transport" in out and "values never rescaled" in out  # the diagnosis names the cause
    assert _hash(fp8_data) == before


def test_transfer_backend_pure():
    from eagle3_conformance.contract import load_contract

    c = load_contract(TINY)

    def cap(payload, reader):
        return Capture("training", "sample 7", torch.zeros(3, dtype=torch.long), torch.zeros(3, 96),
                       torch.arange(3), provenance={"payload": payload, "transfer": reader})

    fp8 = {"file": "hidden_states/hs_7.safetensors", "dtype": "float8_e4m3fn", "shape": [3, 4, 32],
           "scales": [3, 1, 1], "scales_dtype": "float32"}
    plain = {**fp8, "dtype": "bfloat16", "scales": None, "scales_dtype": None}
    status = lambda p, r: [f.status for f in checks.check_transfer_backend(c, cap(p, r))]  # noqa: E731
    assert status(fp8, "fp8") == ["pass"] and status(plain, "file") == ["pass"]
    for p, r, words in [
        (fp8, "file", "FP8 data read as plain files"),
        ({**fp8, "scales": None, "scales_dtype": None}, "fp8", "no hidden_states_scales"),
        ({**fp8, "scales": [3]}, "fp8", "expected [T, 1, 1] = [3, 1, 1]"),
        ({**fp8, "scales_dtype": "int64"}, "fp8", "expected float32"),
        ({**plain, "scales": [3, 1, 1], "scales_dtype": "float32"}, "fp8", "multiplies plain values"),
        (plain, "fp8", "the contract says training.transfer: fp8"),
        ({**fp8, "bad_scale": {"token": 2, "value": 0.0, "count": 1}}, "fp8", "at token 2 is 0"),
        ({**plain, "scales": [3, 1, 1], "scales_dtype": "float32"}, "file", "plain bfloat16 hidden_states with a "
         "hidden_states_scales tensor beside them (not FP8 data)"),
    ]:
        fs = checks.check_transfer_backend(c, cap(p, r))
        assert [f.status for f in fs] == ["fail"] and words in fs[0].message, (p, r, fs[0].message)
        assert "hs_7.safetensors" in fs[0].message and fs[0].where == "sample 7"
    # captures of other paths carry no payload: no finding
    assert checks.check_transfer_backend(c, Capture("sglang-extend", "x", torch.zeros(1, dtype=torch.long),
                                                    torch.zeros(1, 96), torch.arange(1))) == []


# --- the shared per-token scale -------------------------------------------------------------------


def test_massive_value_in_b_l_fails_the_fp8_gate_naming_the_token(tiny, tiny_contract, tmp_path):
    from eagle3_conformance.faults.operators.dtype import OUTLIER_RATIO

    d = tmp_path / "data"
    shutil.copytree(tiny.data_dir, d)
    victim, tok = 4, 2

    def outlier(i, hs):
        if i == victim:  # one massive value in B_L at token `tok`
            hs[tok, -1, 0] = OUTLIER_RATIO * float(hs[tok, 0].float().pow(2).mean().sqrt())
        return hs

    _to_fp8(d, outlier)
    c = contract_with(tiny_contract, **{"training.transfer": "fp8"})
    res = scan(c, d, sample=-1, reference_dir=tiny.target_dir)
    bad = [f for f in res.findings if f.check == "fp8_scale_error" and f.status == "fail"]
    assert bad and all(f.where.startswith(f"sample {victim} ") for f in bad), [(f.where, f.slot) for f in bad]
    s0 = [f for f in bad if f.slot == "slot 0"]
    assert s0 and s0[0].observed["token"] == tok and f"at token {tok}" in s0[0].message
    assert s0[0].observed["max"] > 0.1 and s0[0].gate == "gates.fp8_max_relative_error"
    # the same token with the outlier but stored plain (file backend): no FP8 coarsening of slot 0
    d2 = tmp_path / "plain"
    shutil.copytree(tiny.data_dir, d2)
    ok = [f for f in scan(tiny_contract, d2, sample=-1, reference_dir=tiny.target_dir).findings
          if f.check == "fp8_scale_error"]
    assert ok == []  # plain payloads: nothing to measure


def test_fp8_gate_contract_override(fp8_data, tiny, tiny_contract):
    c = contract_with(tiny_contract, **{"training.transfer": "fp8", "gates.fp8_max_relative_error": 0.001})
    res = scan(c, fp8_data, sample=2, reference_dir=tiny.target_dir)
    bad = [f for f in res.findings if f.check == "fp8_scale_error" and f.status == "fail"]
    assert bad and all("gates.fp8_max_relative_error 0.001" in f.message for f in bad)


# --- bad FP8 input: findings naming the file, never a traceback, inputs unchanged -----------------


def _drop_scales(p: Path):
    from safetensors.torch import load_file, save_file

    t = load_file(str(p))
    del t["hidden_states_scales"]
    save_file(t, str(p))


def _flat_scales(p: Path):
    from safetensors.torch import load_file, save_file

    t = load_file(str(p))
    t["hidden_states_scales"] = t["hidden_states_scales"].reshape(-1).contiguous()
    save_file(t, str(p))


def _int_scales(p: Path):
    from safetensors.torch import load_file, save_file

    t = load_file(str(p))
    t["hidden_states_scales"] = t["hidden_states_scales"].long()
    save_file(t, str(p))


def _zero_scale(p: Path):
    from safetensors.torch import load_file, save_file

    t = load_file(str(p))
    t["hidden_states_scales"][4:] = 0.0  # tokens 4.. all scale 0: their values dequantise to zero
    save_file(t, str(p))


def _negative_scale(p: Path):
    from safetensors.torch import load_file, save_file

    t = load_file(str(p))
    t["hidden_states_scales"][4] *= -1  # token 4 flipped
    save_file(t, str(p))


def _truncate(p: Path):
    b = p.read_bytes()
    p.write_bytes(b[: len(b) // 2])


@pytest.mark.parametrize("mutate,disk_words,loader_check", [
    (_drop_scales, "without hidden_states_scales", "transfer_backend"),
    (_flat_scales, "hidden_states_scales is [", "sample_available"),
    (_int_scales, "hidden_states_scales is [", "transfer_backend"),
    (_truncate, "hs_3.safetensors could not be read", "sample_available"),
    (_zero_scale, "hidden_states_scales at token 4 is 0", "transfer_backend"),
    (_negative_scale, "hidden_states_scales at token 4 is -", "transfer_backend"),
], ids=["scales_missing", "scales_wrong_shape", "scales_int", "truncated", "scales_zero", "scales_negative"])
def test_bad_fp8_shard_is_a_finding_naming_the_file(mutate, disk_words, loader_check, fp8_copy, tiny, tmp_path,
                                                     capsys):
    mutate(_shard(fp8_copy, 3))
    before = _hash(fp8_copy)
    rc, fs, _ = _check_data(_fp8_contract(tmp_path), fp8_copy, tiny, tmp_path, capsys, "--sample", "-1")
    assert rc == 1
    disk = [f for f in fs if f["path"] == DISK_PATH and f["status"] == "fail"]
    assert disk and all(f["where"].startswith("sample 3") for f in disk), disk
    assert any(disk_words in f["message"] and "hs_3.safetensors" in f["message"] for f in disk), disk
    loader = [f for f in fs if f["path"] == LOADER_PATH and f["status"] == "fail"]
    assert loader and all(f["where"].startswith("sample 3 ") for f in loader), loader
    hit = [f for f in loader if f["check"] == loader_check]
    assert hit and any("hs_3.safetensors" in f["message"] for f in hit), loader
    if mutate in (_zero_scale, _negative_scale):  # the loader names the file and the first bad token too
        assert any("hidden_states_scales at token 4 is" in f["message"] for f in hit), hit
        assert any("hidden_states/hs_3.safetensors" in f["message"] for f in hit + disk)
    if mutate is _flat_scales:  # FP8Transfer raises on the broadcast; the finding names the key and shape
        assert any("hidden_states_scales is [" in f["message"] for f in hit), hit
    ok = {f["where"].split(" (")[0] for f in fs if f["check"] == "sample_available" and f["status"] == "pass"
          and f["path"] == DISK_PATH}
    assert {f"sample {i}" for i in range(12) if i != 3} <= ok  # every other sample was still checked
    assert _hash(fp8_copy) == before


def test_contract_keys_explained(tmp_path, capsys):
    text = TINY.read_text()
    for extra, words in [("training:\n  transfer: fp4\n", "training.transfer"),
                         ("training:\n  tool: specforge\n  transfer: fp8\n", "hs-connectors backend"),
                         ]:
        p = tmp_path / "c.yaml"
        p.write_text(text + extra)
        assert main(["validate", str(p)]) == 2
        out = capsys.readouterr()
        assert "Traceback" not in out.out + out.err
        assert any(words in ln and ln.startswith(f"{p}:") for ln in out.out.splitlines()), out.out
    p = tmp_path / "g.yaml"
    p.write_text(text.replace("gates:", "gates:\n  fp8_max_relative_error: 2", 1))
    assert main(["validate", str(p)]) == 2
    assert "gates.fp8_max_relative_error" in capsys.readouterr().out


# --- kill matrix: both operators caught on the training column -----------------------------------


def test_fp8_operators_caught_on_the_synthetic_scenario(tmp_path):
    from eagle3_conformance.faults.example import default_example
    from eagle3_conformance.faults.matrix import MATRIX_SCENARIOS, evaluate
    from eagle3_conformance.faults.operators import OPERATORS_BY_NAME, NotApplicable
    from eagle3_conformance.faults.scenario import build_scenario

    scn = build_scenario(MATRIX_SCENARIOS["base"], tmp_path / "base", for_sglang=False)
    ex = default_example(scn)
    c = scn.contract(extra_tokens=ex.tokens())
    for name, check in (("fp8-read-as-file", "transfer_backend"), ("fp8-scale-outlier", "fp8_scale_error")):
        op = OPERATORS_BY_NAME[name]
        v = evaluate(op, "training", scn, c, ex, None)
        assert (v.status, v.check) == ("caught", check), (name, v)
        assert not v.baseline_failures
        assert all(isinstance(op.paths[p], NotApplicable) for p in op.paths if p != "training")
    v = evaluate(OPERATORS_BY_NAME["fp8-scale-outlier"], "training", scn, c, ex, None)
    assert "slot 0" in v.detail  # the early slot, coarsened by B_L's value through the shared scale


# --- the real pair (slow): which checks see FP8 read as plain files --------------------------------


@pytest.mark.slow
def test_real_pair_fp8_read_as_file_which_checks_catch_it(tmp_path):
    """SmolLM2-135M, 6 corpus samples written by the fp8 backend: read with FP8Transfer, nothing
    fails; read as plain files, ``transfer_backend``, ``fp8_scale_error`` and ``dtype`` (float8 on
    disk where the contract says bfloat16) fail on every sample; ``magnitude`` only where 448/amax
    strays more than 1.1x from 1 (SmolLM2's amax is ~480: the factor is near 1, so on some samples
    it passes); the cosine-based identity checks cannot see a per-token scale and pass."""
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.suite.assess import sample_findings
    from eagle3_conformance.testbed.datagen import write_speculators_dataset
    from eagle3_conformance.testbed.fixture_base import fixture_spec
    from eagle3_conformance.testbed.fixtures_real import corpus_samples, load_tokenizer, resolve_spec
    from eagle3_conformance.testbed.model_cache import ensure_model
    from eagle3_conformance.tools.speculators_loader import TrainingLoader

    c = load_contract(REPO / "contracts" / "smollm2-135m.yaml")
    spec = resolve_spec(*fixture_spec("smollm2-135m"))
    target = ensure_model(spec["model"], "float32")
    seqs = [list(s.input_ids) for s in corpus_samples(spec, load_tokenizer(target))][:6]
    ref = load_reference_model(target, c.target)
    d = write_speculators_dataset(tmp_path / "d", ref, seqs, slots=c.capture.boundaries + [c.verifier_last.tensor],
                                  transfer="fp8")
    fails: dict[str, dict[str, set]] = {}
    for tr in ("fp8", "file"):
        cc = contract_with(c, **{"training.transfer": tr})
        loader = TrainingLoader(d, 576, 3, torch.bfloat16, transfer=tr)
        fails[tr] = {}
        for cap in loader.batch(list(range(len(seqs)))):
            for f in sample_findings(cc, cap, ref):
                if f.status == "fail":
                    fails[tr].setdefault(f.check, set()).add(f.where)
    assert fails["fp8"] == {}
    every = {f"sample {i} (batch position {i})" for i in range(6)}
    for chk in ("transfer_backend", "fp8_scale_error", "dtype"):
        assert fails["file"][chk] == every, chk
    assert 0 < len(fails["file"].get("magnitude", ())) <= 6
    for chk in ("slot_identity", "row_fingerprint", "verifier_identity", "slot_order"):
        assert chk not in fails["file"], chk


# --- what the fp8-transport diagnosis tells the user to fix ----------------------------------------


def _plain_with_scales(d: Path) -> None:
    """Plain bf16 shards with a stray ``hidden_states_scales`` (float32 [T, 1, 1] ones) beside them."""
    from safetensors.torch import load_file, save_file

    for p in sorted((d / "hidden_states").glob("hs_*.safetensors")):
        t = load_file(str(p))
        t["hidden_states_scales"] = torch.ones(t["hidden_states"].shape[0], 1, 1)
        save_file(t, str(p))


def _bf16_scales(d: Path) -> None:
    from safetensors.torch import load_file, save_file

    for p in sorted((d / "hidden_states").glob("hs_*.safetensors")):
        t = load_file(str(p))
        t["hidden_states_scales"] = t["hidden_states_scales"].to(torch.bfloat16)
        save_file(t, str(p))


def test_fp8_transport_fix_says_what_the_files_are(fp8_data, tiny, tmp_path, capsys):
    """The fix matches the fault: plain data under ``transfer: fp8`` is told to declare ``file`` (the
    contract already says fp8); plain data with a stray scales tensor is called that, not FP8 data read
    without scales; bf16 scales are told the scales must be float32 [T, 1, 1]."""
    plain = tmp_path / "plain"
    shutil.copytree(tiny.data_dir, plain)
    stray = tmp_path / "stray"
    shutil.copytree(tiny.data_dir, stray)
    _plain_with_scales(stray)
    bf16 = tmp_path / "bf16"
    shutil.copytree(fp8_data, bf16)
    _bf16_scales(bf16)
    fp8c, filec = _fp8_contract(tmp_path, "fp8"), _fp8_contract(tmp_path, "file")

    def diag(contract, d):
        out = tmp_path / "d.json"
        rc = main(["check-data", str(contract), "--data", str(d), "--reference", str(tiny.target_dir), "--quiet",
                   "--json", str(out), "--sample", "2"])
        cap = capsys.readouterr()
        assert "Traceback" not in cap.err + cap.out and rc == 1
        ds = [x for x in json.loads(out.read_text())["diagnoses"] if x["kind"] == "fp8-transport"]
        assert ds, ds  # one per path that read the files (the all-rows scan, the loader)
        assert all(x["fix"] == ds[0]["fix"] and x["title"] == ds[0]["title"] for x in ds), ds
        return ds[0]

    d = diag(fp8c, plain)
    fix = " ".join(d["fix"])
    assert "the files are plain bfloat16: declare training.transfer: file, or regenerate with the FP8 connector" in fix
    assert "declare training.transfer: fp8" not in fix
    d = diag(filec, stray)
    text = d["title"] + " " + " ".join(d["evidence"]) + " " + " ".join(d["fix"])
    assert "plain" in d["title"] and "hidden_states_scales tensor beside them" in d["title"]
    assert "read without its scales" not in text and "448/amax" not in text and "never rescaled" not in text
    d = diag(fp8c, bf16)
    fix = " ".join(d["fix"])
    assert "the scales must be float32 [T, 1, 1]" in fix and "declare training.transfer: fp8" not in fix
