"""Offline hidden-state files (legacy speculators .pt, SpecForge .ckpt) through
`eagle3-conformance check-offline`: real captures from the fixture target, read only with
torch.load(weights_only=True); a pickle that would run code is refused and never executed."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch
from conftest import tree_digest

from eagle3_conformance.cli import main
from eagle3_conformance.testbed.fixtures import sample_token_ids
from eagle3_conformance.tools import offline_files as of

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"
AUX = ["B_2", "B_4", "B_5"]




def _legacy(ref, ids, slots=AUX + ["B_8"]):
    r = ref.capture(ids)
    return {"input_ids": torch.tensor(ids), "loss_mask": torch.ones(len(ids), dtype=torch.long),
            "hidden_states": [r.boundary(s).bfloat16() for s in slots]}


def _specforge(ref, ids, shift_target=0):
    r = ref.capture(ids)
    F = r.boundary("F")
    if shift_target:  # a generation bug: the verifier rows already shifted left by one
        F = torch.cat([F[shift_target:], F[-shift_target:]])
    return {"input_ids": torch.tensor(ids), "loss_mask": torch.ones(len(ids), dtype=torch.long),
            "hidden_state": F[None].bfloat16(),
            "aux_hidden_state": torch.cat([r.boundary(s) for s in AUX], -1)[None].bfloat16()}


@pytest.fixture(scope="module")
def samples(tiny):
    return sample_token_ids(tiny.spec, 3, 6, 16, seed=5)


@pytest.fixture(scope="module")
def specforge_contract(tmp_path_factory):
    text = TINY.read_text().replace("tensor: B_8 ", "tensor: F   ").replace("  norm: pre", "  norm: post")
    assert "tensor: F" in text and "norm: post" in text
    p = tmp_path_factory.mktemp("c") / "specforge.yaml"
    p.write_text(text)
    return p


def _run(args, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["check-offline", *map(str, args), "--quiet", "--json", str(out)])
    cap = capsys.readouterr()
    # check-offline starts no server: a socketserver request thread's error block left by another test's
    # stand-in server (printed to this process's stderr while this test captures it: seen once in a clean
    # clone's serial run, 2026-12-06) is not this tool's traceback
    own_err = re.sub(r"-{40}\nException occurred during processing of request from .*?\n-{40}\n", "", cap.err,
                     flags=re.S)
    assert "Traceback" not in own_err, own_err
    return rc, (json.loads(out.read_text())["findings"] if out.exists() else []), cap.err


def test_legacy_pt_conforms_and_files_are_untouched(tmp_path, tiny, tiny_ref, samples, capsys):
    d = tmp_path / "legacy"
    d.mkdir()
    for i, ids in enumerate(samples):
        torch.save(_legacy(tiny_ref, ids), d / f"sample_{i}.pt")
    before = tree_digest(d)
    rc, fs, _ = _run([TINY, "--files", d, "--reference", tiny.target_dir], tmp_path, capsys)
    assert rc == 0, [f["message"] for f in fs if f["status"] == "fail"]
    assert {f["path"] for f in fs} == {"training-legacy"}
    assert sum(f["check"] == "slot_identity" and f["status"] == "pass" for f in fs) == 3 * len(samples)
    assert tree_digest(d) == before


def test_quiet_still_prints_the_verdict_once(tmp_path, tiny, tiny_ref, samples, capsys):
    """Fresh report 10, 22: ``--quiet`` printed no verdict at all (the shapes-only caveat and a
    VIOLATIONS verdict lost); the shapes-only verdict said "not checked" twice. Now one line, as
    check-data --quiet prints it (docs/diagnosis.md)."""
    d = tmp_path / "legacy"
    d.mkdir()
    for i, ids in enumerate(samples):
        torch.save(_legacy(tiny_ref, ids), d / f"sample_{i}.pt")
    js = tmp_path / "r.json"
    assert main(["check-offline", str(TINY), "--files", str(d), "--no-reference", "--quiet", "--json", str(js)]) == 0
    out = capsys.readouterr().out
    n = len(json.loads(js.read_text())["findings"])
    assert out.strip() == (f"CONFORMS ON SHAPES ONLY: slot identity, order and alignment were not checked "
                           f"(no reference model): {n} findings, 0 failed"), out
    (d / "sample_9.pt").write_bytes((d / "sample_0.pt").read_bytes()[:100])
    assert main(["check-offline", str(TINY), "--files", str(d), "--reference", str(tiny.target_dir), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("VIOLATIONS: ") and out.splitlines()[0].endswith(" findings, 1 failed"), out


def test_legacy_pt_seed_incident_names_the_embedding(tmp_path, tiny, tiny_ref, samples, capsys):
    d = tmp_path / "seed"
    d.mkdir()
    torch.save(_legacy(tiny_ref, samples[0], ["B_0", "B_2", "B_4", "B_5"]), d / "s.pt")
    rc, fs, _ = _run([TINY, "--files", d, "--reference", tiny.target_dir], tmp_path, capsys)
    assert rc == 1
    assert any(f["check"] == "slot_identity" and f["slot"] == "slot 0" and f["observed"] == "B_0" for f in fs)


def test_the_report_is_check_datas_with_the_fix_verbose_and_markdown(tmp_path, tiny, tiny_ref, samples, capsys):
    """New-user report: check-offline printed a table and one line per diagnosis, its fix only in
    --json, and had no -v / --markdown. Now check-data's report: the diagnosis with evidence and fix,
    -v listing the passing checks, the same report as Markdown."""
    d = tmp_path / "seed"
    d.mkdir()
    torch.save(_legacy(tiny_ref, samples[0], ["B_0", "B_2", "B_4", "B_5"]), d / "s.pt")
    md = tmp_path / "r.md"
    args = ["check-offline", str(TINY), "--files", str(d), "--reference", str(tiny.target_dir)]
    assert main([*args, "--markdown", str(md)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("VIOLATIONS: ") and "DIAGNOSIS 1/" in out, out
    assert "  evidence: " in out and "  fix:      " in out, out
    assert "passed: " in out and "(-v lists them)" in out
    text = md.read_text()
    assert text.startswith("## ❌ VIOLATIONS") and "Fix:" in text, text
    assert main([*args, "-v"]) == 1
    verbose = capsys.readouterr().out
    assert "(-v lists them)" not in verbose and len(verbose.splitlines()) > len(out.splitlines())
    assert main([*args, "--markdown", str(tmp_path / "j.json"), "--json", str(tmp_path / "j.json")]) == 2


def test_specforge_ckpt_feature_is_aux_and_verifier_is_F(tmp_path, tiny, tiny_ref, samples, specforge_contract,
                                                         capsys):
    d = tmp_path / "rows_0-3"
    d.mkdir()
    for i, ids in enumerate(samples):
        torch.save(_specforge(tiny_ref, ids), d / f"data_{i}.ckpt")
    rc, fs, _ = _run([specforge_contract, "--files", d, "--reference", tiny.target_dir], tmp_path, capsys)
    assert rc == 0, [f["message"] for f in fs if f["status"] == "fail"]
    assert {f["path"] for f in fs} == {"training-specforge"}
    assert all(f["observed"] == "F" for f in fs if f["check"] == "verifier_identity")
    # the same files against the speculators contract (verifier B_8, pre-norm): F is reported
    rc, fs, _ = _run([TINY, "--files", d, "--reference", tiny.target_dir], tmp_path, capsys)
    assert rc == 1
    ver = [f for f in fs if f["check"] == "verifier_identity"]
    assert ver and all(f["status"] == "fail" and f["observed"] == "F" for f in ver)


def test_specforge_target_shifted_twice_is_an_alignment_failure(tmp_path, tiny, tiny_ref, samples,
                                                                 specforge_contract, capsys):
    d = tmp_path / "shifted"
    d.mkdir()
    torch.save(_specforge(tiny_ref, samples[0], shift_target=1), d / "data_0.ckpt")
    rc, fs, _ = _run([specforge_contract, "--files", str(d / "*.ckpt"), "--reference", tiny.target_dir],
                     tmp_path, capsys)
    assert rc == 1
    ta = [f for f in fs if f["check"] == "target_alignment"]
    assert ta and ta[0]["status"] == "fail" and ta[0]["observed"] == 2


class _Evil:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_that_would_run_code_is_refused_never_executed(tmp_path, tiny, tiny_ref, samples, capsys):
    marker = tmp_path / "EXECUTED"
    d = tmp_path / "mixed"
    d.mkdir()
    torch.save(_legacy(tiny_ref, samples[0]), d / "a_good.pt")
    torch.save({"input_ids": torch.arange(4), "hidden_states": [_Evil(marker)]}, d / "b_evil.pt")
    before = tree_digest(d)
    rc, fs, _ = _run([TINY, "--files", d, "--reference", tiny.target_dir], tmp_path, capsys)
    assert not marker.exists()
    assert rc == 1  # the good file is still checked
    bad = [f for f in fs if f["check"] == "sample_available" and f["status"] == "fail"]
    assert len(bad) == 1 and "b_evil.pt" in bad[0]["message"] and "refused" in bad[0]["message"]
    assert "posix.system" in bad[0]["message"] or "os.system" in bad[0]["message"]
    assert any(f["check"] == "slot_identity" and f["status"] == "pass" for f in fs)
    assert tree_digest(d) == before
    # only the evil file: nothing could be read -> exit 2, and still nothing executed
    rc, _, err = _run([TINY, "--files", d / "b_evil.pt", "--no-reference"], tmp_path, capsys)
    assert rc == 2 and "could be read" in err
    assert not marker.exists()


@pytest.mark.parametrize("name,obj,words", [
    ("empty.pt", b"", "could not be read"),
    ("garbage.ckpt", bytes(range(256)) * 3, "could not be read"),
    ("list.pt", [torch.zeros(3)], "not a legacy speculators .pt or SpecForge .ckpt"),
    ("nokeys.ckpt", {"input_ids": torch.arange(5), "hidden_state": torch.zeros(1, 5, 64)}, "without ['loss_mask'"),
    ("tmismatch.ckpt", {"input_ids": torch.arange(5), "loss_mask": torch.ones(5), "hidden_state": torch.zeros(1, 4, 64),
                        "aux_hidden_state": torch.zeros(1, 5, 192)}, "hidden_state is [1, 4, 64]"),
    ("notalist.pt", {"input_ids": torch.arange(5), "loss_mask": torch.ones(5), "hidden_states": torch.zeros(5, 4, 64)},
     "expected a list"),
    ("floatids.pt", {"input_ids": torch.rand(5), "loss_mask": torch.ones(5), "hidden_states": [torch.zeros(5, 64)] * 4},
     "not integers"),
])
def test_broken_files_are_findings_naming_the_file(tmp_path, tiny, tiny_ref, samples, name, obj, words, capsys):
    d = tmp_path / "d"
    d.mkdir()
    torch.save(_legacy(tiny_ref, samples[0]), d / "0_good.pt")
    if isinstance(obj, bytes):
        (d / name).write_bytes(obj)
    else:
        torch.save(obj, d / name)
    rc, fs, err = _run([TINY, "--files", d, "--reference", tiny.target_dir], tmp_path, capsys)
    assert rc == 1, err
    bad = [f for f in fs if f["check"] == "sample_available" and f["status"] == "fail"]
    assert len(bad) == 1 and name in bad[0]["message"] and words in bad[0]["message"], bad
    assert "\n" not in bad[0]["message"]


def test_nan_rows_and_short_samples(tmp_path, tiny, tiny_ref, samples, capsys):
    d = tmp_path / "d"
    d.mkdir()
    s = _legacy(tiny_ref, samples[0])
    s["hidden_states"][1][3, 7] = float("nan")
    torch.save(s, d / "a_nan.pt")
    torch.save({"input_ids": torch.zeros(0, dtype=torch.long), "loss_mask": torch.zeros(0),
                "hidden_states": [torch.zeros(0, 64)] * 4}, d / "b_empty.pt")
    torch.save(_legacy(tiny_ref, samples[1][:1]), d / "c_one.pt")
    rc, fs, _ = _run([TINY, "--files", d, "--reference", tiny.target_dir], tmp_path, capsys)
    assert rc == 1
    fin = [f for f in fs if f["check"] == "finite" and f["status"] == "fail"]
    assert fin and "a_nan.pt" in fin[0]["where"]
    # fingerprints are judged on the finite rows: the NaN row does not turn slot 1 into B_0
    assert all(f["status"] == "pass" for f in fs if f["check"] == "slot_identity" and "a_nan" in f["where"])
    ln = {f["where"]: f for f in fs if f["check"] == "sample_length"}
    assert ln["sample 1 (b_empty.pt)"]["status"] == "fail"
    assert ln["sample 2 (c_one.pt)"]["status"] == "skip"


def test_an_empty_directory_names_every_format_check_offline_reads(tmp_path, capsys):
    """The message listed only *.pt / *.ckpt though vLLM's *.safetensors are read too."""
    (tmp_path / "empty").mkdir()
    assert main(["check-offline", str(TINY), "--files", str(tmp_path / "empty"), "--no-reference"]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in ("*.pt", "*.ckpt", "*.ckpt.gz", "*.safetensors")), err


