"""check-data on a local Ray (eagle3_conformance.scan.ray_tasks): same findings as one process, progress across
tasks, the reference computed once and shared through its disk cache, a worker that dies mid-shard
retried, one that keeps dying reported with its shard (exit 2).

One local Ray (2 CPUs) is started for the module, with a worker setup hook (Ray's own
``worker_process_setup_hook``) that makes a worker process exit hard (``os._exit``) when it reaches
a chosen sample, as a crashed or OOM-killed worker would; which sample and how many times is read
from a control file, so scans without it run normally.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from eagle3_conformance.cli import main
from eagle3_conformance.scan import ScanError, scan

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"

pytestmark = pytest.mark.slow

CTL = "CONFORMANCE_TEST_CRASH"


def _crash_hook() -> None:  # runs in every Ray worker process at start
    import os

    import eagle3_conformance.scan.all_rows as scan_mod

    ctl = os.environ.get("CONFORMANCE_TEST_CRASH")
    orig = scan_mod.disk_findings

    def wrapped(st, i, *a, **k):
        if ctl and os.path.exists(ctl):
            with open(ctl) as f:
                want = json.load(f)
            if i == want["sample"]:
                cnt = ctl + ".count"
                n = int(open(cnt).read()) if os.path.exists(cnt) else 0
                if n < want["times"]:
                    with open(cnt, "w") as f:
                        f.write(str(n + 1))
                    os._exit(1)  # the worker process dies mid-shard
        return orig(st, i, *a, **k)

    scan_mod.disk_findings = wrapped


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    import ray
    import ray.cloudpickle

    ctl = tmp_path_factory.mktemp("crash") / "ctl.json"
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
             runtime_env={"worker_process_setup_hook": _crash_hook,
                          "env_vars": {CTL: str(ctl), "PYTHONPATH": os.pathsep.join(
                              [str(REPO), os.environ.get("PYTHONPATH", "")])}})
    try:
        yield ctl
    finally:
        ray.shutdown()


def _crash(ctl: Path, sample: int, times: int) -> None:
    Path(str(ctl) + ".count").unlink(missing_ok=True)
    ctl.write_text(json.dumps({"sample": sample, "times": times}))


def _no_crash(ctl: Path) -> None:
    ctl.unlink(missing_ok=True)
    Path(str(ctl) + ".count").unlink(missing_ok=True)


def _key(f) -> str:
    return json.dumps(f.to_json(), sort_keys=True)


_DECIMAL = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")


def _same_findings(got, want) -> None:
    """The same findings, in order, with every decimal number within reduction-order noise.

    A Ray task runs its checks on 1 torch thread, the one-process scan on the driver's threads:
    float32 sums in another order. Near 0 degrees one float32 ulp of a cosine is about 0.002 deg
    of angle (d angle / d cos = 1 / sin), so a median row angle read 0.093 in one and 0.095 in the
    other on an AMD EPYC runner (2026-12-02); statuses, checks, slots, counts and every integer
    must still be equal."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        kg, kw = _key(g), _key(w)
        assert _DECIMAL.sub("#", kg) == _DECIMAL.sub("#", kw), (kg, kw)
        for a, b in zip(map(float, _DECIMAL.findall(kg)), map(float, _DECIMAL.findall(kw))):
            assert abs(a - b) <= 0.01 + 1e-3 * abs(b), (a, b, kg)


def test_same_findings_tells_a_real_difference():
    """The comparison above fails on what it exists to catch: another status, another integer,
    an angle past the noise; it accepts a one-ulp angle."""
    from eagle3_conformance.core.findings import Finding

    def f(status="pass", observed=3, msg="median row angle 0.093 deg"):
        return Finding("slot_identity", status, "data", "slot 0", 3, observed, "sample 0", msg, "K1")

    _same_findings([f(msg="median row angle 0.095 deg")], [f()])
    for other in (f(status="fail"), f(observed=4), f(msg="median row angle 0.193 deg")):
        with pytest.raises(AssertionError):
            _same_findings([other], [f()])
    with pytest.raises(AssertionError):
        _same_findings([f(), f()], [f()])


def test_ray_workers_equal_one_process_and_share_the_reference(ray_local, tiny, tiny_contract, tmp_path):
    _no_crash(ray_local)
    kw = dict(sample=4, seed=1, reference_dir=tiny.target_dir, batch_size=2)
    one = scan(tiny_contract, tiny.data_dir, **kw)
    cache = tmp_path / "refcache"
    two = scan(tiny_contract, tiny.data_dir, workers=2, ref_cache=cache, **kw)
    _same_findings(two.findings, one.findings)
    assert any(f.check == "slot_identity" and f.status == "pass" for f in two.findings)
    assert two.meta["engine"]["kind"] == "ray" and two.meta["engine"]["tasks"] == 2
    rf = two.meta["reference_forward"]
    # the driver ran the forward once per sampled sample; the tasks only read the disk cache
    assert rf["prefill"]["samples"] == 4 and rf["prefill"]["forwards"] == 4
    assert rf["task_forwards"] == 0 and rf["task_disk_hits"] == 4
    assert len(list(cache.rglob("*.safetensors"))) == 4
    # a second run reads everything from the cache: no forward at all
    again = scan(tiny_contract, tiny.data_dir, workers=2, ref_cache=cache, **kw)
    assert again.meta["reference_forward"]["prefill"]["forwards"] == 0
    _same_findings(again.findings, one.findings)


