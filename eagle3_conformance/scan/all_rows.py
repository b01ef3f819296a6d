"""The all-rows pass over one stored sample: the capture checks of the registry on views of the
on-disk tensors and on their per-row RMS, and the per-slot RMS statistics.

Which view a check gets is declared with the check
(:data:`eagle3_conformance.checks.registry.STORED`): the capture of views (``tensors``), the
reduced capture of per-row per-slot RMS (``row-rms``; ``slot-rms`` when each stored plane is one
slot wide), or, for FP8 data read with ``training.transfer: fp8``, a capture carrying the dtype the
trainer receives (``dtypes``). Verdicts, row numbers and messages are the checks' own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

import torch

import eagle3_conformance.scan.rms as rms
from eagle3_conformance.checks import registry
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.report.slot_stats import merge_slot_stats  # noqa: F401  (JSON only: merge-reports runs it without torch)
from eagle3_conformance.scan.options import DISK_PATH
from eagle3_conformance.scan.ray_tasks import torch_threads
from eagle3_conformance.tools.shared.fp8_payload import SCALES_KEY  # hs-connectors' FP8 scales key


@dataclass
class SlotStats:
    """Per-row RMS statistics of one slot over the samples of a part."""

    rows: int = 0
    finite_rows: int = 0
    rms_sum: float = 0.0
    rms_min: float = math.inf
    rms_max: float = -math.inf

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "finite_rows": self.finite_rows, "rms_sum": self.rms_sum,
                "rms_min": None if self.finite_rows == 0 else self.rms_min,
                "rms_max": None if self.finite_rows == 0 else self.rms_max}

    def add(self, col: torch.Tensor, ok: torch.Tensor) -> None:
        """Add one sample's RMS column ``col`` ([T] float32) of which ``ok`` ([T] bool) is finite."""
        self.rows += int(col.shape[0])
        nf = int(ok.sum())
        self.finite_rows += nf
        if nf:
            v = col[ok]
            self.rms_sum += float(v.double().sum())
            self.rms_min = min(self.rms_min, float(v.min()))
            self.rms_max = max(self.rms_max, float(v.max()))


@dataclass
class PassState:
    """What the all-rows pass of one part keeps across its samples.

    Attributes:
        c: the contract; rc: the same as seen by checks on RMS columns (:func:`rms.reduced_contract`).
        block_elems: elements per float32 block of the RMS pass.
        stats: per-slot RMS statistics, by slot label.
        buf: float32 scratch reused across samples (dtypes converted in row blocks).
    """

    c: Contract
    block_elems: int
    rc: Contract = field(init=False)
    stats: dict[str, SlotStats] = field(default_factory=dict)
    buf: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        self.rc = rms.reduced_contract(self.c)


@dataclass
class _Stored:
    """One sample's tensors as read: hidden_states [T, N, H], token_ids [T], the FP8 scales or None."""

    hs: torch.Tensor
    tok: torch.Tensor
    scales: Optional[torch.Tensor]
    payload: dict
    dequant: bool


def _read(c: Contract, hs_path: Path, name: str) -> tuple[Optional[_Stored], Optional[str], int]:
    """(the sample's tensors, None, bytes) or (None, why it cannot be judged, bytes)."""
    from safetensors import safe_open

    from eagle3_conformance.checks.transport import FP8_DTYPES
    from eagle3_conformance.tools.shared import fp8_payload

    if not hs_path.is_file():
        return None, f"hidden_states/{hs_path.name} is missing", 0
    nbytes = hs_path.stat().st_size
    try:
        with safe_open(str(hs_path), framework="pt") as f:
            keys = set(f.keys())
            missing = {"hidden_states", "token_ids"} - keys
            if missing:
                return None, f"{hs_path.name} has no {sorted(missing)}", nbytes
            hs = f.get_tensor("hidden_states")
            tok = f.get_tensor("token_ids")
            scales = f.get_tensor(SCALES_KEY) if SCALES_KEY in keys else None
    except Exception as e:  # safetensors raises SafetensorError / OSError on a corrupt file
        return None, f"{hs_path.name} could not be read: {type(e).__name__}: {e}", nbytes
    if hs.ndim != 3:
        return None, f"{hs_path.name}: hidden_states is {list(hs.shape)}, expected [T, N, H]", nbytes
    T = hs.shape[0]
    payload = fp8_payload.payload(name, hs, scales)
    # hs-connectors' fp8 backend (training.transfer: fp8): the trainer sees hidden_states x scales
    # (FP8Transfer, transfer.py:212-248); the per-row RMS is taken of those values
    dequant = c.training.transfer == "fp8" and (scales is not None or payload["dtype"] in FP8_DTYPES)
    if dequant:
        if scales is None:
            return None, (f"{hs_path.name}: {payload['dtype']} hidden_states without {SCALES_KEY} "
                          "(training.transfer: fp8 needs them)"), nbytes
        if list(scales.shape) != [T, 1, 1] or not scales.is_floating_point():
            return None, (f"{hs_path.name}: {SCALES_KEY} is {list(scales.shape)} {payload['scales_dtype']}, "
                          f"expected [T, 1, 1] = [{T}, 1, 1] float32 (one scale per token)"), nbytes
    return _Stored(hs, tok.reshape(-1), scales, payload, dequant), None, nbytes


