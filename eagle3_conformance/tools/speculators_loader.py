"""speculators 0.9.0's own training loader: what it hands its EAGLE-3 draft during training.

Runs the real loader stack on a dataset directory in the speculators 0.9.0 on-disk format:
``speculators.train.data.ArrowDataset`` (reads ``hidden_states/hs_{i}.safetensors`` and routes
``hs[:, :-1].flatten(1)`` to ``hidden_states`` and ``hs[:, -1]`` to
``verifier_last_hidden_states``, src/speculators/train/data.py:274-333), then
``speculators.train.data.CollateFn`` with ``speculators.models.eagle3.data.shift_batch`` as its
preprocess step (src/speculators/models/eagle3/data.py:8-44), exactly as the trainer does. The
packed batch is split back into documents with its ``document_ids``; each document becomes one
:class:`eagle3_conformance.core.capture.Capture`.

The hidden-states files are read with the hs-connectors 0.9.0 backend the contract names
(``training.transfer``): ``file`` -> ``hs_connectors.transfer.FileTransfer`` (the tensors as
stored; what ``ArrowDataset`` builds itself when given none, train/data.py:184), ``fp8`` ->
``hs_connectors.transfer.FP8Transfer(dequantize_dtype=dtype)`` (float8 ``hidden_states`` times
``hidden_states_scales``, transfer.py:212-248). Each capture's provenance records the backend
(``transfer``) and what the file held (``payload``: on-disk dtype, scales shape), read from the
safetensors header, so a check can tell FP8 data read as plain files.

Nothing here re-implements the loader: the routing, shift and packing are speculators' own.
Used by the ``training`` and ``cross-path`` paths, ``check-data``'s fingerprint sample,
``calibrate`` and the kill matrix.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from eagle3_conformance.environment import torch_env

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.tools.shared.fp8_payload import SCALES_KEY  # noqa: E402  (hs-connectors' FP8 scales key)

PATH = "training"
"""The ``Capture.path`` of what this loader hands the draft."""


def default_batches(n: int, batch_size: int = 4) -> list[list[int]]:
    """Consecutive batches covering every sample once (``[[0, 1, 2, 3], [4, ...], ...]``;
    :func:`eagle3_conformance.core.batches.every_sample`)."""
    from eagle3_conformance.core.batches import every_sample

    return every_sample(n, batch_size)


class TrainingDataError(Exception):
    """The dataset directory cannot be opened as a speculators 0.9.0 dataset at all."""


TRANSFERS = ("file", "fp8")
"""hs-connectors 0.9.0 backends the loader can read with (``training.transfer``)."""



def make_transfer(name: str, hs_dir: Path, dtype):
    """hs-connectors' own reader for backend ``name`` over ``hs_dir``: ``FileTransfer(hs_dir)`` or
    ``FP8Transfer(hs_dir, dequantize_dtype=dtype)``.

    Raises:
        ValueError: ``name`` is not one of :data:`TRANSFERS`.
    """
    from hs_connectors.transfer import FileTransfer, FP8Transfer

    if name == "file":
        return FileTransfer(hs_dir)
    if name == "fp8":
        return FP8Transfer(hs_dir, dequantize_dtype=dtype)
    raise ValueError(f"unknown hs-connectors backend {name!r}; known: {', '.join(TRANSFERS)}")


def read_payload(path: Path) -> Optional[dict]:
    """What a ``hs_{i}.safetensors`` file holds, from its header (and the T scale values only):
    ``{"file", "dtype"`` (of ``hidden_states``, e.g. ``"float8_e4m3fn"``), ``"shape"``,
    ``"scales"`` (shape of ``hidden_states_scales``, None when absent), ``"scales_dtype"``,
    ``"bad_scale"`` (the first token whose scale is not > 0: :func:`eagle3_conformance.tools.shared.fp8_payload.bad_scale`;
    the scales' T values are the only tensor data read), ``"scale_values"`` (those T values:
    :func:`eagle3_conformance.tools.shared.fp8_payload.scale_values`)``}``. None when the file cannot be read (the
    loader reports why)."""
    try:
        from safetensors import safe_open

        from eagle3_conformance.tools.shared import fp8_payload

        with safe_open(str(path), framework="pt") as f:
            keys = set(f.keys())
            if "hidden_states" not in keys:
                return None
            hs = f.get_slice("hidden_states")
            out: dict[str, Any] = {"file": f"hidden_states/{path.name}", "dtype": _st_dtype(hs.get_dtype()),
                   "shape": list(hs.get_shape()), "scales": None, "scales_dtype": None}
            out["bad_scale"] = None
            out["scale_values"] = None
            if SCALES_KEY in keys:
                sc = f.get_slice(SCALES_KEY)
                out["scales"] = list(sc.get_shape())
                out["scales_dtype"] = _st_dtype(sc.get_dtype())
                st = f.get_tensor(SCALES_KEY)  # T values: the only tensor data read
                if st.is_floating_point() and st.numel() and st.dim():
                    out["bad_scale"] = fp8_payload.bad_scale(st)
                out["scale_values"] = fp8_payload.scale_values(st)
            return out
    except Exception:  # a corrupt or truncated file: the loader's own read reports it
        return None


_ST_DTYPES = {"F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "BF16": "bfloat16", "F16": "float16",
              "F32": "float32", "F64": "float64", "I64": "int64", "I32": "int32"}


def _st_dtype(code: str) -> str:
    return _ST_DTYPES.get(code, code.lower())


class TrainingLoader:
    """The real speculators loader over one dataset directory.

    Args:
        data_dir: Arrow ``save_to_disk`` dir with ``hidden_states/hs_{i}.safetensors`` beside it.
        target_hidden_size: d (CollateFn's ``hidden_size``).
        num_aux: K (CollateFn's ``num_target_layers``).
        dtype: the dtype CollateFn casts hidden states to (the trainer's), e.g. torch.bfloat16; also
            FP8Transfer's ``dequantize_dtype``.
        transfer: the hs-connectors backend the trainer reads the files with (``training.transfer``):
            ``"file"`` or ``"fp8"`` (:func:`make_transfer`).

    Raises:
        TrainingDataError: the directory is missing or is not an Arrow dataset.
        ValueError: an unknown ``transfer``.
    """

    def __init__(self, data_dir: str | Path, target_hidden_size: int, num_aux: int, dtype=torch.bfloat16,
                 transfer: str = "file"):
        from speculators.train.data import ArrowDataset

        self.data_dir = Path(data_dir)
        if not self.data_dir.is_dir():
            raise TrainingDataError(f"{self.data_dir}: no such data directory")
        self.transfer = transfer
        reader = make_transfer(transfer, self.data_dir / "hidden_states", dtype)
        try:
            self.dataset = ArrowDataset(max_len=1 << 30, datapath=str(self.data_dir), on_missing="warn",
                                        transfer=reader)
        except Exception as e:  # datasets raises FileNotFoundError / ValueError / pyarrow errors
            from eagle3_conformance.tools.shared.arrow_dir import arrow_load_error

            raise TrainingDataError(arrow_load_error(self.data_dir, e)) from None
        self.d = target_hidden_size
        self.K = num_aux
        self.dtype = dtype

    def __len__(self) -> int:
        return len(self.dataset)

    def dataset_row(self, i: int) -> dict:
        """The Arrow row ``i`` (input_ids, loss_mask as tensors)."""
        return self.dataset.data[i]

    def _item(self, i: int):
        """``ArrowDataset[i]``, with exceptions and warnings turned into an unavailable reason."""
        from speculators.train.recovery import SampleUnavailable

        name = f"hidden_states/hs_{i}.safetensors"
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            try:
                item = self.dataset[i]
            except Exception as e:  # a corrupt shard raises from safetensors (FP8Transfer: ill-shaped scales)
                msg = " ".join(str(e).split())  # whole: a failure's text is never cut
                p = read_payload(self.data_dir / name)
                why = ""
                if p is not None and p["scales"] is not None and p["scales"] != [p["shape"][0], 1, 1]:
                    why = f" ({SCALES_KEY} is {p['scales']}, expected [T, 1, 1] = [{p['shape'][0]}, 1, 1])"
                return None, f"{name} could not be read{why}: {type(e).__name__}: {msg}"
        if isinstance(item, SampleUnavailable):
            reason = item.reason or "; ".join(str(x.message) for x in w) or "sample unavailable"
            if not (self.data_dir / name).exists():
                reason = f"{name} is missing"
            elif "token ids" in reason.lower():
                reason = self._token_mismatch(i, name) or f"{name}: {reason}"
            return None, reason
        return item, None

    def _token_mismatch(self, i: int, name: str) -> Optional[str]:
        """Describe how the shard's ``token_ids`` differ from Arrow row ``i`` (read-only)."""
        try:
            from safetensors import safe_open

            with safe_open(str(self.data_dir / name), framework="pt") as f:
                tok = f.get_tensor("token_ids").long()
            src = torch.as_tensor(self.dataset_row(i)["input_ids"]).reshape(-1).long()
        except Exception:
            return None
        if tok.dim() != 1:
            return f"{name}: token_ids is {list(tok.shape)}, expected [T] (Arrow row {i} holds {src.shape[0]} tokens)"
        if tok.shape != src.shape:
            return f"{name}: token_ids hold {tok.shape[0]} tokens but Arrow row {i} holds {src.shape[0]}"
        j = int((tok != src).nonzero()[0]) if bool((tok != src).any()) else -1
        return (f"{name}: token_ids differ from Arrow row {i} input_ids at token {j} "
                f"({int(tok[j])} vs {int(src[j])}); speculators skips such a sample")

    def batch(self, indices: Sequence[int], max_len: Optional[int] = None) -> list:
        """Load ``indices`` as one packed training batch and split it into per-sample captures.

        Args:
            indices: dataset rows, in batch order (repeats allowed).
            max_len: CollateFn's packing length; default fits every sample (no truncation).

        Returns:
            One :class:`Capture` per index, in order; unavailable samples carry ``unavailable``.
        """
        from eagle3_conformance.core.capture import Capture

        raw = [self._item(i) for i in indices]
        items = [it for it, _ in raw]
        try:
            batch = self._collate(items, max_len)
        except Exception as e:
            if max_len is None and sum(it is not None for it in items) > 1:
                # CollateFn sizes its buffers from the first sample: one shard of another shape (a
                # wrong slot count, width or rank) makes the whole packed batch raise. Collate each
                # sample alone: every other sample is still checked, the odd one on its own shape.
                out = []
                for i in indices:
                    out += self.batch([i])
                return out
            if len(indices) != 1 or items[0] is None:
                raise
            msg = " ".join(str(e).split())
            raw = [(None, f"hidden_states/hs_{indices[0]}.safetensors: {self._shape_words(items[0])} cannot be "
                          f"collated as {self.K} aux slots + verifier of width {self.d} "
                          f"({type(e).__name__}: {msg})")]
            items = [None]
            batch = self._collate(items, max_len)
        doc = batch["document_ids"][0]
        out = []
        j = 0  # document index among available samples
        for pos, (i, (item, reason)) in enumerate(zip(indices, raw)):
            where = f"sample {i} (batch position {pos})"
            row = self.dataset_row(i)
            src_ids = torch.as_tensor(row["input_ids"]).long()
            src_mask = torch.as_tensor(row["loss_mask"])
            if item is None:
                out.append(Capture(PATH, where, src_ids, torch.zeros(0, self.K * self.d), torch.zeros(0, dtype=torch.long),
                                   source_token_ids=src_ids, unavailable=reason, stored=True,
                                   provenance={"sample": i, "data_dir": str(self.data_dir)}))
                continue
            sel = (doc == j).nonzero().flatten()
            j += 1
            n = int(sel.numel())
            out.append(Capture(
                path=PATH,
                stored=True,
                where=where,
                token_ids=item["input_ids"].long(),
                feature=batch["hidden_states"][0, sel],
                rows=torch.arange(n, dtype=torch.long),
                verifier_last=batch["verifier_last_hidden_states"][0, sel],
                draft_input_ids=batch["input_ids"][0, sel],
                loss_mask=batch["loss_mask"][0, sel],
                source_loss_mask=src_mask,
                position_ids=batch["position_ids"][0, sel],
                source_token_ids=src_ids,
                provenance={"sample": i, "data_dir": str(self.data_dir),
                            "on_disk_dtype": str(item["hidden_states"].dtype).replace("torch.", ""),
                            "transfer": self.transfer,
                            # speculators' item splits the last plane off as the verifier (data.py:274-333)
                            "planes": int(item["hidden_states"].shape[-1]) // self.d + 1, "verifier_plane": "last",
                            "payload": read_payload(self.data_dir / f"hidden_states/hs_{i}.safetensors"),
                            "loader": f"speculators.train.data.ArrowDataset(transfer=hs_connectors {self.transfer}) "
                                      "+ CollateFn(shift_batch)"},
            ))
        return out

    def _collate(self, items: list, max_len: Optional[int]):
        from speculators.models.eagle3.data import shift_batch
        from speculators.train.data import CollateFn

        lens = [int(it["input_ids"].shape[0]) - 1 for it in items if it is not None]
        total = max(sum(max(n, 0) for n in lens), 1)
        collate = CollateFn(max_len or total, hidden_size=self.d, num_target_layers=self.K, dtype=self.dtype,
                            preprocess=shift_batch)
        # CollateFn consumes the items; hand it shallow copies so the raw ones stay readable
        return collate([dict(it) if it is not None else None for it in items])

    @staticmethod
    def _shape_words(item: dict) -> str:
        return ", ".join(f"{k} {list(v.shape)}" for k, v in item.items() if hasattr(v, "shape"))

    def iter_batches(self, batches: Iterable[Sequence[int]]):
        for b in batches:
            yield from self.batch(b)