def test_progress_streams_across_tasks(ray_local, tiny, tiny_contract):
    from eagle3_conformance.scan import Part, ScanOptions, scan_part
    from eagle3_conformance.scan.ray_tasks import run_tasks

    _no_crash(ray_local)
    specs = [Part(tiny_contract, str(tiny.data_dir), ScanOptions(shard=(w, 3), sample=0, data_format="speculators"))
             for w in range(3)]
    got = []
    parts = run_tasks(scan_part, specs, on_progress=lambda ns, nb: got.append((ns, nb)))
    assert sum(ns for ns, _ in got) == 12 == sum(p["shard_samples"] for p in parts)
    assert sum(nb for _, nb in got) == sum(p["bytes"] for p in parts) > 0


def test_a_task_gets_its_cpus_and_runs_with_that_many_threads(ray_local, tiny, tiny_contract):
    from eagle3_conformance.scan import Part, ScanOptions, scan_part
    from eagle3_conformance.scan.ray_tasks import run_tasks

    _no_crash(ray_local)
    spec = Part(tiny_contract, str(tiny.data_dir), ScanOptions(sample=0, data_format="speculators", cpus_per_worker=2))
    (part,) = run_tasks(scan_part, [spec], cpus_per_task=2)  # the module's Ray has 2 CPUs: both to this task
    assert part["threads"] == 2 and part["shard_samples"] == 12
    res = scan(tiny_contract, tiny.data_dir, sample=0, workers=2, cpus_per_worker=1)
    assert res.meta["engine"]["cpus_per_task"] == 1 and res.meta["threads_per_worker"] == [1, 1]


def test_worker_dying_mid_shard_is_retried(ray_local, tiny, tiny_contract):
    _crash(ray_local, sample=5, times=1)  # shard 1/2 owns 1, 3, 5, 7, ...: dies after 1 and 3
    try:
        two = scan(tiny_contract, tiny.data_dir, sample=0, workers=2)
    finally:
        crashed = Path(str(ray_local) + ".count").read_text() if Path(str(ray_local) + ".count").exists() else "0"
        _no_crash(ray_local)
    assert crashed == "1", "the injected crash did not happen"
    one = scan(tiny_contract, tiny.data_dir, sample=0)
    _same_findings(two.findings, one.findings)
    assert two.meta["shard_samples"] == 12


def test_worker_that_keeps_dying_names_its_shard(ray_local, tiny, tiny_contract, capsys):
    _crash(ray_local, sample=5, times=99)
    try:
        with pytest.raises(ScanError, match=r"shard 1/2 .*worker died 2 time"):
            scan(tiny_contract, tiny.data_dir, sample=0, workers=2, max_retries=1)
        rc = main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--no-reference", "--sample", "0",
                   "--workers", "2", "--quiet"])
    finally:
        _no_crash(ray_local)
    assert rc == 2
    err = capsys.readouterr().err
    assert "shard 1/2" in err and "not checked" in err and "Traceback" not in err


def test_a_task_waiting_for_a_cpu_is_named(ray_local, tiny, tiny_contract, monkeypatch, capsys):
    """Ray keeps a task pending without a word while other work holds the cluster's CPUs: after
    START_WARN_S the parts not started are named on stderr, and the run still completes."""
    import time

    import ray

    from eagle3_conformance.scan import Part, ScanOptions, ray_tasks, scan_part

    _no_crash(ray_local)
    assert ray.is_initialized()  # the module's local Ray (a remote call must not auto-connect elsewhere)
    monkeypatch.setattr(ray_tasks, "START_WARN_S", 1.0)

    @ray.remote(num_cpus=1)
    def hold(s: float) -> None:
        time.sleep(s)

    blocker = [hold.remote(12.0), hold.remote(4.0)]  # both CPUs held: no part can start for 4 s
    time.sleep(1.0)
    specs = [Part(tiny_contract, str(tiny.data_dir), ScanOptions(shard=(w, 2), sample=0, data_format="speculators"))
             for w in range(2)]
    parts = ray_tasks.run_tasks(scan_part, specs, describe=lambda s: f"shard {s.shard[0]}/{s.shard[1]}")
    ray.get(blocker)
    assert sum(p["shard_samples"] for p in parts) == 12
    err = capsys.readouterr().err
    assert "have checked no sample yet" in err and "shard 0/2" in err and "shard 1/2" in err, err
