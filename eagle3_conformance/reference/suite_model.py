"""The reference model the conformance suite judges with: the target's boundaries cached on disk across runs."""

from __future__ import annotations

import os

from eagle3_conformance.environment.cache import REFERENCE_CACHE_ENV as CACHE_ENV
from eagle3_conformance.reference.model import ReferenceModel, default_cache_dir, load_reference_model


def suite_reference_model(target_dir, target) -> ReferenceModel:
    """The suite's (process-wide cached) reference model of ``target_dir``
    (:func:`eagle3_conformance.reference.load_reference_model`), its boundaries cached on disk in
    :func:`eagle3_conformance.reference.default_cache_dir` (keyed by the model's files, the compute dtype, the
    torch and transformers versions and the reference's code, and the token ids; the derandomized suite asks
    for the same tokens each run, so a warm run reads them back instead of running the target again);
    ``CONFORMANCE_REFERENCE_CACHE=0``: memory only."""
    return load_reference_model(target_dir, target, cache_dir=suite_cache_dir())


def suite_cache_dir():
    """The suite's reference disk cache: :func:`eagle3_conformance.reference.default_cache_dir`, or None
    (memory only) under ``CONFORMANCE_REFERENCE_CACHE=0``. The real fixtures' float32 data generation
    writes there too (:func:`eagle3_conformance.testbed.fixtures_real.write_data`)."""
    return None if os.environ.get(CACHE_ENV, "1") == "0" else default_cache_dir()
