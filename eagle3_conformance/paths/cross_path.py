"""``cross-path``: the same token ids through two paths agree row by row.

First the pair's stored samples (up to 4 with at least 2 tokens) through speculators' loader and
through SGLang extend; then drawn prompts through SGLang extend and through SGLang verify (the
last 1..3 tokens as draft tokens, all accepted). Each pair of captures is compared per slot
(min cosine >= ``gates.cross_path_min_cosine``; max abs difference reported). SGLang extend and
verify are the CPU harness's, so the path runs on every release it serves (0.5.23; 0.5.14 in
``tox -e sglang-0.5.14``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from eagle3_conformance.environment.engines import HARNESS_RELEASES
from eagle3_conformance.paths.base import Needs, Observation, Path, start_token


@dataclass
class _State:
    contract: Any
    harness: Any  # SGLangCPUHarness
    loader: Optional[Any]  # TrainingLoader over the pair's stored data, or None
    pool: Any = None  # tokenized corpus (eagle3_conformance.testbed.corpus.prompt_pool) or None


def prepare(c, pair) -> _State:
    from eagle3_conformance.suite.pairs import torch_dtype
    from eagle3_conformance.testbed.corpus import prompt_pool
    from eagle3_conformance.tools.sglang_cpu import shared_harness

    h = shared_harness(pair.target_dir, pair.draft_dir, torch_dtype(c.serving_dtype))
    loader = None
    if pair.data_dir is not None:
        from eagle3_conformance.tools.speculators_loader import TrainingLoader

        loader = TrainingLoader(pair.data_dir, c.draft.target_hidden_size, c.num_slots, torch_dtype(c.data_dtype),
                                transfer=c.training.transfer)
    return _State(c, h, loader, prompt_pool(pair.target_dir))


def first(s: _State) -> Optional[Observation]:
    """Stored samples: the training loader's captures vs SGLang extend on their tokens."""
    if s.loader is None:
        return None
    idx = [i for i in range(len(s.loader)) if len(s.loader.dataset_row(i)["input_ids"]) >= 2][:4]
    train = s.loader.batch(idx)
    ext = s.harness.extend([cap.token_ids.tolist() for cap in train])
    return Observation(pairs=list(zip(train, ext)))


def observe(s: _State, draw) -> Observation:
    """Drawn prompts (at least 3 tokens) and a draft-token count: extend vs verify."""
    from hypothesis import strategies as st

    from eagle3_conformance.suite import strategies

    c = s.contract
    batch = draw(strategies.prompt_batches(c.target.vocab_size, start_token=start_token(c), min_len=3, pool=s.pool), label="batch")
    n = draw(st.integers(1, 3), label="draft tokens")
    n = min(n, min(len(x) for x in batch) - 1)
    ext = s.harness.extend(batch)
    prefixes = [x[:-n] for x in batch]
    drafts = [x[-n:] for x in batch]
    dec = s.harness.verify(prefixes, drafts, [1] * len(batch))
    return Observation(pairs=list(zip(ext, dec)))


PATH = Path(
    name="cross-path",
    summary="the training loader, SGLang extend and SGLang verify on the same tokens: row-by-row agreement",
    needs=Needs(modules=("sglang",), draft=True, also_on={"sglang": HARNESS_RELEASES}),
    prepare=prepare,
    first=first,
    observe=observe,
)
