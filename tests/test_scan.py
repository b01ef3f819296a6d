"""The streaming scanner (eagle3_conformance.scan), sharding, workers and merge-reports.

Correctness only: performance is measured by benchmarks/bench_check_data.py, never here.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import contract_with

from eagle3_conformance import report
from eagle3_conformance.checks import registry
from eagle3_conformance.cli import main
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.scan import (
    DISK_PATH,
    LOADER_PATH,
    fingerprint_sample,
    parse_shard,
    scan,
    shard_indices,
    slot_rms,
)
from eagle3_conformance.scan.rms import band_edges, reduced_contract

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"


def _key(f) -> str:
    return json.dumps(f.to_json() if hasattr(f, "to_json") else f, sort_keys=True)


def _write(tmp_path: Path, name: str, res) -> Path:
    p = tmp_path / name
    report.write_json(p, str(TINY), res.findings, res.meta)
    return p


def _sample_of(where: str) -> int:
    return int(where.split()[1])


@pytest.fixture(scope="module")
def unsharded(tiny, tiny_contract):
    return scan(tiny_contract, tiny.data_dir, sample=5, seed=3, reference_dir=tiny.target_dir, batch_size=2)


@pytest.fixture(scope="module")
def nan_data(tiny, tmp_path_factory):
    """A copy of the tiny dataset with NaN in one row of one slot of a sample outside the
    fingerprint sample (sample=2, seed=0)."""
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("nan") / "data"
    shutil.copytree(tiny.data_dir, out)
    sampled = set(fingerprint_sample(12, 2, 0))
    victim = next(i for i in range(12) if i not in sampled and i % 2 == 0 and
                  load_file(str(out / "hidden_states" / f"hs_{i}.safetensors"))["hidden_states"].shape[0] >= 5)
    f = out / "hidden_states" / f"hs_{victim}.safetensors"
    d = load_file(str(f))
    d["hidden_states"][3, 1, 7] = float("nan")  # row 3, aux slot 1
    save_file(d, str(f))
    return out, victim


# --- the scan on the fixture -----------------------------------------------------------------


def test_scan_fixture_conforms_with_scope(unsharded, tiny):
    fs = unsharded.findings
    assert fs and not [f for f in fs if f.status == "fail"]
    disk = [f for f in fs if f.path == DISK_PATH]
    # every sample got the all-rows checks, finiteness on both tensors
    finite = [f for f in disk if f.check == "finite"]
    assert sorted(_sample_of(f.where) for f in finite) == sorted(list(range(12)) * 2)
    assert {f.check for f in disk} >= {"slot_count", "feature_width", "verifier_width", "dtype", "row_count",
                                       "token_ids", "finite", "sample_available"}
    # fingerprints only on the seeded sample, through the real loader
    idx = unsharded.meta["fingerprint_sample"]["indices"]
    assert idx == fingerprint_sample(12, 5, 3) and len(idx) == 5
    ident = {_sample_of(f.where) for f in fs if f.path == LOADER_PATH and f.check == "slot_identity"}
    assert ident == set(idx)
    assert any(f.check == "slot_identity" and f.status == "pass" for f in fs)
    assert any(f.check == "position_alignment" and f.status == "pass" for f in fs)  # shift_batch ran
    scope = unsharded.meta["scope"]
    assert "every row" in scope[DISK_PATH] and "finite" in scope[DISK_PATH]
    assert "sampled" in scope[LOADER_PATH] and "fingerprints" in scope[LOADER_PATH]
    st = unsharded.meta["slot_stats"]
    assert set(st) == {"slot 0", "slot 1", "slot 2", "verifier"}
    assert st["slot 0"]["rows"] == sum(len(tiny_row) for tiny_row in _ids(tiny))
    assert st["verifier"]["rms_mean"] > st["slot 0"]["rms_mean"] > 0  # residual grows with depth


def _ids(tiny):
    from datasets import load_from_disk

    return load_from_disk(str(tiny.data_dir))["input_ids"]


def test_shards_cover_every_sample_once_and_merge_equals_unsharded(unsharded, tiny, tiny_contract, tmp_path):
    parts = [scan(tiny_contract, tiny.data_dir, shard=(i, 3), sample=5, seed=3, reference_dir=tiny.target_dir,
                  batch_size=2, cpus_per_worker=1 + i % 2) for i in range(3)]
    covered = [_sample_of(f.where) for p in parts for f in p.findings
               if f.path == DISK_PATH and f.check == "sample_available"]
    assert sorted(covered) == list(range(12))  # each sample exactly once
    for i, p in enumerate(parts):
        assert {_sample_of(f.where) for f in p.findings if f.path == DISK_PATH} == set(range(i, 12, 3))
        assert p.meta["shard"] == f"{i}/3"
    files = [_write(tmp_path, f"part-{i}.json", p) for i, p in enumerate(parts)]
    out = tmp_path / "merged.json"
    assert main(["merge-reports", str(out), *map(str, files)]) == 0
    merged = json.loads(out.read_text())
    whole = json.loads(_write(tmp_path, "whole.json", unsharded).read_text())
    assert Counter(map(_key, merged["findings"])) == Counter(map(_key, whole["findings"]))
    assert merged["meta"]["complete"] is True and merged["meta"]["shards_missing"] == []
    assert merged["meta"]["fingerprint_sample"]["indices"] == whole["meta"]["fingerprint_sample"]["indices"]
    assert merged["meta"]["threads_per_part"] == {str(f): [1 + i % 2] for i, f in enumerate(files)}
    # files given in any order merge in shard order (a glob puts part-10 before part-2)
    rev = tmp_path / "merged-rev.json"
    assert main(["merge-reports", str(rev), *map(str, files[::-1])]) == 0
    merged_rev = json.loads(rev.read_text())
    assert merged_rev["findings"] == merged["findings"] and merged_rev["meta"]["merged_from"] == list(map(str, files))
    assert merged["meta"]["slot_stats"]["verifier"]["rows"] == whole["meta"]["slot_stats"]["verifier"]["rows"]
    assert merged["meta"]["slot_stats"]["slot 1"]["rms_max"] == whole["meta"]["slot_stats"]["slot 1"]["rms_max"]


def test_workers_2_same_findings_as_1(tiny, tiny_contract):
    # sample=0 keeps the spawned workers from importing speculators (slow); the sampled loader
    # path per sub-shard is covered in-process by the sharding test above
    one = scan(tiny_contract, tiny.data_dir, sample=0)
    two = scan(tiny_contract, tiny.data_dir, sample=0, workers=2)
    assert [_key(f) for f in two.findings] == [_key(f) for f in one.findings]
    assert two.meta["workers"] == 2 and two.meta["shard_samples"] == one.meta["shard_samples"] == 12
    assert two.meta["fingerprint_sample"] == one.meta["fingerprint_sample"]


def test_cpus_per_worker_sets_the_scan_threads_and_restores_them(tiny, tiny_contract, monkeypatch):
    import torch

    from eagle3_conformance.scan import rms as rms_mod

    before = torch.get_num_threads()
    seen = []
    orig = rms_mod.slot_rms
    monkeypatch.setattr(rms_mod, "slot_rms", lambda *a, **k: (seen.append(torch.get_num_threads()), orig(*a, **k))[1])
    res = scan(tiny_contract, tiny.data_dir, sample=0, cpus_per_worker=before + 1)
    assert set(seen) == {before + 1} and len(seen) == 12  # the all-rows pass ran with the threads asked for
    assert res.meta["threads_per_worker"] == [before + 1]
    assert torch.get_num_threads() == before  # the process's own setting is given back


def test_default_cpus_per_worker(monkeypatch):
    from eagle3_conformance.scan.ray_tasks import available_cpus, default_cpus_per_worker

    monkeypatch.delenv("CONFORMANCE_TORCH_THREADS", raising=False)
    n = available_cpus()
    assert default_cpus_per_worker(1) == n  # one worker uses every core of this machine
    assert default_cpus_per_worker(2) == max(n // 2, 1)
    assert default_cpus_per_worker(4 * n) == 1
    assert default_cpus_per_worker(2, "10.0.0.1:6379") == 1  # a cluster's nodes are not this machine
    monkeypatch.setenv("CONFORMANCE_TORCH_THREADS", "3")
    assert default_cpus_per_worker(1) == 3 == default_cpus_per_worker(2, "auto")
    for bad in ("0", "-1", "abc", "1.5", "100000"):
        monkeypatch.setenv("CONFORMANCE_TORCH_THREADS", bad)
        with pytest.raises(ValueError, match="CONFORMANCE_TORCH_THREADS"):
            default_cpus_per_worker(1)


def test_available_cpus_follows_the_container_quota(monkeypatch, tmp_path):
    from eagle3_conformance.scan import ray_tasks as scan_mod

    cpu_max = tmp_path / "cpu.max"
    monkeypatch.setattr(scan_mod, "CGROUP_CPU_MAX", cpu_max)
    mask = len(os.sched_getaffinity(0))
    assert scan_mod.available_cpus() == mask  # no cgroup file
    cpu_max.write_text("max 100000\n")
    assert scan_mod.available_cpus() == mask  # no quota
    cpu_max.write_text("50000 100000\n")  # half a CPU (a Kubernetes limit of 500m)
    assert scan_mod.available_cpus() == 1
    cpu_max.write_text(f"{150000 * mask} 100000\n")  # 1.5x the mask: the mask bounds it
    assert scan_mod.available_cpus() == mask


@pytest.mark.parametrize("opts, env, needle", [
    (["--cpus-per-worker", "0"], None, "--cpus-per-worker 0: must be >= 1"),
    (["--cpus-per-worker", "100000"], None, "give at most"),
    (["--cpus-per-worker", "99999999999999999999"], None, "give at most"),
    (["--cpus-per-worker", "5000", "--ray-address", "127.0.0.1:1"], None, "at most 1024"),
    (["--workers", "2", "--cpus-per-worker", "W2"], None, "over 2 workers"),  # W x C above the machine's CPUs
    ([], "abc", "CONFORMANCE_TORCH_THREADS='abc'"),
    ([], "100000", "CONFORMANCE_TORCH_THREADS='100000'"),
    ([], "\u00b2", "CONFORMANCE_TORCH_THREADS="),  # a superscript two: isdigit() but not an int
])
def test_bad_cpus_per_worker_exit_2(tiny, capsys, monkeypatch, opts, env, needle):
    from eagle3_conformance.scan.ray_tasks import available_cpus

    if env is not None:
        monkeypatch.setenv("CONFORMANCE_TORCH_THREADS", env)
    opts = [str(available_cpus() // 2 + 1) if o == "W2" else o for o in opts]
    assert main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--no-reference", *opts]) == 2
    err = capsys.readouterr().err
    assert needle in err and "internal error" not in err and "Traceback" not in err, err


# --- corrupted data --------------------------------------------------------------------------


def test_nan_row_caught_outside_the_fingerprint_sample(nan_data, tiny_contract, tmp_path, capsys):
    data, victim = nan_data
    res = scan(tiny_contract, data, sample=2, seed=0)
    assert victim not in res.meta["fingerprint_sample"]["indices"]
    bad = [f for f in res.findings if f.status == "fail"]
    assert [(f.path, f.check, f.slot, f.where) for f in bad] == [(DISK_PATH, "finite", "feature", f"sample {victim}")]
    assert bad[0].observed == "non-finite rows [3]"
    assert res.meta["slot_stats"]["slot 1"]["finite_rows"] == res.meta["slot_stats"]["slot 1"]["rows"] - 1
    # the CLI exits 1 and names the sample
    out = tmp_path / "r.json"
    assert main(["check-data", str(TINY), "--data", str(data), "--no-reference", "--sample", "2",
                 "--json", str(out)]) == 1
    assert f"sample {victim}" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert any(f["check"] == "finite" and f["status"] == "fail" for f in doc["findings"])


def test_slot_rms_matches_reference_rms_nan_and_overflow():
    g = torch.Generator().manual_seed(0)
    hs = (torch.randn(37, 4, 64, generator=g) * 3).to(torch.bfloat16)
    hs[5, 2, 9] = float("nan")
    hs[6, 0, 1] = float("inf")
    hs[7, 3, :] = 1e30  # finite in bf16, overflows a float32 sum of squares
    want = hs.double().pow(2).mean(-1).sqrt()  # float64: the exact RMS of the stored values
    finite_where = torch.tensor([[not (t == 5 and k == 2) and not (t == 6 and k == 0) for k in range(4)]
                                 for t in range(37)])
    for dtype, rtol in ((torch.bfloat16, 2.0 ** -8), (torch.float16, 1e-5), (torch.float32, 1e-5)):
        x = hs.to(dtype) if dtype is not torch.float16 else hs.float().clamp(-6e4, 6e4).to(dtype)
        x[6, 0, 1] = float("inf")  # (the clamp made the fp16 copy's inf finite)
        w = x.double().pow(2).mean(-1).sqrt() if dtype is torch.float16 else want
        for block in (1, 64 * 4 * 3, 1 << 20):  # one row per block, a few rows, everything at once
            r = slot_rms(x, block_elems=block)
            assert torch.equal(torch.isfinite(r), finite_where), dtype
            f = torch.isfinite(w)
            assert torch.allclose(r[f].double(), w[f], rtol=rtol), dtype
        if dtype is not torch.float16:
            assert r[7, 3] == pytest.approx(1e30, rel=1e-2)


def test_slot_rms_bf16_is_exact_near_the_given_edges():
    """The bfloat16 fast path rounds the RMS to bfloat16; rows near a band edge are recomputed in
    float32, so a band verdict is the float32 reduction's."""
    g = torch.Generator().manual_seed(1)
    hs = (torch.randn(64, 3, 512, generator=g) * torch.tensor([0.5, 2.0, 9.0]).view(1, 3, 1)).to(torch.bfloat16)
    exact = torch.linalg.vector_norm(hs.float(), dim=-1) * (1.0 / 512 ** 0.5)
    fast = slot_rms(hs)
    assert not torch.equal(fast, exact)  # the fast path does round
    edges = [[float(exact[3, 0]), float(exact[10, 0])], [], [float(exact[0, 2])]]
    r = slot_rms(hs, exact_near=edges)
    for t, k in ((3, 0), (10, 0), (0, 2)):
        assert r[t, k] == exact[t, k]  # bit-equal to the float32 reduction
        assert (r[t, k] > edges[k][0]) == (exact[t, k] > edges[k][0])
    far = (r[:, 1] - fast[:, 1]).abs().max()
    assert far == 0  # a slot with no edges keeps the fast values


