"""``sglang-engine-invariance``: the real ``sglang.Engine`` checked against itself (issue 45 item 1).

The same held-out prompts (``CONFORMANCE_INVARIANCE_PROMPTS``, default 2, of 48 tokens;
``CONFORMANCE_INVARIANCE_TOKENS`` new tokens, default 8) run plain (each alone, an empty radix cache,
no chunking, no logprobs, TP 1) and under each variation SGLang offers
(:mod:`eagle3_conformance.tools.sglang_engine.variations`): ``batch``, ``input-logprobs``,
``prefix-cache-repeat``, ``prefix-cache-shared`` (one engine start with the plain run, shared with any other
caller of the same engine configuration, :mod:`eagle3_conformance.tools.sglang_engine.shared`),
``chunked-prefill`` (its own start: chunk ends at 16 and 32 inside each prompt) and ``tp2`` (its own
start; only when asked: ``CONFORMANCE_ENGINE_VARIATIONS=all`` or a comma list; ``none`` skips the path).
Every draft input row of every variation, extend and verify, is compared with the plain run's by
:func:`eagle3_conformance.checks.invariance.check_engine_invariance` (no reference model); the fact
``engine_variations`` says what ran, what it cost and what could not run. Under pytest the runs start in
the background once the session's items are chosen (:func:`warm`, as ``sglang-engine``'s), so their engine
starts overlap the paths before this one; ``prepare`` then takes them.

Which pair: the fixture pair with a trained draft, or a user's pair (:func:`~eagle3_conformance.paths.base.engine_pair`).
A half-precision contract runs at float32 on CPU (:func:`~eagle3_conformance.paths.base.run_dtype`), judged
with the contract's own (looser) noise allowance.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path as _FsPath
from typing import Any

from eagle3_conformance.paths.base import Needs, Observation, Path, Skipped, engine_device, engine_pair, run_dtype

NAME = "sglang-engine-invariance"
PROMPT_TOKENS = 48


@dataclass
class _State:
    contract: Any
    observation: Any  # eagle3_conformance.tools.sglang_engine.variations.VariationObservation
    names: list
    note: str = ""


@dataclass(frozen=True)
class _Plan:
    """The runs a contract asks for: what :func:`prepare` (and :func:`warm`, ahead of it) hands
    :func:`eagle3_conformance.tools.sglang_engine.variations.run_variations`."""

    target_dir: Any
    draft_dir: Any
    prompts: Any  # list[list[int]]
    names: tuple
    max_new_tokens: int
    device: str
    dtype: str
    note: str

    def key(self) -> str:
        import json

        return json.dumps([str(self.target_dir), str(self.draft_dir), self.prompts, self.names, self.max_new_tokens,
                           self.device, self.dtype], default=str)

    def kwargs(self) -> dict:
        return {"names": list(self.names), "path": NAME, "max_new_tokens": self.max_new_tokens,
                "device": self.device, "dtype": self.dtype, "share": True}


def _planned(c, pair) -> "_Plan | Skipped":
    """The runs :func:`prepare` makes for ``c`` (or why it makes none).

    Raises:
        UsageError: a bad ``CONFORMANCE_ENGINE_VARIATIONS`` / ``CONFORMANCE_INVARIANCE_*`` value."""
    from eagle3_conformance.contract import pipeline_refusal
    from eagle3_conformance.core.errors import UsageError
    from eagle3_conformance.testbed.trained_draft import eval_prompts
    from eagle3_conformance.tools.sglang_engine.variations import OFFERED
    from eagle3_conformance.tools.shared.variations import ENV, requested

    got = engine_pair(c, pair, NAME)
    if isinstance(got, Skipped):
        return got
    refused = pipeline_refusal(c.engines.sglang_pp_size, c.method)
    if refused:
        return Skipped(f"{NAME}: {refused}")
    try:  # a one-line usage error naming the variable, never a traceback
        names = requested(os.environ.get(ENV), OFFERED)
    except ValueError as e:
        raise UsageError(f"{ENV}={os.environ.get(ENV)!r}: {e}") from None
    try:
        n, new = _count("CONFORMANCE_INVARIANCE_PROMPTS", 2), _count("CONFORMANCE_INVARIANCE_TOKENS", 8)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not names:
        return Skipped(f"{NAME}: {ENV}=none")
    target_dir, draft_dir = got
    device = engine_device()
    dtype, note = run_dtype(c, device)
    return _Plan(target_dir, draft_dir, eval_prompts(_FsPath(target_dir), n, PROMPT_TOKENS), tuple(names), new, device,
                 dtype, note)


_AHEAD: dict[str, Any] = {}
"""Runs :func:`warm` started, by :meth:`_Plan.key`; :func:`prepare` takes its own."""


def warm(c, pair):
    """Start :func:`prepare`'s engine runs now, in the background (one after the other, as ``prepare`` runs them: the
    base run's start and phases and the chunked run's, about 60-100 s on the shared 2-core machine, overlap
    the paths before this one). Returns the job's ``discard`` (kills the engine if it still
    runs), or None when there is nothing to start. The runs, their arguments and what is judged are
    :func:`prepare`'s."""
    from eagle3_conformance.tools.sglang_engine.ahead import Job
    from eagle3_conformance.tools.sglang_engine.variations import run_variations

    plan = _planned(c, pair)
    if isinstance(plan, Skipped) or plan.key() in _AHEAD:
        return None
    job = Job(run_variations, plan.target_dir, plan.draft_dir, plan.prompts, **plan.kwargs())
    _AHEAD[plan.key()] = job
    return job.discard


