"""``vllm-extend``: vLLM 0.33.0's prefill, as its real EAGLE-3 draft class receives it, on each model
runner the contract declares (``engines.vllm.runners``).

vLLM has two model runners and each reads the draft config's aux-layer ids with its own function
(V1 reads the nested ``eagle_config`` key, V2 does not), so the same draft can be served with
different boundaries depending on the runner. Hypothesis draws batches of prompts
(``strategies.prompt_batches``); vLLM's real ``LlamaForCausalLM`` runs the prefill on CPU with each
runner's ids applied by its own setter, and the concat reaches the real ``Eagle3LlamaForCausalLM``
(``combine_hidden_states``, ``fc``, draft forward) (:class:`eagle3_conformance.tools.vllm_cpu.harness.
VLLMCPUHarness`). Every request on every runner is checked against the reference on the same
tokens; the installed vLLM release is reported once. Runs only where vLLM is installed (``tox -e
vllm``) and only for contracts that declare vLLM serving (``engines.vllm``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eagle3_conformance.paths.base import Needs, Observation, Path, Skipped, min_prompt_len, start_token


@dataclass
class _State:
    contract: Any
    harness: Any  # VLLMCPUHarness
    runners: tuple[str, ...]
    pool: Any = None


def prepare(c, pair):
    if c.engines.vllm is None:
        return Skipped("the contract declares no vLLM serving (engines.vllm: version and runners); "
                       "`eagle3-conformance translate --to vllm` gives the ids vLLM needs")
    if c.target.architecture != "LlamaForCausalLM":
        return Skipped(f"the vLLM CPU harness runs LlamaForCausalLM targets only, not {c.target.architecture}")
    from eagle3_conformance.suite.pairs import torch_dtype
    from eagle3_conformance.testbed.corpus import prompt_pool
    from eagle3_conformance.tools.vllm_cpu.harness import shared_harness

    h = shared_harness(pair.target_dir, pair.draft_dir, torch_dtype(c.serving_dtype))
    return _State(c, h, tuple(c.engines.vllm.runners), prompt_pool(pair.target_dir))


def first(s: _State) -> Observation:
    """The installed vLLM release (its id readers change between releases)."""
    return Observation(facts={"vllm_version": s.harness.vllm_version})


def observe(s: _State, draw) -> Observation:
    """One drawn batch of prompts ``[[token id, ...], ...]`` through the prefill, per runner."""
    from eagle3_conformance.suite import strategies

    c = s.contract
    batch = draw(strategies.prompt_batches(c.target.vocab_size, start_token=start_token(c),
                                           min_len=min_prompt_len(c), pool=s.pool), label="batch")
    return Observation(captures=s.harness.extend(batch, s.runners))


PATH = Path(
    name="vllm-extend",
    summary="vLLM 0.33.0's target (LlamaForCausalLM, aux capture with each model runner's ids) -> its "
            "Eagle3LlamaForCausalLM: the aux concat entering combine_hidden_states, and whether its fc ran",
    needs=Needs(modules=("vllm",), draft=True),
    prepare=prepare,
    first=first,
    observe=observe,
)
