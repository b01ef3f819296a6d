"""``cpu-accept``: the accept length of a pair with a trained draft, measured on CPU.

For a contract whose fixture has a trained draft (:data:`eagle3_conformance.testbed.trained_draft.TRAINED`;
today the float32 SmolLM2-135M pair), the draft is the shipped one (trained with speculators' trainer
on CPU, checked against its recipe, :func:`eagle3_conformance.testbed.trained_draft.ensure_trained_draft`) and
the greedy speculative loop
(:func:`eagle3_conformance.tools.sglang_cpu.spec_loop.speculative_decode`: the installed SGLang's
real target and draft classes, 0.5.23 or 0.5.14 through the harness's release branches) runs over
held-out corpus prompts. The path reports one fact,
``avg_accept_length`` (mean tokens committed per verify step, bonus included), which
:func:`eagle3_conformance.checks.check_accept_length` gates on ``gates.min_accept_length``, as the
``sglang-engine`` path does on a GPU runner with the engine's own figure.

The run is the configuration the floor was derived on (``CONFORMANCE_ACCEPT_PROMPTS`` prompts,
default :data:`DEFAULT_PROMPTS` = 8, of 48 tokens, ``CONFORMANCE_ACCEPT_TOKENS`` new tokens each,
default :data:`DEFAULT_TOKENS` = 32, k = 3 draft tokens): the correct row of the
faults-vs-acceptance table (``eagle3-conformance faults --acceptance``, docs/acceptance.md). With 3
prompts x 24 tokens the self-distilled draft measured 1.131 where the 8 prompts give its mean: the
first three held-out items are two prose paragraphs and a code snippet, the kinds it accepts least.
Other contracts are skipped with the reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from eagle3_conformance.environment.engines import HARNESS_RELEASES
from eagle3_conformance.paths.base import Needs, Observation, Path, Skipped

PROMPT_TOKENS = 48
DEFAULT_PROMPTS = 8
DEFAULT_TOKENS = 32
NUM_DRAFT_TOKENS = 3


@dataclass
class _State:
    contract: Any
    trained: Any  # eagle3_conformance.testbed.trained_draft.TrainedDraft


def prepare(c, pair):
    from eagle3_conformance.testbed.trained_draft import TRAINED, ensure_trained_draft

    if c.fixture not in TRAINED:
        return Skipped(f"cpu-accept: no trained draft for this pair (fixtures with one: {', '.join(TRAINED)})")
    if c.serving_dtype != "float32":
        return Skipped(f"cpu-accept: the trained draft is measured with the float32 target; this contract "
                       f"serves {c.serving_dtype}")
    return _State(c, ensure_trained_draft(TRAINED[c.fixture]))


def first(s: _State) -> Observation:
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    import torch

    from eagle3_conformance.testbed.trained_draft import eval_prompts
    from eagle3_conformance.tools.sglang_cpu import SGLangCPUHarness
    from eagle3_conformance.tools.sglang_cpu.spec_loop import speculative_decode

    n = int(os.environ.get("CONFORMANCE_ACCEPT_PROMPTS", str(DEFAULT_PROMPTS)))
    new = int(os.environ.get("CONFORMANCE_ACCEPT_TOKENS", str(DEFAULT_TOKENS)))
    prompts = eval_prompts(s.trained.target_dir, n, PROMPT_TOKENS)
    h = SGLangCPUHarness(s.trained.target_dir, s.trained.draft_dir, dtype=torch.float32)
    try:
        res = speculative_decode(h, prompts, num_draft_tokens=NUM_DRAFT_TOKENS, max_new_tokens=new)
    finally:
        h.close()
    from eagle3_conformance.acceptance.stats import per_position

    hist = res.correct_drafts_histogram if res.verify_steps else []
    fact = {"spec_accept_length": res.mean_accept_length, "spec_correct_drafts_histogram": hist,
            "per_position_acceptance": per_position(hist, NUM_DRAFT_TOKENS) if hist else []}
    return Observation(facts={"avg_accept_length": fact})


PATH = Path(
    name="cpu-accept",
    summary="greedy speculative loop on SGLang's real classes (CPU) with a trained draft: mean accept length",
    needs=Needs(modules=("sglang", "speculators"), also_on={"sglang": HARNESS_RELEASES}),
    prepare=prepare,
    first=first,
)
