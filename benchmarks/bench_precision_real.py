"""Production precision on a real model (issue 23): data produced in bfloat16 from the float32
SmolLM2-135M checkpoint, judged by ``check-data`` against the float32 reference, plain and through
hs-connectors FP8 (docs/gates.md, "Production precision").

Data: the ``smollm2-135m`` fixture's speculators dataset (float32 forward, stored bf16) and the
``smollm2-135m-bf16`` fixture's (a bfloat16 forward of the same weights, which is what vLLM's and
SGLang's ``dtype="auto"`` serve a float32 checkpoint as). FP8 copies are written file by file with
:func:`eagle3_conformance.testbed.datagen.hs_payload` (byte-identical to ``FP8HiddenStatesConnector._write_tensors``:
tests/test_precision.py). Each run is ``check-data CONTRACT --data D --reference <float32 target>
--sample -1`` with the fixture contract plus ``precision.training`` (and ``training.transfer: fp8``);
a last run adds the FP8 scale fault (one value of B_L at a middle token of every sample at
``OUTLIER_RATIO`` x slot 0's RMS, faults/operators/dtype.py) to the float32 FP8 data.

Prints per run: exit code, samples judged, min / median / max of the per-sample median row angle
(deg), failing findings per check, the diagnoses' kinds, wall time. Expected: plain bf16 under float32
-> exit 1, one diagnosis ``production-precision``; under bfloat16 -> exit 0, 0 failures; FP8 of float32 ->
exit 0; FP8 of bf16 under float32 -> ``production-precision`` only; under bfloat16 -> exit 0; the scale
fault -> ``fp8-transport``, no ``production-precision``.

Usage: python benchmarks/bench_precision_real.py [--out DIR]
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import tempfile
import time
from pathlib import Path


def _fp8_copy(src: Path, dst: Path, outlier: bool = False) -> Path:
    from safetensors.torch import load_file, save_file

    from eagle3_conformance.faults.operators.dtype import OUTLIER_RATIO
    from eagle3_conformance.testbed.datagen import hs_payload

    shutil.copytree(src, dst)
    for p in sorted((dst / "hidden_states").glob("hs_*.safetensors")):
        t = load_file(str(p))
        hs = t["hidden_states"].clone()
        if outlier:
            k = hs.shape[0] // 2
            hs[k, -1, 0] = OUTLIER_RATIO * float(hs[k, 0].float().pow(2).mean().sqrt())
        save_file(hs_payload(hs, t["token_ids"], "fp8"), str(p))
    return dst


def _contract(base: str, out: Path, precision: str, transfer: str) -> Path:
    text = base.replace("\ndata_dtype:", f"\nprecision:\n  training: {precision}\ndata_dtype:", 1)
    if transfer == "fp8":
        text += "training:\n  transfer: fp8\n"
    p = out / f"smollm2-{precision}-{transfer}.yaml"
    p.write_text(text)
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="keep the data and reports here (default: a temp dir)")
    a = ap.parse_args()
    from eagle3_conformance.cli import main as cli
    from eagle3_conformance.testbed.fixtures import REPO_ROOT, build_fixture

    f32, b16 = build_fixture("smollm2-135m"), build_fixture("smollm2-135m-bf16")
    base = (REPO_ROOT / "contracts" / "smollm2-135m.yaml").read_text()
    assert "\ntraining:" not in base and "\nprecision:" not in base
    with tempfile.TemporaryDirectory() as tmp:
        out = a.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        runs = [("plain bf16-forward", b16.data_dir, "float32", "file"),
                ("plain bf16-forward", b16.data_dir, "bfloat16", "file"),
                ("fp8 float32-forward", _fp8_copy(f32.data_dir, out / "fp8-f32"), "float32", "fp8"),
                ("fp8 bf16-forward", _fp8_copy(b16.data_dir, out / "fp8-bf16"), "float32", "fp8"),
                ("fp8 bf16-forward", out / "fp8-bf16", "bfloat16", "fp8"),
                ("fp8 float32-forward + scale fault", _fp8_copy(f32.data_dir, out / "fp8-f32-outlier", True),
                 "float32", "fp8")]
        for i, (name, data, precision, transfer) in enumerate(runs):
            rep = out / f"r{i}.json"
            t0 = time.perf_counter()
            rc = cli(["check-data", str(_contract(base, out, precision, transfer)), "--data", str(data), "--quiet",
                      "--json", str(rep), "--reference", str(f32.target_dir), "--sample", "-1"])
            dt = time.perf_counter() - t0
            doc = json.loads(rep.read_text())
            pp = sorted(f["observed"]["median_row_angle_deg"] for f in doc["findings"]
                        if f["check"] == "production_precision" and f["observed"])
            fails = collections.Counter(f["check"] for f in doc["findings"] if f["status"] == "fail")
            span = f"{pp[0]:.3f} / {pp[len(pp) // 2]:.3f} / {pp[-1]:.3f}" if pp else "-"
            print(f"{name:34} precision.training {precision:8} transfer {transfer:4}: exit {rc}, {len(pp)} samples, "
                  f"median row angle min/med/max {span} deg, failures {dict(fails) or 0}, "
                  f"diagnoses {[d['kind'] for d in doc['diagnoses']]}, {dt:.0f} s", flush=True)


if __name__ == "__main__":
    main()
