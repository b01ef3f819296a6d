"""Side-by-side throughput of `eagle3-conformance check-data` against raw reads and speculators' loader,
and the throughput of each step of its all-rows pass.

Run on demand (not collected by pytest):

    python benchmarks/bench_check_data.py [--out /tmp/bench_check_data] [--gb 3.5] [--json results.json]
        [--readers raw,raw-read,check-data,...] [--baseline TREE] [--repeat R] [--cold fadvise|drop_caches|none]

It writes synthetic datasets of realistic shape in the speculators 0.9.0 on-disk format (an Arrow
``save_to_disk`` directory with input_ids / loss_mask / seq_len, plus
``hidden_states/hs_{i}.safetensors`` holding ``hidden_states`` [T, 4, H] bf16 and ``token_ids``
[T] int64), one with H = 4096 (Llama-3-8B width) and one with H = 7168 (DeepSeek-V3 width),
T up to 4096, random values scaled per slot, and a contract with calibrated norm bands for each.
Then, for each dataset, each reader runs in its own subprocess:

- ``raw``: ``safetensors.torch.load_file`` of every file, every tensor touched (one element per
  4 KiB page, so every byte is read from disk; from a warm cache this only maps the cached
  pages: no byte is copied or computed on);
- ``raw-read``: every file read whole into one reusable 16 MiB buffer (``readinto``: every byte
  copied out of the page cache once, the least any reader that looks at every value pays warm);
- ``speculators``: ``speculators.train.data.ArrowDataset(max_len, datapath, on_missing="raise")``
  iterated ``ds[i]`` (hidden_states and verifier_last_hidden_states touched page by page);
- ``check-data``: ``eagle3-conformance check-data CONTRACT --data DIR --no-reference --sample 0
  --json FILE`` (cheap checks on every row and slot, norm bands on; no fingerprints; one worker with
  its default CPUs: every core of the machine); ``check-data-1cpu``, the same with
  ``--cpus-per-worker 1`` (one torch thread); and the same with
  ``--workers 2`` (two Ray tasks on a local Ray started on demand: the wall time includes starting
  Ray and the workers' imports; ``task s`` is the slowest task's own scan time); and
  ``--workers 2 --ray-address`` on a one-node cluster started before the clock (``ray start
  --head`` with this machine's CPUs, ``--cpus-per-worker`` half of them: a cluster that is
  already running; the run pays its workers' start and imports). ``x 1 worker`` is one worker's seconds over these runs' seconds; ``tasks x 1 worker``
  the same over the slowest task's scan time;
- ``checks`` (warm only): the all-rows pass of check-data in this process over every sample (the
  scan's own ``disk_findings`` with the worker's default threads), each step timed on its own: the
  header read and mapping, the RMS pass (the one pass that reads every value: per-row per-slot RMS,
  non-finite exactly where a row holds NaN/Inf, read by ``finite``, ``norm_band`` and the slot
  statistics), every registered check the pass runs (by wrapping its registry entry, so a check added
  later is timed without touching this file), the per-sample length and token-range findings and the
  slot statistics. Each step's throughput is the dataset's bytes over that step's seconds: what the
  pass would run at if that step were its only cost.

``--baseline TREE`` adds ``check-data@base`` and ``checks@base``: the same two readers importing
``eagle3_conformance`` from another source tree (e.g. ``git archive main | tar -x -C /tmp/base``), so a
change is measured before and after in the same run, on the same files.

Cold runs evict the dataset's own files from the page cache before every run (``--cold fadvise``,
the default: ``fdatasync`` + ``posix_fadvise(POSIX_FADV_DONTNEED)`` on each file, which leaves the
rest of a shared machine's cache alone; the share of the dataset still resident after it, read
with ``mincore``, is reported) or drop the whole cache (``--cold drop_caches``: ``sync; echo 3 >
/proc/sys/vm/drop_caches``, needs root); then every reader runs again warm, ``--repeat R`` rounds
each (a round runs every reader once, in turn, so drift of the disk or the machine hits all readers
alike; the median round is reported with the min-max spread). Reported: GB/s (file bytes / wall
seconds of the read loop, imports excluded), samples/s, ratio to raw and to raw-read, torch
threads per worker, and peak RSS (``VmHWM`` of the subprocess; of the largest Ray task for the
Ray readers) against the target "largest shard + 512 MB"; the goals of issue 42 (check-data >=
0.9x raw-read warm, >= 0.8x raw cold) met or not; and the per-step table. Results are printed as
tables and written as JSON. The data is deleted afterwards unless ``--keep`` (``--reuse`` scans
data a ``--keep`` run left in ``--out`` instead of writing it again).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))  # its sibling modules, however this file is loaded

from page_cache import dataset_files, make_cold, resident_share  # noqa: E402
from ray_head import RayHead, cores  # noqa: E402
from scan_steps import all_rows_pass, per_check_steps, print_steps  # noqa: E402

SLOT_SCALE = [0.5, 1.0, 2.0, 4.0]  # per-slot RMS of the synthetic data (aux slots, then verifier)
LAYERS = {4096: 32, 7168: 61}
GOAL_WARM_X_RAW_READ = 0.9  # issue 42: check-data >= 0.9x the read touching every byte, warm
GOAL_COLD_X_RAW = 0.8  # ... and >= 0.8x raw, cold


# --- dataset -----------------------------------------------------------------------------------


def contract_yaml(H: int, L: int) -> str:
    aux = [2, L // 2, L - 3]
    bands = "\n".join(f"    - {{slot: B_{b}, lo: {s * 0.5}, hi: {s * 2.0}}}"
                      for b, s in zip(aux + [L], SLOT_SCALE))
    return f"""schema_version: 1
