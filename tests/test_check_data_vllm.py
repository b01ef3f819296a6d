"""``check-data`` on a directory of vLLM extraction files (issue #13 item 2): ``{req_id}.safetensors``
holding ``hidden_states`` [T, N, H] and ``token_ids`` [T], as vLLM's ``ExampleHiddenStatesConnector``
writes them, with no Arrow table.

The files are written by :func:`eagle3_conformance.testbed.datagen.write_vllm_extraction` from the reference
forward of the tiny-llama fixture (real boundaries); faults are injected by writing other planes;
which boundary a plane holds is judged against the reference, never against the writer.
"""

from __future__ import annotations

import json
import pickle
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import tree_digest

from eagle3_conformance.cli import main
from eagle3_conformance.scan import DISK_PATH, SPECULATORS, VLLM_EXTRACTION, VLLM_PATH, ScanError, detect_format, scan
from eagle3_conformance.testbed.fixtures import sample_token_ids

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"
AUX = ["B_2", "B_4", "B_5"]
GOOD = AUX + ["B_8"]  # the aux ids then L, as speculators' launcher lists them (N = K + 1)




@pytest.fixture(scope="module")
def prompts(tiny):
    return sample_token_ids(tiny.spec, 7, 6, 16, seed=5)


@pytest.fixture(scope="module")
def write(tiny_ref, prompts, tmp_path_factory):
    """``write(slots, **kw)``: a fresh directory of connector files holding ``slots``."""
    from eagle3_conformance.testbed.datagen import write_vllm_extraction

    def _w(slots, **kw):
        return write_vllm_extraction(tmp_path_factory.mktemp("vllm") / "out", tiny_ref, prompts, slots=slots, **kw)
    return _w


@pytest.fixture(scope="module")
def good_dir(write):
    return write(GOOD)


def _check(tmp_path, capsys, data, *extra):
    out = tmp_path / f"r{len(list(tmp_path.glob('r*.json')))}.json"
    rc = main(["check-data", str(TINY), "--data", str(data), "--quiet", "--json", str(out), *map(str, extra)])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err + cap.out
    doc = json.loads(out.read_text()) if out.exists() else None
    return rc, doc, cap


def _fails(doc, path=None):
    return [f for f in doc["findings"] if f["status"] == "fail" and (path is None or f["path"] == path)]


# --- good data --------------------------------------------------------------------------------


def test_connector_files_conform_every_file_scanned_fingerprints_on_the_sample(good_dir, prompts, tmp_path, capsys):
    before = tree_digest(good_dir)
    rc, doc, _ = _check(tmp_path, capsys, good_dir, "--sample", 3, "--seed", 1)
    assert rc == 0, [f["message"] for f in _fails(doc)]
    m = doc["meta"]
    assert m["format"] == VLLM_EXTRACTION and set(m["reader"]) == {DISK_PATH, VLLM_PATH}
    assert m["samples"] == len(prompts) and m["slot_identity"]["checked"] is True
    # the all-rows pass saw every file, named in `where`, and judged both tensors
    avail = [f["where"] for f in doc["findings"] if f["path"] == DISK_PATH and f["check"] == "sample_available"]
    assert avail == [f"sample {i} (req-{i}.safetensors)" for i in range(len(prompts))]
    disk_checks = {f["check"] for f in doc["findings"] if f["path"] == DISK_PATH}
    assert {"slot_count", "feature_width", "verifier_width", "dtype", "finite", "row_count"} <= disk_checks
    assert "token_ids" not in disk_checks  # no Arrow ids to compare the file's own with
    assert "token ids from the file itself" in m["scope"][DISK_PATH]
    # fingerprints only on the seeded sample, through the vLLM reader
    idx = m["fingerprint_sample"]["indices"]
    assert len(idx) == 3
    ident = {f["where"] for f in doc["findings"] if f["check"] == "slot_identity"}
    assert ident == {f"sample {i} (req-{i}.safetensors)" for i in idx}
    assert {f["path"] for f in doc["findings"] if f["check"] == "verifier_identity"} == {VLLM_PATH}
    assert set(m["slot_stats"]) == {"slot 0", "slot 1", "slot 2", "verifier"}
    assert m["slot_stats"]["slot 0"]["rows"] == sum(map(len, prompts))
    assert tree_digest(good_dir) == before


