"""Hypothesis strategies: batches, prompts, lengths, draft-token layouts.

Composable generators with the field's names. Sizes are kept small by default so that the CPU
tier stays fast; the ``dev`` profile draws more examples, not bigger ones.
"""

from __future__ import annotations

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


def prompt_batches(vocab_size: int, max_batch: int = 3, **kw) -> st.SearchStrategy[list[list[int]]]:
    """A batch of 1..max_batch prompts."""
    return st.lists(prompts(vocab_size, **kw), min_size=1, max_size=max_batch)


@st.composite
def verify_layouts(draw, vocab_size: int, max_batch: int = 3, max_draft_tokens: int = 4, max_prefix: int = 12):
    """A target-verify step: per request a prefix, draft tokens and an accepted count.

    Returns (prefixes, draft_tokens, accepted) with 1 <= accepted[i] <= len(draft_tokens[i]).
    """
    bs = draw(st.integers(1, max_batch))
    n_draft = draw(st.integers(1, max_draft_tokens))
    prefixes = [draw(prompts(vocab_size, min_len=1, max_len=max_prefix)) for _ in range(bs)]
    drafts = [draw(st.lists(st.integers(3, vocab_size - 1), min_size=n_draft, max_size=n_draft)) for _ in range(bs)]
    accepted = [draw(st.integers(1, n_draft)) for _ in range(bs)]
    return prefixes, drafts, accepted
