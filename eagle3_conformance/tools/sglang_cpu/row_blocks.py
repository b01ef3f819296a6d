"""Whether the speculative loop may run several prompts in one forward: row-block invariance of this torch build.

:func:`.spec_loop.speculative_decode` runs the target verify and the draft extend after verify of the
active prompts in one batch (``r = k + 1`` rows per prompt, as SGLang's worker batches its requests)
instead of one prompt at a time, which streams the target's weights once per step instead of once per
prompt. Its numbers must not change: on float32 a GEMM row's bits can depend on how many rows the call
has, because the BLAS picks its kernel by shape (on the project's AVX-512 host, torch 2.13 with MKL
2024.2, a 1-row and a 2-3-row call give other bits than a call of 4 rows or more, whose rows agree whatever
their count: what this probe finds there for the verify's 4 rows). The rest of a forward is per row (norms, rotary embedding,
activations, argmax) or per request (the stand-in attention), so the loop batches only where
:func:`rows_invariant` finds every GEMM shape of the two models giving the same bits to ``r``-row blocks
and to ``b * r`` rows, ``b = 2..B``, and the per-row mean of the norms doing the same; elsewhere it runs
one prompt at a time, as before. The draft's one-row steps always run one prompt at a time (1 row is a
kernel of its own).

The kernel choice depends on shapes, not values, so each (shape, dtype, r, B) is checked once per process,
on the model's own weights with seeded random inputs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

_SEEN: dict[tuple, bool] = {}


def rows_invariant(models: list[Any], rows: int, most: int) -> bool:
    """True when ``most`` requests of ``rows`` rows each may share a forward of ``models`` bit for bit.

    Args:
        models: ``torch.nn.Module`` objects (the target and the draft); every 2-D floating parameter is a
            GEMM weight ``[out, in]`` (or an embedding, tied to the LM head: a GEMM weight too).
        rows: rows per request (the verify's ``k + 1``).
        most: the largest number of requests batched (the prompts).

    Returns False for ``most < 2`` (nothing to batch). Raises nothing of its own.
    """
    if most < 2:
        return False
    weights: dict[tuple, torch.Tensor] = {}
    for m in models:
        for p in m.parameters():
            if p.dim() == 2 and p.is_floating_point():
                weights.setdefault((tuple(p.shape), p.dtype), p.detach())
    widths = {(w.shape[1], w.dtype) for w in weights.values()}  # what the GEMMs read: the norms' widths among them
    return (all(_gemm(w, rows, most) for w in weights.values())
            and all(_mean(width, dtype, rows, most) for width, dtype in sorted(widths, key=str)))


def _gemm(w: torch.Tensor, rows: int, most: int) -> bool:
    key = ("linear", tuple(w.shape), w.dtype, rows, most)
    if key not in _SEEN:
        x = _inputs(rows * most, w.shape[1], w.dtype)
        with torch.no_grad():
            blocks = torch.cat([F.linear(x[i * rows:(i + 1) * rows], w) for i in range(most)])
            _SEEN[key] = all(torch.equal(F.linear(x[:b * rows], w), blocks[:b * rows]) for b in range(2, most + 1))
    return _SEEN[key]


def _mean(width: int, dtype: torch.dtype, rows: int, most: int) -> bool:
    """RMSNorm's per-row ``x.pow(2).mean(-1)`` (``srt/layers/layernorm.py``, ``forward_native``) over
    ``b * rows`` rows against ``rows``-row blocks."""
    key = ("mean", width, dtype, rows, most)
    if key not in _SEEN:
        x = _inputs(rows * most, width, dtype).float()
        blocks = torch.cat([x[i * rows:(i + 1) * rows].pow(2).mean(-1) for i in range(most)])
        _SEEN[key] = all(torch.equal(x[:b * rows].pow(2).mean(-1), blocks[:b * rows]) for b in range(2, most + 1))
    return _SEEN[key]


def _inputs(n: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, width, generator=g).to(dtype)
