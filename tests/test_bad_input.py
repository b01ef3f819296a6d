"""Bad input of every kind: a one-line error with file and line (contracts), a finding naming the
file and sample (data), a full report despite broken files, and inputs never modified."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from eagle3_conformance.checks import dataset as datacheck
from eagle3_conformance.cli import main
from eagle3_conformance.suite import runner

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"
T = TINY.read_text()


def _hash(*roots: Path) -> str:
    h = hashlib.sha256()
    for root in roots:
        for p in sorted([root] if root.is_file() else root.rglob("*")):
            if p.is_file():
                h.update(str(p).encode() + p.read_bytes())
    return h.hexdigest()


# --- contracts ----------------------------------------------------------------------------------

def _sub(old: str, new: str) -> bytes:
    assert old in T, old
    return T.replace(old, new, 1).encode()


def _uncalibrated(extra: str = "", gates_extra: str = "") -> bytes:
    """The tiny contract with its norm_bands section replaced by an uncalibrated one (+ ``extra``)."""
    import re

    text = re.sub(r"(?ms)^norm_bands:\n.*?(?=^gates:)",
                  "norm_bands:\n  status: uncalibrated\n  exclude_positions: [0]\n" + extra, T)
    assert "status: uncalibrated" in text and "gates:" in text
    if gates_extra:
        text = re.sub(r"(?m)^(gates:.*\n)", lambda m: m.group(1) + gates_extra, text, count=1)
    return text.encode()


def _line_of(data: bytes, marker: bytes, nth: int = 1) -> int:
    """1-based line of the nth line containing ``marker`` (contracts change; lines are not hard-coded)."""
    hits = [i + 1 for i, ln in enumerate(data.split(b"\n")) if marker in ln]
    return hits[nth - 1]


CONTRACT_CASES = [
    # name, file bytes, (marker of the reported line or a line number, column or None), words
    ("empty", b"", (1, 1), "no YAML document"),
    ("comments", b"# only a comment\n", (1, 1), "no YAML document"),
    ("list", b"- a\n- b\n", (1, 1), "the document is a list"),
    ("scalar", b"just words\n", (1, 1), "a single string"),
    ("malformed", _sub("  hidden_size: 64\n  vocab", "  hidden_size: [64\n  vocab"), (b"vocab_size: 512", None),
     "malformed YAML"),
    ("not_utf8", T.encode().replace(b"vocab_size: 512", b"vocab_size: \xff512", 1), (b"\xff512", 15), "not UTF-8"),
    ("nul", _sub("name: tiny-llama-eagle3", "name: tiny\x00"), (b"\x00", 11), "0x0000"),
    ("dup_key", _sub("  vocab_size: 512\n", "  vocab_size: 512\n  vocab_size: 256\n"), (b"vocab_size: 256", 3),
     "and again at line"),
    ("deep", b"a: " + b"[" * 5000 + b"]" * 5000, (1, None), "nested more than"),
    ("alias_bomb", b"a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n", (2, 8), "alias *a"),
    ("alias_cycle", b"a: &a [*a]\n", (1, 8), "alias *a"),
    ("two_docs", (T + "---\nname: x\n").encode(), (b"---", 1), "single document"),
    ("id_beyond_L", _sub("boundaries: [B_2, B_4, B_5]", "boundaries: [B_2, B_4, B_9]"), (b"B_9", None), "beyond B_8"),
    ("dup_layer_ids", _sub("values: [1, 3, 4]", "values: [1, 1, 4]"), (b"values: [1, 1, 4]", None),
     "duplicate layer ids"),
    ("layer_id_beyond_L", _sub("values: [1, 3, 4]", "values: [1, 3, 40]"), (b"values: [1, 3, 40]", None),
     "layer id 40 is beyond"),
    ("K0", _sub("boundaries: [B_2, B_4, B_5]", "boundaries: []"), (b"boundaries: []", None), "at least 1"),
    ("widths", _sub("feature_width: 192", "feature_width: 190"), (b"feature_width: 190", None),
     "K x target_hidden_size"),
    ("uncalibrated_gate", _uncalibrated("  bands: [{slot: B_2, lo: 0.1, hi: 1.0}]\n"),
     (b"status: uncalibrated", None), "cannot gate"),
    ("impossible_noise_angle", _sub("  identity_noise_deg: ", "  identity_noise_deg: 120 "),
     (b"identity_noise_deg", None), "less than or equal to 90"),
    ("unknown_key", _sub("  final_norm: rmsnorm", "  final_norm: rmsnorm\n  colour: blue"), (b"colour", 3),
     "unknown key"),
]


@pytest.mark.parametrize("name,data,pos,words", CONTRACT_CASES, ids=[c[0] for c in CONTRACT_CASES])
def test_bad_contract_exit_2_with_file_line_column(name, data, pos, words, tmp_path, capsys):
    p = tmp_path / f"{name}.yaml"
    p.write_bytes(data)
    before = _hash(p)
    assert main(["validate", str(p)]) == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    lines = [ln for ln in out.out.splitlines() if ln.strip()]
    hit = [ln for ln in lines if words in ln]
    assert hit, lines
    marker, col = pos
    line = marker if isinstance(marker, int) else _line_of(data, marker)
    prefix = f"{p}:{line}:" + (f"{col}:" if col else "")
    assert any(ln.startswith(prefix) for ln in hit), (prefix, hit)
    if name == "dup_key":  # both lines named
        first = _line_of(data, b"vocab_size: 512")
        assert f"given at line {first} and again at line {line}" in hit[0]
    assert _hash(p) == before


def test_all_schema_problems_listed_at_once(tmp_path, capsys):
    p = tmp_path / "many.yaml"
    p.write_text(T.replace("  final_norm: rmsnorm", "  final_norm: rmsnorm\n  colour: blue")
                 .replace("  num_hidden_layers: 8", "  num_hidden_layers: eight")
                 .replace("  pre_fc_norm: none", "  pre_fc_norm: sometimes"))
    assert main(["validate", str(p)]) == 2
    out = capsys.readouterr().out
    for key in ("target.colour", "target.num_hidden_layers", "draft.pre_fc_norm"):
        assert any(key in ln and ln.startswith(f"{p}:") for ln in out.splitlines()), key


def test_huge_and_missing_contract(tmp_path, capsys):
    p = tmp_path / "huge.yaml"
    p.write_bytes(b"a: " + b"x" * 3_000_000)
    assert main(["validate", str(p), str(tmp_path / "missing.yaml"), str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "a contract is at most" in out and "No such file" in out and "Is a directory" in out


def test_internal_errors_say_so(monkeypatch, capsys):
    import eagle3_conformance.contract as contract

    def boom(path, **options):
        raise RuntimeError("simulated\nbug")

    monkeypatch.setattr(contract, "load_contract", boom)
    assert main(["validate", str(TINY)]) == 2
    err = capsys.readouterr().err
    assert "internal error" in err and "simulated bug" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    # the program is eagle3-conformance (the old name `conformance` is gone from what users read)
    assert err.startswith("eagle3-conformance: internal error (a bug in eagle3-conformance,"), err


def test_bad_input_errors_name_the_program(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 2
    assert main(["merge-reports", str(tmp_path / "m.json"), str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err and all(ln.startswith("eagle3-conformance: error:") for ln in err), err


# --- datasets -----------------------------------------------------------------------------------


def test_shard_file_findings_pure():
    names = ["hs_0.safetensors", "hs_2.safetensors", "hs_3.safetensors", "hs_01.safetensors", "notes.txt"]
    fs = datacheck.shard_file_findings(names, 3)
    assert all(f.path == "data" for f in fs)
    assert [f.status for f in fs].count("skip") == 1 and fs[-1].status == "skip"
    by = {f.where: f.message for f in fs if f.status == "fail"}
    assert "hs_3.safetensors has no Arrow row: index 3 >= 3" in by["hidden_states/hs_3.safetensors"]
    assert "stray" in by["hidden_states/hs_01.safetensors"] and "hidden_states/notes.txt" not in by
    assert "notes.txt" in fs[-1].message and "not read" in fs[-1].message
    assert "1 of 3 shards are missing" in by["hidden_states"] and "hs_1.safetensors" in by["hidden_states"]
    ok = datacheck.shard_file_findings([f"hs_{i}.safetensors" for i in range(4)], 4)
    assert [f.status for f in ok] == ["pass"]
    assert datacheck.shard_file_findings([], 2)[0].observed == "2 missing"


@pytest.fixture()
def data(tiny, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(tiny.data_dir, d)
    return d


def _shard(d: Path, i: int) -> Path:
    return d / "hidden_states" / f"hs_{i}.safetensors"


def _check(d, tiny, tmp_path, capsys, *extra):
    out = tmp_path / "r.json"
    rc = main(["check-data", str(TINY), "--data", str(d), "--reference", str(tiny.target_dir), "--quiet",
               "--json", str(out), *extra])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err
    fs = json.loads(out.read_text())["findings"] if out.exists() else []
    return rc, fs, cap.err


def _truncate(p: Path):
    b = p.read_bytes()
    p.write_bytes(b[: len(b) // 2])


def _tamper_tokens(p: Path):
    from safetensors.torch import load_file, save_file

    t = load_file(p)
    t["token_ids"] = t["token_ids"].clone()
    t["token_ids"][2] += 1
    save_file(t, p)


def _nan(p: Path):
    from safetensors.torch import load_file, save_file

    t = load_file(p)
    h = t["hidden_states"].clone()
    h[3, 1, 5] = float("nan")
    h[4, 3, 0] = float("inf")
    t["hidden_states"] = h
    save_file(t, p)


@pytest.mark.parametrize("mutate,check,words", [
    (lambda d: _shard(d, 3).unlink(), "sample_available", "hidden_states/hs_3.safetensors is missing"),
    (lambda d: _truncate(_shard(d, 3)), "sample_available", "hs_3.safetensors could not be read"),
    (lambda d: _shard(d, 3).write_bytes(bytes(range(200))), "sample_available", "hs_3.safetensors could not be read"),
    (lambda d: _shard(d, 3).write_bytes(b""), "sample_available", "hs_3.safetensors could not be read"),
    (lambda d: _tamper_tokens(_shard(d, 3)), "sample_available", "hs_3.safetensors"),
    (lambda d: _nan(_shard(d, 3)), "finite", "1 rows hold NaN or Inf (slot 1 = B_4: rows [3])"),
], ids=["missing", "truncated", "garbage", "empty_file", "token_mismatch", "nan_inf"])
def test_broken_shard_is_one_finding_and_the_scan_goes_on(mutate, check, words, data, tiny, tmp_path, capsys):
    mutate(data)
    before = _hash(data)
    rc, fs, err = _check(data, tiny, tmp_path, capsys)
    assert rc == 1, err
    bad = [f for f in fs if f["check"] == check and f["status"] == "fail"]
    assert bad and all(f["where"].startswith("sample 3") for f in bad), bad
    assert any(words in f["message"] or words in str(f["observed"]) for f in bad), bad
    assert all("\n" not in f["message"] for f in fs)
    # every other sample was still checked
    ok = {f["where"].split(" (")[0] for f in fs if f["check"] == "sample_available" and f["status"] == "pass"}
    assert {f"sample {i}" for i in range(12) if i != 3} <= ok
    assert _hash(data) == before


@pytest.mark.parametrize("mutate,words", [
    (lambda d: _truncate(_shard(d, 3)), ["sample 3: hidden_states/hs_3.safetensors could not be read",
                                         "calibrate reads every sample"]),
    (lambda d: _shard(d, 3).unlink(), ["sample 3: hidden_states/hs_3.safetensors is missing"]),
    (lambda d: _nan(_shard(d, 3)), ["sample 3: slot 1 (B_4): 1 rows hold NaN or Inf (rows [3])"]),
], ids=["truncated", "missing", "nan"])
def test_calibrate_refuses_a_broken_sample_naming_it(mutate, words, data, tmp_path, capsys):
    """A shard the loader cannot read, or a slot holding NaN: exit 2 naming the sample (and slot),
    no file written; never bands from the other samples, never a traceback (fresh report 3, 6)."""
    mutate(data)
    out = tmp_path / "cal.yaml"
    rc = main(["calibrate", str(TINY), "--data", str(data), "--no-reference", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "internal error" not in err and "Traceback" not in err, err
    assert str(data) in err and all(w in err for w in words), err
    assert not out.exists()


@pytest.mark.parametrize("mutate,words", [
    (lambda d: _truncate(d / "data-00000-of-00001.arrow"), "not a speculators Arrow dataset"),
    (lambda d: (d / "data-00000-of-00001.arrow").write_bytes(b"\0" * 64), "not a speculators Arrow dataset"),
    (lambda d: (d / "state.json").unlink(), "not a speculators Arrow dataset"),
    # datasets names no file for a malformed JSON marker: the message names it, with the line
    (lambda d: (d / "dataset_info.json").write_text('{"citation": "",\n  "features": {'),
     "dataset_info.json:2: not JSON"),
    (lambda d: (d / "state.json").write_text("{,}"), "state.json:1: not JSON"),
], ids=["arrow_truncated", "arrow_zeroed", "no_state", "info_not_json", "state_not_json"])
def test_unreadable_dataset_exit_2_one_line(mutate, words, data, tiny, tmp_path, capsys):
    mutate(data)
    rc, _, err = _check(data, tiny, tmp_path, capsys)
    assert rc == 2 and words in err and str(data) in err, err
    assert len(err.strip().splitlines()) == 1


def test_missing_data_directory_exit_2(tiny, tmp_path, capsys):
    rc, _, err = _check(tmp_path / "nope", tiny, tmp_path, capsys)
    assert rc == 2 and "no such data directory" in err


def test_reference_without_weights_exit_2(data, tiny, tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text((tiny.target_dir / "config.json").read_text())
    rc, _, err = _check(data, tiny, tmp_path, capsys, "--reference", str(model))
    assert rc == 2 and str(model) in err and "no *.safetensors" in err


def _check_data(d, tiny, out):
    """The real `eagle3-conformance check-data` (streaming scanner), in-process."""
    return main(["check-data", str(TINY), "--data", str(d), "--reference", str(tiny.target_dir),
                 "--json", str(out), "--quiet"])


@pytest.mark.parametrize("mutate,where,words", [
    (lambda d: shutil.copy(_shard(d, 1), _shard(d, 12)), "hidden_states/hs_12.safetensors", "has no Arrow row"),
    (lambda d: shutil.copy(_shard(d, 1), d / "hidden_states" / "hs_01.safetensors"),
     "hidden_states/hs_01.safetensors", "stray"),
    (lambda d: _shard(d, 5).unlink(), "hidden_states", "1 of 12 shards are missing"),
], ids=["extra_shard", "stray_file", "missing_shard"])
def test_dataset_level_shard_findings_in_check_data(mutate, where, words, data, tiny, tmp_path, capsys):
    """`eagle3-conformance check-data` reports shard files as dataset-level findings, path "data"."""
    mutate(data)
    out = tmp_path / "r.json"
    assert _check_data(data, tiny, out) == 1
    fs = json.loads(out.read_text())["findings"]
    hit = [f for f in fs if f["check"] == "shard_files" and f["status"] == "fail"]
    assert len(hit) == 1 and hit[0]["path"] == "data" and hit[0]["where"] == where and words in hit[0]["message"]


def test_stray_non_shard_files_in_hidden_states_are_skipped_not_failed(data, tiny, tmp_path, capsys):
    """A ``.lock`` (or notes) beside the shards is listed as skipped, like the vLLM layout's
    ``data_files``; it is not data, so the run passes (exit 0), and it is never opened."""
    (data / "hidden_states" / ".lock").write_text("")
    (data / "hidden_states" / "NOTES.txt").write_text("x")
    out = tmp_path / "r.json"
    rc = main(["check-data", str(TINY), "--data", str(data), "--no-reference", "--json", str(out), "--quiet"])
    assert rc == 0
    fs = [f for f in json.loads(out.read_text())["findings"] if f["check"] == "shard_files"]
    assert [f["status"] for f in fs] == ["pass", "skip"]
    assert ".lock" in fs[1]["message"] and "NOTES.txt" in fs[1]["message"] and fs[1]["path"] == "data"


def test_check_data_with_every_shard_missing_exit_2(data, tiny, tmp_path, capsys):
    shutil.rmtree(data / "hidden_states")
    out = tmp_path / "r.json"
    assert _check_data(data, tiny, out) == 2
    assert "none of the 12 samples could be read" in capsys.readouterr().err
    fs = json.loads(out.read_text())["findings"]  # the full report is still written
    # every sample is reported on the all-rows disk scan (and again by the sampled loader pass)
    assert sum(f["check"] == "sample_available" and f["status"] == "fail" and f["path"] == "training-disk"
               for f in fs) == 12
    assert any(f["check"] == "shard_files" and "is missing" in f["message"] for f in fs)


# --- sample-level robustness (runner.training_findings) -----------------------------------------


def _write(d: Path, ref, samples, *, tamper=None):
    from datasets import Dataset
    from safetensors.torch import save_file

    rows = {"input_ids": samples, "loss_mask": [[1] * len(s) for s in samples], "seq_len": [len(s) for s in samples]}
    ds = Dataset.from_dict(rows)
    ds.set_format("torch")
    ds.save_to_disk(str(d))
    (d / "hidden_states").mkdir()
    for i, ids in enumerate(samples):
        ok = ids and all(0 <= x < 512 for x in ids)
        r = ref.capture(ids) if ok else None
        hs = (torch.stack([r.boundary(b) for b in ["B_2", "B_4", "B_5", "B_8"]], 1) if ok
              else torch.zeros(len(ids), 4, 64)).bfloat16().contiguous()
        if tamper and i in tamper:
            hs = tamper[i](hs).contiguous()
        save_file({"hidden_states": hs, "token_ids": torch.tensor(ids, dtype=torch.long)},
                  str(d / "hidden_states" / f"hs_{i}.safetensors"))
    return d


def test_empty_one_token_and_out_of_vocab_samples(tmp_path, tiny, tiny_ref, tiny_contract):
    d = _write(tmp_path / "d", tiny_ref, [[1, 5, 6, 7, 8], [], [1], [1, 600, 7, 8], [1, 9, 10, 11]])
    fs = runner.training_findings(tiny_contract, d, tiny.target_dir, [[0, 1, 2, 3, 4]])
    by = {(f.check, f.where.split(" (")[0]): f for f in fs}
    assert by[("sample_length", "sample 1")].status == "fail" and "T = 0" in by[("sample_length", "sample 1")].message
    assert by[("sample_length", "sample 2")].status == "skip"
    tr = by[("token_range", "sample 3")]
    assert tr.status == "fail" and "token id 600 at token 1" in tr.message
    # the other samples were fingerprinted
    assert sum(f.check == "slot_identity" and f.status == "pass" for f in fs) == 6


def test_nan_rows_do_not_fake_a_slot_identity(tmp_path, tiny, tiny_ref, tiny_contract):
    def nan(hs):
        hs = hs.clone()
        hs[2, 0, :] = float("nan")
        return hs

    d = _write(tmp_path / "d", tiny_ref, [[1, 5, 6, 7, 8, 9, 10]], tamper={0: nan})
    fs = runner.training_findings(tiny_contract, d, tiny.target_dir, [[0]])
    assert any(f.check == "finite" and f.status == "fail" for f in fs)
    ident = [f for f in fs if f.check == "slot_identity"]
    assert ident and all(f.status == "pass" for f in ident), [f.message for f in ident]


def test_one_odd_shaped_shard_does_not_sink_its_batch(tmp_path, tiny, tiny_ref, tiny_contract):
    d = _write(tmp_path / "d", tiny_ref, [[1, 5, 6, 7, 8], [1, 9, 10, 11, 12], [1, 13, 14, 15]],
               tamper={1: lambda hs: hs[:, 1:]})  # 3 slots stored instead of 4
    fs = runner.training_findings(tiny_contract, d, tiny.target_dir, [[0, 1, 2]])
    sc = {f.where.split(" (")[0]: f.status for f in fs if f.check == "slot_count"}
    assert sc == {"sample 0": "pass", "sample 1": "fail", "sample 2": "pass"}


def test_inputs_are_never_modified(data, tiny, tiny_ref, tmp_path, capsys):
    """Hash every input (contract, data dir, reference dir) before and after every command."""
    from eagle3_conformance.testbed.fixtures import sample_token_ids

    off = tmp_path / "offline"
    off.mkdir()
    r = tiny_ref.capture(sample_token_ids(tiny.spec, 1, 6, 10, seed=2)[0])
    torch.save({"input_ids": r.token_ids, "loss_mask": torch.ones(len(r.token_ids)),
                "hidden_states": [r.boundary(b).bfloat16() for b in ["B_2", "B_4", "B_5", "B_8"]]}, off / "s.pt")
    _nan(_shard(data, 2))
    roots = (TINY, data, tiny.target_dir, off)
    before = _hash(*roots)
    assert main(["validate", str(TINY)]) == 0
    assert main(["check-data", str(TINY), "--data", str(data), "--reference", str(tiny.target_dir), "--quiet"]) == 1
    assert _check_data(data, tiny, tmp_path / "r.json") == 1
    assert main(["check-offline", str(TINY), "--files", str(off), "--reference", str(tiny.target_dir),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert _hash(*roots) == before


# --- a contract's own reference that cannot be resolved is bad input, never a silent downgrade ----


@pytest.mark.parametrize("old,new,words", [
    ("fixture: tiny-llama", "fixture: nope", "bad.yaml:7:1: fixture: fixture 'nope' is not a known fixture"),
    ("fixture: tiny-llama\n", "", "target.path './no-such-model'"),
], ids=["unknown_fixture", "missing_target_path"])
def test_unresolvable_contract_reference_exit_2(old, new, words, tiny, tmp_path, capsys):
    """An unknown fixture is refused by the contract gate (as `validate` refuses it: issue 41), whatever the
    options; a target.path that is not here is a warning of the gate, and bad input only where the reference is
    needed (--no-reference / --reference run it)."""
    text = T.replace(old, new)
    if not new:
        text = text.replace("  name: fixtures/tiny-llama\n", "  name: fixtures/tiny-llama\n  path: ./no-such-model\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    out = tmp_path / "r.json"
    rc = main(["check-data", str(bad), "--data", str(tiny.data_dir), "--json", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and words in err and str(bad) in err, err
    errors = [line for line in err.splitlines() if line.startswith("eagle3-conformance: error:")]
    assert len(errors) == 1 and not out.exists()  # refused before scanning
    rc = main(["check-data", str(bad), "--data", str(tiny.data_dir), "--no-reference", "--sample", "0", "--quiet"])
    if new:  # the gate refuses the contract itself: no option runs it
        assert rc == 2 and words in capsys.readouterr().err
        return
    assert rc == 0  # explicit --no-reference (or --reference) is the way to run such a contract
    files = tmp_path / "s.pt"
    torch.save({"input_ids": torch.tensor([1, 5, 6]), "loss_mask": torch.ones(3),
                "hidden_states": [torch.zeros(3, 64, dtype=torch.bfloat16)] * 4}, files)
    assert main(["check-offline", str(bad), "--files", str(files), "--quiet"]) == 2
    assert words in capsys.readouterr().err


def test_contract_without_fixture_or_target_path_runs_without_reference(tiny, tmp_path, capsys):
    bare = tmp_path / "bare.yaml"
    bare.write_text(T.replace("fixture: tiny-llama\n", ""))
    out = tmp_path / "r.json"
    assert main(["check-data", str(bare), "--data", str(tiny.data_dir), "--sample", "2", "--json", str(out)]) == 0
    assert "slot identity not checked" in capsys.readouterr().out
    assert json.loads(out.read_text())["meta"]["slot_identity_checked"] is False


# --- --json / OUT never overwrites an input and is checked before the scan -----------------------


def _json_target(case: str, tmp_path: Path, data: Path, tiny) -> tuple[Path, str]:
    if case == "contract":
        return tmp_path / "c.yaml", "is the input"
    if case == "data_file":
        return data / "state.json", "inside the input directory"
    if case == "data_new_file":
        return data / "hidden_states" / "report.json", "inside the input directory"
    if case == "reference":
        return tiny.target_dir / "r.json", "inside the input directory"
    if case == "no_parent":
        return tmp_path / "no" / "such" / "r.json", "does not exist"
    return tmp_path, "is a directory"


@pytest.mark.parametrize("case", ["contract", "data_file", "data_new_file", "reference", "no_parent", "directory"])
def test_check_data_json_guard_exit_2_before_scanning(case, data, tiny, tmp_path, capsys, monkeypatch):
    from eagle3_conformance import scan as scan_mod

    contract = tmp_path / "c.yaml"
    shutil.copy(TINY, contract)
    out, words = _json_target(case, tmp_path, data, tiny)
    roots = (contract, data, tiny.target_dir)
    before = _hash(*roots)

    def no_scan(*a, **k):
        raise AssertionError("scanned despite a bad --json")

    monkeypatch.setattr(scan_mod, "scan", no_scan)
    rc = main(["check-data", str(contract), "--data", str(data), "--reference", str(tiny.target_dir),
               "--json", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and words in err and "--json" in err and "internal error" not in err, err
    assert len(err.strip().splitlines()) == 1
    assert _hash(*roots) == before


def test_check_offline_and_merge_never_overwrite_inputs(tiny, tmp_path, capsys):
    contract = tmp_path / "c.yaml"
    shutil.copy(TINY, contract)
    off = tmp_path / "off"
    off.mkdir()
    torch.save({"input_ids": torch.tensor([1, 5, 6]), "loss_mask": torch.ones(3),
                "hidden_states": [torch.zeros(3, 64, dtype=torch.bfloat16)] * 4}, off / "s.pt")
    before = _hash(contract, off)
    for out in (contract, off / "s.pt", off / "r.json"):
        assert main(["check-offline", str(contract), "--files", str(off), "--no-reference", "--quiet",
                     "--json", str(out)]) == 2
    assert _hash(contract, off) == before
    a = tmp_path / "a.json"
    assert main(["check-data", str(contract), "--data", str(tiny.data_dir), "--no-reference", "--sample", "0",
                 "--quiet", "--json", str(a)]) == 0
    ha = _hash(a)
    assert main(["merge-reports", str(a), str(a)]) == 2
    assert main(["merge-reports", str(tmp_path / "nodir" / "m.json"), str(a)]) == 2
    err = capsys.readouterr().err
    assert "is the input" in err and "does not exist" in err and "Traceback" not in err
    assert _hash(a) == ha


def test_merge_reports_refuses_an_existing_out_unless_force(tiny, tmp_path, capsys):
    """`merge-reports s0.json s1.json` (OUT forgotten) must not destroy the part report s0.json."""
    base = ["check-data", str(TINY), "--data", str(tiny.data_dir), "--no-reference", "--quiet"]
    s0, s1 = tmp_path / "s0.json", tmp_path / "s1.json"
    assert main([*base, "--shard", "0/2", "--json", str(s0)]) == 0
    assert main([*base, "--shard", "1/2", "--json", str(s1)]) == 0
    h0 = _hash(s0)
    capsys.readouterr()
    assert main(["merge-reports", str(s0), str(s1)]) == 2
    err = capsys.readouterr().err
    assert "exists" in err and "--force" in err and "Traceback" not in err
    assert _hash(s0) == h0
    m = tmp_path / "m.json"
    m.write_text("old")
    assert main(["merge-reports", str(m), str(s0), str(s1), "--quiet"]) == 2 and m.read_text() == "old"
    assert main(["merge-reports", str(m), str(s0), str(s1), "--quiet", "--force"]) == 0
    assert json.loads(m.read_text())["meta"]["complete"] is True


# --- arguments that used to be accepted silently ----------------------------------------------------


@pytest.mark.parametrize("extra,words", [
    (["--sample", "-5"], "--sample -5"),
    (["--batch-size", "0"], "--batch-size 0"),
    (["--workers", "0"], "--workers 0"),
    (["--shard", "1/0"], "shard"),
    (["--shard", "x"], "shard"),
    (["--no-reference", "--reference", "/x"], "--no-reference"),
], ids=["sample_negative", "batch_size_0", "workers_0", "shard_n0", "shard_malformed", "both_reference_flags"])
def test_bad_arguments_exit_2_one_line(extra, words, tiny, capsys):
    assert main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--quiet", *extra]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1 and "internal error" not in err, err


def test_sample_minus_one_still_means_all(tiny, tmp_path):
    out = tmp_path / "r.json"
    assert main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--no-reference", "--sample", "-1",
                 "--quiet", "--json", str(out)]) == 0
    assert len(json.loads(out.read_text())["meta"]["fingerprint_sample"]["indices"]) == 12


def test_data_that_is_a_file_says_not_a_directory(tiny, capsys):
    assert main(["check-data", str(TINY), "--data", str(TINY), "--no-reference"]) == 2
    err = capsys.readouterr().err
    assert "is not a directory" in err and "no such data directory" not in err
    assert main(["calibrate", str(TINY), "--data", str(TINY), "--no-reference"]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_reference_cache_and_markdown_paths_refused(tiny, tmp_path, capsys):
    """--reference-cache writes files: never inside the dataset or the reference model, never over a
    file; --markdown and --json must be two files. Exit 2, one line, nothing written."""
    def digest(d: Path) -> str:
        h = hashlib.sha256()
        for p in sorted(d.rglob("*")):
            h.update(str(p.relative_to(d)).encode())
        return h.hexdigest()

    data = tmp_path / "data"
    shutil.copytree(tiny.data_dir, data)
    before = digest(data)
    base = ["check-data", str(TINY), "--data", str(data), "--reference", str(tiny.target_dir), "--sample", "2",
            "--quiet"]
    a_file = tmp_path / "cache.txt"
    a_file.write_text("not a directory")
    for cache, words in ((data, "lies inside the input directory"), (data / "sub", "lies inside the input directory"),
                         (tiny.target_dir, "lies inside the input directory"), (a_file, "is a file")):
        assert main([*base, "--reference-cache", str(cache)]) == 2
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, err
    assert digest(data) == before and a_file.read_text() == "not a directory"
    out = tmp_path / "r.json"
    assert main([*base, "--json", str(out), "--markdown", str(out)]) == 2
    assert "is also the --json output" in capsys.readouterr().err and not out.exists()


def test_init_with_a_missing_model_at_the_root_names_it(tmp_path, capsys):
    """A target that does not exist is reported missing, not as "-o lies inside the input directory /"."""
    assert main(["init", "--target", "/no-such-target", "--draft", "/no-such-draft", "-o",
                 str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err
    assert "no such" in err and "lies inside" not in err and "Traceback" not in err, err


@pytest.mark.parametrize("argv", [["schema"], ["translate", str(TINY), "--to", "vllm"]],
                         ids=["large_output", "small_output"])
def test_a_closed_stdout_ends_quietly_like_sigpipe(argv):
    """`eagle3-conformance ... | head -c 10`: the reader goes away; no "internal error", no
    BrokenPipeError at the exit flush, exit 141 (128 + SIGPIPE) as a shell reports for such a tool."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first write: deterministic, whatever the pipe buffer
    try:
        p = subprocess.run([sys.executable, "-m", "eagle3_conformance.cli", *argv], stdout=w,
                           stderr=subprocess.PIPE, env=env, timeout=120)
    finally:
        os.close(w)
    err = p.stderr.decode()
    assert p.returncode == 141, err
    assert "internal error" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err


def test_validate_refuses_a_fifo_instead_of_hanging(tmp_path, capsys):
    """`mkfifo ff; eagle3-conformance validate ff` waited forever for a writer."""
    import os
    import signal

    def hung(*_):
        raise TimeoutError("validate blocked on the FIFO")

    ff = tmp_path / "ff"
    os.mkfifo(ff)
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)  # a regression fails the test instead of hanging the suite
    try:
        assert main(["validate", str(ff)]) == 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert "not a regular file" in capsys.readouterr().out


def test_an_accept_floor_needs_no_calibrated_bands(tmp_path, capsys):
    """Issue 41: a contract carries an acceptance floor from a recorded good run (accept / check-captures
    --write-floor) whether or not its norm bands are calibrated: the floor gates the engine's own accept
    counters, not a magnitude. validate used to refuse it."""
    p = tmp_path / "floor.yaml"
    p.write_bytes(_uncalibrated(gates_extra="  min_accept_length: 1.4\n"))
    assert main(["validate", str(p)]) == 0, capsys.readouterr()
