"""Data layouts: telling a speculators dataset from vLLM extraction files, and a cheap identity of
each."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

from eagle3_conformance.core.errors import DataError
from eagle3_conformance.scan.options import DISK_PATH, LOADER_PATH, ScanError
from eagle3_conformance.tools.shared.arrow_dir import ARROW_MARKERS as _ARROW_MARKERS
from eagle3_conformance.tools.shared.vllm_files import PATH as _VLLM_READER_PATH
from eagle3_conformance.tools.shared.vllm_files import SUFFIX, find_files

VLLM_PATH = _VLLM_READER_PATH
"""Finding path of the sampled vLLM extraction files (:data:`eagle3_conformance.tools.vllm_hidden_states.PATH`)."""

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
                        f"{names(nested)}; give one of them as --data")
    others = [p.name for p in entries if p.is_file() and p.suffix != SUFFIX]
    found = (f"{len(candidates)} *.safetensors file(s), none holding both 'hidden_states' and 'token_ids'"
             if candidates else "no *.safetensors file") + (f"; other files: {names(others)}" if others else "")
    hint = (" (legacy .pt / SpecForge .ckpt files: use eagle3-conformance check-offline)"
            if any(o.endswith((".pt", ".ckpt", ".ckpt.gz")) for o in others) else "")
    raise ScanError(f"{d}: not a speculators Arrow dataset (no save_to_disk table: dataset_info.json + state.json) "
                    f"and not vLLM extraction output (*.safetensors files holding 'hidden_states' [T, N, H] and "
                    f"'token_ids' [T]); found {found}{hint}")


def dataset_identity(data_dir: str | Path, fmt: str, samples: int) -> str:
    """A cheap identity of the dataset at ``data_dir`` (no sample is read), recorded as
    ``meta.dataset_identity`` so that :mod:`eagle3_conformance.report.merge` refuses parts of two datasets of one
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


def names(xs: list[str], most: int = 8) -> str:
    return ", ".join(xs[:most]) + (f" and {len(xs) - most} more" if len(xs) > most else "")
