"""``sglang-decode``: what SGLang's draft receives after a target verify step.

Hypothesis draws verify layouts (batches, draft-token counts, accepted counts;
``strategies.verify_layouts``); SGLang's real target runs TARGET_VERIFY with FULL capture and the
draft extend after verify gets the verify rows. Draft tokens are made consistent with the
target (:func:`consistent_drafts`) so that accepted rows pair with real next tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eagle3_conformance.environment.engines import HARNESS_RELEASES
from eagle3_conformance.paths.base import Needs, Observation, Path


def consistent_drafts(ref_model, prefix: list[int], n: int, accepted: int, filler: list[int]) -> list[int]:
    """Draft tokens for one verify step that the target really accepts ``accepted`` of: token 0
    is the bonus token, tokens 1..accepted-1 are the target's greedy continuation, the rest are
    ``filler`` ids changed where they would happen to be accepted."""
    seq = list(prefix) + [filler[0]]
    drafts = [filler[0]]
    for j in range(1, n):
        g = ref_model.greedy_next(seq)
        t = g if j < accepted else (filler[j] if filler[j] != g else (filler[j] + 1) % ref_model.model.config.vocab_size)
        drafts.append(t)
        seq.append(t)
    return drafts


@dataclass
class _State:
    contract: Any
    harness: Any  # SGLangCPUHarness
    ref_model: Any  # ReferenceModel: the target's greedy continuation
    pool: Any = None  # tokenized corpus (eagle3_conformance.testbed.corpus.prompt_pool) or None


def prepare(c, pair) -> _State:
    from eagle3_conformance.reference.suite_model import suite_reference_model
    from eagle3_conformance.suite.pairs import torch_dtype
    from eagle3_conformance.testbed.corpus import prompt_pool
    from eagle3_conformance.tools.sglang_cpu import shared_harness

    h = shared_harness(pair.target_dir, pair.draft_dir, torch_dtype(c.serving_dtype))
    return _State(c, h, suite_reference_model(pair.target_dir, c.target), prompt_pool(pair.target_dir))


def observe(s: _State, draw) -> Observation:
    """One drawn verify step: prefixes, draft tokens made consistent with the target, accepted
    counts; the captures are what the draft extend after verify received."""
    from eagle3_conformance.suite import strategies

    prefixes, fillers, accepted = draw(strategies.verify_layouts(s.contract.target.vocab_size, pool=s.pool), label="verify")
    n = len(fillers[0])
    drafts = [consistent_drafts(s.ref_model, p, n, a, f) for p, f, a in zip(prefixes, fillers, accepted)]
    return Observation(captures=s.harness.verify(prefixes, drafts, accepted))


PATH = Path(
    name="sglang-decode",
    summary="SGLang target verify (TARGET_VERIFY, FULL) -> draft extend after verify: the aux concat entering "
            "the draft on decode",
    needs=Needs(modules=("sglang",), draft=True, also_on={"sglang": HARNESS_RELEASES}),
    prepare=prepare,
    observe=observe,
)