def test_sampled_findings_equal_check_offlines_on_the_same_files(good_dir, write, tiny, tiny_contract):
    """The fingerprint sample is read with check-offline's reader and rule (first K planes aux, plane
    K the verifier when N = K + 1; N = K: no verifier, which fails verifier_present): with every file sampled, the sampled findings
    are check-offline's findings, for both plane counts."""
    from eagle3_conformance.suite.runner import offline_findings
    from eagle3_conformance.tools.vllm_hidden_states import find_files

    for d, bad in ((good_dir, set()), (write(AUX), {"verifier_present"})):  # N = K: the verifier is missing
        res = scan(tiny_contract, d, sample=-1, reference_dir=tiny.target_dir)
        got = [f.to_json() for f in res.findings if f.path == VLLM_PATH]
        want = [f.to_json() for f in offline_findings(tiny_contract, find_files(d), tiny.target_dir)]
        assert got == want and {f.check for f in res.findings if f.status == "fail"} == bad


def test_raw_connector_output_without_b_l_fails_naming_the_missing_verifier(write, tiny, tiny_contract, tmp_path,
                                                                           capsys):
    """N = K (the connector's planes without B_L, speculators' launcher ``--no-include-last-layer``):
    all K planes are aux, as check-offline reads them, and the verifier the contract declares
    (``verifier_last: B_8``) is missing: every file fails ``verifier_present`` on both the all-rows
    pass and the sampled reader, diagnosed ``verifier-missing`` (issue 23 item 3)."""
    d = write(AUX)
    res = scan(tiny_contract, d, sample=2, reference_dir=tiny.target_dir)
    fails = [f for f in res.findings if f.status == "fail"]
    assert {f.check for f in fails} == {"verifier_present"} and {f.slot for f in fails} == {"verifier"}
    assert {f.path for f in fails} == {DISK_PATH, VLLM_PATH}
    assert len([f for f in fails if f.path == DISK_PATH]) == 7  # every file, not only the sample
    assert all("B_8" in f.message and "missing" in f.message for f in fails)
    disk = [f for f in res.findings if f.path == DISK_PATH]
    assert [f.observed for f in disk if f.check == "slot_count"] == [3] * 7
    assert set(res.meta["slot_stats"]) == {"slot 0", "slot 1", "slot 2"}
    rc, doc, _ = _check(tmp_path, capsys, d, "--reference", tiny.target_dir)
    assert rc == 1 and [x["kind"] for x in doc["diagnoses"]] == ["verifier-missing"]


# --- faults -------------------------------------------------------------------------------------


@pytest.mark.parametrize("planes,diagnosis,checks", [
    (["B_4", "B_2", "B_5", "B_8"], "slots-permuted", {"slot_order", "slot_identity"}),
    (["B_3", "B_5", "B_6", "B_8"], "convention-shift", {"slot_identity"}),  # ids read one boundary deeper
    (["B_0"] + AUX, "embedding-for-last", {"no_embedding", "slot_identity", "verifier_identity"}),
])
def test_injected_faults_fail_with_their_diagnosis(write, tmp_path, capsys, planes, diagnosis, checks):
    d = write(planes)
    rc, doc, _ = _check(tmp_path, capsys, d, "--sample", 2)
    assert rc == 1
    assert {dg["kind"] for dg in doc["diagnoses"]} >= {diagnosis}, doc["diagnoses"]
    assert checks <= {f["check"] for f in _fails(doc, VLLM_PATH)}
    assert all(".safetensors)" in f["where"] for f in _fails(doc))