def test_no_files_and_bad_reference_exit_2(tmp_path, tiny, tiny_ref, samples, capsys):
    assert main(["check-offline", str(TINY), "--files", str(tmp_path / "nothing-*.pt")]) == 2
    assert "no file matches" in capsys.readouterr().err
    d = tmp_path / "d"
    d.mkdir()
    torch.save(_legacy(tiny_ref, samples[0]), d / "a.pt")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text((tiny.target_dir / "config.json").read_text())
    out = tmp_path / "r.json"
    rc = main(["check-offline", str(TINY), "--files", str(d), "--reference", str(model), "--json", str(out)])
    cap = capsys.readouterr()
    fs = json.loads(out.read_text())["findings"]
    assert rc == 2 and "no *.safetensors" in cap.err
    # the verdict word agrees with the exit code: an unusable reference is an input error
    assert "VIOLATIONS" not in cap.out and "INPUT ERROR: the reference model could not be used" in cap.out, cap.out
    assert any(f["check"] == "reference" and f["status"] == "fail" for f in fs)
    assert any(f["check"] == "feature_width" and f["status"] == "pass" for f in fs)  # the scan went on


def test_safe_load_refuses_code_directly(tmp_path):
    marker = tmp_path / "RAN"
    p = tmp_path / "x.pt"
    torch.save({"a": _Evil(marker)}, p)
    obj, why = of.safe_load(p)
    assert obj is None and "refused" in why and not marker.exists()


def test_folder_of_vllm_files_with_a_stray_pickle_is_read_whole(tmp_path, tiny, tiny_ref, samples, capsys):
    """A vLLM extraction folder with one stray .pt: every file is read (the pickle through
    weights_only=True), not the pickle alone (found by a fresh-user trial)."""
    from eagle3_conformance.testbed.datagen import write_vllm_extraction

    d = write_vllm_extraction(tmp_path / "vx", tiny_ref, samples, slots=AUX + ["B_8"])
    torch.save(_legacy(tiny_ref, samples[0]), d / "stray.pt")
    before = tree_digest(d)
    rc, findings, err = _run([TINY, "--files", d, "--reference", tiny.target_dir], tmp_path, capsys)
    read = {f["where"].split(" ")[0] for f in findings if f["check"] == "sample_available"}
    assert len([f for f in findings if f["check"] == "sample_available"]) == len(samples) + 1, read
    assert rc == 0, [f for f in findings if f["status"] == "fail"][:3]
    assert tree_digest(d) == before
