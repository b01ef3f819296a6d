"""``sglang-mtp``: the hidden state SGLang hands an MTP / NextN head (issue 14), on every release
the CPU harness serves (0.5.23; 0.5.14 in ``tox -e sglang-0.5.14``).

For a ``method: mtp`` contract. SGLang's real target runs EXTEND with FULL capture and no aux
capture; what the installed release's own logits processor stores (``spec_info.hidden_states`` of
an MTP draft; the line is in each capture's ``provenance["source"]``) is fingerprinted against the
contract's ``verifier_last`` (B_L pre-norm or F post-norm): a head trained on B_L and served F
fails here. SGLang's MTP draft classes themselves are not run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eagle3_conformance.environment.engines import HARNESS_RELEASES
from eagle3_conformance.paths.base import Needs, Observation, Path, min_prompt_len, start_token


@dataclass
class _State:
    contract: Any
    harness: Any
    pool: Any = None


def prepare(c, pair) -> _State:
    from eagle3_conformance.suite.pairs import torch_dtype
    from eagle3_conformance.testbed.corpus import prompt_pool
    from eagle3_conformance.tools.sglang_cpu.families import runtime_harness

    return _State(c, runtime_harness(pair.target_dir, torch_dtype(c.serving_dtype)), prompt_pool(pair.target_dir))


def first(s: _State) -> Observation:
    return Observation(facts={"sglang_version": s.harness.sglang_version})


def observe(s: _State, draw) -> Observation:
    from eagle3_conformance.suite import strategies
    from eagle3_conformance.tools.sglang_cpu.families import mtp_source_extend

    c = s.contract
    batch = draw(strategies.prompt_batches(c.target.vocab_size, start_token=start_token(c),
                                           min_len=min_prompt_len(c), pool=s.pool), label="batch")
    return Observation(captures=mtp_source_extend(s.harness, batch))


PATH = Path(
    name="sglang-mtp",
    summary="SGLang's target (0.5.23 or 0.5.14; EXTEND, FULL, no aux) -> the hidden state an MTP / NextN head "
            "is handed (B_L or F)",
    needs=Needs(modules=("sglang",), methods=("mtp",), also_on={"sglang": HARNESS_RELEASES}),
    prepare=prepare,
    first=first,
    observe=observe,
)