def test_an_extra_plane_fails_on_every_file_not_only_the_sample(write, tmp_path, capsys):
    """N = K + 2 (the embedding prepended to the K aux and B_L): the all-rows pass fails the slot
    count of every file, including those outside the fingerprint sample."""
    d = write(["B_0"] + GOOD)
    rc, doc, _ = _check(tmp_path, capsys, d, "--sample", 1, "--no-reference")
    assert rc == 1
    bad = [f for f in _fails(doc, DISK_PATH) if f["check"] == "slot_count"]
    assert [f["where"] for f in bad] == [f"sample {i} (req-{i}.safetensors)" for i in range(7)]
    assert bad[0]["observed"] == 4 and bad[0]["expected"] == 3


def test_nan_outside_the_sample_is_caught_by_the_all_rows_pass(write, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    d = write(GOOD)
    p = d / "req-4.safetensors"
    t = load_file(str(p))
    t["hidden_states"][2, 1, 5] = float("nan")
    save_file(t, str(p))
    rc, doc, _ = _check(tmp_path, capsys, d, "--sample", 0)
    assert rc == 1
    assert [(f["check"], f["slot"], f["where"], f["observed"]) for f in _fails(doc)] == [
        ("finite", "feature", "sample 4 (req-4.safetensors)", "non-finite rows [2]")]


# --- bad input ----------------------------------------------------------------------------------


class _Boom:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "code ran"))