@pytest.mark.parametrize("calibrated", [False, True])
def test_reduced_capture_gives_the_checks_own_verdicts(tiny, tiny_contract, calibrated):
    """check_finite and check_norm_bands on the per-row RMS capture agree with the same checks on
    the full tensors (statuses, row numbers, band extremes)."""
    from safetensors.torch import load_file

    c = tiny_contract
    if calibrated:
        c = contract_with(c, **{"norm_bands.status": "calibrated", "norm_bands.massive_activation_ratio": 4.0,
                                "norm_bands.bands": [{"slot": s, "lo": 0.1, "hi": 0.9} for s in
                                                     ["B_2", "B_4", "B_5", "B_8"]]})
    rc = reduced_contract(c)
    seen = Counter()
    for i in range(12):
        hs = load_file(str(tiny.data_dir / "hidden_states" / f"hs_{i}.safetensors"))["hidden_states"]
        if i == 4:
            hs[2, 0, 3] = float("nan")
        T = hs.shape[0]
        rows = torch.arange(T)
        full = Capture(DISK_PATH, f"sample {i}", torch.zeros(T, dtype=torch.long), hs[:, :-1].flatten(1), rows,
                       verifier_last=hs[:, -1])
        r = slot_rms(hs, exact_near=band_edges(c, hs.shape[1]))
        red = Capture(DISK_PATH, f"sample {i}", torch.zeros(T, dtype=torch.long), r[:, :-1], rows,
                      verifier_last=r[:, -1:])
        # every check the registry runs on the RMS columns (finite, norm bands) says of them what it
        # says of the full tensors
        for spec in registry.of(registry.CAPTURE):
            if spec.stored not in (registry.ROW_RMS, registry.SLOT_RMS):
                continue
            a, b = spec.fn(c, full), spec.fn(rc, red)
            assert [(f.check, f.status, f.slot) for f in a] == [(f.check, f.status, f.slot) for f in b]
            for fa, fb in zip(a, b):
                seen[fa.status] += 1
                if isinstance(fa.observed, list):
                    assert fb.observed == pytest.approx(fa.observed, rel=2.0 ** -8)  # bf16-rounded extremes
                else:
                    assert fa.observed == fb.observed
    assert seen["fail"] and seen["pass"]  # both verdicts were exercised


