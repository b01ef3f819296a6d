"""The GPU checks of issue 45's field reports that no CPU path here can carry (docs/field-reports-2026.md).
NEVER RUN ON A GPU (written without one, 2026-12): treat the first run as the measurement.

Runnable on one GPU with the project's SmolLM2-135M pair (``scripts/gpu-check.sh`` calls it):

- ``runtime`` (R89, R94 on CUDA): the ``sglang-engine`` column's draft-runtime faults through the real
  ``sglang.Engine`` on CUDA (``faults.engine_column``, ``device="cuda"``): ``draft-fp16-overflow`` must fail
  ``draft_logits_finite`` and ``draft_dtype``; ``draft-fp8-loaded-raw`` must fail ``draft_quantization``;
  and, what the CPU cannot build (SGLang's ``Fp8LinearMethod`` needs AMX on CPU), a correct FP8 checkpoint
  (``faults.engine_runtime.fp8_draft``: every linear weight FP8, none ignored) must be built quantized and
  pass ``draft_quantization``.
- ``prefill-graphs`` (R98: padded rows through a full prefill CUDA graph): the same pair eager (no CUDA
  graphs), with SGLang's default graphs, and with ``disable_prefill_cuda_graph``: the outputs must equal
  the eager run's (greedy); SGLang's ``spec_accept_length`` of each run is reported beside the eager run's,
  not gated (hooks never fire on graph replay: acceptance is the observable, as for R42; no constant
  gates graphed against eager acceptance until the spread is measured on a GPU, docs/gates.md).

Needs a model this repository cannot ship (set the variable, else the step is reported skipped):

- ``GPU_MTP_MODEL`` (R93): a DeepSeek-V4 checkpoint directory with its NextN layer. SGLang serves it with
  ``speculative_algorithm="NEXTN"``; a forward hook on the NextN model records
  ``forward_batch.spec_info.hidden_states``: its width must be ``hc_mult x hidden_size`` (the state before
  ``hc_head``, ``deepseek_v4_nextn.py:157-161``), never ``hidden_size`` (R93's single buffer, AL 1.09).

Prints one JSON object; exit 0 when every step that ran held, 1 otherwise, 2 when there is no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def runtime(c, td, prompts, work: Path) -> dict:
    from eagle3_conformance.faults.engine_column import FAULTS, EngineFault, run_engine_column
    from eagle3_conformance.faults.engine_runtime import fp8_draft

    good_fp8 = EngineFault("fp8-correct", "K12", "a correct FP8 draft checkpoint (baseline of R94 on CUDA)",
                           ("draft_quantization",), draft_dir=fp8_draft, dtype="bfloat16", runtime=True)
    faults = [f for f in FAULTS if f.name in ("draft-fp16-overflow", "draft-fp8-loaded-raw")] + [good_fp8]
    res = run_engine_column(c, td.target_dir, td.draft_dir, prompts, work, faults=faults, device="cuda",
                            log=lambda s: print(s, file=sys.stderr, flush=True))
    v, failed = res["verdicts"], res["failed_checks"]
    held = (v["draft-fp16-overflow"].status == "caught"
            and {"draft_logits_finite", "draft_dtype"} <= set(failed.get("draft-fp16-overflow", []))
            and v["draft-fp8-loaded-raw"].check == "draft_quantization"
            and "draft_quantization" not in failed.get("fp8-correct", ["missing"]))
    return {"held": held, "verdicts": {k: [x.status, x.check, x.detail[:300]] for k, x in v.items()},
            "failed_checks": failed, "timings": res["timings"]}


def prefill_graphs(td, prompts, work: Path) -> dict:
    from eagle3_conformance.tools.sglang_engine import run_engine
    from eagle3_conformance.tools.sglang_engine.captures import accept_figures

    runs = {}
    for name, graphs, extra in (("eager", False, {}), ("graphs", True, {}),
                                ("no-prefill-graph", True, {"server_args": {"disable_prefill_cuda_graph": True}})):
        r = run_engine(td.target_dir, td.draft_dir, prompts, device="cuda", max_new_tokens=64, observe=False,
                       cuda_graph=graphs, workdir=work / name, extra=extra)
        runs[name] = {"accept": accept_figures(r.outputs)["spec_accept_length"],
                      "outputs": [o["output_ids"] for o in r.outputs]}
    e, g = runs["eager"], runs["graphs"]
    held = g["outputs"] == e["outputs"]  # acceptance: reported, not gated (never measured on a GPU)
    return {"held": held, "accept": {k: x["accept"] for k, x in runs.items()},
            "outputs_equal": {k: x["outputs"] == e["outputs"] for k, x in runs.items()}}


def mtp_streams(model: Path, work: Path) -> dict:
    """R93 on a user's DeepSeek-V4 checkpoint: the NextN head's input width (hooks through ``forward_hooks``)."""
    from eagle3_conformance.tools.sglang_engine import run_engine

    cfg = json.loads((model / "config.json").read_text())
    d, hc = int(cfg["hidden_size"]), int(cfg.get("hc_mult", 1))
    out = work / "mtp-records"
    r = run_engine(model, model, [[1, 2, 3, 4, 5, 6, 7, 8]], device="cuda", max_new_tokens=8, observe=False,
                   workdir=work / "mtp", extra={"server_args": {
                       "speculative_algorithm": "NEXTN", "speculative_draft_model_path": None,
                       "forward_hooks": [{"name": "mtp-width", "target_modules": ["model"],
                                          "hook_factory": "scripts.gpu_field_check:width_recorder",
                                          "config": {"out": str(out)}}]}})
    widths = sorted({int(x) for x in (out / "widths.txt").read_text().split()}) if (out / "widths.txt").exists() else []
    return {"held": widths == [hc * d], "widths": widths, "want": hc * d, "hc_mult": hc, "d": d,
            "accept": r.outputs[0].get("meta_info", {}).get("spec_accept_length")}


def width_recorder(config: dict):
    """``forward_hooks`` factory for :func:`mtp_streams`: appends the width of the tensor an MTP / NextN
    model is handed (``spec_info.hidden_states``) to ``config["out"]/widths.txt``."""
    out = Path(config["out"])
    out.mkdir(parents=True, exist_ok=True)

    def hook(module, args, output):
        fb = args[2] if len(args) > 2 else None
        h = getattr(getattr(fb, "spec_info", None), "hidden_states", None)
        if h is not None and (hasattr(module, "h_proj") or hasattr(module, "eh_proj")):  # the NextN model only
            with open(out / "widths.txt", "a") as f:
                f.write(f"{int(h.shape[-1])}\n")
        return None

    return hook


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=4)
    a = ap.parse_args()
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.testbed.trained_draft import ensure_trained_draft, eval_prompts
    from eagle3_conformance.tools.sglang_engine import EngineStartError

    t0 = time.perf_counter()
    td = ensure_trained_draft()
    c = load_contract(REPO / "contracts" / "smollm2-135m.yaml")
    prompts = eval_prompts(td.target_dir, a.prompts, 48)
    work = Path(tempfile.mkdtemp(prefix="gpu-field-"))
    out: dict = {"never_run_on_a_gpu_before": True}
    try:
        out["runtime"] = runtime(c, td, prompts, work / "runtime")
        out["prefill_graphs"] = prefill_graphs(td, prompts, work / "prefill")
        model = os.environ.get("GPU_MTP_MODEL")
        out["mtp_streams"] = mtp_streams(Path(model), work) if model else {
            "skipped": "GPU_MTP_MODEL is not set (a DeepSeek-V4 checkpoint with its NextN layer)"}
    except EngineStartError as e:
        print(json.dumps({**out, "error": e.reason, "log_tail": e.log_tail}, indent=1, default=str))
        return 2
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=1, default=str))
    return 0 if all(v.get("held", True) for v in out.values() if isinstance(v, dict)) else 1


if __name__ == "__main__":
    sys.exit(main())
