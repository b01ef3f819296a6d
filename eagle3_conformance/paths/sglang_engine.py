"""``sglang-engine``: the real ``sglang.Engine`` (EAGLE3, topk 1), observed through SGLang's own
``forward_hooks`` (:mod:`eagle3_conformance.tools.sglang_engine`).

One engine start per contract (shared with any other caller of the same engine configuration that asks
before the engine is up, :mod:`eagle3_conformance.tools.sglang_engine.shared`: in the main job,
``sglang-engine-invariance``'s base run; this path gets back its own batch alone) and one batch of held-out
corpus prompts
(``CONFORMANCE_ENGINE_PROMPTS``, default 4, of 48 tokens, ``CONFORMANCE_ENGINE_TOKENS`` new tokens,
default 32; 3 draft steps, 4 draft tokens). What reaches the draft is judged by every capture check:
the draft extend after prefill (rows of the prompt) and the draft extends after verify that accepted
a draft token, plus each request's first and last (:func:`judged_decode`; all of them with
``CONFORMANCE_ENGINE_ALL_DECODE=1``, as the slow tier's engine column does). Facts: SGLang's own acceptance counters (``completion_tokens /
spec_verify_ct``, gated on ``gates.min_accept_length``; per-position acceptance from
``spec_correct_drafts_histogram`` in the finding's locator), and losslessness against the target's
greedy decode (float32).

On CPU it runs config B of docs/REFERENCE.md section 4.1 (stand-ins, no GPU) for the pair with a
trained draft (:data:`eagle3_conformance.testbed.trained_draft.TRAINED`, float32), and for a user's pair
(a contract whose ``target.path`` and ``draft.path`` are local, the draft with safetensors weights). With CUDA (prepared, never
run on a GPU) it runs the pair twice: eager with hooks (every check) and with CUDA graphs (acceptance only:
hooks never fire on graph replay), and reports graphed beside eager acceptance (``graph_acceptance``, the R42
class) without gating it: their spread was never measured, so no constant may judge it.

The reference the captures are judged against is the contract's ``reference`` (pytest
``--conformance-reference`` overrides it): ``transformers`` (the project's own forward of the target,
the independent oracle) or ``engine`` (the target's boundaries recorded by the same forward_hooks in
the same forward, docs/engine-reference.md); the ``reference`` fact says which judged. A contract
served at float16/bfloat16 (SGLang's ``dtype=auto`` for a float32 checkpoint, as ``init`` writes it)
runs here, on CPU, at float32 and says so in the ``lossless`` finding: the losslessness oracle holds
only in float32 (near-tie flips in half precision), and the capture gates of the contract's dtype are
looser than float32's. A contract with ``engines.sglang_pp_size > 1`` does not run: SGLang refuses
EAGLE-3 aux capture with pipeline parallelism (:func:`eagle3_conformance.contract.pipeline_refusal`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path as _FsPath
from typing import Any

from eagle3_conformance.paths.base import Needs, Observation, Path, Skipped, engine_device, engine_pair, run_dtype

__all__ = ["PATH", "run_dtype", "reference_config", "reference_builder", "judged_decode"]

PROMPT_TOKENS = 48
PATH_NAME = "sglang-engine"


@dataclass
class _State:
    contract: Any
    observation: Any  # eagle3_conformance.tools.sglang_engine.EngineObservation
    reference: str = "transformers"
    note: str = ""
    run_dtype: str = ""
    draft_dir: Any = None


@dataclass(frozen=True)
class _Run:
    """The engine run a contract asks for: what :func:`prepare` (and :func:`warm`, ahead of it) hands
    :func:`eagle3_conformance.tools.sglang_engine.observe_engine`."""

    target_dir: Any
    draft_dir: Any
    prompts: Any  # list[list[int]]
    dtype: str
    note: str
    max_new_tokens: int
    device: str
    reference: Any  # reference_config(...) or None
    extra: Any  # driver spec extras or None

    def key(self) -> str:
        import json

        return json.dumps([str(self.target_dir), str(self.draft_dir), self.prompts, self.dtype, self.max_new_tokens,
                           self.device, self.reference, self.extra], sort_keys=True, default=str)

    def kwargs(self) -> dict:
        return {"dtype": self.dtype, "max_new_tokens": self.max_new_tokens, "device": self.device,
                "reference": self.reference, "extra": self.extra, "share": PATH_NAME}


def _planned(c, pair) -> "_Run | Skipped":
    """The run :func:`prepare` makes for ``c`` (or why it makes none)."""
    from eagle3_conformance.contract import pipeline_refusal
    from eagle3_conformance.testbed.trained_draft import eval_prompts

    got = engine_pair(c, pair, "sglang-engine")
    if isinstance(got, Skipped):
        return got
    refused = pipeline_refusal(c.engines.sglang_pp_size, c.method)
    if refused:
        return Skipped(f"sglang-engine: {refused}")
    device = engine_device()
    dtype, note = run_dtype(c, device)
    target_dir, draft_dir = got
    n = int(os.environ.get("CONFORMANCE_ENGINE_PROMPTS", "4"))
    new = int(os.environ.get("CONFORMANCE_ENGINE_TOKENS", "32"))
    prompts = eval_prompts(target_dir, n, PROMPT_TOKENS)
    return _Run(target_dir, draft_dir, prompts, dtype, note, new, device, reference_config(c, target_dir),
                {"tp_size": c.engines.sglang_tp_size} if c.engines.sglang_tp_size > 1 else None)


_AHEAD: dict[str, Any] = {}
"""Engine runs :func:`warm` started, by :meth:`_Run.key`; :func:`prepare` takes its own."""


def warm(c, pair):
    """Start the engine run of :func:`prepare` now, in the background (the engine's processes work while
    the paths before this one run: on the 2-core machine the start and the batch, about 40-60 s, overlap
    them). Returns the job's ``discard`` (kills the engine if it still runs), or None when there is
    nothing to start. The run, its arguments and what is judged are :func:`prepare`'s."""
    from eagle3_conformance.tools.sglang_engine import start_engine

    run = _planned(c, pair)
    if isinstance(run, Skipped) or run.key() in _AHEAD:
        return None
    job = start_engine(run.target_dir, run.draft_dir, run.prompts, **run.kwargs())
    _AHEAD[run.key()] = job
    return job.discard


