"""Streaming scan of training data: cheap checks on every row, fingerprints on a sample.

``eagle3-conformance check-data`` runs here (its arguments and output: :mod:`eagle3_conformance.cli.check_data`).
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
  for which planes are aux and which is the verifier (see :class:`_VllmExtractionSource`).
  Other files and subdirectories are listed (a skipped ``data_files`` finding), never opened.

For every sample ``i`` of its shard of a speculators dataset the scanner

- memory-maps ``hidden_states/hs_{i}.safetensors`` with ``safetensors.safe_open`` (framework
  "pt"; nothing is read until touched) and reads the Arrow ``input_ids`` row (``datasets
  .load_from_disk``, zero-copy from the Arrow table);
- builds a :class:`eagle3_conformance.capture.Capture` of *views* of the on-disk tensors (path
  :data:`DISK_PATH`; ``feature = hs[:, :-1].flatten(1)``, ``verifier_last = hs[:, -1]``, exactly
  speculators' routing; ``rows = arange(len(token_ids))``, the on-disk bookkeeping "row t is
  token t") and runs the pure checks of :data:`eagle3_conformance.checks.CAPTURE_CHECKS` on it: slot
  count, widths, dtypes, row count (rows == tokens), stored token ids vs the Arrow input ids;
- streams the hidden states once, reducing every row of every slot to its RMS
  ``sqrt(mean(x**2))`` (float32 [T, N]; bfloat16 data directly by torch's norm kernel, other
  dtypes in float32 row blocks of about :data:`BLOCK_ELEMS` elements). The two
  data-touching checks, :func:`eagle3_conformance.checks.check_finite` and
  :func:`eagle3_conformance.checks.check_norm_bands`, are row-wise functions of that RMS (a row's RMS is
  non-finite iff the row holds NaN/Inf; bands are defined on it), so they run unchanged on a
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
(w = 0..W-1), one Ray task each (:mod:`eagle3_conformance.ray_tasks`: a local Ray started on demand, or
the cluster at ``ray_address``); their results stream back and are merged here in sample order.
With a reference, the driver first computes the boundaries of every sampled sample once into the
reference's disk cache (:class:`eagle3_conformance.reference.ReferenceModel`), so the tasks read them
instead of each loading the target. The fingerprint sample is drawn over the whole dataset
and cut into loader batches of ``batch_size`` consecutive sampled indices; a batch belongs to
the shard owning its first index. So shards ``0/N .. N-1/N`` together produce exactly the
findings of one unsharded run.
"""

from __future__ import annotations

import hashlib
import os
import math
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

from eagle3_conformance import torch_env

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.capture import Capture  # noqa: E402
from eagle3_conformance.contract import Contract, contract_source  # noqa: E402
from eagle3_conformance.errors import DataError  # noqa: E402
from eagle3_conformance.findings import Finding  # noqa: E402
from eagle3_conformance.fp8_payload import SCALES_KEY  # noqa: E402  (hs-connectors' FP8 scales key)
from eagle3_conformance.tools.vllm_hidden_states import PATH as VLLM_PATH  # noqa: E402

DISK_PATH = "training-disk"
"""Finding path of the all-rows scan (tensors as stored on disk for training)."""

LOADER_PATH = "training"
"""Finding path of the sampled samples (through speculators' own loader)."""

BLOCK_ELEMS = 1 << 21
"""Elements per float32 row block of the RMS pass (8 MiB of float32)."""

PREFETCH = 2
"""How many shard files the prefetch thread may read ahead of the scan."""

SHARDING = "modulo: shard i/N owns the samples s with s % N == i"

DISK_CHECKS = ("sample_available", "slot_count", "feature_width", "verifier_width", "dtype", "id_dtype",
               "finite", "row_count", "token_ids", "norm_band", "transfer_backend")


_DTYPE_OF = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


class ScanError(DataError):
    """The dataset cannot be scanned at all (not a dataset, no samples, Ray unreachable, a task that
    failed for good)."""


# --- shard arithmetic --------------------------------------------------------------------------


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
    batches = [sample[k:k + bs] for k in range(0, len(sample), bs)]
    return [b for b in batches if b[0] % shard[1] == shard[0]]


# --- per-row reduction -------------------------------------------------------------------------


EXACT_NEAR_REL = 2.0 ** -7
"""bfloat16 fast path: rows whose RMS lies within this relative distance of a given edge (a band
limit) are recomputed exactly in float32, so verdicts equal the float32 reduction's."""