def _reduce(st: PassState, s: _Stored, last: bool) -> torch.Tensor:
    """Per-row per-slot RMS of the stored values the trainer receives, float32 [T, N]."""
    c, hs = st.c, s.hs
    T, N, H = hs.shape
    rows_per_block = max(1, st.block_elems // max(N * H, 1))
    # float32 scratch, kept across samples, for the dtypes slot_rms converts in row blocks (not
    # float32, read directly; not bfloat16, reduced by torch's bf16 norm without a copy)
    buf = st.buf
    if hs.dtype not in (torch.float32, torch.bfloat16) and N * H and (
            buf is None or buf.shape[1:] != (N, H) or buf.shape[0] < min(rows_per_block, T)):
        buf = st.buf = torch.empty(max(1, min(rows_per_block, T)), N, H, dtype=torch.float32)
    edges = rms.band_edges(c, N, last) if H == c.draft.target_hidden_size and not s.dequant else None  # fp8: exact
    r = rms.slot_rms(hs, st.block_elems, buf, edges) if N else torch.zeros(T, 0)
    if s.dequant and s.scales is not None:  # _read refuses an fp8 sample without its scales
        r = r * s.scales.reshape(T, 1).float()  # rms(q * s_t) = s_t * rms(q): one scale per token
    return r


def _judge(st: PassState, cap: Capture, reduced: Capture, s: _Stored, last: bool) -> list[Finding]:
    """The registry's capture checks that run on stored data, each on the view it declares."""
    from eagle3_conformance.checks import dataset as datacheck
    from eagle3_conformance.environment.torch_env import torch_dtype

    c = st.c
    planes_are_slots = s.hs.shape[2] == c.draft.target_hidden_size
    specs = [spec for spec in registry.of(registry.CAPTURE) if spec.stored]
    out = [f for spec in specs if spec.always for f in spec.fn(c, cap)]
    out += datacheck.sample_length_findings(cap) + datacheck.token_range_findings(cap, c.target.vocab_size)
    for spec in specs:
        if spec.always:
            continue
        if spec.stored == registry.ROW_RMS:
            out += spec.fn(c, reduced)
        elif spec.stored == registry.SLOT_RMS:
            # per-slot RMS columns are slots only when each plane is one slot wide; uncalibrated
            # bands are a skip that reads no data
            if planes_are_slots or c.norm_bands.status != "calibrated":
                out += spec.fn(st.rc, reduced)
        elif spec.stored == registry.DTYPES and s.dequant:
            # what the trainer receives: FP8Transfer's dequantize_dtype (data_dtype), not the float8 codes
            deq = torch_dtype(c.data_dtype)
            out += spec.fn(c, replace(cap, feature=torch.empty(0, dtype=deq),
                                      verifier_last=torch.empty(0, dtype=deq) if last else None))
        else:
            out += spec.fn(c, cap)
    return out


def disk_findings(st: PassState, i: int, hs_path: Path, src_ids: Optional[torch.Tensor], verifier: bool = True,
                  name: Optional[str] = None) -> tuple[list[Finding], int]:
    """All-rows checks of sample ``i``, its RMS added to ``st.stats``. Returns (findings, bytes
    read); never raises for bad data.

    ``src_ids``: the sample's token ids from elsewhere (the Arrow row), compared with the file's;
    None leaves that comparison out (vLLM extraction files: nothing else holds the ids).
    ``verifier``: the last of the N planes is the verifier (speculators' routing, N = K + 1);
    False reads all N planes as aux slots (raw vLLM extraction output with N = K: no B_L plane),
    so ``feature = hs.flatten(1)`` and the verifier's width, finiteness and band do not apply.
    ``name``: the file as findings name it, relative to the data directory (default
    ``hidden_states/{file name}``, speculators' layout)."""
    from eagle3_conformance.checks import check_sample_available

    c, where = st.c, f"sample {i}"
    s, why, nbytes = _read(c, hs_path, name or f"hidden_states/{hs_path.name}")
    if s is None:
        norow = torch.zeros(0, dtype=torch.long)
        cap = Capture(DISK_PATH, where, src_ids if src_ids is not None else norow,
                      torch.zeros(0, c.capture.feature_width), norow, source_token_ids=src_ids, unavailable=why,
                      stored=True)
        return check_sample_available(c, cap), nbytes
    hs, tok = s.hs, s.tok
    T, N, _ = hs.shape
    last = verifier and N > 0  # the last plane is the verifier slot
    rows = torch.arange(T, dtype=torch.long)
    cap = Capture(DISK_PATH, where, token_ids=tok, feature=hs[:, :-1].flatten(1) if last else hs.flatten(1),
                  rows=torch.arange(int(tok.shape[0]), dtype=torch.long),
                  verifier_last=hs[:, -1] if last else None, verifier_offset=0, source_token_ids=src_ids,
                  provenance={"sample": i, "file": str(hs_path), "payload": s.payload,
                              "transfer": c.training.transfer, "planes": N,
                              "verifier_plane": "last" if last else None}, stored=True)
    # one streamed pass over the data: per-row per-slot RMS, float32 [T, N]
    r = _reduce(st, s, last)
    reduced = Capture(DISK_PATH, where, token_ids=tok, feature=r[:, :-1] if last else r, rows=rows,
                      verifier_last=r[:, -1:] if last else None, verifier_offset=0,
                      provenance=cap.provenance, stored=True)
    # the checks read the [T, N] RMS and O(d) rows: on one thread, since a parallel region of their small
    # ops costs more than their work (on a busy machine, up to a timeslice each: 3x slower with 2 threads)
    with torch_threads(1):
        out = _judge(st, cap, reduced, s, last)
        fin = torch.isfinite(r)
        for k in range(N):
            label = ("verifier" if k == N - 1 else f"slot {k}") if last else f"slot {k}"
            st.stats.setdefault(label, SlotStats()).add(r[:, k], fin[:, k])
    return out, nbytes
