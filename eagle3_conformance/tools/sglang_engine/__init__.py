"""The real ``sglang.Engine`` with its EAGLE-3 worker, on CPU (config B of
docs/REFERENCE.md section 4.1) or CUDA, one code path; observed through SGLang's own
``forward_hooks``.

- :mod:`.launch`: :func:`run_engine` starts the driver (:mod:`.driver`) in its own process group with
  the recipe's environment, always reaps it, bounds start and generation with timeouts;
- :mod:`.bootstrap` + ``site/sitecustomize.py``: what every spawned process loads (torchvision
  shim; on CPU the guards, :mod:`.sgl_kernel_standin` and :mod:`.patches`);
- :mod:`.guards`: exact SGLang version and source digests of everything a stand-in serves;
- :mod:`.hooks`: the ``forward_hooks`` factory recording what enters the draft;
- :mod:`.captures`: records -> Captures, SGLang's acceptance counters;
- :func:`observe_engine`: one observed run with the reference greedy decode, for the path;
  :func:`start_engine` starts that run ahead (:mod:`.ahead`), so it overlaps what runs before it;
- :mod:`.shared`: one engine start for several callers' phases of the same engine configuration
  (``observe_engine(..., share=NAME)``, ``variations.run_variations(..., share=True)``).

"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from eagle3_conformance.tools.sglang_engine.launch import EngineRun, EngineRunError, EngineStartError, run_engine

if TYPE_CHECKING:
    from eagle3_conformance.tools.sglang_engine.ahead import EngineJob

__all__ = ["EngineRun", "EngineRunError", "EngineStartError", "EngineObservation", "observe_engine", "run_engine",
           "start_engine"]

# No constant gates graphed against eager acceptance: the spread was never measured on a GPU (the CUDA
# route is prepared, never run on a GPU). ``graph_acceptance`` reports both figures without judging them
# (checks/facts.py); scripts/gpu_accept.sh gates them with ``accept``'s baseline rule (docs/accept.md).


@dataclass
class EngineObservation:
    """One observed engine run: captures, SGLang's counters, losslessness."""

    run: EngineRun
    extend: list
    decode: list
    acceptance: dict[str, Any]
    lossless: dict[str, Any]
    extra_facts: dict[str, Any] = field(default_factory=dict)
    engine_reference: Any = None  # eagle3_conformance.reference.engine.EngineReference, when recorded


def reference_greedy(target_dir, prompts: list[list[int]], max_new_tokens: int, dtype: str) -> list[list[int]]:
    """The target's own greedy decode of each prompt (:func:`eagle3_conformance.reference.greedy.target_greedy`)."""
    from eagle3_conformance.reference.greedy import target_greedy

    return target_greedy(target_dir, prompts, max_new_tokens, dtype)


def observe_engine(target_dir, draft_dir, prompts: list[list[int]], *, dtype: str = "float32",
                   max_new_tokens: int = 32, device: str = "cpu", lossless: bool = True,
                   job: "Optional[EngineJob]" = None, **kw) -> EngineObservation:
    """Run the engine with the hooks, build the captures, compare with the target's greedy decode.
    With CUDA also a graphed run (acceptance only) -> ``extra_facts["graph_acceptance"]``.

    ``reference=`` (a dict: the hooks' ``reference`` config) also records the target's boundaries;
    ``reference_builder=`` (``(records, prompts, outputs) -> reference``, the caller's: the engine tools
    judge nothing, e.g. :func:`eagle3_conformance.reference.engine.build_engine_reference`) turns them
    into ``engine_reference``. ``lossless=False``: no transformers greedy decode (a target that does not
    fit twice). ``job``: the same run started ahead by :func:`start_engine` with the same arguments (its
    result is taken instead of starting the engine here; its folder is removed after). ``share=NAME``: the
    batch is one phase of an engine run shared with other callers of the same configuration
    (:func:`.shared.run_batch`; the captures, counters and losslessness are this batch's alone).

    Raises:
        EngineStartError / EngineRunError: see :func:`run_engine`.
    """
    import shutil
    import tempfile

    if job is not None:
        try:
            return _observe(target_dir, draft_dir, prompts, dtype, max_new_tokens, device, kw, lossless, job)
        finally:
            job.discard()
    own = kw.get("workdir") is None
    if own:
        kw["workdir"] = Path(tempfile.mkdtemp(prefix="sglang-engine-"))
    try:
        return _observe(target_dir, draft_dir, prompts, dtype, max_new_tokens, device, kw, lossless)
    finally:
        if own:
            shutil.rmtree(kw["workdir"], ignore_errors=True)


