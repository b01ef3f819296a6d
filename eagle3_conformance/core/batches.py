"""Every sample once, in consecutive batches: the one way loaders are fed across the package."""

from __future__ import annotations

from typing import Sequence, TypeVar

T = TypeVar("T")

BATCH_SIZE = 4
"""Samples per loader batch unless a caller says otherwise (check-data's ``--batch-size`` default)."""


def in_batches(items: Sequence[T], size: int = BATCH_SIZE) -> list[list[T]]:
    """``items`` cut into consecutive batches of ``size`` (the last may be shorter), each item once:
    ``in_batches([5, 7, 9], 2) == [[5, 7], [9]]``; ``[]`` for no items."""
    return [list(items[k:k + size]) for k in range(0, len(items), size)]


def every_sample(n: int, size: int = BATCH_SIZE) -> list[list[int]]:
    """Sample indices ``0..n-1`` in consecutive batches of ``size``: ``[[0, 1, 2, 3], [4, ...], ...]``."""
    return in_batches(range(n), size)
