"""One part of a scan (a shard, in this process or in a Ray task): the all-rows pass over every
sample it owns, the fingerprint sample through the path's own loader; and the driver's one-time
reference prefill for the parts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from eagle3_conformance.core.findings import Finding
from eagle3_conformance.scan.all_rows import PassState
from eagle3_conformance.scan.options import Part, ScanError
from eagle3_conformance.scan.prefetch import Prefetcher
from eagle3_conformance.scan.ray_tasks import torch_threads
from eagle3_conformance.scan.shards import fingerprint_sample, loader_batches, shard_indices
from eagle3_conformance.scan.sources import open_source


def scan_part(part: Part, on_progress: Optional[Callable[[int, int], None]] = None) -> dict[str, Any]:
    """Scan one shard in this process, with ``part.options.cpus_per_worker`` torch threads.

    Args:
        part: what to scan (contract, data directory, options with this part's shard and layout).
        on_progress: called with (samples done, bytes read) increments after each sample.

    Returns:
        A picklable dict: ``groups`` ([[sample, order, [Finding, ...]], ...]), ``slot_stats``,
        ``samples`` (dataset size), ``shard_samples``, ``bytes``, ``seconds``, ``threads``,
        ``fingerprint_samples`` (the sampled indices this part fingerprinted), ``format``,
        ``peak_rss_mb``, ``reference_forwards``, ``reference_disk_hits``.

    Raises:
        ScanError: the directory is not of ``part.layout`` or holds no samples.
        eagle3_conformance.reference.ReferenceError: the reference model cannot be loaded.
    """
    t0 = time.perf_counter()
    with torch_threads(part.options.cpus_per_worker):
        src = open_source(part.layout, part.data_dir)
        if src.n == 0:
            raise ScanError(f"{part.data_dir}: the dataset holds no samples")
        mine = list(shard_indices(src.n, part.shard))
        o = part.options
        batches = {b[0]: b for b in loader_batches(fingerprint_sample(src.n, o.sample, o.seed), o.batch_size,
                                                    part.shard)}
        pre = Prefetcher([src.file(j) for j in mine])
        try:
            res = _scan_loop(part, src, mine, batches, pre, on_progress)
        finally:
            pre.close()
    res["seconds"] = time.perf_counter() - t0
    if part.shard[0] == 0:  # dataset-level findings (files vs rows), once over all shards
        res["groups"].insert(0, [-1, 0, src.dataset_findings()])
    res["format"] = src.format
    return res


def _scan_loop(part: Part, src, mine: list[int], batches: dict[int, list[int]], pre: Prefetcher,
               on_progress) -> dict[str, Any]:
    from eagle3_conformance.suite.assess import sample_findings

    c = part.contract
    st = PassState(c, part.options.block_elems)
    groups: list[list[Any]] = []
    total = 0
    ref_model, f0, h0 = None, 0, 0
    sampled = False
    for pos, i in enumerate(mine):
        pre.advance(pos)
        found, nbytes = src.disk_findings(st, i)
        groups.append([i, 0, found])
        if i in batches:
            if not sampled:
                sampled = True
                if part.options.reference_dir:
                    ref_model = part.reference_model()
                    f0, h0 = ref_model.forwards, ref_model.disk_hits
            lf: list[Finding] = []
            for cap in src.captures(c, batches[i]):
                lf += sample_findings(c, cap, ref_model)
            groups.append([i, 1, lf])
        total += nbytes
        if on_progress:
            on_progress(1, nbytes)
    return {"groups": groups, "slot_stats": {k: v.to_json() for k, v in st.stats.items()}, "samples": src.n,
            "shard_samples": len(mine), "bytes": total, "threads": torch.get_num_threads(),
            "fingerprint_samples": sorted(j for b in batches.values() for j in b), "peak_rss_mb": peak_rss_mb(),
            "reference_forwards": ref_model.forwards - f0 if ref_model is not None else 0,
            "reference_disk_hits": ref_model.disk_hits - h0 if ref_model is not None else 0}


def peak_rss_mb() -> Optional[float]:
    """Peak resident set of this process in MB (``VmHWM``, Linux), None where unavailable."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def describe(part: Part) -> str:
    """A part in words, for a failed task's message."""
    return f"shard {part.shard[0]}/{part.shard[1]} (samples s % {part.shard[1]} == {part.shard[0]})"


def prefill_reference(part: Part) -> dict[str, Any]:
    """Compute, once in this process, the reference boundaries of every sampled sample of
    ``part.shard`` into the reference's disk cache (``part.options.ref_cache``), so that the scan
    tasks read them instead of each loading the target.

    Returns:
        ``{"samples": k, "forwards": f, "disk_hits": h, "seconds": s}``.

    Raises:
        ScanError: the dataset cannot be opened.
        eagle3_conformance.reference.ReferenceError: the reference cannot be loaded (missing shards, ...).
    """
    from eagle3_conformance.reference import ReferenceError

    t0 = time.perf_counter()
    o = part.options
    src = open_source(part.layout, part.data_dir)
    n = src.n
    idx = [j for b in loader_batches(fingerprint_sample(n, o.sample, o.seed), o.batch_size, part.shard)
           for j in b] if n else []
    if not idx:
        return {"samples": 0, "forwards": 0, "disk_hits": 0, "seconds": 0.0}
    model = part.reference_model()
    f0, h0 = model.forwards, model.disk_hits
    for j in idx:
        ids = src.token_ids(j)
        if ids is None:
            continue  # an unreadable file: the task reports it as a finding on that sample
        try:
            model.capture(ids)
        except ReferenceError:
            continue  # the task reports it as a finding on that sample (sample_findings)
    return {"samples": len(idx), "forwards": model.forwards - f0, "disk_hits": model.disk_hits - h0,
            "seconds": round(time.perf_counter() - t0, 3)}