def slot_rms(hs: torch.Tensor, block_elems: int = BLOCK_ELEMS, buf: Optional[torch.Tensor] = None,
             exact_near: Optional[list[list[float]]] = None) -> torch.Tensor:
    """Per-row per-slot RMS of stored hidden states, read once.

    bfloat16 data is reduced directly by torch's norm kernel (float accumulation, the RMS rounded
    to bfloat16: relative error <= 2**-8); other dtypes are converted in float32 row blocks.

    Args:
        hs: [T, N, H] tensor of any float dtype (bf16, fp16, fp32, fp8); typically a
            memory-mapped view, read once.
        block_elems: elements per float32 block (memory used is 4 bytes x this).
        buf: optional reusable float32 scratch of at least one block ([B, N, H]).
        exact_near: per slot, values (RMS units, e.g. a norm band's lo and hi) near which the
            result must be exact: bfloat16 rows within :data:`EXACT_NEAR_REL` of one are
            recomputed in float32, so a comparison with those values is decided as the float32
            reduction decides it.

    Returns:
        [T, N] float32: ``sqrt(mean(x**2))`` over H for each row and slot (for bfloat16 data
        within a relative 2**-8 of the exact value); NaN or Inf exactly
        where the row/slot holds a NaN or Inf (finite rows that overflow float32 are recomputed
        in float64).
    """
    T, N, H = hs.shape
    out = torch.empty(T, N, dtype=torch.float32)
    if T == 0:
        return out
    if H == 0:
        return out.zero_()
    if hs.dtype == torch.bfloat16:
        # torch's CPU norm kernel reads the bf16 data once and accumulates in float (the opmath
        # type of bfloat16); only the result is rounded to bfloat16: relative error <= 2**-8, the
        # data's own precision (tests/test_scan.py compares with a float64 sum). About 2.5x faster
        # than converting row blocks to float32 first (12 vs 5 GB/s on one core of the 2-core VM).
        out = torch.linalg.vector_norm(hs, dim=-1).float().mul_(1.0 / math.sqrt(H))
        for k, edges in enumerate((exact_near or [])[:N]):
            if not edges:
                continue
            e = torch.tensor([float(v) for v in edges], dtype=torch.float32)
            near = ((out[:, k, None] - e).abs() <= EXACT_NEAR_REL * e.abs()).any(-1).nonzero().flatten()
            if near.numel():
                out[near, k] = torch.linalg.vector_norm(hs[near, k].float(), dim=-1).mul_(1.0 / math.sqrt(H))
        return _overflow_rows(hs, out)
    rows = max(1, block_elems // max(N * H, 1))
    if hs.dtype != torch.float32 and (buf is None or buf.shape[0] < min(rows, T) or buf.shape[1:] != (N, H)):
        buf = torch.empty(min(rows, T), N, H, dtype=torch.float32)
    for a in range(0, T, rows):
        b = min(a + rows, T)
        x = hs[a:b]
        if x.dtype != torch.float32:
            xf = buf[: b - a]
            xf.copy_(x)
            x = xf
        torch.linalg.vector_norm(x, dim=-1, out=out[a:b])
    out.mul_(1.0 / math.sqrt(H))
    return _overflow_rows(hs, out)


def _overflow_rows(hs: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out`` with its non-finite entries recomputed in float64 where the row itself is finite
    (float32 overflow of the sum of squares); NaN/Inf rows stay non-finite."""
    bad = (~torch.isfinite(out)).nonzero()
    for t, k in bad.tolist():  # rare: NaN/Inf rows, or float32 overflow of the sum of squares
        x = hs[t, k]
        if bool(torch.isfinite(x).all()):
            out[t, k] = float(x.double().pow(2).mean().sqrt())
    return out


def _reduced_contract(c: Contract) -> Contract:
    """The contract as seen by checks run on per-row RMS columns: each slot is 1 wide."""
    return c.model_copy(update={"draft": c.draft.model_copy(update={"target_hidden_size": 1})})


def _slot_label(k: int, n: int) -> str:
    return "verifier" if k == n - 1 else f"slot {k}"


# --- Arrow ids ---------------------------------------------------------------------------------


class _ArrowIds:
    """Row -> int64 ``input_ids`` tensor, read zero-copy from the Arrow table."""

    def __init__(self, ds):
        self.ds = ds
        self.col = None
        if getattr(ds, "_indices", None) is None:
            col = ds.data.table.column("input_ids")
            self.col = col
            self.starts = []
            s = 0
            for ch in col.chunks:
                self.starts.append(s)
                s += len(ch)

    def __call__(self, i: int) -> torch.Tensor:
        if self.col is None:
            return torch.as_tensor(self.ds[i]["input_ids"]).long()
        import bisect

        k = bisect.bisect_right(self.starts, i) - 1
        v = self.col.chunk(k)[i - self.starts[k]].values
        return torch.from_numpy(v.to_numpy(zero_copy_only=False).astype("int64", copy=True))


class _Prefetcher:
    """A daemon thread that asks the kernel to read upcoming shard files into the page cache
    before the memory-mapped pass faults on them, staying at most ``ahead`` files ahead of the
    consumer.

    On Linux it calls ``posix_fadvise(POSIX_FADV_WILLNEED)`` on each file: the kernel starts
    asynchronous read-ahead of the pages not yet cached and skips the cached ones, so a warm
    cache costs nothing (reading the file with ``readinto``, as before, copied every byte once
    more: 2.5x slower warm on 2 cores, no faster cold; benchmarks/bench_check_data.py). Where
    ``posix_fadvise`` is missing (macOS) it reads the file in large ``readinto`` calls instead."""

    def __init__(self, paths: list[Path], ahead: int = PREFETCH, chunk: int = 8 << 20):
        import threading

        self.paths = paths
        self.ahead = ahead
        self.chunk = chunk
        self.current = 0
        self.cv = threading.Condition()
        self.stop = False
        self.thread = threading.Thread(target=self._run, name="conformance-prefetch", daemon=True)
        if ahead > 0 and paths:
            self.thread.start()

    def _run(self) -> None:
        advise = hasattr(os, "posix_fadvise")
        view = None if advise else memoryview(bytearray(self.chunk))
        for j, p in enumerate(self.paths):
            with self.cv:
                while not self.stop and j > self.current + self.ahead:
                    self.cv.wait()
                if self.stop:
                    return
                if j < self.current:
                    continue  # the consumer is already past it
            try:
                if advise:
                    fd = os.open(p, os.O_RDONLY)
                    try:
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                    finally:
                        os.close(fd)
                    continue
                with open(p, "rb", buffering=0) as f:
                    while f.readinto(view):
                        if self.stop:
                            return
            except OSError:
                continue  # the scan reports unreadable files itself

    def advance(self, i: int) -> None:
        """The consumer now works on file ``i``."""
        with self.cv:
            self.current = i
            self.cv.notify()

    def close(self) -> None:
        with self.cv:
            self.stop = True
            self.cv.notify()


# --- one part (a shard, in this process) -------------------------------------------------------


@dataclass
class PartSpec:
    """Everything one scan task needs (picklable: sent to Ray workers)."""

    contract: dict[str, Any]
    data_dir: str
    shard: tuple[int, int]
    sample: int = 32
    seed: int = 0
    reference_dir: Optional[str] = None
    batch_size: int = 4
    block_elems: int = BLOCK_ELEMS
    ref_device: str = "cpu"
    ref_dtype: str = "float32"
    stream_layers: bool = False
    ref_cache: Optional[str] = None
    layout: str = "speculators"
    threads: Optional[int] = None
    """torch intra-op threads while this part runs (None: leave the process's setting)."""

    def reference_model(self, target):
        """The (process-wide cached) reference model of this spec, not loaded until needed."""
        from eagle3_conformance.reference import load_reference_model

        return load_reference_model(self.reference_dir, target, device=self.ref_device, dtype=self.ref_dtype,
                                    stream_layers=self.stream_layers, cache_dir=self.ref_cache)


@dataclass
class _Stats:
    rows: int = 0
    finite_rows: int = 0
    rms_sum: float = 0.0
    rms_min: float = math.inf
    rms_max: float = -math.inf

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "finite_rows": self.finite_rows, "rms_sum": self.rms_sum,
                "rms_min": None if self.finite_rows == 0 else self.rms_min,
                "rms_max": None if self.finite_rows == 0 else self.rms_max}


def merge_slot_stats(parts: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Combine per-slot RMS statistics of several parts (rows, finite_rows, rms_sum summed; min,
    max combined; ``rms_mean`` = rms_sum / finite_rows recomputed)."""
    out: dict[str, dict[str, Any]] = {}
    for p in parts:
        for label, s in p.items():
            o = out.setdefault(label, {"rows": 0, "finite_rows": 0, "rms_sum": 0.0, "rms_min": None, "rms_max": None})
            o["rows"] += int(s["rows"])
            o["finite_rows"] += int(s["finite_rows"])
            o["rms_sum"] += float(s["rms_sum"])
            for k, fn in (("rms_min", min), ("rms_max", max)):
                if s.get(k) is not None:
                    o[k] = s[k] if o[k] is None else fn(o[k], s[k])
    for o in out.values():
        o["rms_mean"] = o["rms_sum"] / o["finite_rows"] if o["finite_rows"] else None
    return out


def _band_edges(c: Contract, n: int, verifier: bool = True) -> Optional[list[list[float]]]:
    """Per stored slot (aux slots, then the verifier when ``verifier``), the RMS values a norm-band
    verdict turns on: the band's lo and hi and the massive-activation cut
    (:func:`eagle3_conformance.checks.band_rows`)."""
    if c.norm_bands.status != "calibrated":
        return None
    ratio = c.norm_bands.massive_activation_ratio
    out = []
    for k in range(n):
        b = c.verifier_last.parsed if verifier and k == n - 1 else (c.aux[k] if k < c.num_slots else None)
        band = c.band_for(b) if b is not None else None
        if band is None:
            out.append([])
            continue
        edges = [band.lo, band.hi]
        if ratio and band.lo > 0:
            edges.append(ratio * (band.lo * band.hi) ** 0.5)
        out.append(edges)
    return out


def _disk_findings(c: Contract, rc: Contract, i: int, hs_path: Path, src_ids: Optional[torch.Tensor],
                   stats: dict[str, _Stats], block_elems: int, buf_holder: list,
                   verifier: bool = True, name: Optional[str] = None) -> tuple[list[Finding], int]:
    """All-rows checks of sample ``i``. Returns (findings, bytes read); never raises for bad data.

    ``src_ids``: the sample's token ids from elsewhere (the Arrow row), compared with the file's;
    None leaves that comparison out (vLLM extraction files: nothing else holds the ids).
    ``verifier``: the last of the N planes is the verifier (speculators' routing, N = K + 1);
    False reads all N planes as aux slots (raw vLLM extraction output with N = K: no B_L plane),
    so ``feature = hs.flatten(1)`` and the verifier's width, finiteness and band do not apply.
    ``name``: the file as findings name it, relative to the data directory (default
    ``hidden_states/{file name}``, speculators' layout)."""
    from safetensors import safe_open

    from eagle3_conformance import checks

    where = f"sample {i}"
    empty = torch.zeros(0, c.capture.feature_width)
    norow = torch.zeros(0, dtype=torch.long)

    def unavailable(reason: str) -> list[Finding]:
        ids = src_ids if src_ids is not None else norow
        cap = Capture(DISK_PATH, where, ids, empty, norow, source_token_ids=src_ids, unavailable=reason)
        return checks.check_sample_available(c, cap)

    if not hs_path.is_file():
        return unavailable(f"hidden_states/{hs_path.name} is missing"), 0
    nbytes = hs_path.stat().st_size
    try:
        with safe_open(str(hs_path), framework="pt") as f:
            keys = set(f.keys())
            missing = {"hidden_states", "token_ids"} - keys
            if missing:
                return unavailable(f"{hs_path.name} has no {sorted(missing)}"), nbytes
            hs = f.get_tensor("hidden_states")
            tok = f.get_tensor("token_ids")
            scales = f.get_tensor(SCALES_KEY) if SCALES_KEY in keys else None
    except Exception as e:  # safetensors raises SafetensorError / OSError on a corrupt file
        return unavailable(f"{hs_path.name} could not be read: {type(e).__name__}: {e}"), nbytes
    if hs.ndim != 3:
        return unavailable(f"{hs_path.name}: hidden_states is {list(hs.shape)}, expected [T, N, H]"), nbytes
    T, N, H = hs.shape
    from eagle3_conformance import fp8_payload

    payload = fp8_payload.payload(name or f"hidden_states/{hs_path.name}", hs, scales)
    # hs-connectors' fp8 backend (training.transfer: fp8): the trainer sees hidden_states x scales
    # (FP8Transfer, transfer.py:212-248); the per-row RMS is taken of those values
    dequant = c.training.transfer == "fp8" and (scales is not None or payload["dtype"] in checks.FP8_DTYPES)
    if dequant:
        if scales is None:
            return unavailable(f"{hs_path.name}: {payload['dtype']} hidden_states without {SCALES_KEY} "
                               "(training.transfer: fp8 needs them)"), nbytes
        if list(scales.shape) != [T, 1, 1] or not scales.is_floating_point():
            return unavailable(f"{hs_path.name}: {SCALES_KEY} is {list(scales.shape)} {payload['scales_dtype']}, "
                               f"expected [T, 1, 1] = [{T}, 1, 1] float32 (one scale per token)"), nbytes
    tok = tok.reshape(-1)
    last = verifier and N > 0  # the last plane is the verifier slot
    cap = Capture(DISK_PATH, where, token_ids=tok, feature=hs[:, :-1].flatten(1) if last else hs.flatten(1),
                  rows=torch.arange(int(tok.shape[0]), dtype=torch.long),
                  verifier_last=hs[:, -1] if last else None, verifier_offset=0, source_token_ids=src_ids,
                  provenance={"sample": i, "file": str(hs_path), "payload": payload,
                              "transfer": c.training.transfer})
    # one streamed pass over the data: per-row per-slot RMS, float32 [T, N]
    buf = buf_holder[0] if buf_holder else None
    rows_per_block = max(1, block_elems // max(N * H, 1))
    # float32 scratch, kept across samples, for the dtypes slot_rms converts in row blocks (not
    # float32, read directly; not bfloat16, reduced by torch's bf16 norm without a copy)
    if hs.dtype not in (torch.float32, torch.bfloat16) and N * H and (buf is None or buf.shape[1:] != (N, H) or buf.shape[0] < min(rows_per_block, T)):
        buf = torch.empty(max(1, min(rows_per_block, T)), N, H, dtype=torch.float32)
        buf_holder[:] = [buf]
    edges = _band_edges(c, N, last) if H == c.draft.target_hidden_size and not dequant else None  # fp8: exact
    r = slot_rms(hs, block_elems, buf, edges) if N else torch.zeros(T, 0)
    if dequant:
        r = r * scales.reshape(T, 1).float()  # rms(q * s_t) = s_t * rms(q): one scale per token
    reduced = Capture(DISK_PATH, where, token_ids=tok, feature=r[:, :-1] if last else r,
                      rows=torch.arange(T, dtype=torch.long), verifier_last=r[:, -1:] if last else None, verifier_offset=0,
                      provenance=cap.provenance)
    from eagle3_conformance import datacheck

    out = checks.check_sample_available(c, cap)
    out += datacheck.sample_length_findings(cap) + datacheck.token_range_findings(cap, c.target.vocab_size)
    for chk in checks.CAPTURE_CHECKS:
        if chk is checks.check_finite:
            out += chk(c, reduced)
        elif dequant and chk in (checks.check_dtype, checks.check_tensor_dtypes):
            # what the trainer receives: FP8Transfer's dequantize_dtype (data_dtype), not the float8 codes
            deq = _DTYPE_OF[c.data_dtype]
            out += chk(c, replace(cap, feature=torch.empty(0, dtype=deq),
                                  verifier_last=torch.empty(0, dtype=deq) if last else None))
        elif chk is checks.check_norm_bands:
            if c.norm_bands.status != "calibrated":
                out += chk(c, cap)  # a skip; reads no data
            elif H == c.draft.target_hidden_size:
                out += chk(rc, reduced)
        else:
            out += chk(c, cap)
    fin = torch.isfinite(r)
    for k in range(N):
        s = stats.setdefault(_slot_label(k, N) if last else f"slot {k}", _Stats())
        col, ok = r[:, k], fin[:, k]
        s.rows += T
        nf = int(ok.sum())
        s.finite_rows += nf
        if nf:
            v = col[ok]
            s.rms_sum += float(v.double().sum())
            s.rms_min = min(s.rms_min, float(v.min()))
            s.rms_max = max(s.rms_max, float(v.max()))
    del cap, reduced, hs, tok
    return out, nbytes


def scan_part(spec: PartSpec, on_progress: Optional[Callable[[int, int], None]] = None) -> dict[str, Any]:
    """Scan one shard in this process.

    Args:
        spec: what to scan (contract as a dict, data directory and its layout, shard, sample, reference).
        on_progress: called with (samples done, bytes read) increments after each sample.

    Returns:
        A JSON-able dict: ``groups`` ([[sample, order, [finding json...]], ...]), ``slot_stats``,
        ``samples`` (dataset size), ``shard_samples``, ``bytes``, ``seconds``,
        ``fingerprint_samples`` (the sampled indices this part fingerprinted), ``format``.

    Raises:
        ScanError: the directory is not of ``spec.layout`` or holds no samples.
        eagle3_conformance.reference.ReferenceError: the reference model cannot be loaded.
    """
    t0 = time.perf_counter()
    with torch_threads(spec.threads):
        return _scan_part(spec, on_progress, t0)


def _scan_part(spec: PartSpec, on_progress, t0: float) -> dict[str, Any]:
    c = Contract.model_validate(spec.contract)
    rc = _reduced_contract(c)
    src = open_source(spec.layout, spec.data_dir)
    n = src.n
    if n == 0:
        raise ScanError(f"{spec.data_dir}: the dataset holds no samples")
    mine = list(shard_indices(n, spec.shard))
    sample = fingerprint_sample(n, spec.sample, spec.seed)
    batches = {b[0]: b for b in loader_batches(sample, spec.batch_size, spec.shard)}
    pre = _Prefetcher([src.file(j) for j in mine])
    try:
        res = _scan_loop(spec, c, rc, src, mine, batches, pre, on_progress, t0, n)
    finally:
        pre.close()
    if spec.shard[0] == 0:  # dataset-level findings (files vs rows), once over all shards
        res["groups"].insert(0, [-1, 0, [f.to_json() for f in src.dataset_findings()]])
    res["format"] = src.format
    return res


def _scan_loop(spec, c, rc, src, mine, batches, pre, on_progress, t0, n) -> dict[str, Any]:
    stats: dict[str, _Stats] = {}
    groups: list[list[Any]] = []
    total = 0
    buf_holder: list = []
    ref_model = None
    sampled = False
    for pos, i in enumerate(mine):
        pre.advance(pos)
        found, nbytes = src.disk_findings(c, rc, i, stats, spec.block_elems, buf_holder)
        groups.append([i, 0, [f.to_json() for f in found]])
        if i in batches:
            from eagle3_conformance.assess import sample_findings

            if not sampled:
                sampled = True
                if spec.reference_dir:
                    ref_model = spec.reference_model(c.target)
                    f0, h0 = ref_model.forwards, ref_model.disk_hits
            lf: list[Finding] = []
            for cap in src.captures(c, batches[i]):
                lf += sample_findings(c, cap, ref_model)
            groups.append([i, 1, [f.to_json() for f in lf]])
        total += nbytes
        if on_progress:
            on_progress(1, nbytes)
    return {"groups": groups, "slot_stats": {k: v.to_json() for k, v in stats.items()}, "samples": n,
            "shard_samples": len(mine), "bytes": total, "seconds": time.perf_counter() - t0,
            "threads": torch.get_num_threads(),
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


# --- data layouts: where sample i's ids and file come from -------------------------------------

SPECULATORS = "speculators"
"""Layout: a speculators 0.9.0 dataset (Arrow ``save_to_disk`` table + ``hidden_states/hs_{i}.safetensors``)."""

VLLM_EXTRACTION = "vllm-extraction"
"""Layout: a directory of vLLM extraction files (``{req_id}.safetensors`` as ``ExampleHiddenStatesConnector``
writes them; no Arrow table), read by :mod:`eagle3_conformance.tools.vllm_hidden_states`."""

FORMATS = (SPECULATORS, VLLM_EXTRACTION)

READERS = {
    SPECULATORS: {DISK_PATH: "safetensors.safe_open (hidden_states/hs_{i}.safetensors) + Arrow input_ids",
                  LOADER_PATH: "speculators 0.9.0 ArrowDataset + CollateFn(shift_batch)"},
    VLLM_EXTRACTION: {DISK_PATH: "safetensors.safe_open ({req_id}.safetensors; token ids: the file's own)",
                      VLLM_PATH: "eagle3_conformance.tools.vllm_hidden_states.load_capture (safetensors.safe_open; "
                                 "rows paired at the contract's alignment offsets, no loss mask)"},
}
"""What read each path of a scan, per layout (the report's ``meta.reader``)."""

_ARROW_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
"""Files ``datasets.load_from_disk`` looks for (datasets 5.1.0 ``load.py:1742-1746``: DATASET_INFO_FILENAME
+ DATASET_STATE_JSON_FILENAME, or DATASETDICT_JSON_FILENAME). Any one of them, or a top-level
``*.arrow`` file, makes a directory a speculators dataset for detection, so that a dataset whose
table is damaged (say ``state.json`` lost) is reported as such rather than read as bare files."""

_VLLM_KEYS = ("hidden_states", "token_ids")


def _safetensors_keys(path: Path) -> Optional[set[str]]:
    """The tensor names in a safetensors file's header (nothing else is read), None if it is not one."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return set(f.keys())
    except Exception:  # SafetensorError / OSError: not safetensors, truncated header, unreadable
        return None


def _is_arrow_dir(d: Path) -> bool:
    return any((d / m).is_file() for m in _ARROW_MARKERS) or (d.is_dir() and any(d.glob("*.arrow")))


def extraction_files(d: Path) -> tuple[Path, list[Path]]:
    """The vLLM extraction files of directory ``d``: the ``*.safetensors`` files directly in it, or,
    when it has none, those directly in ``d/hidden_states`` (speculators' datagen before the Arrow
    table exists); natural order (:func:`eagle3_conformance.tools.vllm_hidden_states.find_files`: ``req-2``
    before ``req-10``). Subdirectories are not searched. Returns (the folder read, its files),
    files empty when neither holds one."""
    import glob as _glob

    from eagle3_conformance.tools.vllm_hidden_states import SUFFIX, find_files

    for sub in (d, d / "hidden_states"):
        try:
            if sub.is_dir() and any(p.suffix == SUFFIX and p.is_file() for p in sub.iterdir()):
                return sub, find_files(_glob.escape(str(sub)) + "/*" + SUFFIX)
        except (OSError, DataError):
            continue
    return d, []


def detect_format(data_dir: str | Path, requested: str = "auto") -> str:
    """The layout of ``data_dir``: ``requested`` when it names one of :data:`FORMATS`; for ``"auto"``,
    :data:`SPECULATORS` when the directory holds a ``datasets`` ``save_to_disk`` table (any file of
    :data:`_ARROW_MARKERS`, or a top-level ``*.arrow``), else :data:`VLLM_EXTRACTION` when a
    file of :func:`extraction_files` (directly in it, or in its ``hidden_states/``) holds both
    ``hidden_states`` and ``token_ids`` (headers only, natural order, first match wins). Nothing
    deeper is looked at, so a wrong ``--data`` such as ``/`` costs one listing.

    Raises:
        ScanError: ``auto`` and neither layout is there (the message says what was expected and
            what was found, and names datasets one level below); ValueError: ``requested`` is
            not ``auto`` or one of :data:`FORMATS`.
    """
    if requested in FORMATS:
        return requested
    if requested != "auto":
        raise ValueError(f"format must be auto or one of {list(FORMATS)}, got {requested!r}")
    d = Path(data_dir)
    if _is_arrow_dir(d):
        return SPECULATORS
    from eagle3_conformance.tools.vllm_hidden_states import SUFFIX

    try:
        entries = sorted(d.iterdir()) if d.is_dir() else []
    except OSError as e:
        raise ScanError(f"{d}: cannot be listed: {e.strerror or e}") from None
    _, candidates = extraction_files(d)
    for f in candidates:
        keys = _safetensors_keys(f)
        if keys is not None and set(_VLLM_KEYS) <= keys:
            return VLLM_EXTRACTION
    nested = [p.name for p in entries if p.is_dir() and _is_arrow_dir(p)]
    if nested:
        raise ScanError(f"{d}: not a speculators Arrow dataset itself, but speculators dataset(s) lie below it: "
                        f"{_names(nested)}; give one of them as --data")
    others = [p.name for p in entries if p.is_file() and p.suffix != SUFFIX]
    found = (f"{len(candidates)} *.safetensors file(s), none holding both 'hidden_states' and 'token_ids'"
             if candidates else "no *.safetensors file") + (f"; other files: {_names(others)}" if others else "")
    hint = (" (legacy .pt / SpecForge .ckpt files: use eagle3-conformance check-offline)"
            if any(o.endswith((".pt", ".ckpt", ".ckpt.gz")) for o in others) else "")
    raise ScanError(f"{d}: not a speculators Arrow dataset (no save_to_disk table: dataset_info.json + state.json) "
                    f"and not vLLM extraction output (*.safetensors files holding 'hidden_states' [T, N, H] and "
                    f"'token_ids' [T]); found {found}{hint}")


def dataset_identity(data_dir: str | Path, fmt: str, samples: int) -> str:
    """A cheap identity of the dataset at ``data_dir`` (no sample is read), recorded as
    ``meta.dataset_identity`` so that :mod:`eagle3_conformance.merge` refuses parts of two datasets of one
    size. It never includes the absolute path: the same dataset mounted elsewhere has the same identity.

    - :data:`SPECULATORS`: ``"arrow:<fingerprints>:<samples>"``, the ``_fingerprint`` field(s) of
      the ``datasets`` ``save_to_disk`` ``state.json`` (of ``data_dir`` and, for a dataset dict, of
      its immediate subfolders; ``datasets`` arrow_dataset.py ``Dataset.save_to_disk`` writes it),
      ``"-"`` when there is none or it cannot be read, and the number of samples.
    - :data:`VLLM_EXTRACTION`: ``"files:<sha256>"`` of the sorted lines ``"<name> <size in bytes>"``
      of :func:`extraction_files`.

    Never raises: an unreadable state.json or file counts as absent.
    """
    import json

    d = Path(data_dir)
    if fmt == VLLM_EXTRACTION:
        lines = []
        for f in extraction_files(d)[1]:
            try:
                size = f.stat().st_size
            except OSError:
                size = -1
            lines.append(f"{f.name} {size}")
        return "files:" + hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()
    fps = []
    for state in [d / "state.json", *sorted(d.glob("*/state.json"))]:
        try:
            fp = json.loads(state.read_text(encoding="utf-8")).get("_fingerprint")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            continue
        if isinstance(fp, str) and fp:
            fps.append(fp if state.parent == d else f"{state.parent.name}={fp}")
    return f"arrow:{','.join(fps) or '-'}:{samples}"


def _names(xs: list[str], most: int = 8) -> str:
    return ", ".join(xs[:most]) + (f" and {len(xs) - most} more" if len(xs) > most else "")


class _SpeculatorsSource:
    """Sample ``i`` of a speculators 0.9.0 dataset: Arrow row ``i``'s ``input_ids`` and
    ``hidden_states/hs_{i}.safetensors``; the fingerprint sample goes through speculators' own
    loader (:class:`eagle3_conformance.tools.speculators_loader.TrainingLoader`), path :data:`LOADER_PATH`."""

    format = SPECULATORS

    def __init__(self, data: Path):
        from datasets import load_from_disk

        try:
            self.ds = load_from_disk(str(data))
        except Exception as e:  # datasets raises FileNotFoundError / ValueError / pyarrow errors
            raise ScanError(f"{data}: not a speculators Arrow dataset: {e}") from None
        self.data = data
        self.n = len(self.ds)
        self.ids = _ArrowIds(self.ds)
        self._loader = None

    def file(self, i: int) -> Path:
        return self.data / "hidden_states" / f"hs_{i}.safetensors"

    def token_ids(self, i: int) -> Optional[torch.Tensor]:
        return self.ids(i)

    def disk_findings(self, c: Contract, rc: Contract, i: int, stats: dict, block_elems: int,
                      buf_holder: list) -> tuple[list[Finding], int]:
        return _disk_findings(c, rc, i, self.file(i), self.ids(i), stats, block_elems, buf_holder)

    def captures(self, c: Contract, batch: list[int]) -> list[Capture]:
        if self._loader is None:
            from eagle3_conformance.pairs import torch_dtype
            from eagle3_conformance.tools.speculators_loader import TrainingLoader

            self._loader = TrainingLoader(self.data, c.draft.target_hidden_size, c.num_slots,
                                          torch_dtype(c.data_dtype), transfer=c.training.transfer)
        return self._loader.batch(batch)

    def dataset_findings(self) -> list[Finding]:
        from eagle3_conformance import datacheck

        return datacheck.dataset_findings(self.data, self.n)


class _VllmExtractionSource:
    """Sample ``i`` of a directory of vLLM extraction files: the ``i``-th of :func:`extraction_files`
    (natural order; the connector writes one flat folder); its token ids are the file's own
    ``token_ids`` (there is no Arrow table to compare them with).

    Which planes are aux and which is the verifier follows the reader's rule
    (:func:`eagle3_conformance.tools.vllm_hidden_states.load_capture`, as ``check-offline``): the first K
    planes are the contract's aux slots; with N = K + 1 the last is B_L, the verifier. So a file
    with N != K goes through the same all-rows pass as a speculators shard
    (``feature = hs[:, :-1]``, ``verifier = hs[:, -1]``; N = K + 2, e.g. an embedding prepended,
    is a slot-count failure there), and a file with N = K (raw connector output without B_L)
    through the same pass with ``verifier=False`` (feature = all K planes, no verifier slot). The fingerprint
    sample is read by :func:`~eagle3_conformance.tools.vllm_hidden_states.load_capture` (path
    ``"training-vllm"``: unshifted rows paired at the contract's alignment offsets, no loss mask).
    """

    format = VLLM_EXTRACTION

    def __init__(self, data: Path):
        from eagle3_conformance.tools import vllm_hidden_states as vh

        self.vh = vh
        self.data = data
        if not data.is_dir():
            raise ScanError(f"{data}: not a directory of vLLM extraction files")
        self.folder, self.files = extraction_files(data)
        if not self.files:
            raise ScanError(f"{data}: no *{vh.SUFFIX} files in it or in its hidden_states/ (expected vLLM "
                            "extraction output: *.safetensors files holding 'hidden_states' [T, N, H] and "
                            "'token_ids' [T])")
        self.n = len(self.files)

    def file(self, i: int) -> Path:
        return self.files[i]

    def where(self, i: int) -> str:
        return f"sample {i} ({self.files[i].name})"

    def name(self, i: int) -> str:
        """File ``i`` relative to the data directory (as the user finds it)."""
        try:
            return self.files[i].relative_to(self.data).as_posix()
        except ValueError:
            return str(self.files[i])

    def token_ids(self, i: int) -> Optional[torch.Tensor]:
        got, why = self.vh.read(self.files[i])
        return None if why else got["token_ids"]

    def _planes(self, path: Path) -> Optional[int]:
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                shape = f.get_slice("hidden_states").get_shape()
        except Exception:  # unreadable or no such key: the all-rows pass reports it
            return None
        return int(shape[1]) if len(shape) == 3 else None

    def disk_findings(self, c: Contract, rc: Contract, i: int, stats: dict, block_elems: int,
                      buf_holder: list) -> tuple[list[Finding], int]:
        from dataclasses import replace

        path = self.files[i]
        # no Arrow ids: None leaves check_token_ids_match out (it would compare the file with itself);
        # N = K planes are all aux (no B_L plane), N = K + 1 end with the verifier (vllm_hidden_states' rule)
        found, nbytes = _disk_findings(c, rc, i, path, None, stats, block_elems, buf_holder,
                                       verifier=self._planes(path) != len(c.aux), name=self.name(i))
        plain, named = f"sample {i}", self.where(i)
        return [replace(f, where=named) if f.where == plain else f for f in found], nbytes

    def captures(self, c: Contract, batch: list[int]) -> list[Capture]:
        return [self.vh.load_capture(self.files[j], c, j, name=self.name(j)) for j in batch]

    def dataset_findings(self) -> list[Finding]:
        """One skipped ``data_files`` finding (path ``"data"``) naming what the folder read (and
        ``--data`` above it) holds besides the extraction files: other files and subdirectories,
        none of them opened (a pickle is never loaded); skipped, not failed: without an Arrow
        table nothing says they were meant to be samples. Else one pass."""
        suffix = self.vh.SUFFIX
        try:
            entries = {p for q in {self.data, self.folder} for p in q.iterdir()}
        except OSError as e:
            return [Finding("data_files", "fail", "data", None, f"*{suffix} only", e.strerror or str(e),
                            str(self.data), f"{self.data} cannot be listed: {e.strerror or e}", "K13")]
        files = set(self.files)
        others = sorted(p.relative_to(self.data).as_posix() + ("/" if p.is_dir() else "") for p in entries
                        if p not in files and p != self.folder)
        if others:
            return [Finding("data_files", "skip", "data", None, f"*{suffix} only", f"{len(others)} other entries",
                            str(self.data), f"{len(others)} entries in {self.data} are not vLLM extraction files "
                            f"and were not checked (none is opened; a pickle is never loaded): {_names(others)}",
                            "K13")]
        return [Finding("data_files", "pass", "data", None, f"*{suffix} only", f"{self.n} files", str(self.data),
                        f"{self.folder} holds {self.n} *{suffix} files and nothing else", "K13")]


def open_source(layout: str, data: str | Path):
    """The per-sample source of ``data`` in ``layout`` (one of :data:`FORMATS`).

    Raises:
        ScanError: ``data`` is not of that layout, or holds no sample files.
    """
    data = Path(data)
    if layout == SPECULATORS:
        return _SpeculatorsSource(data)
    if layout == VLLM_EXTRACTION:
        return _VllmExtractionSource(data)
    raise ValueError(f"unknown layout {layout!r}")


# --- fan-out ---------------------------------------------------------------------------------


def _describe(spec: PartSpec) -> str:
    return f"shard {spec.shard[0]}/{spec.shard[1]} (samples s % {spec.shard[1]} == {spec.shard[0]})"


def prefill_reference(c: Contract, spec: PartSpec) -> dict[str, Any]:
    """Compute, once in this process, the reference boundaries of every sampled sample of
    ``spec.shard`` into the reference's disk cache (``spec.ref_cache``), so that the scan tasks
    read them instead of each loading the target.

    Returns:
        ``{"samples": k, "forwards": f, "disk_hits": h, "seconds": s}``.

    Raises:
        ScanError: the dataset cannot be opened.
        eagle3_conformance.reference.ReferenceError: the reference cannot be loaded (missing shards, ...).
    """
    from eagle3_conformance.reference import ReferenceError

    t0 = time.perf_counter()
    src = open_source(spec.layout, spec.data_dir)
    n = src.n
    idx = [j for b in loader_batches(fingerprint_sample(n, spec.sample, spec.seed), spec.batch_size, spec.shard)
           for j in b] if n else []
    if not idx:
        return {"samples": 0, "forwards": 0, "disk_hits": 0, "seconds": 0.0}
    model = spec.reference_model(c.target)
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


# --- public entry ------------------------------------------------------------------------------


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


def scan(c: Contract, data_dir: str | Path, *, shard: tuple[int, int] = (0, 1), workers: int = 1,
         sample: int = 32, seed: int = 0, reference_dir: Optional[str | Path] = None, batch_size: int = 4,
         progress: bool = False, block_elems: int = BLOCK_ELEMS, ray_address: Optional[str] = None,
         ref_device: str = "cpu", ref_dtype: str = "float32", stream_layers: bool = False,
         ref_cache: Optional[str | Path | bool] = None, max_retries: int = 2,
         ray_runtime_env: Optional[dict[str, Any]] = None, data_format: str = "auto",
         cpus_per_worker: Optional[int] = None) -> ScanResult:
    """Scan shard ``shard`` of a speculators 0.9.0 dataset, or of a directory of vLLM extraction
    files, against contract ``c``.

    Args:
        c: the contract.
        data_dir: Arrow ``save_to_disk`` directory with ``hidden_states/hs_{i}.safetensors``, or a
            directory of vLLM's ``{req_id}.safetensors`` extraction files (sample ``i``: the
            ``i``-th file in natural order).
        shard: ``(i, N)``: this run covers samples ``s % N == i`` (see :func:`shard_indices`).
        workers: Ray tasks to split the shard over (a local Ray started on demand, or the cluster at
            ``ray_address``); 1 without ``ray_address`` scans in this process, without Ray.
        sample: fingerprint sample size over the whole dataset (``-1``: all; 0: none).
        seed: seed of the fingerprint sample.
        reference_dir: HF target directory for fingerprints; None: fingerprints are skipped.
        batch_size: loader batch size for the sampled samples (CollateFn packing).
        progress: show a rich progress bar (samples/s, GB/s) on stderr.
        block_elems: elements per float32 block of the RMS pass.
        ray_address: Ray cluster to run the tasks on (``host:port``, ``auto``); None: local Ray.
        ref_device, ref_dtype, stream_layers: how the reference forward runs
            (:class:`eagle3_conformance.reference.ReferenceModel`).
        ref_cache: folder of the reference's disk cache of boundaries; False: none; None: none
            in-process, :func:`eagle3_conformance.reference.default_cache_dir` with Ray tasks.
        max_retries: Ray re-runs of a task whose worker dies.
        ray_runtime_env: extra Ray runtime_env for a local Ray started here.
        data_format: ``"auto"`` (see :func:`detect_format`), :data:`SPECULATORS` or
            :data:`VLLM_EXTRACTION`.
        cpus_per_worker: CPUs (torch intra-op threads, and Ray ``num_cpus`` of each task) per
            worker; None: :func:`default_cpus_per_worker`.

    Returns:
        A :class:`ScanResult`.

    Raises:
        ScanError: not a dataset of the format (or, with ``auto``, of neither), no samples, Ray
            unreachable, or a task failed for good (the message names its shard).
        ValueError: ``workers < 1`` or ``cpus_per_worker < 1``, an unknown ``data_format``.
        eagle3_conformance.reference.ReferenceError: the reference model cannot be loaded (1 worker).
    """
    if workers < 1:
        raise ValueError("workers must be >= 1")
    if cpus_per_worker is not None and cpus_per_worker < 1:
        raise ValueError("cpus_per_worker must be >= 1")
    i, count = shard
    fmt = detect_format(data_dir, data_format)
    use_ray = workers > 1 or bool(ray_address)
    cpus = cpus_per_worker or default_cpus_per_worker(workers, ray_address)
    if use_ray and reference_dir and ref_cache is None:
        from eagle3_conformance.reference import default_cache_dir

        ref_cache = default_cache_dir()
    base = PartSpec(contract=c.model_dump(mode="json"), data_dir=str(data_dir), shard=shard, sample=sample,
                    seed=seed, reference_dir=str(reference_dir) if reference_dir else None,
                    batch_size=batch_size, block_elems=block_elems, ref_device=ref_device, ref_dtype=ref_dtype,
                    stream_layers=stream_layers, ref_cache=str(ref_cache) if ref_cache else None, layout=fmt,
                    threads=cpus)
    ref_cache = base.ref_cache
    specs = [base] if workers == 1 else [
        PartSpec(**{**base.__dict__, "shard": (i + w * count, count * workers)}) for w in range(workers)]
    t0 = time.perf_counter()
    prefill = None
    with _Progress(progress, _count_hint(data_dir, shard, fmt) if progress else None) as bar:
        if not use_ray:
            parts = [scan_part(specs[0], bar.advance)]
        else:
            from eagle3_conformance.ray_tasks import TaskFailed, run_tasks

            if base.reference_dir and base.ref_cache and sample != 0:
                with torch_threads(cpus):  # the forwards the tasks would have run, with their threads
                    prefill = prefill_reference(c, base)
            try:
                parts = run_tasks(scan_part, specs, describe=_describe, on_progress=bar.advance,
                                  address=ray_address, max_retries=max_retries, runtime_env=ray_runtime_env,
                                  cpus_per_task=cpus)
            except TaskFailed as e:
                raise ScanError(str(e)) from None
    seconds = time.perf_counter() - t0
    groups = sorted((g for p in parts for g in p["groups"]), key=lambda g: (g[0], g[1]))
    findings = [Finding(**d) for g in groups for d in g[2]]
    meta = _scan_meta(c, data_dir, parts, findings, seconds, shard=shard, workers=workers, sample=sample, seed=seed,
                      reference_dir=reference_dir, batch_size=batch_size, fmt=fmt)
    if use_ray:
        meta["engine"] = {"kind": "ray", "address": ray_address or "local (started on demand)",
                          "tasks": len(parts), "nodes": len({p["ray"]["node_id"] for p in parts}),
                          "task_seconds": [round(p["seconds"], 3) for p in parts],
                          "cpus_per_task": cpus,
                          "task_peak_rss_mb": [p.get("peak_rss_mb") for p in parts]}
    if reference_dir:
        meta["reference_forward"] = {"device": ref_device, "dtype": ref_dtype, "stream_layers": stream_layers,
                                     "cache": str(ref_cache) if ref_cache else None}
        if use_ray:  # who ran the forward: the driver once (prefill), the tasks (should be 0)
            meta["reference_forward"].update({
                "prefill": prefill, "task_forwards": sum(p.get("reference_forwards", 0) for p in parts),
                "task_disk_hits": sum(p.get("reference_disk_hits", 0) for p in parts)})
    return ScanResult(findings, meta)


CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
"""cgroup v2 CPU quota of this process's container (``quota period`` or ``max period``)."""


def available_cpus() -> int:
    """CPUs this process may use: its affinity mask (``os.sched_getaffinity``, else
    ``os.cpu_count()``), capped by the container's cgroup v2 CPU quota where one is set
    (:data:`CGROUP_CPU_MAX`: quota / period, rounded up; a Kubernetes CPU limit), at least 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:
        quota, period = CGROUP_CPU_MAX.read_text().split()[:2]
        if quota != "max":
            n = min(n, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError, ZeroDivisionError):
        pass
    return max(n, 1)


def cpu_share(workers: int) -> int:
    """This machine's CPUs (:func:`available_cpus`) split evenly over ``workers``, at least 1."""
    return max(available_cpus() // max(int(workers), 1), 1)


def default_cpus_per_worker(workers: int, ray_address: Optional[str] = None) -> int:
    """CPUs (torch threads; Ray ``num_cpus`` of a task) each worker gets when none are asked for.

    ``CONFORMANCE_TORCH_THREADS`` when set (the user's choice for every torch op of this
    package; it wins over both defaults below); on an existing Ray cluster (``ray_address``) 1,
    since this machine's CPU count says nothing of the nodes'; else :func:`cpu_share`: the all-rows RMS pass is
    compute-bound once the data is in the page cache, so one worker uses every core
    (``benchmarks/bench_check_data.py``).

    Raises:
        ValueError: ``CONFORMANCE_TORCH_THREADS`` is set to something else than a thread count.
    """
    env = torch_env.threads_from_env()
    if env:
        return env
    if ray_address:
        return 1
    return cpu_share(workers)


@contextmanager
def torch_threads(n: Optional[int]):
    """torch's intra-op threads set to ``n`` inside the block (None: unchanged), the previous
    setting given back after."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _unchecked_reason(reference_dir, fps: list[int], sample: int) -> str:
    """Why slot identity was not judged, in words (when no fingerprint passed or failed)."""
    if not reference_dir:
        return "no reference model"
    if not fps:
        return "no sample was fingerprinted (--sample 0)" if sample == 0 else "no fingerprinted sample in this shard"
    return "every fingerprint was skipped"


def _scope(c: Contract, fps: list[int], seed: int, reference_dir, fmt: str = SPECULATORS) -> dict[str, str]:
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


def _scan_meta(c: Contract, data_dir, parts: list[dict[str, Any]], findings: list[Finding], seconds: float, *,
               shard: tuple[int, int], workers: int, sample: int, seed: int, reference_dir,
               batch_size: int, fmt: str = SPECULATORS) -> dict[str, Any]:
    """The report metadata of a scan from its parts (see :class:`ScanResult`)."""
    from eagle3_conformance import report

    i, count = shard
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
        "workers": workers,
        "reference": str(reference_dir) if reference_dir else "none (slot identity not checked)",
        "fingerprint_sample": {"size": sample, "seed": seed, "batch_size": batch_size, "indices": fps},
        "dataset_identity": dataset_identity(data_dir, fmt, parts[0]["samples"]),
        "scope": _scope(c, fps, seed, reference_dir, fmt),
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


def human_bytes(n: float) -> str:
    """``n`` bytes in decimal human units: ``512 B``, ``3.2 KB``, ``41.0 MB``, ``1.25 GB``, ``2.00 TB``."""
    n = float(n)
    if n < 1e3:
        return f"{n:.0f} B"
    for unit, scale in (("KB", 1e3), ("MB", 1e6), ("GB", 1e9)):
        if n < scale * 1e3:
            v = n / scale
            return f"{v:.{2 if v < 10 else 1}f} {unit}"
    return f"{n / 1e12:.2f} TB"


def _count_hint(data_dir, shard, fmt: str = SPECULATORS) -> Optional[int]:
    """Number of samples in the shard, for the progress bar (None if unknown)."""
    try:
        return len(shard_indices(open_source(fmt, data_dir).n, shard))
    except Exception:  # the scan itself reports an unreadable dataset
        return None


class _Progress:
    """A rich progress bar with samples/s and GB/s on stderr; a no-op when disabled."""

    def __init__(self, enabled: bool, total: Optional[int]):
        self.enabled = enabled
        self.total = total
        self.done = 0
        self.nbytes = 0
        self.t0 = time.perf_counter()

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
                TimeRemainingColumn

            self.p = Progress(TextColumn("check-data"), BarColumn(), MofNCompleteColumn(),
                              TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                              console=Console(stderr=True), transient=False)
            self.p.start()
            self.task = self.p.add_task("scan", total=self.total, rate="")
        return self

    def advance(self, ns: int, nb: int) -> None:
        self.done += ns
        self.nbytes += nb
        if self.enabled:
            dt = max(time.perf_counter() - self.t0, 1e-9)
            self.p.update(self.task, advance=ns,
                          rate=f"{self.done / dt:.1f} samples/s  {human_bytes(self.nbytes / dt)}/s")

    def __exit__(self, *exc):
        if self.enabled:
            self.p.stop()
        return False