def prepare(c, pair):
    """Run the plain run and the variations (an engine that does not start is a skip with SGLang's reason);
    the runs :func:`warm` started for the same arguments are taken instead."""
    from eagle3_conformance.tools.sglang_engine import EngineStartError
    from eagle3_conformance.tools.sglang_engine.variations import run_variations

    plan = _planned(c, pair)
    if isinstance(plan, Skipped):
        return plan
    job = _AHEAD.pop(plan.key(), None)
    work = _FsPath(tempfile.mkdtemp(prefix="sglang-invariance-")) if job is None else job.workdir
    try:
        obs = job.result() if job is not None else run_variations(plan.target_dir, plan.draft_dir, plan.prompts,
                                                                  workdir=work, **plan.kwargs())
    except EngineStartError as e:
        return Skipped(f"{NAME}: {e}")
    finally:
        if job is not None:
            job.discard()
        shutil.rmtree(work, ignore_errors=True)
    return _State(c, obs, list(plan.names), plan.note)


def _count(var: str, default: int) -> int:
    value = os.environ.get(var, str(default))
    if not value.strip().isdigit() or int(value) < 1:
        raise ValueError(f"{var}={value!r}: a whole number of 1 or more")
    return int(value)


def observation(vobs, names: list, note: str = "") -> Observation:
    """The observation of a :class:`~eagle3_conformance.tools.sglang_engine.variations.VariationObservation`:
    its (plain, variant) pairs, and the ``engine_variations`` fact (what ran, its cost, what failed or
    could not run, what was not asked for and why)."""
    from eagle3_conformance.tools.sglang_engine.variations import OFFERED
    from eagle3_conformance.tools.shared.variations import variations_fact

    fact = variations_fact(vobs, names, OFFERED, f"sglang.Engine {vobs.version}", note)
    return Observation(variants=vobs.paired.pairs, facts={"engine_variations": fact})


def first(s: _State) -> Observation:
    return observation(s.observation, s.names, s.note)


PATH = Path(
    name=NAME,
    summary="the real sglang.Engine against itself: each prompt's draft inputs under chunked prefill, input logprobs, "
            "prefix-cache hits, a batch (and TP 2) equal the plain run's, row by row",
    needs=Needs(modules=("sglang", "speculators")),
    prepare=prepare,
    first=first,
    warm=warm,
)