def test_bad_files_are_findings_naming_the_file_never_a_traceback(good_dir, tmp_path, capsys):
    from safetensors.torch import save_file

    d = tmp_path / "d"
    shutil.copytree(good_dir, d)
    good = (d / "req-0.safetensors").read_bytes()
    (d / "truncated.safetensors").write_bytes(good[: len(good) // 2])
    (d / "text.safetensors").write_bytes(b"not a safetensors file at all")
    save_file({"hidden_states": torch.zeros(5, 4, 64, dtype=torch.bfloat16)}, str(d / "nokey.safetensors"))
    save_file({"hidden_states": torch.zeros(5, 256, dtype=torch.bfloat16),
               "token_ids": torch.ones(5, dtype=torch.long)}, str(d / "rank.safetensors"))
    save_file({"hidden_states": torch.zeros(5, 4, 64, dtype=torch.float16),
               "token_ids": torch.ones(5, dtype=torch.int32)}, str(d / "dtypes.safetensors"))
    marker = tmp_path / "marker"
    (d / "evil.pt").write_bytes(pickle.dumps(_Boom(marker)))
    (d / "sub").mkdir()  # the connector writes one flat folder: subdirectories are listed, not read
    shutil.copy(d / "req-0.safetensors", d / "sub" / "nested.safetensors")
    before = tree_digest(d)
    rc, doc, _ = _check(tmp_path, capsys, d, "--sample", -1)
    assert rc == 1 and not marker.exists()
    na = [(f["path"], f["where"], f["message"]) for f in doc["findings"]
          if f["check"] == "sample_available" and f["status"] == "fail"]
    for name, words in (("truncated", "could not be read"), ("text", "could not be read"),
                        ("nokey", "token_ids"), ("rank", "[T, N, H]")):
        hit = [(path, msg) for path, w, msg in na if f"{name}.safetensors" in w]
        # the all-rows pass and the sampled reader each name the file
        assert sorted(p for p, _ in hit) == [DISK_PATH, VLLM_PATH], (name, na)
        assert all(words in msg and f"{name}.safetensors" in msg for _, msg in hit), (name, hit)
    wrong = {(f["check"], f["slot"]) for f in _fails(doc) if "dtypes.safetensors" in f["where"]}
    assert {("dtype", "on disk"), ("id_dtype", "token_ids")} <= wrong
    stray = [f for f in doc["findings"] if f["check"] == "data_files"]
    assert len(stray) == 1 and stray[0]["status"] == "skip" and "evil.pt" in stray[0]["message"]
    assert "sub/" in stray[0]["message"] and not [f for f in doc["findings"] if "nested" in f["where"]]
    assert tree_digest(d) == before


@pytest.mark.parametrize("layout", ["empty", "only-pt", "no-keys"])
def test_not_extraction_output_exit_2_saying_what_was_expected(tmp_path, capsys, layout):
    from safetensors.torch import save_file

    d = tmp_path / "d"
    d.mkdir()
    if layout == "only-pt":
        (d / "a.pt").write_bytes(pickle.dumps(_Boom(tmp_path / "marker")))
    elif layout == "no-keys":
        save_file({"weight": torch.zeros(2, 2)}, str(d / "model.safetensors"))
    before = tree_digest(d)
    rc, doc, cap = _check(tmp_path, capsys, d)
    assert rc == 2 and doc is None
    assert "not a speculators Arrow dataset" in cap.err and "'hidden_states'" in cap.err, cap.err
    if layout == "only-pt":
        assert "check-offline" in cap.err and not (tmp_path / "marker").exists()
    assert tree_digest(d) == before


def test_the_directory_above_a_dataset_is_not_read_as_extraction_files(tiny, tmp_path, capsys):
    """The speculators shards below a parent directory hold the connector's keys; auto-detection
    must not read the parent as vLLM output (a wrong --data), and says where the dataset is."""
    shutil.copytree(tiny.data_dir, tmp_path / "parent" / "ds")
    rc, _, cap = _check(tmp_path, capsys, tmp_path / "parent")
    assert rc == 2 and "speculators dataset(s) lie below it: ds" in cap.err, cap.err


def test_nothing_readable_exit_2(tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.safetensors").write_bytes(b"junk")
    rc, _, cap = _check(tmp_path, capsys, d, "--format", "vllm-extraction")
    assert rc == 2 and "none of the 1 samples could be read" in cap.err


@pytest.mark.parametrize("verb", ["check-data", "check-offline"])
def test_verdict_word_and_exit_code_agree_when_nothing_is_readable(tmp_path, capsys, verb):
    """A rank-2 ``hidden_states`` file, the only one: the input cannot be checked at all, so exit 2
    and every verdict (quiet line, JSON meta, Markdown) says INPUT ERROR, never VIOLATIONS."""
    from safetensors.torch import save_file

    d = tmp_path / "d"
    d.mkdir()
    save_file({"hidden_states": torch.zeros(5, 256, dtype=torch.bfloat16),
               "token_ids": torch.ones(5, dtype=torch.long)}, str(d / "rank.safetensors"))
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    args = (["check-data", str(TINY), "--data", str(d), "--markdown", str(md)] if verb == "check-data"
            else ["check-offline", str(TINY), "--files", str(d), "--no-reference"])
    for quiet in ([], ["--quiet"]):
        rc = main([*args, "--json", str(out), *quiet])
        cap = capsys.readouterr()
        assert rc == 2 and "could be read" in cap.err, cap.err
        assert "VIOLATIONS" not in cap.out and "INPUT ERROR: none of the 1 samples could be read" in cap.out, cap.out
        assert json.loads(out.read_text())["meta"]["verdict"].startswith("INPUT ERROR")
        if verb == "check-data":
            assert "VIOLATIONS" not in md.read_text() and "INPUT ERROR" in md.read_text()
        out.unlink()


# --- layout detection and forcing ---------------------------------------------------------------


def test_auto_detection_and_forcing(tiny, good_dir, tmp_path, capsys):
    assert detect_format(tiny.data_dir) == SPECULATORS
    assert detect_format(good_dir) == VLLM_EXTRACTION
    assert detect_format(good_dir, SPECULATORS) == SPECULATORS  # forced: not looked at
    with pytest.raises(ScanError, match="not a speculators Arrow dataset"):
        detect_format(tmp_path)
    # speculators' datagen before its Arrow table exists: hidden_states/hs_{i}.safetensors only
    pre = tmp_path / "pre"
    shutil.copytree(tiny.data_dir / "hidden_states", pre / "hidden_states")
    assert detect_format(pre) == VLLM_EXTRACTION
    rc, doc, _ = _check(tmp_path, capsys, tiny.data_dir, "--no-reference", "--sample", 0)
    assert rc == 0 and doc["meta"]["format"] == SPECULATORS
    rc, doc, cap = _check(tmp_path, capsys, good_dir, "--format", "speculators")
    assert rc == 2 and "not a speculators Arrow dataset" in cap.err


def test_speculators_shards_read_as_extraction_files_give_the_same_all_rows_verdicts(tiny, tiny_contract, tmp_path):
    """The shard files of a speculators dataset are the connector's files renamed: read as vLLM
    extraction output (auto-detected once the Arrow table is gone) the all-rows pass gives the same
    verdicts, sample for sample, except the comparison with Arrow ids it cannot make."""
    d = tmp_path / "hs"
    shutil.copytree(tiny.data_dir / "hidden_states", d)
    a = scan(tiny_contract, tiny.data_dir, sample=0)
    b = scan(tiny_contract, d, sample=0)
    assert a.meta["format"] == SPECULATORS and b.meta["format"] == VLLM_EXTRACTION

    def key(res, drop):
        def obs(f):  # the file as each layout names it (relative to its data directory) aside
            o = f.to_json()["observed"]
            return json.dumps({k: v for k, v in o.items() if k != "file"} if isinstance(o, dict) else o)
        return [(f.check, f.status, f.slot, obs(f), f.where.split(" (")[0])
                for f in res.findings if f.path == DISK_PATH and f.check not in drop]
    assert key(a, {"token_ids"}) == key(b, set())
    names = lambda res: {f.observed["file"] for f in res.findings if f.check == "transfer_backend"}  # noqa: E731
    assert names(a) == {f"hidden_states/hs_{i}.safetensors" for i in range(a.meta["samples"])}
    assert names(b) == {f"hs_{i}.safetensors" for i in range(b.meta["samples"])}
    assert a.meta["slot_stats"] == b.meta["slot_stats"]


# --- shards, merge, --json-passes -------------------------------------------------------------


def _key(f) -> str:
    return json.dumps(f, sort_keys=True)


def test_shards_merged_equal_the_unsharded_run(write, tmp_path, capsys):
    d = write(["B_4", "B_2", "B_5", "B_8"])  # swapped: failures on both paths must survive the merge
    base = ["check-data", str(TINY), "--data", str(d), "--quiet", "--sample", "4", "--seed", "2", "--batch-size", "2"]
    whole = tmp_path / "whole.json"
    assert main(base + ["--json", str(whole)]) == 1
    parts = [tmp_path / f"part-{i}.json" for i in range(3)]
    rcs = [main(base + ["--shard", f"{i}/3", "--json", str(p)]) for i, p in enumerate(parts)]
    assert 1 in rcs and set(rcs) <= {0, 1}  # a shard without a fingerprinted batch has nothing to fail
    out = tmp_path / "merged.json"
    assert main(["merge-reports", str(out), *map(str, parts), "--quiet"]) == 1
    assert "Traceback" not in capsys.readouterr().err
    merged, whole = json.loads(out.read_text()), json.loads(whole.read_text())
    assert Counter(map(_key, merged["findings"])) == Counter(map(_key, whole["findings"]))
    assert {f["path"] for f in merged["findings"] if f["status"] == "fail"} == {VLLM_PATH}
    assert merged["meta"]["complete"] is True and merged["meta"]["format"] == VLLM_EXTRACTION
    assert merged["meta"]["fingerprint_sample"]["indices"] == whole["meta"]["fingerprint_sample"]["indices"]
    for slot, st in whole["meta"]["slot_stats"].items():
        assert merged["meta"]["slot_stats"][slot]["rows"] == st["rows"]
        assert merged["meta"]["slot_stats"][slot]["rms_max"] == st["rms_max"]


def test_merge_refuses_parts_read_in_different_formats(tiny, tmp_path, capsys):
    d = tmp_path / "hs"
    shutil.copytree(tiny.data_dir / "hidden_states", d)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    base = ["--no-reference", "--sample", "0", "--quiet"]
    assert main(["check-data", str(TINY), "--data", str(tiny.data_dir), *base, "--shard", "0/2", "--json", str(a)]) == 0
    assert main(["check-data", str(TINY), "--data", str(d), *base, "--shard", "1/2", "--json", str(b)]) == 0
    assert main(["merge-reports", str(tmp_path / "m.json"), str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "format" in err and "Traceback" not in err


def test_json_passes_counts(good_dir, tmp_path, capsys):
    rc, full, _ = _check(tmp_path, capsys, good_dir, "--sample", 2)
    rc2, folded, _ = _check(tmp_path, capsys, good_dir, "--sample", 2, "--json-passes", "counts")
    assert rc == rc2 == 0
    passes = [f for f in folded["findings"] if f["status"] == "pass"]
    assert sum(f["count"] for f in passes) == sum(f["status"] == "pass" for f in full["findings"])
    assert len(folded["findings"]) < len(full["findings"])


@pytest.mark.slow
def test_workers_2_same_findings_as_1(good_dir, tiny_contract):
    one = scan(tiny_contract, good_dir, sample=0)
    two = scan(tiny_contract, good_dir, sample=0, workers=2)
    assert [f.to_json() for f in two.findings] == [f.to_json() for f in one.findings]
    assert two.meta["format"] == VLLM_EXTRACTION and two.meta["engine"]["tasks"] == 2


# --- hs-connectors FP8 payloads in extraction files ------------------------------------------------


def _to_fp8(d: Path, mutate=None) -> Path:
    """Rewrite every file of ``d`` as hs-connectors' ``FP8HiddenStatesConnector`` writes it
    (:func:`eagle3_conformance.testbed.datagen.hs_payload`); ``mutate(name, tensors)`` may change the written tensors."""
    from safetensors.torch import load_file, save_file

    from eagle3_conformance.testbed.datagen import hs_payload

    for p in sorted(d.glob("*.safetensors")):
        t = load_file(str(p))
        out = hs_payload(t["hidden_states"], t["token_ids"], "fp8")
        if mutate is not None:
            mutate(p.stem, out)
        save_file(out, str(p))
    return d


def _contract(tmp_path: Path, transfer: str) -> Path:
    p = tmp_path / f"tiny-{transfer}.yaml"
    text = TINY.read_text()
    assert "\ntraining:" not in text
    p.write_text(text + f"training:\n  transfer: {transfer}\n")
    return p


def _check_with(tmp_path, capsys, contract, data, *extra):
    out = tmp_path / f"r{len(list(tmp_path.glob('r*.json')))}.json"
    rc = main(["check-data", str(contract), "--data", str(data), "--quiet", "--json", str(out), *map(str, extra)])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err + cap.out
    return rc, json.loads(out.read_text()), cap.out + cap.err


@pytest.fixture(scope="module")
def fp8_dir(write):
    return _to_fp8(write(GOOD))


def test_fp8_extraction_files_read_through_fp8_conform(fp8_dir, tmp_path, capsys):
    """transfer: fp8 on FP8 connector files: the fingerprint reader dequantises with hs-connectors'
    own ``dequantize_fp8_tensor`` (no float8 dtype failure, no magnitude diagnosis), and
    ``transfer_backend`` / ``fp8_scale_error`` judge the vLLM captures as they judge training data."""
    before = tree_digest(fp8_dir)
    rc, doc, out = _check_with(tmp_path, capsys, _contract(tmp_path, "fp8"), fp8_dir, "--sample", -1)
    assert rc == 0, [f["message"] for f in _fails(doc)]
    assert not doc["diagnoses"]
    tb = [f for f in doc["findings"] if f["check"] == "transfer_backend"]
    assert {f["path"] for f in tb} == {DISK_PATH, VLLM_PATH} and all(f["status"] == "pass" for f in tb)
    assert len([f for f in tb if f["path"] == VLLM_PATH]) == 7
    fe = [f for f in doc["findings"] if f["check"] == "fp8_scale_error"]
    assert fe and {f["path"] for f in fe} == {VLLM_PATH} and all(f["status"] == "pass" for f in fe)
    assert {f["slot"] for f in fe} == {"slot 0", "slot 1", "slot 2", "verifier"}
    dt = [f for f in doc["findings"] if f["check"] == "dtype" and f["path"] == VLLM_PATH]
    assert dt and all(f["status"] == "pass" for f in dt)
    assert tree_digest(fp8_dir) == before


def test_fp8_extraction_files_read_as_file_fail_naming_the_file_as_it_is(fp8_dir, tmp_path, capsys):
    rc, doc, out = _check_with(tmp_path, capsys, _contract(tmp_path, "file"), fp8_dir, "--sample", -1)
    assert rc == 1
    bad = [f for f in _fails(doc) if f["check"] == "transfer_backend"]
    assert {f["path"] for f in bad} == {DISK_PATH, VLLM_PATH}
    for f in bad:
        i = int(f["where"].split()[1])
        assert "FP8 data read as plain files" in f["message"]
        assert f"req-{i}.safetensors holds" in f["message"] and "hidden_states/" not in f["message"]
        assert (fp8_dir / f["observed"]["file"]).is_file()  # the evidence names a file that exists
    assert "fp8-transport" in {d["kind"] for d in doc["diagnoses"]}


@pytest.mark.parametrize("value", [0.0, -1.0])
def test_nonpositive_fp8_scale_fails_naming_file_and_token(write, tmp_path, capsys, value):
    def bad(stem, t):
        if stem == "req-3":
            t["hidden_states_scales"][5] = value

    d = _to_fp8(write(GOOD), bad)
    rc, doc, _ = _check_with(tmp_path, capsys, _contract(tmp_path, "fp8"), d, "--sample", -1)
    assert rc == 1
    bad_f = [f for f in _fails(doc) if f["check"] == "transfer_backend"]
    assert {f["path"] for f in bad_f} == {DISK_PATH, VLLM_PATH}  # the all-rows pass and the loader
    assert {f["where"] for f in bad_f} == {"sample 3 (req-3.safetensors)"}
    assert all("req-3.safetensors" in f["message"] and "at token 5 is" in f["message"] for f in bad_f)


def test_check_data_and_check_offline_say_what_their_finding_counts_count(good_dir, tmp_path, capsys):
    """newuser finding 17: check-data and check-offline on the same files gave 224 and 159 findings and
    neither said why. By design: check-data adds an all-rows pass over every stored sample to the per-file
    findings of its fingerprint sample, which are check-offline's (test above). Now both reports say what
    they count, and with every file sampled the sampled part is check-offline's count."""
    rc, doc, _ = _check(tmp_path, capsys, good_dir, "--sample", -1)
    assert rc == 0
    rc = main(["check-data", str(TINY), "--data", str(good_dir), "--sample", "-1"])
    data_out = " ".join(capsys.readouterr().out.split())
    rc2 = main(["check-offline", str(TINY), "--files", str(good_dir), "--json", str(tmp_path / "o.json")])
    offline_out = " ".join(capsys.readouterr().out.split())
    assert rc == rc2 == 0
    n_off = len(json.loads((tmp_path / "o.json").read_text())["findings"])
    by = Counter(f["path"] for f in doc["findings"])
    assert by[VLLM_PATH] == n_off and len(doc["findings"]) > n_off  # the two counts differ, by design
    assert (f"counted: {by[DISK_PATH]} all-rows pass + {n_off} per file, as check-offline counts + "
            in data_out), data_out
    assert f"counted: {n_off} findings, each file read as its trainer reads it (check-data on the same files adds" \
        in offline_out, offline_out
