"""Shard arithmetic: which samples a shard owns, the seeded fingerprint sample, its loader batches."""

from __future__ import annotations

import random

from eagle3_conformance.core.batches import in_batches

SHARDING = "modulo: shard i/N owns the samples s with s % N == i"


def parse_shard(text: str) -> tuple[int, int]:
    """Parse ``"i/N"`` into ``(i, N)``.

    Raises:
        ValueError: not of the form i/N with 0 <= i < N.
    """
    try:
        a, b = text.split("/")
        i, n = int(a), int(b)
    except ValueError:
        raise ValueError(f"shard must be i/N (e.g. 0/4), got {text!r}") from None
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"shard {text!r}: need 0 <= i < N and N >= 1")
    return i, n


def shard_indices(n: int, shard: tuple[int, int]) -> range:
    """Sample indices of shard ``(i, N)`` among ``n`` samples: ``range(i, n, N)``."""
    i, count = shard
    return range(i, n, count)


def fingerprint_sample(n: int, size: int, seed: int) -> list[int]:
    """The seeded fingerprint sample: ``min(size, n)`` distinct indices of ``range(n)``, sorted.
    ``size < 0`` means every sample."""
    if size < 0 or size >= n:
        return list(range(n))
    return sorted(random.Random(seed).sample(range(n), size))


def loader_batches(sample: list[int], batch_size: int, shard: tuple[int, int]) -> list[list[int]]:
    """The loader batches of ``sample`` (consecutive groups of ``batch_size``) owned by ``shard``
    (the shard that owns a batch's first index)."""
    bs = max(int(batch_size), 1)
    batches = in_batches(sample, bs)
    return [b for b in batches if b[0] % shard[1] == shard[0]]