# --- merge-reports and CLI -------------------------------------------------------------------


def test_merge_refuses_different_contracts_exit_2(tiny, tiny_contract, tmp_path, capsys):
    other = tmp_path / "other.yaml"
    other.write_text(TINY.read_text().replace("name: tiny-llama-eagle3", "name: tiny-llama-other"))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    base = ["--data", str(tiny.data_dir), "--no-reference", "--sample", "0", "--quiet"]
    assert main(["check-data", str(TINY), *base, "--shard", "0/2", "--json", str(a)]) == 0
    assert main(["check-data", str(other), *base, "--shard", "1/2", "--json", str(b)]) == 0
    out = tmp_path / "m.json"
    assert main(["merge-reports", str(out), str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "not the same contract" in err and "Traceback" not in err
    assert not out.exists()
    # the same shard twice would count its findings twice
    assert main(["merge-reports", str(out), str(a), str(a)]) == 2
    assert main(["merge-reports", str(out), str(tmp_path / "missing.json")]) == 2


def test_merge_exit_1_when_a_part_failed(nan_data, tiny, tmp_path, capsys):
    data, victim = nan_data
    bad, good = tmp_path / "bad.json", tmp_path / "good.json"
    base = ["--no-reference", "--sample", "0", "--quiet"]
    assert main(["check-data", str(TINY), "--data", str(data), *base, "--shard", f"{victim % 2}/2",
                 "--json", str(bad)]) == 1
    assert main(["check-data", str(TINY), "--data", str(tiny.data_dir), *base, "--shard", f"{1 - victim % 2}/2",
                 "--json", str(good)]) == 0
    out = tmp_path / "m.json"
    assert main(["merge-reports", str(out), str(good), str(bad)]) == 1
    merged = json.loads(out.read_text())
    assert [f["where"] for f in merged["findings"] if f["status"] == "fail"] == [f"sample {victim}"]
    assert merged["meta"]["complete"] is True
    # a missing shard (a crashed task) is a failure, not a pass, unless explicitly allowed
    assert main(["merge-reports", str(tmp_path / "m2.json"), str(good)]) == 1
    assert "shards missing" in capsys.readouterr().out
    assert main(["merge-reports", str(tmp_path / "m3.json"), str(good), "--allow-missing"]) == 0


def test_merge_missing_shard_is_a_failed_finding(tiny, tmp_path, capsys):
    a = tmp_path / "a.json"
    base = ["--data", str(tiny.data_dir), "--no-reference", "--sample", "0", "--quiet"]
    assert main(["check-data", str(TINY), *base, "--shard", "0/3", "--json", str(a)]) == 0
    out = tmp_path / "m.json"
    assert main(["merge-reports", str(out), str(a), "--quiet"]) == 1
    merged = json.loads(out.read_text())
    miss = [f for f in merged["findings"] if f["check"] == "shards_complete"]
    assert len(miss) == 1 and miss[0]["status"] == "fail" and miss[0]["path"] == "data"
    assert "1/3" in miss[0]["message"] and "2/3" in miss[0]["message"] and "\n" not in miss[0]["message"]
    assert merged["meta"]["shards_missing"] == ["1/3", "2/3"] and merged["meta"]["complete"] is False
    assert main(["merge-reports", str(out), str(a), "--quiet", "--allow-missing", "--force"]) == 0
    merged = json.loads(out.read_text())
    assert [f["status"] for f in merged["findings"] if f["check"] == "shards_complete"] == ["skip"]


def test_read_summary_uses_human_units(tiny, capsys):
    from eagle3_conformance.cli.progress import human_bytes

    assert human_bytes(0) == "0 B" and human_bytes(512) == "512 B"
    assert human_bytes(17_234) == "17.2 KB" and human_bytes(3_400_000) == "3.40 MB"
    assert human_bytes(1.25e9) == "1.25 GB" and human_bytes(2e12) == "2.00 TB"
    assert main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--no-reference", "--sample", "0"]) == 0
    read = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("read:"))
    assert "0.000 GB" not in read and "0.00 GB/s" not in read
    assert " KB in " in read and "/s)" in read, read


@pytest.mark.parametrize("shard", ["3/3", "1", "a/b", "-1/2"])
def test_bad_shard_exit_2(tiny, shard, capsys):
    assert main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--no-reference", f"--shard={shard}"]) == 2
    assert "shard" in capsys.readouterr().err


def test_shard_arithmetic():
    assert parse_shard("2/5") == (2, 5)
    n = 23
    got = sorted(j for i in range(4) for j in shard_indices(n, (i, 4)))
    assert got == list(range(n))
    # workers split shard i/N into sub-shards i + w*N of N*W: same samples
    sub = sorted(j for w in range(3) for j in shard_indices(n, (1 + w * 4, 12)))
    assert sub == list(shard_indices(n, (1, 4)))
    assert fingerprint_sample(10, -1, 0) == list(range(10)) and fingerprint_sample(10, 0, 0) == []


def test_json_passes_counts_folds_passes_and_keeps_failures(tmp_path):
    """For datasets of 10^5+ samples: passes folded per (path, check, slot) with a count, every
    failure kept in full, and merge-reports still reads the file."""
    import json as _json
    import shutil

    from safetensors.torch import load_file, save_file

    from eagle3_conformance.cli import main
    from eagle3_conformance.testbed.fixtures import build_fixture

    fx = build_fixture("tiny-llama")
    data = tmp_path / "data"
    shutil.copytree(fx.data_dir, data)
    p = data / "hidden_states" / "hs_3.safetensors"
    d = load_file(p)
    d["hidden_states"] = d["hidden_states"].clone()
    d["hidden_states"][1, 0, 0] = float("nan")
    save_file(d, p)
    full, folded = tmp_path / "full.json", tmp_path / "folded.json"
    contract = str(Path(__file__).resolve().parent.parent / "contracts" / "tiny-llama.yaml")
    base = ["check-data", contract, "--data", str(data), "--no-reference", "--quiet"]
    assert main(base + ["--json", str(full)]) == 1
    assert main(base + ["--json", str(folded), "--json-passes", "counts"]) == 1
    a, b = _json.loads(full.read_text())["findings"], _json.loads(folded.read_text())["findings"]
    assert [f for f in a if f["status"] != "pass"] == [f for f in b if f["status"] != "pass"]
    passes = [f for f in b if f["status"] == "pass"]
    assert sum(f["count"] for f in passes) == sum(f["status"] == "pass" for f in a)
    assert len({(f["path"], f["check"], f["slot"]) for f in passes}) == len(passes) < len(a)
    assert main(["merge-reports", str(tmp_path / "m.json"), str(folded)]) == 1


def test_merge_diagnoses_like_one_run(tiny, tmp_path, capsys):
    """merge-reports names the fault behind the merged findings as one unsharded run does, with the
    parts' own contract (found by its path and sha256) or --contract; another contract is refused."""
    from safetensors.torch import load_file, save_file

    data = tmp_path / "wide"
    shutil.copytree(tiny.data_dir, data)
    for p in sorted((data / "hidden_states").glob("hs_*.safetensors")):  # another model's width
        t = load_file(str(p))
        t["hidden_states"] = torch.cat([t["hidden_states"], t["hidden_states"]], dim=-1).contiguous()
        save_file(t, str(p))
    base = ["--data", str(data), "--no-reference", "--sample", "0", "--quiet"]
    whole, a, b = tmp_path / "whole.json", tmp_path / "a.json", tmp_path / "b.json"
    assert main(["check-data", str(TINY), *base, "--json", str(whole)]) == 1
    assert main(["check-data", str(TINY), *base, "--shard", "0/2", "--json", str(a)]) == 1
    assert main(["check-data", str(TINY), *base, "--shard", "1/2", "--json", str(b)]) == 1
    out = tmp_path / "m.json"
    capsys.readouterr()
    assert main(["merge-reports", str(out), str(a), str(b)]) == 1
    text = capsys.readouterr().out
    kinds = [d["kind"] for d in json.loads(out.read_text())["diagnoses"]]
    assert kinds == [d["kind"] for d in json.loads(whole.read_text())["diagnoses"]] and kinds[0] == "other-model-width"
    assert "K6 other-model-width" in text and "fix:" in text
    # --contract: the same file elsewhere is fine; another contract is refused (exit 2, out untouched)
    same = tmp_path / "same.yaml"
    same.write_bytes(TINY.read_bytes())
    assert main(["merge-reports", str(tmp_path / "m2.json"), str(a), str(b), "--contract", str(same)]) == 1
    other = tmp_path / "other.yaml"
    other.write_text(TINY.read_text().replace("name: tiny-llama-eagle3", "name: tiny-llama-other"))
    assert main(["merge-reports", str(tmp_path / "m3.json"), str(a), str(b), "--contract", str(other)]) == 2
    err = capsys.readouterr().err
    assert "not the same contract" in err and "Traceback" not in err and not (tmp_path / "m3.json").exists()


# --- merge-reports refuses parts that do not belong together ------------------------------------


def _part(tmp_path, name, data, *extra) -> Path:
    out = tmp_path / name
    rc = main(["check-data", str(TINY), "--data", str(data), "--no-reference", "--quiet", "--json", str(out),
               *map(str, extra)])
    assert rc == 0, rc
    return out


def test_merge_refuses_parts_of_different_shard_counts(tiny, tmp_path, capsys):
    """0/3, 1/2 and 2/3 cover samples {0,3,6,9} + {1,3,5,7,9,11} + {2,5,8,11}: sample 10 never
    checked, 3/5/9/11 twice; refused (exit 2) naming the two parts and their shard counts."""
    a = _part(tmp_path, "A.json", tiny.data_dir, "--sample", 0, "--shard", "0/3")
    b = _part(tmp_path, "B.json", tiny.data_dir, "--sample", 0, "--shard", "1/2")
    c = _part(tmp_path, "C.json", tiny.data_dir, "--sample", 0, "--shard", "2/3")
    out = tmp_path / "m.json"
    capsys.readouterr()
    assert main(["merge-reports", str(out), str(a), str(b), str(c)]) == 2
    err = capsys.readouterr().err
    assert (f"shard 1/2 in {b}, shard 0/3 in {a}: parts of different shard counts cannot cover the dataset once"
            in err), err
    assert "Traceback" not in err and not out.exists()


@pytest.mark.parametrize("flag,values", [("--seed", (0, 1)), ("--sample", (2, 3)), ("--batch-size", (2, 4))])
def test_merge_refuses_parts_with_different_fingerprint_settings(tiny, tmp_path, capsys, flag, values):
    settings = {"--seed": 0, "--sample": 2, "--batch-size": 2}
    parts = []
    for k, v in enumerate(values):
        opts = [x for f, d in {**settings, flag: v}.items() for x in (f, d)]
        parts.append(_part(tmp_path, f"p{k}.json", tiny.data_dir, *opts, "--shard", f"{k}/2"))
    out = tmp_path / "m.json"
    capsys.readouterr()
    assert main(["merge-reports", str(out), *map(str, parts)]) == 2
    err = capsys.readouterr().err
    assert f"{parts[1]} ran with {flag} {values[1]}, {parts[0]} with {flag} {values[0]}" in err, err
    assert "Traceback" not in err and not out.exists()
    # the same settings merge
    same = _part(tmp_path, "same.json", tiny.data_dir, *[x for f, d in settings.items() for x in (f, d)],
                 "--shard", "1/2")
    assert main(["merge-reports", str(out), str(parts[0]), str(same), "--quiet"]) == 0


@pytest.fixture(scope="module")
def other_same_size(tiny, tiny_ref, tmp_path_factory):
    """Another speculators dataset of the tiny pair with as many samples as the tiny fixture's."""
    from datasets import load_from_disk

    from eagle3_conformance.testbed.datagen import write_speculators_dataset
    from eagle3_conformance.testbed.fixtures import sample_token_ids

    n = len(load_from_disk(str(tiny.data_dir)))
    samples = sample_token_ids(tiny.spec, n, 6, 16, seed=1234)
    return write_speculators_dataset(tmp_path_factory.mktemp("other") / "data", tiny_ref, samples,
                                     slots=["B_1", "B_2", "B_3", "B_5"])


def test_merge_refuses_parts_of_different_datasets_of_one_size(tiny, other_same_size, tmp_path, capsys):
    a = _part(tmp_path, "a.json", tiny.data_dir, "--sample", 0, "--shard", "0/2")
    b = _part(tmp_path, "b.json", other_same_size, "--sample", 0, "--shard", "1/2")
    ma, mb = (json.loads(p.read_text())["meta"] for p in (a, b))
    assert ma["samples"] == mb["samples"] and ma["dataset_identity"] != mb["dataset_identity"]
    out = tmp_path / "m.json"
    capsys.readouterr()
    assert main(["merge-reports", str(out), str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert f"{b} checked dataset {mb['dataset_identity']}" in err and str(a) in err, err
    assert "not the same dataset" in err and "Traceback" not in err and not out.exists()
    # the same dataset at another path (another machine's mount) merges
    moved = tmp_path / "elsewhere" / "data"
    shutil.copytree(tiny.data_dir, moved)
    c = _part(tmp_path, "c.json", moved, "--sample", 0, "--shard", "1/2")
    assert json.loads(c.read_text())["meta"]["dataset_identity"] == ma["dataset_identity"]
    assert main(["merge-reports", str(out), str(a), str(c), "--quiet"]) == 0
    assert json.loads(out.read_text())["meta"]["complete"] is True
    # older parts without the field merge as before (compared by size only)
    for p in (a, b):
        doc = json.loads(p.read_text())
        del doc["meta"]["dataset_identity"]
        p.write_text(json.dumps(doc))
    assert main(["merge-reports", str(out), str(a), str(b), "--quiet", "--force"]) == 0


def test_dataset_identity_of_vllm_files_is_names_and_sizes_not_the_path(tiny, tmp_path):
    from eagle3_conformance.scan import VLLM_EXTRACTION, dataset_identity

    d = tmp_path / "a"
    shutil.copytree(tiny.data_dir / "hidden_states", d)
    moved = tmp_path / "b" / "mount"
    shutil.copytree(d, moved)
    ident = dataset_identity(d, VLLM_EXTRACTION, 12)
    assert ident.startswith("files:") and dataset_identity(moved, VLLM_EXTRACTION, 12) == ident
    victim = sorted(moved.glob("*.safetensors"))[0]
    victim.write_bytes(victim.read_bytes() + b"\0")  # another file size
    assert dataset_identity(moved, VLLM_EXTRACTION, 12) != ident
    victim.rename(moved / ("x" + victim.name))  # another file name
    assert dataset_identity(moved, VLLM_EXTRACTION, 12) != ident


@pytest.fixture(scope="module")
def seed_incident(tiny, tiny_ref, tmp_path_factory):
    """Data captured at B_0, B_2, B_4, B_5 for a contract of B_2, B_4, B_5 (+ verifier): the slots
    shifted by one boundary (as tests/test_cli_and_plugin.py's seed_incident_data)."""
    from eagle3_conformance.testbed.datagen import write_speculators_dataset
    from eagle3_conformance.testbed.fixtures import sample_token_ids

    samples = sample_token_ids(tiny.spec, 4, 3, 16, seed=11)
    return write_speculators_dataset(tmp_path_factory.mktemp("seed") / "data", tiny_ref, samples,
                                     slots=["B_0", "B_2", "B_4", "B_5"])


@pytest.fixture(scope="module")
def noise_in_two(tiny, tmp_path_factory):
    """A copy of the tiny dataset whose samples 1 and 2 hold noise (of the stored RMS) in every slot:
    a minority of samples (2 of 12) that match no boundary of the reference."""
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("noise") / "data"
    shutil.copytree(tiny.data_dir, out)
    g = torch.Generator().manual_seed(7)
    for i in (1, 2):
        f = out / "hidden_states" / f"hs_{i}.safetensors"
        d = load_file(str(f))
        hs = d["hidden_states"]
        scale = hs.float().pow(2).mean().sqrt()
        d["hidden_states"] = (torch.randn(hs.shape, generator=g) * scale).to(hs.dtype)
        save_file(d, str(f))
    return out


@pytest.mark.parametrize("data", ["noise_in_two", "seed_incident"])
def test_counts_parts_merged_diagnose_like_the_unsharded_full_run(data, request, tiny, tmp_path, capsys):
    """A folded pass entry stands for ``count`` findings: the diagnoses of --json-passes counts
    reports (one, or shards merged) equal those of the unsharded full report (kinds and support
    strings). noise_in_two: 2 of 12 samples fail, so counting a folded entry as one pass
    turned "2/12 samples" into "2/3" and a minority into a false majority."""
    base = ["check-data", str(TINY), "--data", str(request.getfixturevalue(data)), "--reference",
            str(tiny.target_dir), "--quiet"]

    def diag(doc):
        return sorted((d["kind"], json.dumps(d["support"], sort_keys=True)) for d in doc["diagnoses"])

    whole = tmp_path / "whole.json"
    assert main([*base, "--json", str(whole)]) == 1
    want = diag(json.loads(whole.read_text()))
    assert want and all(sup != "{}" for _, sup in want), want  # the fault is diagnosed, with its support
    counts = tmp_path / "counts.json"
    assert main([*base, "--json", str(counts), "--json-passes", "counts"]) == 1
    assert diag(json.loads(counts.read_text())) == want
    for passes in ("all", "counts"):
        parts = [tmp_path / f"{passes}-{k}.json" for k in range(2)]
        for k, p in enumerate(parts):
            main([*base, "--shard", f"{k}/2", "--json", str(p), "--json-passes", passes])
        out = tmp_path / f"m-{passes}.json"
        assert main(["merge-reports", str(out), *map(str, parts), "--quiet"]) == 1
        assert diag(json.loads(out.read_text())) == want, passes