def prepare(c, pair):
    """Start the engine once and run the batch (an engine that does not start is a skip with
    SGLang's reason and log tail); a run :func:`warm` started for the same arguments is taken instead."""
    from eagle3_conformance.tools.sglang_engine import EngineStartError, observe_engine

    run = _planned(c, pair)
    if isinstance(run, Skipped):
        return run
    ref = run.reference
    try:
        obs = observe_engine(run.target_dir, run.draft_dir, run.prompts, job=_AHEAD.pop(run.key(), None),
                             reference_builder=reference_builder(ref, run.target_dir) if ref else None,
                             **run.kwargs())
    except EngineStartError as e:
        return Skipped(f"sglang-engine: {e}")
    if run.note and "skip" not in obs.lossless:
        obs.lossless["note"] = run.note
    return _State(c, obs, c.reference, run.note, run.dtype if run.note else "", run.draft_dir)


def reference_config(c, target_dir) -> "dict | None":
    """The hooks' ``reference`` config for the contract (None: the transformers reference judges).
    Rows: all (``CONFORMANCE_ENGINE_REF_ROWS`` rows per forward caps them); bytes:
    ``CONFORMANCE_ENGINE_REF_BYTES`` (default 256 MiB per engine process)."""
    if c.reference != "engine":
        return None
    from eagle3_conformance.reference.engine import needed_boundaries
    from eagle3_conformance.tools.sglang_engine.boundaries import family

    arch = list((_config(target_dir).get("architectures") or []))
    rows = os.environ.get("CONFORMANCE_ENGINE_REF_ROWS")
    return {"boundaries": needed_boundaries(c.aux, c.L), "max_rows": int(rows) if rows else None,
            "max_bytes": int(os.environ.get("CONFORMANCE_ENGINE_REF_BYTES", str(256 << 20))),
            "prefix": family(arch).prefix, "num_layers": c.L, "final_norm": c.target.final_norm}


