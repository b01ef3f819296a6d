"""Streaming scan of training data: cheap checks on every row, fingerprints on a sample.

``eagle3-conformance check-data`` runs here (its arguments and output: :mod:`eagle3_conformance.cli.check_data`).

=============  ========================================================================================
module         job
=============  ========================================================================================
``options``    :class:`ScanOptions` (one frozen object for the scan and its parts), :class:`Part`
``shards``     shard arithmetic: who owns which sample, the seeded fingerprint sample, its batches
``formats``    the two layouts told apart (:func:`detect_format`), a dataset's cheap identity
``sources``    sample ``i``'s file, ids and fingerprint captures, per layout
``rms``        the per-row per-slot RMS reduction, read once
``all_rows``   the registry's capture checks on every stored sample, slot statistics
``prefetch``   read-ahead of shard files into the page cache
``parts``      one part (a shard, in this process or a Ray task), the reference prefill
``results``    the parts merged: findings in sample order, the report's metadata
``driver``     :func:`scan`: resolve the options, run the parts, merge
=============  ========================================================================================

CPU accounting of the parts (CPUs per worker, torch threads) is :mod:`eagle3_conformance.scan.ray_tasks`'.

Two layouts (:data:`FORMATS`, told apart by :func:`detect_format` or forced) share one scan loop
through a per-sample source (:func:`open_source`: sample ``i``'s file, its ids, its fingerprint
captures, the directory-level findings):

- :data:`SPECULATORS`: a speculators 0.9.0 dataset (Arrow table + ``hidden_states/hs_{i}.safetensors``),
  described below;
- :data:`VLLM_EXTRACTION`: a directory of vLLM's extraction files (``{req_id}.safetensors``,
  ``hidden_states`` [T, N, H] + ``token_ids`` [T], no Arrow table; sample ``i`` is the ``i``-th file of
  :func:`extraction_files`, natural order). The same all-rows pass runs on every file with the
  file's own token ids (no Arrow ids to compare them with); the fingerprint sample is read by
  :mod:`eagle3_conformance.tools.vllm_hidden_states` (path :data:`VLLM_PATH`) with check-offline's rule
  for which planes are aux and which is the verifier.
  Other files and subdirectories are listed (a skipped ``data_files`` finding), never opened.

For every sample ``i`` of its shard of a speculators dataset the scanner

- memory-maps ``hidden_states/hs_{i}.safetensors`` with ``safetensors.safe_open`` (framework
  "pt"; nothing is read until touched) and reads the Arrow ``input_ids`` row (``datasets
  .load_from_disk``, zero-copy from the Arrow table);
- builds a :class:`eagle3_conformance.core.capture.Capture` of *views* of the on-disk tensors (path
  :data:`DISK_PATH`, ``stored=True``; ``feature = hs[:, :-1].flatten(1)``, ``verifier_last = hs[:, -1]``,
  exactly speculators' routing; ``rows = arange(len(token_ids))``, the on-disk bookkeeping "row t is
  token t") and runs the capture checks of the registry that declare a ``stored`` view on it
  (:mod:`eagle3_conformance.checks.registry`): slot count, widths, dtypes, row count (rows == tokens),
  stored token ids vs the Arrow input ids;
- streams the hidden states once, reducing every row of every slot to its RMS
  ``sqrt(mean(x**2))`` (float32 [T, N]; bfloat16 data directly by torch's norm kernel, other
  dtypes in float32 row blocks of about :data:`BLOCK_ELEMS` elements). The checks declared
  ``row-rms`` / ``slot-rms`` (finiteness, norm bands) are row-wise functions of that RMS (a row's RMS
  is non-finite iff the row holds NaN/Inf; bands are defined on it), so they run unchanged on a
  *reduced* Capture whose slots are the per-row RMS (one column per slot; the norm-band check is
  given the contract with ``target_hidden_size = 1`` so each column is one slot). Verdicts,
  row numbers and messages are the checks' own. A row whose float32 sum of squares overflows
  (|x| > 1.8e19 while finite) is recomputed in float64, so overflow is never reported as NaN.

Only one sample's tensors are mapped at a time; a background thread reads the next
:data:`PREFETCH` files sequentially into the page cache so disk reads overlap the arithmetic.

Slot identity (fingerprints against the reference model's forward) runs only on a seeded sample
of the dataset (``--sample N``, ``--seed``), and those samples go through the real speculators
loader (:class:`eagle3_conformance.tools.speculators_loader.TrainingLoader`: ``ArrowDataset`` + ``CollateFn``
with ``shift_batch``), findings on path ``"training"``. The report's ``meta.scope`` says which
checks ran on every row and which on the sample.

Sharding is by sample index modulo the shard count: shard ``i/N`` owns the samples ``s`` with
``s % N == i``. ``workers=W`` splits a shard ``i/N`` into sub-shards ``i + w*N`` of ``N*W``
(w = 0..W-1), one Ray task each (:mod:`eagle3_conformance.scan.ray_tasks`: a local Ray started on demand, or
the cluster at ``ray_address``); their results (:class:`eagle3_conformance.core.findings.Finding` objects,
pickled by Ray) stream back and are merged in sample order. With a reference, the driver first
computes the boundaries of every sampled sample once into the reference's disk cache
(:class:`eagle3_conformance.reference.ReferenceModel`), so the tasks read them instead of each
loading the target. The fingerprint sample is drawn over the whole dataset and cut into loader
batches of ``batch_size`` consecutive sampled indices; a batch belongs to the shard owning its
first index. So shards ``0/N .. N-1/N`` together produce exactly the findings of one unsharded run.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from eagle3_conformance.environment import torch_env

torch_env.prepare()  # before torch is imported: the package's thread settings (nothing without torch)

if TYPE_CHECKING:
    from eagle3_conformance.scan.all_rows import merge_slot_stats  # noqa: F401
    from eagle3_conformance.scan.driver import scan  # noqa: F401
    from eagle3_conformance.scan.formats import (  # noqa: F401
        FORMATS,
        READERS,
        SPECULATORS,
        VLLM_EXTRACTION,
        VLLM_PATH,
        dataset_identity,
        detect_format,
        extraction_files,
    )
    from eagle3_conformance.scan.options import BLOCK_ELEMS, DISK_PATH, LOADER_PATH, Part, ScanError, ScanOptions  # noqa: F401
    from eagle3_conformance.scan.parts import peak_rss_mb, prefill_reference, scan_part  # noqa: F401
    from eagle3_conformance.scan.prefetch import PREFETCH  # noqa: F401
    from eagle3_conformance.scan.results import DISK_CHECKS, ScanResult, contract_digest  # noqa: F401
    from eagle3_conformance.scan.rms import slot_rms  # noqa: F401
    from eagle3_conformance.scan.shards import SHARDING, fingerprint_sample, loader_batches, parse_shard, shard_indices  # noqa: F401
    from eagle3_conformance.scan.sources import open_source, shard_size  # noqa: F401

_WHERE: dict[str, str] = {
    **dict.fromkeys(('merge_slot_stats',), "all_rows"),
    **dict.fromkeys(('scan',), "driver"),
    **dict.fromkeys(('FORMATS', 'READERS', 'SPECULATORS', 'VLLM_EXTRACTION', 'VLLM_PATH', 'dataset_identity', 'detect_format', 'extraction_files',), "formats"),
    **dict.fromkeys(('BLOCK_ELEMS', 'DISK_PATH', 'LOADER_PATH', 'Part', 'ScanError', 'ScanOptions',), "options"),
    **dict.fromkeys(('peak_rss_mb', 'prefill_reference', 'scan_part',), "parts"),
    **dict.fromkeys(('PREFETCH',), "prefetch"),
    **dict.fromkeys(('DISK_CHECKS', 'ScanResult', 'contract_digest',), "results"),
    **dict.fromkeys(('slot_rms',), "rms"),
    **dict.fromkeys(('SHARDING', 'fingerprint_sample', 'loader_batches', 'parse_shard', 'shard_indices',), "shards"),
    **dict.fromkeys(('open_source', 'shard_size',), "sources"),
}
"""Re-exported name -> the module of this package defining it. Resolved on first use (PEP 562), so the
names whose module needs no torch (:class:`ScanOptions`, :class:`ScanError`, :class:`ScanResult`,
:func:`detect_format`, ...) import on a core-only install; ``scan``, ``parts``, ``all_rows``, ``rms`` and
``sources`` need torch."""

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    """``eagle3_conformance.scan.<name>`` for the names of :data:`_WHERE`, from their module.

    Raises:
        AttributeError: any other name.
    """
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
