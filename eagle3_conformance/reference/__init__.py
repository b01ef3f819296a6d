"""The oracle: the target's residual stream (B_0..B_L and F) from transformers' own forward.

- :mod:`~eagle3_conformance.reference.model`: :class:`Reference`, :class:`ReferenceModel`,
  :func:`load_reference_model`, :func:`rms` (re-exported here: ``from eagle3_conformance.reference
  import Reference, rms`` is the public import path);
- :mod:`~eagle3_conformance.reference.engine`: the reference an engine path compares with, built
  from the target the engine itself loaded;
- :mod:`~eagle3_conformance.reference.greedy`: the target's greedy continuation, read by the engine
  tools (a lower layer, tests/layers.py).

The re-exports are resolved on first use (PEP 562 ``__getattr__``), so importing
``reference.greedy`` does not import ``reference.model`` (torch, the contract) with it, and the names
``reference.weights`` defines (:class:`ReferenceError` among them) import without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eagle3_conformance.reference.model import (
        DTYPES,
        MissingBoundary,
        Reference,
        ReferenceError,
        ReferenceModel,
        default_cache_dir,
        load_reference_model,
        missing_weights,
        rms,
        weight_index,
    )

__all__ = ["DTYPES", "MissingBoundary", "Reference", "ReferenceError", "ReferenceModel", "default_cache_dir",
           "load_reference_model", "missing_weights", "rms", "weight_index"]

_WEIGHTS = ("MissingBoundary", "ReferenceError", "missing_weights", "weight_index")
"""The names defined in ``reference.weights`` (no torch), served from there."""


def __getattr__(name: str) -> Any:
    """``eagle3_conformance.reference.<name>`` for the names of :data:`__all__`, from ``reference.model``.

    Raises:
        AttributeError: any other name.
    """
    if name in _WEIGHTS:  # torch-free: importable on a core-only install (the public ReferenceError)
        from eagle3_conformance.reference import weights

        return getattr(weights, name)
    if name in __all__:
        from eagle3_conformance.reference import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
