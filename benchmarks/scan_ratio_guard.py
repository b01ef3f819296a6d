"""CI's guard on check-data's speed (issue 42): a ratio measured side by side in one process, never a time.

    python benchmarks/scan_ratio_guard.py [--mb 400] [--rounds 5] [--min-ratio 0.45] [--tree DIR] [--json FILE]

Writes a synthetic speculators dataset of about ``--mb`` MB (``bench_check_data.build_dataset``: H = 4096,
``hidden_states`` [T <= 4096, 4, H] bf16, a contract with calibrated norm bands), reads it once so the page
cache is warm, runs ``check-data`` once untimed (first-call imports), then ``--rounds`` rounds, each
alternating ``--per-round`` times, in this one process, between:

- the read touching every byte: every ``hs_{i}.safetensors`` read whole into one reusable 16 MiB buffer
  (``readinto``; ``raw-read`` of bench_check_data.py);
- ``eagle3-conformance check-data CONTRACT --data DIR --no-reference --sample 0 --quiet --json FILE`` (the
  command's ``main``, every cheap check on every row and slot, norm bands on; one worker, its default threads).

The ratio of a round is the read's seconds over check-data's, each reader's fastest of the round (1.0:
check-data as fast as copying every byte once; the fastest, since on a shared machine other jobs only add
time). The median round's ratio must be at least ``--min-ratio`` (default 0.45, half of issue 42's goal of
0.9); exit 0 when it is, 1 when it is not (or when check-data does not find the synthetic data conforming),
2 on a usage error. ``--tree DIR`` imports ``eagle3_conformance`` from another source tree (``git archive
REV | tar -x -C DIR``): the ratio a past revision gives. The data is deleted afterwards unless ``--keep``;
``--json`` writes every round.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
GOAL = 0.9  # issue 42: check-data >= 0.9x the read touching every byte, warm
MIN_RATIO = GOAL / 2


def _bench():
    spec = importlib.util.spec_from_file_location("bench_check_data", HERE.parent / "bench_check_data.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def read_every_byte(files: list[Path], buf: memoryview) -> None:
    for p in files:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def check_data(main, contract: str, data: str, report: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return main(["check-data", contract, "--data", data, "--no-reference", "--sample", "0", "--quiet",
                     "--json", report])


def rounds(files: list[Path], contract: str, data: str, n: int, k: int, tmp: Path) -> list[dict]:
    """``n`` rounds, each ``k`` alternations of (read every byte, check-data), warm, in this process; a
    round's seconds per reader are its fastest of the ``k`` (what the reader costs when nothing else on a
    shared machine interrupts it)."""
    from eagle3_conformance.cli import build_parser, main

    build_parser()
    buf = memoryview(bytearray(16 << 20))
    read_every_byte(files, buf)  # the page cache warm
    report = str(tmp / "report.json")
    rc = check_data(main, contract, data, report)  # first call: the command's own imports, untimed
    out = []
    for _ in range(n):
        t_read, t_check = [], []
        for _ in range(k):
            t = time.perf_counter()
            read_every_byte(files, buf)
            t_read.append(time.perf_counter() - t)
            t = time.perf_counter()
            rc = max(rc, check_data(main, contract, data, report))
            t_check.append(time.perf_counter() - t)
        out.append({"read_s": min(t_read), "check_data_s": min(t_check), "ratio": min(t_read) / min(t_check),
                    "rc": rc})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=400, help="dataset size in MB (default 400)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; the median round is judged (default 5)")
    ap.add_argument("--per-round", type=int, default=3,
                    help="alternations of the two readers in a round; each reader's fastest counts (default 3)")
    ap.add_argument("--min-ratio", type=float, default=MIN_RATIO,
                    help=f"the least median ratio that passes (default {MIN_RATIO}: half of the goal {GOAL})")
    ap.add_argument("--tree", default=None, help="import eagle3_conformance from this source tree")
    ap.add_argument("--out", default=None, help="where the data is written (default a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the data (and reuse it when --out holds it)")
    ap.add_argument("--json", default=None, help="write the rounds and the verdict here")
    a = ap.parse_args(argv)
    if a.rounds < 1 or a.per_round < 1 or a.mb <= 0:
        ap.error("--rounds and --per-round must be >= 1, --mb > 0")
    tree = Path(a.tree).resolve() if a.tree else HERE.parent.parent
    if not (tree / "eagle3_conformance" / "__init__.py").is_file():
        ap.error(f"--tree {tree}: no eagle3_conformance package there")
    sys.path.insert(0, str(tree))
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    import eagle3_conformance

    tmp = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="scan-ratio-"))
    root = tmp / "h4096"
    try:
        if not (root / "dataset_info.json").is_file():
            shutil.rmtree(root, ignore_errors=True)
            tmp.mkdir(parents=True, exist_ok=True)
            _bench().build_dataset(root, 4096, int(a.mb * 1e6), seed=0)
        files = sorted((root / "hidden_states").glob("hs_*.safetensors"))
        nbytes = sum(p.stat().st_size for p in files)
        rs = rounds(files, str(tmp / "h4096.yaml"), str(root), a.rounds, a.per_round, tmp)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    med = statistics.median(r["ratio"] for r in rs)
    ok = med >= a.min_ratio and rs[-1]["rc"] == 0
    print(f"check-data vs the read touching every byte, warm, one process ({nbytes / 1e6:.0f} MB, "
          f"{eagle3_conformance.__file__}, load {os.getloadavg()[0]:.1f}):")
    for i, r in enumerate(rs, 1):
        print(f"  round {i}: read {nbytes / 1e9 / r['read_s']:6.2f} GB/s  check-data "
              f"{nbytes / 1e9 / r['check_data_s']:6.2f} GB/s  ratio {r['ratio']:.2f}")
    spread = f"{min(r['ratio'] for r in rs):.2f}-{max(r['ratio'] for r in rs):.2f}"
    verdict = "ok" if ok else "FAILED"
    why = "" if rs[-1]["rc"] == 0 else f" (check-data exited {rs[-1]['rc']} on conforming data)"
    print(f"median ratio {med:.2f} (rounds {spread}); at least {a.min_ratio:.2f} required: {verdict}{why}")
    if a.json:
        Path(a.json).write_text(json.dumps({"bytes": nbytes, "tree": str(tree), "rounds": rs, "median": med,
                                            "min_ratio": a.min_ratio, "ok": ok}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
