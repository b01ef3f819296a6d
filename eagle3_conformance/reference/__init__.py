"""The oracle: the target's residual stream (B_0..B_L and F) from transformers' own forward.

- :mod:`~eagle3_conformance.reference.model`: :class:`Reference`, :class:`ReferenceModel`,
  :func:`load_reference_model`, :func:`rms` (re-exported here: ``from eagle3_conformance.reference
  import Reference, rms`` is the public import path);
- :mod:`~eagle3_conformance.reference.engine`: the reference an engine path compares with, built
  from the target the engine itself loaded;
- :mod:`~eagle3_conformance.reference.greedy`: the target's greedy continuation (read by the
  engine tools, so it imports nothing of this package's heavier modules).
"""

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
