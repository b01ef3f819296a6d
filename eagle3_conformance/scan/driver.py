"""The public entry of a scan: resolve the options, run the parts (in this process or as Ray
tasks), merge them."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional

from eagle3_conformance.contract import Contract
from eagle3_conformance.scan.across import across_findings
from eagle3_conformance.scan.formats import SPECULATORS, VLLM_PATH, detect_format
from eagle3_conformance.scan.options import LOADER_PATH, Part, ScanError, ScanOptions
from eagle3_conformance.scan.parts import describe, prefill_reference, scan_part
from eagle3_conformance.scan.ray_tasks import default_cpus_per_worker, torch_threads
from eagle3_conformance.scan.results import ScanResult, merge_parts, scan_meta


def resolve(data_dir: str | Path, o: ScanOptions) -> ScanOptions:
    """``o`` as the parts need it: the detected layout, the CPUs per worker, the reference's disk
    cache (a folder with Ray tasks and a reference, unless False), paths as strings.

    Raises:
        ScanError: ``auto`` and the directory is of neither layout; ValueError: an unknown format.
    """
    fmt = detect_format(data_dir, o.data_format)
    cpus = o.cpus_per_worker or default_cpus_per_worker(o.workers, o.ray_address)
    ref_cache = o.ref_cache
    if o.use_ray and o.reference_dir and ref_cache is None:
        from eagle3_conformance.reference import default_cache_dir

        ref_cache = default_cache_dir()
    return replace(o, data_format=fmt, cpus_per_worker=cpus, ref_cache=str(ref_cache) if ref_cache else None,
                   reference_dir=str(o.reference_dir) if o.reference_dir else None)


def scan(c: Contract, data_dir: str | Path, options: Optional[ScanOptions] = None, *,
         on_progress: Optional[Callable[[int, int], None]] = None, **fields: Any) -> ScanResult:
    """Scan shard ``options.shard`` of a speculators 0.9.0 dataset, or of a directory of vLLM
    extraction files, against contract ``c``.

    Args:
        c: the contract.
        data_dir: Arrow ``save_to_disk`` directory with ``hidden_states/hs_{i}.safetensors``, or a
            directory of vLLM's ``{req_id}.safetensors`` extraction files (sample ``i``: the
            ``i``-th file in natural order).
        options: how to scan (:class:`ScanOptions`; default: its defaults).
        on_progress: called with (samples done, bytes read) increments as samples finish.
        **fields: :class:`ScanOptions` fields overriding ``options`` (``scan(c, d, sample=5)``).

    Returns:
        A :class:`eagle3_conformance.scan.results.ScanResult`.

    Raises:
        ScanError: not a dataset of the format (or, with ``auto``, of neither), no samples, Ray
            unreachable, or a task failed for good (the message names its shard).
        ValueError: ``workers < 1`` or ``cpus_per_worker < 1``, an unknown ``data_format``.
        TypeError: a keyword that is no :class:`ScanOptions` field.
        eagle3_conformance.reference.ReferenceError: the reference model cannot be loaded (1 worker).
    """
    o = resolve(data_dir, replace(options or ScanOptions(), **fields))
    i, count = o.shard
    base = Part(c, str(data_dir), o)
    parts_to_run = [base] if o.workers == 1 else [
        Part(c, str(data_dir), replace(o, shard=(i + w * count, count * o.workers))) for w in range(o.workers)]
    t0 = time.perf_counter()
    prefill = None
    if not o.use_ray:
        parts = [scan_part(base, on_progress)]
    else:
        from eagle3_conformance.scan.ray_tasks import TaskFailed, run_tasks

        if o.reference_dir and o.ref_cache and o.sample != 0:
            with torch_threads(o.cpus_per_worker):  # the forwards the tasks would have run, with their threads
                prefill = prefill_reference(base)
        cpus = o.cpus_per_worker
        assert cpus is not None  # resolve() sets it
        try:
            parts = run_tasks(scan_part, parts_to_run, describe=describe, on_progress=on_progress,
                              address=o.ray_address, max_retries=o.max_retries, runtime_env=o.ray_runtime_env,
                              cpus_per_task=cpus)
        except TaskFailed as e:
            raise ScanError(str(e)) from None
    seconds = time.perf_counter() - t0
    findings = merge_parts(parts)
    if count == 1:  # a shard of several: merge-reports runs the checks across samples (scan.across)
        findings += across_findings(c, data_dir, o.data_format, findings,
                                    VLLM_PATH if o.data_format != SPECULATORS else LOADER_PATH)
    return ScanResult(findings, scan_meta(c, data_dir, parts, findings, seconds, o, prefill))
