"""``sglang-extend``: SGLang's prefill, as its real EAGLE-3 draft class receives it.

Hypothesis draws batches of prompts (batch 1..3, lengths 3..24: ``min_prompt_len``; ``strategies.prompt_batches``);
SGLang's real target runs EXTEND with FULL capture on CPU and its real draft class receives the
aux concat (:class:`eagle3_conformance.tools.sglang_cpu.SGLangCPUHarness`). Every request is checked
against the reference on the same tokens; the installed SGLang release is reported once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eagle3_conformance.environment.engines import HARNESS_RELEASES
from eagle3_conformance.paths.base import Needs, Observation, Path, min_prompt_len, start_token


@dataclass
class _State:
    contract: Any
    harness: Any  # SGLangCPUHarness
    pool: Any = None  # tokenized corpus (eagle3_conformance.testbed.corpus.prompt_pool) or None


def prepare(c, pair) -> _State:
    from eagle3_conformance.suite.pairs import torch_dtype
    from eagle3_conformance.testbed.corpus import prompt_pool
    from eagle3_conformance.tools.sglang_cpu import shared_harness

    return _State(c, shared_harness(pair.target_dir, pair.draft_dir, torch_dtype(c.serving_dtype)), prompt_pool(pair.target_dir))


def first(s: _State) -> Observation:
    """The installed SGLang release (id rules change between releases)."""
    return Observation(facts={"sglang_version": s.harness.sglang_version})


def observe(s: _State, draw) -> Observation:
    """One drawn batch of prompts ``[[token id, ...], ...]`` through extend."""
    from eagle3_conformance.suite import strategies

    c = s.contract
    batch = draw(strategies.prompt_batches(c.target.vocab_size, start_token=start_token(c),
                                           min_len=min_prompt_len(c), pool=s.pool), label="batch")
    return Observation(captures=s.harness.extend(batch))


PATH = Path(
    name="sglang-extend",
    summary="SGLang's target (0.5.23 or 0.5.14; EXTEND, FULL capture) -> its EAGLE-3 draft class: the aux concat entering "
            "the draft, and whether its fc ran",
    needs=Needs(modules=("sglang",), draft=True, also_on={"sglang": HARNESS_RELEASES}),
    prepare=prepare,
    first=first,
    observe=observe,
)
