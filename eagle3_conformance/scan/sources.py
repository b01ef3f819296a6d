"""Where sample ``i``'s ids, file and fingerprint captures come from, per layout: one source
class per format of :mod:`eagle3_conformance.scan.formats`, sharing the all-rows pass
(:func:`eagle3_conformance.scan.all_rows.disk_findings`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import torch

import eagle3_conformance.scan.all_rows as all_rows
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.scan.formats import SPECULATORS, VLLM_EXTRACTION, extraction_files, names
from eagle3_conformance.scan.options import ScanError
from eagle3_conformance.scan.shards import shard_indices

if TYPE_CHECKING:
    from eagle3_conformance.tools.speculators_loader import TrainingLoader


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
            from eagle3_conformance.tools.shared.arrow_dir import arrow_load_error

            raise ScanError(arrow_load_error(Path(data), e)) from None
        self.data = data
        self.n = len(self.ds)
        self.ids = _ArrowIds(self.ds)
        self._loader: Optional[TrainingLoader] = None  # built on the first fingerprint batch

    def file(self, i: int) -> Path:
        return self.data / "hidden_states" / f"hs_{i}.safetensors"

    def token_ids(self, i: int) -> Optional[torch.Tensor]:
        return self.ids(i)

    def disk_findings(self, st: all_rows.PassState, i: int) -> tuple[list[Finding], int]:
        return all_rows.disk_findings(st, i, self.file(i), self.ids(i))

    def captures(self, c: Contract, batch: list[int]) -> list[Capture]:
        if self._loader is None:
            from eagle3_conformance.environment.torch_env import torch_dtype
            from eagle3_conformance.tools.speculators_loader import TrainingLoader

            self._loader = TrainingLoader(self.data, c.draft.target_hidden_size, c.num_slots,
                                          torch_dtype(c.data_dtype), transfer=c.training.transfer)
        return self._loader.batch(batch)

    def dataset_findings(self) -> list[Finding]:
        from eagle3_conformance.checks import dataset as datacheck

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
        return None if why or got is None else got["token_ids"]

    def _planes(self, path: Path) -> Optional[int]:
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                shape = f.get_slice("hidden_states").get_shape()
        except Exception:  # unreadable or no such key: the all-rows pass reports it
            return None
        return int(shape[1]) if len(shape) == 3 else None

    def disk_findings(self, st: all_rows.PassState, i: int) -> tuple[list[Finding], int]:
        path = self.files[i]
        # no Arrow ids: None leaves check_token_ids_match out (it would compare the file with itself);
        # N = K planes are all aux (no B_L plane), N = K + 1 end with the verifier (vllm_hidden_states' rule)
        found, nbytes = all_rows.disk_findings(st, i, path, None, verifier=self._planes(path) != len(st.c.aux),
                                               name=self.name(i))
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
                            f"and were not checked (none is opened; a pickle is never loaded): {names(others)}",
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


def shard_size(data_dir, shard: tuple[int, int], fmt: str = SPECULATORS) -> Optional[int]:
    """Number of samples in ``shard`` of the dataset at ``data_dir`` in layout ``fmt`` (for a
    progress bar's total); None if it cannot be opened (the scan itself reports why)."""
    try:
        return len(shard_indices(open_source(fmt, data_dir).n, shard))
    except Exception:  # the scan itself reports an unreadable dataset
        return None