def reference_builder(ref: dict, target_dir):
    """``(records, prompts, outputs) -> EngineReference`` from the hooks' records of the target's
    boundaries (:func:`eagle3_conformance.reference.engine.build_engine_reference`)."""
    from eagle3_conformance.reference.engine import build_engine_reference, final_norm_weight

    def build(records, prompts, outs):
        return build_engine_reference(records, prompts, outs, num_layers=int(ref["num_layers"]),
                                      final_norm_weight=final_norm_weight(target_dir),
                                      final_norm_kind=ref.get("final_norm", "rmsnorm"))
    return build


def _config(target_dir) -> dict:
    import json

    try:
        return json.loads((_FsPath(target_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def judged_decode(decode: list) -> list:
    """The decode captures the main job judges: every verify step that accepted a draft token (the
    rows after partial acceptance), and each request's first and last step; all of them with
    ``CONFORMANCE_ENGINE_ALL_DECODE=1``. Every capture costs one reference forward (~0.3-0.9 s on
    the shared 2-core machine); on the SmolLM2 batch this judges 27 of 104 steps (measured)."""
    if os.environ.get("CONFORMANCE_ENGINE_ALL_DECODE") == "1":
        return list(decode)
    by_req: dict = {}
    for cap in decode:
        by_req.setdefault(cap.provenance["request"], []).append(cap)
    keep = {id(caps[0]) for caps in by_req.values()} | {id(caps[-1]) for caps in by_req.values()}
    return [cap for cap in decode if id(cap) in keep or cap.provenance.get("accepted", 1) > 1]


def first(s: _State) -> Observation:
    obs = s.observation
    caps = obs.extend + judged_decode(obs.decode)
    if s.run_dtype:  # the project ran the engine in another dtype than the contract's (run_dtype): say so per capture
        for cap in caps:
            cap.provenance["run_dtype"] = s.run_dtype
    facts = {"sglang_version": obs.run.sglang_version, "avg_accept_length": obs.acceptance,
             "engine_lossless": obs.lossless, **obs.extra_facts, **after_boundary_facts(obs.acceptance, s.draft_dir,
                                                                                        "sglang.Engine")}
    eref = obs.engine_reference
    if eref is None:
        facts["reference"] = {"kind": "transformers"}
        return Observation(captures=caps, facts=facts)
    judged = [j for j in (judged_rows(cap, eref) for cap in caps) if j is not None]
    facts["reference"] = reference_fact(s.contract, eref, len(caps) - len(judged))
    return Observation(captures=judged, facts=facts, reference=eref)


def after_boundary_facts(acceptance, draft_dir, engine: str) -> dict:
    """The facts that judge what lies after the boundary: the draft's own acceptance (``draft_acceptance``,
    from the engine's correct-drafts histogram) and its checkpoint's vocabulary (``draft_vocab``)."""
    from eagle3_conformance.acceptance.stats import draft_acceptance_fact
    from eagle3_conformance.draft_config.checkpoint import read_draft_vocab

    vocab = read_draft_vocab(draft_dir) if draft_dir is not None else {"skip": "no draft directory"}
    return {"draft_acceptance": draft_acceptance_fact(acceptance, f"{engine} accept counters"), "draft_vocab": vocab}


def judged_rows(cap, eref):
    from eagle3_conformance.reference.engine import judged_rows as rows

    return rows(cap, eref)


def reference_fact(c, eref, dropped_captures: int) -> dict:
    """The ``reference`` fact of an engine-reference run (:func:`eagle3_conformance.checks.facts.check_reference`)."""
    from eagle3_conformance.reference.engine import needed_boundaries

    st = eref.stats
    return {"kind": "engine", "source": eref.source, "needed": needed_boundaries(c.aux, c.L),
            "recorded": [str(b) for b in eref.present], "rows": st["rows"], "bytes": st["bytes"],
            "missing": sorted(st["missing"]), "errors": list(st["errors"]), "dropped": list(st["dropped"]),
            "captures_not_recorded": dropped_captures}


PATH = Path(
    name=PATH_NAME,
    summary="the real sglang.Engine (EAGLE3, topk 1; CPU: config B stand-ins) observed through its forward_hooks: "
            "draft extend and draft extend after verify rows, SGLang's accept counters, lossless greedy",
    needs=Needs(modules=("sglang", "speculators")),
    prepare=prepare,
    first=first,
    warm=warm,
)
