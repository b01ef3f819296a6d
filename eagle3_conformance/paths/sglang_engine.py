"""``sglang-engine``: a real ``sglang.Engine`` (EAGLE3, hidden-state return) on a GPU runner.

One run on prompts hypothesis finds (at least 2, lengths >= 4; ``strategies.prompt_batches``):
prefill blocks are checked in full against the reference, decode rows on widths and norm bands,
and the release is gated on ``avg_spec_accept_length >= gates.min_accept_length``. Skipped
without a GPU (:func:`eagle3_conformance.tools.sglang_engine.gpu_available`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eagle3_conformance.paths.base import Needs, Observation, Path, Skipped, start_token


@dataclass
class _State:
    contract: Any
    pair: Any


def prepare(c, pair):
    from eagle3_conformance.tools.sglang_engine import gpu_available

    ok, why = gpu_available()
    if not ok:
        return Skipped(f"GPU engine path: {why}")
    return _State(c, pair)


def first(s: _State) -> Observation:
    from hypothesis import find

    from eagle3_conformance import strategies
    from eagle3_conformance.tools.sglang_engine import run_engine

    c = s.contract
    prompts = find(strategies.prompt_batches(c.target.vocab_size, max_batch=4, start_token=start_token(c),
                                             min_len=4), lambda b: len(b) >= 2)
    res = run_engine(s.pair.target_dir, s.pair.draft_dir, prompts, dtype=c.serving_dtype)
    return Observation(captures=res.prefill, shapes_only=res.decode,
                       facts={"avg_accept_length": res.avg_accept_length})


PATH = Path(
    name="sglang-engine",
    summary="a real sglang.Engine with EAGLE3 and hidden-state return (GPU): prefill and decode rows, "
            "avg_spec_accept_length",
    needs=Needs(modules=("sglang",), gpu=True),
    prepare=prepare,
    first=first,
)