name: bench-h{H}
description: synthetic benchmark data (random values, realistic shapes)
target: {{name: synthetic/h{H}, architecture: LlamaForCausalLM, num_hidden_layers: {L}, hidden_size: {H},
         vocab_size: 128256, dtype: bfloat16, final_norm: rmsnorm}}
draft:
  name: synthetic/draft
  architecture: Eagle3Speculator
  hidden_size: {H}
  target_hidden_size: {H}
  draft_vocab_size: 32000
  layer_ids: {{values: null, location: absent}}
capture: {{boundaries: [B_{aux[0]}, B_{aux[1]}, B_{aux[2]}], feature_width: {3 * H}}}
verifier_last: {{tensor: B_{L}, norm: pre}}
norm_bands:
  status: calibrated
  exclude_positions: [0]
  bands:
{bands}
data_dtype: bfloat16
"""


def build_dataset(root: Path, H: int, budget_bytes: int, seed: int) -> dict:
    import torch
    from datasets import Dataset
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    hs_dir = root / "hidden_states"
    hs_dir.mkdir(parents=True)
    rows = {"input_ids": [], "loss_mask": [], "seq_len": []}
    total, i, largest = 0, 0, 0
    scale = torch.tensor(SLOT_SCALE).view(1, 4, 1)
    while total < budget_bytes:
        T = 4096 if i == 0 else int(torch.randint(256, 4097, (1,), generator=g))
        ids = torch.randint(0, 128256, (T,), generator=g)
        hs = (torch.randn(T, 4, H, generator=g) * scale).to(torch.bfloat16)
        p = hs_dir / f"hs_{i}.safetensors"
        save_file({"hidden_states": hs, "token_ids": ids}, str(p))
        size = p.stat().st_size
        total += size
        largest = max(largest, size)
        rows["input_ids"].append(ids.tolist())
        rows["loss_mask"].append([0] * (T // 4) + [1] * (T - T // 4))
        rows["seq_len"].append(T)
        i += 1
    Dataset.from_dict(rows).with_format("torch").save_to_disk(str(root))  # as speculators writes it
    (root.parent / f"{root.name}.yaml").write_text(contract_yaml(H, LAYERS[H]))
    return {"dir": str(root), "contract": str(root.parent / f"{root.name}.yaml"), "H": H, "samples": i,
            "bytes": total, "largest_shard_bytes": largest}


# --- children (one measurement each, in a fresh process) -----------------------------------------


def _touch(t) -> int:
    import torch

    if t.dim() == 0 or t.numel() == 0:
        return 0
    if t.is_contiguous():
        return int(t.reshape(-1).view(torch.uint8)[::4096].sum())
    per_page = max(4096 // t.element_size(), 1)  # [T, W] strided view: one element per page
    return int(t[..., ::per_page].float().sum().isfinite())


def _check_data_main():
    """The CLI's ``main``, with what check-data's run imports on its first call imported now."""
    import eagle3_conformance.cli.progress  # noqa: F401
    import eagle3_conformance.diagnose  # noqa: F401
    import eagle3_conformance.environment.validated  # noqa: F401
    import eagle3_conformance.report  # noqa: F401
    import eagle3_conformance.suite.assess  # noqa: F401
    from eagle3_conformance import scan  # noqa: F401
    from eagle3_conformance.cli import build_parser, main

    build_parser()  # import the extra command modules
    return main


def child(kind: str, data: str, contract: str, out_json: str) -> None:
    sys.path.insert(0, os.environ.get("BENCH_TREE") or str(HERE.parent.parent))  # --baseline: the other tree
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    import datasets  # noqa: F401  (imports are not I/O: loaded before the clock starts)
    import safetensors.torch  # noqa: F401
    import torch  # noqa: F401

    files = sorted((Path(data) / "hidden_states").glob("hs_*.safetensors"),
                   key=lambda p: int(p.stem.split("_")[1]))
    nbytes = sum(p.stat().st_size for p in files)
    if kind == "speculators":
        from speculators.train.data import ArrowDataset
    if kind.startswith("check-data"):
        main = _check_data_main()
    if kind.startswith("checks"):
        steps = per_check_steps()
    rss0 = vm_hwm_mb()
    t0 = time.perf_counter()
    extra_out: dict = {}
    if kind == "raw":
        from safetensors.torch import load_file

        for p in files:
            for t in load_file(str(p)).values():
                _touch(t)
        n, rc = len(files), 0
    elif kind == "raw-read":
        buf = memoryview(bytearray(16 << 20))
        for p in files:
            with open(p, "rb", buffering=0) as f:
                while f.readinto(buf):
                    pass
        n, rc = len(files), 0
    elif kind == "speculators":
        ds = ArrowDataset(1 << 30, data, on_missing="raise")
        for i in range(len(ds)):
            item = ds[i]
            _touch(item["hidden_states"])
            _touch(item["verifier_last_hidden_states"])
        n, rc = len(ds), 0
    elif kind.startswith("checks"):
        n, rc = all_rows_pass(data, contract), 0
        extra_out["steps"] = dict(steps)
    else:
        workers = kind.split(":")[1].split("@")[0] if ":" in kind else "1"
        extra = []
        if kind.endswith("@cluster"):  # the machine's cores split over the tasks, as --workers does locally
            extra = ["--ray-address", os.environ["BENCH_RAY_ADDRESS"],
                     "--cpus-per-worker", str(max(cores() // int(workers), 1))]
        if kind.endswith("-1cpu"):
            extra = ["--cpus-per-worker", "1"]
        rc = main(["check-data", contract, "--data", data, "--no-reference", "--sample", "0", "--quiet",
                   "--workers", workers, "--json", out_json + ".report.json", *extra])
        n = len(files)
    dt = time.perf_counter() - t0
    workers_peak = 0.0
    task_s = None
    threads = [torch.get_num_threads()]
    if kind.startswith("check-data"):
        doc = json.loads(Path(out_json + ".report.json").read_text())
        meta = doc["meta"]
        workers_peak = float(meta["peak_rss_mb"] or 0)
        task_s = max(meta["engine"]["task_seconds"]) if "engine" in meta else None
        threads = meta["threads_per_worker"]
        extra_out["findings"] = len(doc["findings"])
        extra_out["failed"] = sum(f["status"] == "fail" for f in doc["findings"])
    Path(out_json).write_text(json.dumps({"kind": kind, "seconds": dt, "bytes": nbytes, "samples": n, "rc": rc,
                                          "maxrss_mb": vm_hwm_mb(), "maxrss_after_imports_mb": rss0,
                                          "maxrss_workers_mb": workers_peak if ":" in kind else 0.0,
                                          "task_seconds_max": task_s, "threads": threads, **extra_out}))


def vm_hwm_mb() -> float:
    """Peak RSS of this process (VmHWM; ru_maxrss would include the forking parent's peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- driver --------------------------------------------------------------------------------------


def run_child(kind: str, ds: dict, tmp: Path) -> dict:
    if kind.endswith("@cluster"):
        with RayHead():
            return _run_child(kind, ds, tmp)
    return _run_child(kind, ds, tmp)


def _run_child(kind: str, ds: dict, tmp: Path) -> dict:
    out = tmp / f"child-{kind.replace(':', '').replace('@', '-')}-{ds['H']}.json"
    env = dict(os.environ)
    if kind.endswith("@base"):
        env["BENCH_TREE"] = BASELINE["tree"]
    subprocess.run([sys.executable, str(HERE), "--child", kind, ds["dir"], ds["contract"], str(out)], check=True,
                   env=env)
    r = json.loads(out.read_text())
    r["gb_per_s"] = r["bytes"] / 1e9 / r["seconds"]
    r["samples_per_s"] = r["samples"] / r["seconds"]
    return r


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, {platform.system()} {platform.release()}"


KINDS = ["raw", "raw-read", "speculators", "check-data", "check-data-1cpu", "check-data:2", "check-data:2@cluster",
         "checks"]
WARM_ONLY = ("checks",)  # per-step timing reads cached data: a cold run would charge the disk to the first step
BASELINE: dict[str, str] = {}  # {"tree": path} with --baseline


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/bench_check_data", help="scratch directory (deleted unless --keep)")
    ap.add_argument("--gb", type=float, default=3.5, help="total dataset size in GB over both widths")
    ap.add_argument("--widths", default="4096,7168", help="hidden sizes H, comma-separated")
    ap.add_argument("--json", default=None, help="results file (default OUT/results.json)")
    ap.add_argument("--keep", action="store_true", help="keep the synthetic data")
    ap.add_argument("--reuse", action="store_true", help="scan the data a --keep run left in --out (same --gb)")
    ap.add_argument("--readers", default=",".join(KINDS), help=f"readers, comma-separated (default {','.join(KINDS)})")
    ap.add_argument("--baseline", default=None, metavar="TREE",
                    help="also run check-data and checks importing eagle3_conformance from this source tree "
                         "(check-data@base, checks@base): before and after in one run")
    ap.add_argument("--cold", choices=("fadvise", "drop_caches", "none"), default="fadvise",
                    help="how a cold run starts: the dataset's files evicted (default), the whole page cache "
                         "dropped (root), or no cold runs")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds per reader (each round runs every reader once, in turn); the median round "
                         "is reported, with the spread (default 1)")
    ap.add_argument("--child", nargs=4, metavar=("KIND", "DATA", "CONTRACT", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.kinds = [k for k in a.readers.split(",") if k]
    unknown = set(a.kinds) - set(KINDS)
    if unknown:
        ap.error(f"unknown readers {sorted(unknown)}; known: {KINDS}")
    if a.baseline:
        if not (Path(a.baseline) / "eagle3_conformance" / "__init__.py").is_file():
            ap.error(f"--baseline {a.baseline}: no eagle3_conformance package there")
        BASELINE["tree"] = str(Path(a.baseline).resolve())
        a.kinds += [f"{k}@base" for k in ("check-data", "checks") if k in a.kinds]
    return a


def datasets_for(a: argparse.Namespace, out: Path) -> list[dict]:
    widths = [int(x) for x in a.widths.split(",")]
    found = []
    for k, H in enumerate(widths):
        root = out / f"h{H}"
        if a.reuse and (root / "dataset_info.json").is_file():
            files = list((root / "hidden_states").glob("hs_*.safetensors"))
            sizes = [p.stat().st_size for p in files]
            ds = {"dir": str(root), "contract": str(out / f"h{H}.yaml"), "H": H, "samples": len(files),
                  "bytes": sum(sizes), "largest_shard_bytes": max(sizes)}
        else:
            t = time.perf_counter()
            ds = build_dataset(root, H, int(a.gb * 1e9 / len(widths)), seed=k)
            for p in dataset_files(ds):  # written back once, so a cold run's eviction has nothing dirty to wait for
                fd = os.open(p, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
            print(f"built h{H}: {ds['samples']} samples, {ds['bytes'] / 1e9:.2f} GB, largest shard "
                  f"{ds['largest_shard_bytes'] / 1e6:.0f} MB ({time.perf_counter() - t:.0f} s)", flush=True)
        found.append(ds)
    return found


def measure(a: argparse.Namespace, results: dict, out: Path) -> None:
    """Every reader on every dataset, cold then warm, ``a.repeat`` interleaved rounds; the median round kept."""
    ds0 = results["datasets"][0]
    cold_ok = a.cold != "none" and make_cold(a.cold, ds0)
    results["cold_cache"] = a.cold if cold_ok else None
    results["resident_after_eviction"] = resident_share(ds0) if cold_ok else None
    modes = (["cold"] if cold_ok else []) + ["warm"]
    for mode in modes:
        kinds = [k for k in a.kinds if not (mode == "cold" and k.split("@")[0] in WARM_ONLY)]
        for ds in results["datasets"]:
            if mode == "warm":
                run_child("raw", ds, out)  # bring every file into the page cache
            rounds: dict[str, list[dict]] = {k: [] for k in kinds}
            for rnd in range(a.repeat):  # rounds interleave the readers: drift hits all alike
                for kind in kinds:
                    if mode == "cold":
                        make_cold(a.cold, ds)
                    r = run_child(kind, ds, out)
                    rounds[kind].append(r)
                    print(f"  {mode} h{ds['H']} {kind:20s} round {rnd + 1}: {r['gb_per_s']:.2f} GB/s  "
                          f"rss {r['maxrss_mb']:.0f} MB", flush=True)
            for kind in kinds:
                rs = sorted(rounds[kind], key=lambda x: x["seconds"])
                r = dict(rs[len(rs) // 2])  # the median round (by seconds)
                r.update(mode=mode, H=ds["H"], largest_shard_mb=ds["largest_shard_bytes"] / 1e6,
                         seconds_all=[x["seconds"] for x in rounds[kind]],
                         maxrss_mb=max(x["maxrss_mb"] for x in rs),
                         maxrss_workers_mb=max(x["maxrss_workers_mb"] for x in rs))
                if "steps" in r:  # per step: the median over the rounds
                    r["steps"] = {k: sorted(x["steps"].get(k, 0.0) for x in rs)[len(rs) // 2] for k in r["steps"]}
                results["runs"].append(r)


def ratios(results: dict) -> None:
    def find(r, kind):
        return next((x for x in results["runs"] if x["mode"] == r["mode"] and x["H"] == r["H"] and x["kind"] == kind),
                    None)

    for r in results["runs"]:
        raw, read, one = find(r, "raw"), find(r, "raw-read"), find(r, "check-data")
        r["ratio_to_raw"] = r["gb_per_s"] / raw["gb_per_s"] if raw else None
        r["ratio_to_raw_read"] = r["gb_per_s"] / read["gb_per_s"] if read else None
        if one is not None and r["kind"].startswith("check-data:"):
            r["ratio_to_one_worker"] = one["seconds"] / r["seconds"]
            if r.get("task_seconds_max"):
                r["task_ratio_to_one_worker"] = one["seconds"] / r["task_seconds_max"]
        rss = max(r["maxrss_mb"], r["maxrss_workers_mb"])
        r["rss_target_mb"] = r["largest_shard_mb"] + 512
        r["rss_ok"] = rss <= r["rss_target_mb"]
        if r["kind"] in ("check-data", "check-data@base"):
            goal, x = ((GOAL_WARM_X_RAW_READ, r["ratio_to_raw_read"]) if r["mode"] == "warm"
                       else (GOAL_COLD_X_RAW, r["ratio_to_raw"]))
            r["goal"] = {"vs": "raw-read" if r["mode"] == "warm" else "raw", "at_least": goal, "ratio": x,
                         "met": x is not None and x >= goal}


def main() -> int:
    a = parse_args()
    if a.child:
        child(*a.child)
        return 0
    out = Path(a.out)
    if out.exists() and not a.reuse:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    results = {"machine": machine(), "torch_threads": None, "datasets": [], "runs": [], "repeat": a.repeat,
               "readers": a.kinds, "baseline": BASELINE.get("tree"), "load_before": os.getloadavg()}
    try:
        sys.path.insert(0, str(HERE.parent.parent))
        from eagle3_conformance.environment import torch_env

        torch_env.prepare()
        import torch

        results["torch_threads"] = torch.get_num_threads()
        results["datasets"] = datasets_for(a, out)
        measure(a, results, out)
        results["load_after"] = os.getloadavg()
        ratios(results)
        print_table(results)
        print_steps(results)
        print_goals(results)
        dest = Path(a.json) if a.json else out / "results.json"
        dest.write_text(json.dumps(results, indent=1))
        print(f"results: {dest}")
    finally:
        if not a.keep:
            for ds in results["datasets"]:
                shutil.rmtree(ds["dir"], ignore_errors=True)
    return 0


def _f(v, fmt: str = ".2f") -> str:
    return "" if v is None else format(v, fmt)


def print_table(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    how = {"fadvise": "cold (the dataset's files evicted: posix_fadvise DONTNEED) and warm",
           "drop_caches": "cold (drop_caches) and warm", None: "warm only"}[results.get("cold_cache")]
    t = Table(title=f"check-data throughput ({results['machine']}; cache {how}; median of {results['repeat']} "
                    f"round(s); load {results['load_before'][0]:.1f} before, {results['load_after'][0]:.1f} after)")
    for col in ("cache", "H", "reader", "threads", "GB", "s", "s min-max", "GB/s", "samples/s", "x raw", "x raw-read",
                "task s", "x 1 worker", "tasks x 1 worker", "peak RSS MB", "target MB", "RSS ok", "failed findings"):
        t.add_column(col, justify="right" if col not in ("cache", "reader") else "left",
                     no_wrap=col == "reader")
    for r in results["runs"]:
        rss = max(r["maxrss_mb"], r["maxrss_workers_mb"])
        t.add_row(r["mode"], str(r["H"]), r["kind"], "+".join(str(x) for x in r.get("threads") or []),
                  f"{r['bytes'] / 1e9:.2f}", f"{r['seconds']:.2f}",
                  f"{min(r['seconds_all']):.2f}-{max(r['seconds_all']):.2f}",
                  f"{r['gb_per_s']:.2f}", f"{r['samples_per_s']:.1f}", _f(r["ratio_to_raw"]),
                  _f(r["ratio_to_raw_read"]), _f(r.get("task_seconds_max")), _f(r.get("ratio_to_one_worker")),
                  _f(r.get("task_ratio_to_one_worker")), f"{rss:.0f}", f"{r['rss_target_mb']:.0f}",
                  "yes" if r["rss_ok"] else "NO", "" if "failed" not in r else f"{r['failed']}/{r['findings']}")
    Console(width=None if sys.stdout.isatty() else 240).print(t)


def print_goals(results: dict) -> None:
    for r in results["runs"]:
        g = r.get("goal")
        if g:
            print(f"goal {r['mode']} H={r['H']} {r['kind']}: {_f(g['ratio'])}x {g['vs']} (goal >= {g['at_least']}): "
                  f"{'met' if g['met'] else 'NOT met'}")
    if results.get("resident_after_eviction") is not None:
        print(f"cold runs: {results['resident_after_eviction']:.1%} of the first dataset resident after eviction")


if __name__ == "__main__":
    sys.exit(main())