def start_engine(target_dir, draft_dir, prompts: list[list[int]], *, dtype: str = "float32",
                 max_new_tokens: int = 32, device: str = "cpu", **kw) -> "EngineJob":
    """The engine run :func:`observe_engine` makes with these arguments, started now in the background
    (:class:`.ahead.EngineJob`); hand it to :func:`observe_engine` as ``job=`` with the same arguments.
    ``reference_builder`` and ``lossless`` are :func:`observe_engine`'s alone (ignored here)."""
    from eagle3_conformance.tools.sglang_engine.ahead import EngineJob, Job
    from eagle3_conformance.tools.sglang_engine.shared import run_batch

    kw = _run_kwargs(dict(kw))
    kw.pop("workdir", None)
    if kw.get("share"):
        return Job(run_batch, target_dir, draft_dir, prompts, device=device, dtype=dtype,  # type: ignore[return-value]
                   max_new_tokens=max_new_tokens, **kw)
    return EngineJob(target_dir, draft_dir, prompts, device=device, dtype=dtype, max_new_tokens=max_new_tokens, **kw)


def _run_kwargs(kw: dict) -> dict:
    """``run_engine``'s keyword arguments from :func:`observe_engine`'s (``reference`` narrowed to what
    the hooks read; ``reference_builder``, ``lossless`` dropped)."""
    ref_cfg = kw.pop("reference", None)
    kw.pop("reference_builder", None)
    kw.pop("lossless", None)
    if not kw.get("share"):
        kw.pop("share", None)
    if ref_cfg:
        kw["reference"] = {k: ref_cfg[k] for k in ("boundaries", "max_rows", "max_bytes", "prefix") if k in ref_cfg}
    return kw


def _observe(target_dir, draft_dir, prompts, dtype, max_new_tokens, device, kw, want_lossless=True,
             job: "Optional[EngineJob]" = None) -> EngineObservation:
    import time

    from eagle3_conformance.tools.sglang_engine.captures import accept_figures, build_captures, load_records

    ref_cfg = kw.get("reference")
    builder = kw.get("reference_builder")
    kw = _run_kwargs(dict(kw))
    if job is not None:
        run = job.result()
        kw["workdir"] = job.workdir
    else:
        from eagle3_conformance.tools.sglang_engine.shared import run_batch

        run = (run_batch if kw.get("share") else run_engine)(target_dir, draft_dir, prompts, device=device,
                                                              dtype=dtype, max_new_tokens=max_new_tokens, **kw)
    outs = [o["output_ids"] for o in run.outputs]
    prov = {"engine": "sglang.Engine", "sglang": run.sglang_version, "device": device,
            "attention": "torch_native (config B)" if device == "cpu" else "default",
            "engine_timings": {k: round(v, 2) for k, v in run.timings.items()}}
    assert run.records_dir is not None  # an observed run (run_engine's observe=True) writes records
    records = load_records(run.records_dir)
    extend, decode = build_captures(records, prompts, outs, prov)
    eref = None
    if ref_cfg and builder is not None:
        t0 = time.perf_counter()
        eref = builder(records, prompts, outs)
        eref.stats["build_s"] = time.perf_counter() - t0
    acc = accept_figures(run.outputs)
    lossless: dict[str, Any]
    if not want_lossless:
        lossless = {"skip": "losslessness not judged: no transformers copy of the target (reference: engine, "
                            "target served at the contract's dtype)"}
    elif dtype == "float32":
        t0 = time.perf_counter()
        lossless = {"engine": outs, "reference": reference_greedy(target_dir, prompts, max_new_tokens, dtype)}
        run.timings["reference_greedy_s"] = time.perf_counter() - t0
    else:
        lossless = {"skip": f"{dtype}: not a losslessness oracle (near-tie flips); float32 only"}
    extra = runtime_facts(run, draft_dir, device)
    if device == "cuda":
        kw.pop("share", None)
        gkw = dict(kw, workdir=Path(kw["workdir"]) / "graphed") if kw.get("workdir") else kw
        graphed = run_engine(target_dir, draft_dir, prompts, device=device, dtype=dtype,
                             max_new_tokens=max_new_tokens, observe=False, cuda_graph=True, **gkw)
        extra["graph_acceptance"] = {"eager": acc["spec_accept_length"],
                                     "graphed": accept_figures(graphed.outputs)["spec_accept_length"]}
    return EngineObservation(run, extend, decode, acc, lossless, extra, eref)


def runtime_facts(run: EngineRun, draft_dir, device: str) -> dict[str, Any]:
    """The draft's runtime facts of one observed run (:mod:`.runtime`): ``draft_runtime`` (its dtype, its
    logits' finiteness) and ``draft_quantization`` (the checkpoint's declaration against what SGLang
    built); left out when the run recorded no draft forward."""
    from eagle3_conformance.tools.sglang_engine.runtime import draft_quantization, draft_runtime, load_runtime

    recs = load_runtime(run.records_dir)
    engine = f"sglang {run.sglang_version} ({device})"
    out = {"draft_runtime": draft_runtime(recs, engine), "draft_quantization": draft_quantization(recs, draft_dir, engine)}
    return {k: v for k, v in out.items() if v is not None}
