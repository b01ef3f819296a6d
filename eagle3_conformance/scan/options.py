"""What a scan is asked to do: one frozen :class:`ScanOptions` for the scan and each of its parts,
and :class:`Part`, what one task scans (the options with its own shard)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from eagle3_conformance.contract import Contract
from eagle3_conformance.core.errors import DataError

if TYPE_CHECKING:
    from eagle3_conformance.reference import ReferenceModel

DISK_PATH = "training-disk"
"""Finding path of the all-rows scan (tensors as stored on disk for training)."""

LOADER_PATH = "training"
"""Finding path of the sampled samples (through speculators' own loader)."""

BLOCK_ELEMS = 1 << 21
"""Elements per float32 row block of the RMS pass (8 MiB of float32)."""


class ScanError(DataError):
    """The dataset cannot be scanned at all (not a dataset, no samples, Ray unreachable, a task that
    failed for good)."""


@dataclass(frozen=True)
class ScanOptions:
    """How to scan (every field has the ``check-data`` default).

    Attributes:
        shard: ``(i, N)``: the samples ``s % N == i`` (:func:`eagle3_conformance.scan.shards.shard_indices`).
        workers: Ray tasks to split the shard over (a local Ray started on demand, or the cluster at
            ``ray_address``); 1 without ``ray_address`` scans in this process, without Ray.
        sample: fingerprint sample size over the whole dataset (``-1``: all; 0: none).
        seed: seed of the fingerprint sample.
        reference_dir: HF target directory for fingerprints; None: fingerprints are skipped.
        batch_size: loader batch size for the sampled samples (CollateFn packing).
        block_elems: elements per float32 block of the RMS pass.
        ray_address: Ray cluster to run the tasks on (``host:port``, ``auto``); None: local Ray.
        ref_device, ref_dtype, stream_layers: how the reference forward runs
            (:class:`eagle3_conformance.reference.ReferenceModel`).
        ref_cache: folder of the reference's disk cache of boundaries; False: none; None: none
            in-process, :func:`eagle3_conformance.reference.default_cache_dir` with Ray tasks.
        max_retries: Ray re-runs of a task whose worker dies.
        ray_runtime_env: extra Ray runtime_env for a local Ray started here.
        data_format: ``"auto"`` (:func:`eagle3_conformance.scan.formats.detect_format`),
            ``"speculators"`` or ``"vllm-extraction"``.
        cpus_per_worker: CPUs (torch intra-op threads, and Ray ``num_cpus`` of each task) per
            worker; None: :func:`eagle3_conformance.scan.ray_tasks.default_cpus_per_worker`.

    Raises:
        ValueError: ``workers < 1`` or ``cpus_per_worker < 1``.
    """

    shard: tuple[int, int] = (0, 1)
    workers: int = 1
    sample: int = 32
    seed: int = 0
    reference_dir: Optional[str | Path] = None
    batch_size: int = 4
    block_elems: int = BLOCK_ELEMS
    ray_address: Optional[str] = None
    ref_device: str = "cpu"
    ref_dtype: str = "float32"
    stream_layers: bool = False
    ref_cache: Optional[str | Path | bool] = None
    max_retries: int = 2
    ray_runtime_env: Optional[dict[str, Any]] = None
    data_format: str = "auto"
    cpus_per_worker: Optional[int] = None

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.cpus_per_worker is not None and self.cpus_per_worker < 1:
            raise ValueError("cpus_per_worker must be >= 1")

    @property
    def use_ray(self) -> bool:
        """The parts run as Ray tasks (more than one worker, or a cluster named)."""
        return self.workers > 1 or bool(self.ray_address)


@dataclass(frozen=True)
class Part:
    """Everything one scan task needs (picklable: sent to Ray workers as it is).

    ``options`` are the scan's, resolved: ``shard`` is this part's (sub-)shard, ``data_format``
    the detected layout, ``cpus_per_worker`` the torch threads this part runs with, ``ref_cache``
    a folder or None, ``reference_dir`` a string or None.
    """

    contract: Contract
    data_dir: str
    options: ScanOptions

    @property
    def shard(self) -> tuple[int, int]:
        return self.options.shard

    @property
    def layout(self) -> str:
        return self.options.data_format

    def reference_model(self) -> ReferenceModel:
        """The (process-wide cached) reference model of this part, not loaded until needed.

        Raises:
            ValueError: the options name no ``reference_dir``.
            eagle3_conformance.reference.ReferenceError: the reference model cannot be loaded.
        """
        from eagle3_conformance.reference import load_reference_model

        o = self.options
        if o.reference_dir is None:
            raise ValueError("this scan names no reference_dir: no reference model")
        cache = None if isinstance(o.ref_cache, bool) else o.ref_cache  # False: no disk cache
        return load_reference_model(o.reference_dir, self.contract.target, device=o.ref_device, dtype=o.ref_dtype,
                                    stream_layers=o.stream_layers, cache_dir=cache)
