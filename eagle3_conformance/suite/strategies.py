"""Hypothesis strategies: batches, prompts, lengths, draft-token layouts.

Composable generators with the field's names. Sizes are kept small by default so that the CPU
tier stays fast; the ``dev`` profile draws more examples, not bigger ones.
"""

from __future__ import annotations

from typing import Optional, Sequence

from hypothesis import strategies as st


def sample_batches(num_samples: int, max_batch: int = 4) -> st.SearchStrategy[list[int]]:
    """A training batch: 1..max_batch dataset indices (repeats allowed, any order)."""
    return st.lists(st.integers(0, num_samples - 1), min_size=1, max_size=max(1, min(max_batch, num_samples)))


def prompts(vocab_size: int, start_token: int | None = 1, min_len: int = 1, max_len: int = 24,
            low_id: int = 3) -> st.SearchStrategy[list[int]]:
    """One prompt: the start token (if given) then ids in [low_id, vocab_size)."""
    body = st.lists(st.integers(low_id, vocab_size - 1), min_size=max(min_len - 1, 0), max_size=max_len - 1)
    if start_token is None:
        return st.lists(st.integers(low_id, vocab_size - 1), min_size=min_len, max_size=max_len)
    return body.map(lambda b: [start_token] + b)


def corpus_prompts(pool: Sequence[Sequence[int]], min_len: int = 1, max_len: int = 24) -> st.SearchStrategy[list[int]]:
    """One prompt like real traffic: a window of a tokenized corpus item (prose, code, chat turns
    rendered with the model's template; :func:`eagle3_conformance.testbed.corpus.prompt_pool`). Every id is one
    the tokenizer produced for real text, so identity gates see ordinary tokens, never runs of
    special or repeated ids. Shrinks toward the first item and its first tokens."""
    usable = [list(p) for p in pool if len(p) >= min_len]
    if not usable:
        raise ValueError(f"no corpus item has {min_len} tokens")

    @st.composite
    def window(draw):
        ids = draw(st.sampled_from(usable))
        n = draw(st.integers(min_len, min(max_len, len(ids))))
        start = draw(st.integers(0, len(ids) - n))
        return ids[start:start + n]

    return window()


def prompt_batches(vocab_size: int, max_batch: int = 3, pool: Optional[Sequence[Sequence[int]]] = None,
                   **kw) -> st.SearchStrategy[list[list[int]]]:
    """A batch of 1..max_batch prompts: corpus windows when a ``pool`` of tokenized real text is
    given (real models), else random ids (the synthetic fixtures, whose vocabulary has no text)."""
    if pool:
        kw.pop("start_token", None)
        kw.pop("low_id", None)
        return st.lists(corpus_prompts(pool, **kw), min_size=1, max_size=max_batch)
    return st.lists(prompts(vocab_size, **kw), min_size=1, max_size=max_batch)


@st.composite
def verify_layouts(draw, vocab_size: int, max_batch: int = 3, max_draft_tokens: int = 4, max_prefix: int = 12,
                   pool: Optional[Sequence[Sequence[int]]] = None):
    """A target-verify step: per request a prefix, draft tokens and an accepted count.

    Returns (prefixes, draft_tokens, accepted) with 1 <= accepted[i] <= len(draft_tokens[i]).
    """
    bs = draw(st.integers(1, max_batch))
    n_draft = draw(st.integers(1, max_draft_tokens))
    if pool:
        prefixes = [draw(corpus_prompts(pool, min_len=1, max_len=max_prefix)) for _ in range(bs)]
        fill = corpus_prompts(pool, min_len=n_draft, max_len=n_draft)
        drafts = [draw(fill) for _ in range(bs)]
    else:
        prefixes = [draw(prompts(vocab_size, min_len=1, max_len=max_prefix)) for _ in range(bs)]
        drafts = [draw(st.lists(st.integers(3, vocab_size - 1), min_size=n_draft, max_size=n_draft))
                  for _ in range(bs)]
    accepted = [draw(st.integers(1, n_draft)) for _ in range(bs)]
    return prefixes, drafts, accepted
