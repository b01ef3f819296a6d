"""The parts of a scan merged into one result: findings in sample order, and the report's
metadata (scope, slot statistics, identity of the dataset and the contract)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.contract import Contract, contract_source
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.report.slot_stats import merge_slot_stats
from eagle3_conformance.scan.formats import READERS, SPECULATORS, VLLM_EXTRACTION, VLLM_PATH, dataset_identity
from eagle3_conformance.scan.options import DISK_PATH, LOADER_PATH, ScanOptions
from eagle3_conformance.scan.shards import SHARDING

#: the findings of the all-rows pass, as the report's ``meta.scope`` names them
DISK_CHECKS = ("sample_available", "slot_count", "feature_width", "verifier_width", "dtype", "id_dtype",
               "finite", "row_count", "token_ids", "norm_band", "transfer_backend")


@dataclass
class ScanResult:
    """Findings and report metadata of a scan.

    Attributes:
        findings: disk findings (path :data:`DISK_PATH`, every sample of the shard) and loader
            findings (path :data:`LOADER_PATH`, the fingerprint sample), ordered by sample.
        meta: JSON-able report metadata (data, samples, shard, scope, slot_stats, bytes, ...).
    """

    findings: list[Finding]
    meta: dict[str, Any] = field(default_factory=dict)


def contract_digest(c: Contract) -> str:
    """sha256 of the contract file's bytes (of its canonical JSON when it has no file)."""
    src = contract_source(c)
    if src is not None and Path(src).is_file():
        return hashlib.sha256(Path(src).read_bytes()).hexdigest()
    return hashlib.sha256(c.model_dump_json().encode()).hexdigest()


def _unchecked_reason(reference_dir: Optional[str | Path], fps: list[int], sample: int) -> str:
    """Why slot identity was not judged, in words (when no fingerprint passed or failed)."""
    if not reference_dir:
        return "no reference model"
    if not fps:
        return "no sample was fingerprinted (--sample 0)" if sample == 0 else "no fingerprinted sample in this shard"
    return "every fingerprint was skipped"


def scope(c: Contract, fps: list[int], seed: int, reference_dir: Optional[str | Path],
          fmt: str = SPECULATORS) -> dict[str, str]:
    """Which checks ran on every row (disk path) and which on the sample (loader path)."""
    bands = "" if c.norm_bands.status == "calibrated" else " (norm bands uncalibrated: skipped)"
    if fmt == VLLM_EXTRACTION:
        fp = (" and fingerprints (slot identity, order, verifier, alignment) against the reference"
              if reference_dir else "; no reference: fingerprints skipped")
        return {
            DISK_PATH: ("every row and slot of every file in this shard (vLLM extraction {req_id}.safetensors; "
                        "token ids from the file itself: there is no Arrow table, so stored ids are not "
                        "compared with a dataset's): " + ", ".join(k for k in DISK_CHECKS if k != "token_ids")
                        + ", token_range" + bands),
            VLLM_PATH: (f"only the {len(fps)} sampled files in this shard (seed {seed}), through "
                   "eagle3_conformance.tools.vllm_hidden_states (the first K planes are aux, plane K the verifier B_L "
                   "when N = K + 1; rows paired at the contract's alignment offsets, no loss mask): capture "
                   "checks, alignment" + fp),
        }
    return {
        DISK_PATH: ("every row and slot of every sample in this shard (hidden_states/hs_{i}.safetensors "
                    "and the Arrow input_ids): " + ", ".join(DISK_CHECKS)
                    + bands),
        LOADER_PATH: (f"only the {len(fps)} sampled samples in this shard (seed {seed}), through "
                      "speculators ArrowDataset + CollateFn(shift_batch): capture checks, shift alignment"
                      + (" and fingerprints (slot identity, order, verifier, alignment) against the reference"
                         if reference_dir else "; no reference: fingerprints skipped")),
    }


def scan_meta(c: Contract, data_dir: str | Path, parts: list[dict[str, Any]], findings: list[Finding], seconds: float,
              o: ScanOptions, prefill: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The report metadata of a scan from its parts (see :class:`ScanResult`); ``o`` are the
    scan's resolved options (``data_format`` the detected layout), ``prefill`` what the driver's
    reference prefill did (:func:`eagle3_conformance.scan.parts.prefill_reference`)."""
    meta = _common_meta(c, data_dir, parts, findings, seconds, o)
    if o.use_ray:
        meta["engine"] = {"kind": "ray", "address": o.ray_address or "local (started on demand)",
                          "tasks": len(parts), "nodes": len({p["ray"]["node_id"] for p in parts}),
                          "task_seconds": [round(p["seconds"], 3) for p in parts],
                          "cpus_per_task": o.cpus_per_worker,
                          "task_peak_rss_mb": [p.get("peak_rss_mb") for p in parts]}
    if o.reference_dir:
        meta["reference_forward"] = {"device": o.ref_device, "dtype": o.ref_dtype, "stream_layers": o.stream_layers,
                                     "cache": str(o.ref_cache) if o.ref_cache else None}
        if o.use_ray:  # who ran the forward: the driver once (prefill), the tasks (should be 0)
            meta["reference_forward"].update({
                "prefill": prefill, "task_forwards": sum(p.get("reference_forwards", 0) for p in parts),
                "task_disk_hits": sum(p.get("reference_disk_hits", 0) for p in parts)})
    return meta


def _common_meta(c: Contract, data_dir: str | Path, parts: list[dict[str, Any]], findings: list[Finding], seconds: float,
                 o: ScanOptions) -> dict[str, Any]:
    from eagle3_conformance import report

    i, count = o.shard
    fmt, sample, seed, reference_dir = o.data_format, o.sample, o.seed, o.reference_dir
    fps = sorted(j for p in parts for j in p["fingerprint_samples"])
    checked = report.slot_identity_checked(findings)
    return {
        "data": str(data_dir),
        "format": fmt,
        "reader": dict(READERS[fmt]),
        "samples": parts[0]["samples"],
        "shard": f"{i}/{count}",
        "sharding": SHARDING,
        "shard_samples": sum(p["shard_samples"] for p in parts),
        "workers": o.workers,
        "reference": str(reference_dir) if reference_dir else "none (slot identity not checked)",
        "fingerprint_sample": {"size": sample, "seed": seed, "batch_size": o.batch_size, "indices": fps},
        "dataset_identity": dataset_identity(data_dir, fmt, parts[0]["samples"]),
        "scope": scope(c, fps, seed, reference_dir, fmt),
        "slot_stats": merge_slot_stats([p["slot_stats"] for p in parts]),
        "bytes": sum(p["bytes"] for p in parts),
        "seconds": round(seconds, 3),
        "threads_per_worker": [p.get("threads") for p in parts],
        "peak_rss_mb": max((p["peak_rss_mb"] for p in parts if p.get("peak_rss_mb") is not None), default=None),
        "contract_name": c.name,
        "contract_sha256": contract_digest(c),
        "slot_identity": {"checked": checked,
                          "reason": None if checked else _unchecked_reason(reference_dir, fps, sample)},
    }


def merge_parts(parts: list[dict[str, Any]]) -> list[Finding]:
    """The findings of every part, ordered by sample (dataset-level findings first), the all-rows
    findings of a sample before its fingerprint sample's."""
    groups = sorted((g for p in parts for g in p["groups"]), key=lambda g: (g[0], g[1]))
    return [f for g in groups for f in g[2]]
