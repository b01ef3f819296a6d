"""``sglang-engine``: the real ``sglang.Engine`` (EAGLE3, topk 1), observed through SGLang's own
``forward_hooks`` (:mod:`eagle3_conformance.tools.sglang_engine`).

One engine start per contract and one batch of held-out corpus prompts
(``CONFORMANCE_ENGINE_PROMPTS``, default 4, of 48 tokens, ``CONFORMANCE_ENGINE_TOKENS`` new tokens,
default 32; 3 draft steps, 4 draft tokens). What reaches the draft is judged by every capture check:
the draft extend after prefill (rows of the prompt) and every draft extend after verify (the verify
rows, partial acceptances included). Facts: SGLang's own acceptance counters (``completion_tokens /
spec_verify_ct``, gated on ``gates.min_accept_length``; per-position acceptance from
``spec_correct_drafts_histogram`` in the finding's locator), and losslessness against the target's
greedy decode (float32).

On CPU it runs config B of ../shared/SGLANG_CPU_ENGINE.md (stand-ins, no GPU) for the pair with a
trained draft (:data:`eagle3_conformance.trained_draft.TRAINED`, float32). With CUDA it runs the
pair twice: eager with hooks (every check) and with CUDA graphs (acceptance only: hooks never fire on
graph replay), and fails when graphed acceptance falls below eager beyond noise (the R42 class).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from eagle3_conformance.paths.base import Needs, Observation, Path, Skipped

PROMPT_TOKENS = 48


@dataclass
class _State:
    contract: Any
    observation: Any  # eagle3_conformance.tools.sglang_engine.EngineObservation


def prepare(c, pair):
    """Start the engine once and run the batch (an engine that does not start is a skip with
    SGLang's reason and log tail)."""
    from eagle3_conformance.tools.sglang_engine import EngineStartError, observe_engine
    from eagle3_conformance.trained_draft import TRAINED, ensure_trained_draft, eval_prompts

    if c.fixture not in TRAINED:
        return Skipped(f"sglang-engine: no trained draft for this pair (fixtures with one: {', '.join(TRAINED)}); "
                       "an untrained draft accepts nothing and its weights may not exist")
    device = os.environ.get("CONFORMANCE_ENGINE_DEVICE") or _default_device()
    if device == "cpu" and c.target.dtype != "float32":
        return Skipped(f"sglang-engine on CPU runs the float32 pair (bf16 is no losslessness oracle); this "
                       f"contract serves {c.target.dtype}")
    t = ensure_trained_draft(TRAINED[c.fixture])
    n = int(os.environ.get("CONFORMANCE_ENGINE_PROMPTS", "4"))
    new = int(os.environ.get("CONFORMANCE_ENGINE_TOKENS", "32"))
    prompts = eval_prompts(t.target_dir, n, PROMPT_TOKENS)
    try:
        obs = observe_engine(t.target_dir, t.draft_dir, prompts, dtype=c.target.dtype, max_new_tokens=new,
                             device=device)
    except EngineStartError as e:
        return Skipped(f"sglang-engine: {e}")
    return _State(c, obs)


def _default_device() -> str:
    from eagle3_conformance import torch_env

    torch_env.prepare()
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def first(s: _State) -> Observation:
    obs = s.observation
    return Observation(captures=obs.extend + obs.decode,
                       facts={"sglang_version": obs.run.sglang_version, "avg_accept_length": obs.acceptance,
                              "engine_lossless": obs.lossless, **obs.extra_facts})


PATH = Path(
    name="sglang-engine",
    summary="the real sglang.Engine (EAGLE3, topk 1; CPU: config B stand-ins) observed through its forward_hooks: "
            "draft extend and draft extend after verify rows, SGLang's accept counters, lossless greedy",
    needs=Needs(modules=("sglang", "speculators")),
    prepare=prepare,
    first=first,
)
