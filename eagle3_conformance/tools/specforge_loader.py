"""SpecForge 0.2.0's own offline loader chain: what its trainer hands the EAGLE-3 draft.

Runs, unmodified, the chain ``specforge.launch.build_offline_runtime`` assembles
(launch.py:539-663; the format in docs/REFERENCE.md section 6):

1. ``OfflineManifestReader`` (runtime/data_plane/offline_reader.py:85-163, built by
   ``algorithms.eagle3.data.build_offline_reader``) lists ``*.ckpt`` / ``*.ckpt.gz`` under the
   data directory, sorted, one ``SampleRef`` per file;
2. ``LocalFeatureStore.get`` reads each file through ``load_feature_file``
   (runtime/data_plane/feature_store.py:236-241);
3. ``FeatureDataLoader`` (runtime/data_plane/feature_dataloader.py:92) applies
   ``normalize_offline_sample`` (algorithms/eagle3/data.py:10-27: ``aux_hidden_state`` -> batch
   ``hidden_state``, ``hidden_state`` -> ``target``, last loss-mask entry zeroed, nothing shifted)
   and collates with ``DataCollatorWithPadding`` (data/utils.py; right-pads with zeros);
4. ``TargetHead.preprocess`` (modeling/target/target_head.py:103-108, called by
   ``training/strategies/base.py:95-121`` ``_prepare_eagle_target``) shifts ``target`` and
   ``input_ids`` left by one with ``specforge.utils.padding``, and leaves ``loss_mask`` as it is;
5. the position ids are ``OnlineEagle3Model._prepare_position_ids(None, ...)``
   (algorithms/eagle3/model.py:201-242): ``arange(T)``.

The pairing that reaches the draft is therefore (h_t, x_{t+1}, F_{t+1}, l_t) at position t: the
target is F (post final norm; ``TargetHead.forward`` applies ``lm_head`` with no norm), the loss
mask is NOT shifted (sgl-project/SpecForge#885). Each :class:`Capture` carries exactly these
tensors, rows t = 0..T-2 of each sample (row T-1's target and input id are the shift's zero pad
and its loss-mask entry is zeroed by ``normalize_offline_sample``: the trainer never supervises it).

Stand-ins, and why: ``load_feature_file`` calls ``torch.load(weights_only=False)``, which runs any
code a pickle holds; while this loader reads, the module attribute is replaced by
:func:`safe_load_feature_file` (the same gunzip and ``torch.load``, with ``weights_only=True``).
``TargetHead.preprocess`` reads nothing from its instance; it is called on an instance built
without weights (the ``lm_head`` projection after it is not what the checks judge). The training
step itself (``LogSoftmaxLoss``) is a triton kernel and does not run on CPU.

SpecForge's own writer (``scripts/prepare_hidden_states.py``) is not in the wheel and needs
SGLang 0.5.14 on a GPU; :func:`write_dataset` writes the same layout (``rows_{g}-{g+2000}/
data_{i}.ckpt`` or ``.ckpt.gz``, keys of algorithms/eagle3/providers.py:141-150) from a target's
forward, padding rows batched together with SpecForge's own ``DataCollatorWithPadding`` as its
capture does (a file then holds token 0, loss mask 0 and real states at its end).

Used by the ``specforge`` path and the kill matrix's ``specforge`` column.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Optional, Sequence

from eagle3_conformance.core.batches import every_sample
from eagle3_conformance.core.errors import DataError
from eagle3_conformance.environment import torch_env

torch_env.prepare()
import torch  # noqa: E402

PATH = "training-specforge"
"""The ``Capture.path`` of what this loader hands the draft ("training*": judged as training data)."""

VERSION = "0.2.0"
"""The SpecForge release this adapter is written against (requirements/cpu-lock.txt)."""

GROUP = 2000
"""Files per ``rows_{g}-{g+GROUP}`` directory (scripts/prepare_hidden_states.py:446-480)."""

LOADER = ("specforge 0.2.0 OfflineManifestReader -> LocalFeatureStore -> FeatureDataLoader"
          "(normalize_offline_sample, DataCollatorWithPadding) -> TargetHead.preprocess")


class SpecForgeDataError(DataError):
    """The data directory holds no SpecForge offline feature file at all."""


def installed_version() -> Optional[str]:
    """The installed ``specforge`` distribution's version, or None."""
    from eagle3_conformance.environment import installed

    return installed.installed_version("specforge")


# --- reading ------------------------------------------------------------------------------------


def safe_load_feature_file(path: str) -> dict:
    """SpecForge's ``load_feature_file`` with ``weights_only=True``: gunzip a ``.gz`` file, then
    ``torch.load``. Tensors and plain containers load; a pickle that would import or call
    anything else raises ``UnpicklingError`` before anything runs.

    Raises:
        Exception: whatever torch/gzip raise for a truncated or foreign file (the loader turns it
            into an unavailable sample naming the file).
    """
    if str(path).endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)
    return torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)


@contextlib.contextmanager
def _weights_only():
    """Replace ``feature_store.load_feature_file`` (read by ``LocalFeatureStore._get_from_file``
    at call time) by :func:`safe_load_feature_file` for the duration."""
    from specforge.runtime.data_plane import feature_store

    orig = feature_store.load_feature_file
    feature_store.load_feature_file = safe_load_feature_file
    try:
        yield
    finally:
        feature_store.load_feature_file = orig


def _why(path: str, e: Exception) -> str:
    name = Path(path).name
    text = str(e)
    m = re.search(r"GLOBAL ([\w.]+)", text)
    if m:
        return (f"{name}: refused: the pickle would call {m.group(1)}; it was loaded with weights_only=True "
                "and nothing in it was executed")
    if "Weights only load failed" in text:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        text = next((ln for ln in lines[1:] if "weights_only" not in ln and "torch.load" not in ln), "not a torch.save file")
    msg = " ".join(text.split()) or "empty or truncated file"
    return f"{name} could not be read by SpecForge's loader: {type(e).__name__}: {msg}"


_KEYS = ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state")


def _problem(raw: Any, name: str, d: int) -> Optional[str]:
    """Why a loaded file cannot be a SpecForge EAGLE-3 sample of this contract's widths, or None.

    SpecForge itself checks none of this (a wrong width fails later in the draft's
    ``project_hidden_states`` assert, a wrong rank in the collator); saying it here names the file.
    """
    if not isinstance(raw, dict):
        return f"{name}: holds a {type(raw).__name__}, not SpecForge's dict of {list(_KEYS)}"
    missing = [k for k in _KEYS if k not in raw]
    if missing:
        return f"{name}: missing keys {missing} (SpecForge offline EAGLE-3 files hold {list(_KEYS)})"
    bad = [k for k in _KEYS if not isinstance(raw[k], torch.Tensor)]
    if bad:
        return f"{name}: {bad} are not tensors"
    ids, mask, hs, aux = (raw[k] for k in _KEYS)
    if ids.dim() != 1 or mask.dim() != 1:
        return f"{name}: input_ids {list(ids.shape)} and loss_mask {list(mask.shape)} must be [T]"
    if ids.is_floating_point() or ids.is_complex():
        return f"{name}: input_ids are {str(ids.dtype).replace('torch.', '')}, not integers"
    T = int(ids.shape[0])
    if T < 2:
        return f"{name}: {T} token(s): the shift leaves no row to train on"
    if int(mask.shape[0]) != T:
        return f"{name}: loss_mask holds {mask.shape[0]} entries but input_ids {T}"
    for key, x, w in (("hidden_state", hs, d), ("aux_hidden_state", aux, None)):
        if x.dim() != 3 or x.shape[0] != 1 or x.shape[1] != T:
            return f"{name}: {key} is {list(x.shape)}, expected [1, T={T}, width]"
        if not x.is_floating_point():
            return f"{name}: {key} is {str(x.dtype).replace('torch.', '')}, not floating point"
        if w is not None and x.shape[2] != w:
            return f"{name}: {key} width {x.shape[2]}, expected d = {w} (F, the target's final-norm output)"
    return None


class SpecForgeLoader:
    """SpecForge 0.2.0's real offline loader chain over one directory of feature files.

    Args:
        data_dir: a directory of ``*.ckpt`` / ``*.ckpt.gz`` files (searched recursively, as
            ``OfflineManifestReader`` does).
        target_hidden_size: d, the width of the stored target ``hidden_state``.
        max_len: ``normalize_offline_sample``'s truncation (the trainer's ``--max-length``).

    Raises:
        SpecForgeDataError: the directory does not exist or holds no feature file.
    """

    def __init__(self, data_dir: str | Path, target_hidden_size: int, max_len: int = 1 << 30):
        from specforge.algorithms.eagle3.data import (
            build_offline_collator,
            build_offline_normalizer,
            build_offline_reader,
        )
        from specforge.runtime.data_plane.feature_store import LocalFeatureStore

        self.data_dir = Path(data_dir)
        if not self.data_dir.is_dir():
            raise SpecForgeDataError(f"{self.data_dir}: no such data directory")
        self.refs = build_offline_reader(str(self.data_dir), run_id="conformance", ttt_length=1, max_len=max_len).read()
        if not self.refs:
            raise SpecForgeDataError(f"{self.data_dir}: no *.ckpt or *.ckpt.gz files (SpecForge's OfflineManifestReader "
                                     "found nothing)")
        self.store = LocalFeatureStore("conformance")
        self.normalize = build_offline_normalizer(max_len)
        self.collate = build_offline_collator()
        self.d = target_hidden_size

    def __len__(self) -> int:
        return len(self.refs)

    def file(self, i: int) -> str:
        """The file of sample ``i`` (SpecForge's own order: sorted paths)."""
        return self.refs[i].feature_store_uri[len("file://"):]

    def _raw(self, i: int):
        """``LocalFeatureStore.get`` of sample ``i`` (weights_only), or (None, why not)."""
        try:
            with _weights_only():
                tensors, handle = self.store.get(self.refs[i])
            self.store.release(handle)
        except Exception as e:  # unreadable, refused pickle, missing key (the store raises KeyError)
            return None, _why(self.file(i), e)
        return tensors, None

    def _run(self, indices: Sequence[int], transform: Optional[Callable] = None):
        """FeatureDataLoader over ``indices`` -> (TrainBatch tensors, raw per-sample dicts)."""
        from specforge.runtime.data_plane.feature_dataloader import FeatureDataLoader

        raws: list[dict] = []

        def per_sample(raw):
            raws.append({k: v.clone() for k, v in raw.items()})
            out = self.normalize(raw)
            return transform(out) if transform is not None else out

        dl = FeatureDataLoader(self.store, refs=[self.refs[i] for i in indices], batch_size=len(indices),
                               collate_fn=self.collate, per_sample_transform=per_sample, drop_last=False,
                               gc_interval_s=None)
        with _weights_only():
            batch = next(iter(dl))
        return batch.tensors, raws

    def batch(self, indices: Sequence[int], transform: Optional[Callable] = None) -> list:
        """One training batch of ``indices`` through the real chain, split back per sample.

        Args:
            indices: sample indices (SpecForge's sorted file order), in batch order; repeats allowed.
            transform: applied after ``normalize_offline_sample`` (fault injection only: e.g. the
                pre-#448 extra shift); None in normal use.

        Returns:
            One :class:`Capture` per index, in order: ``feature`` [T-1, K*d] (the batch
            ``hidden_state``), ``verifier_last`` [T-1, d] (the shifted ``target``, F),
            ``draft_input_ids`` / ``loss_mask`` / ``position_ids`` [T-1] as the draft receives
            them; unreadable or malformed samples carry ``unavailable`` naming the file.
        """
        from eagle3_conformance.core.capture import Capture

        bad = {}
        for i in dict.fromkeys(indices):
            raw, why = self._raw(i)
            why = why or _problem(raw, Path(self.file(i)).name, self.d)
            if why is not None:
                bad[i] = why
        run = [i for i in indices if i not in bad]
        out_by_pos: dict[int, Any] = {}
        if run:
            try:
                tensors, raws = self._run(run, transform)
            except Exception:
                if len(run) == 1:
                    raise
                # the collator needs one width per batch: collate each sample alone
                caps = []
                for i in indices:
                    caps += self.batch([i], transform)
                return caps
            shifted = self._preprocess(tensors)
            for b, i in enumerate(run):
                out_by_pos.setdefault(i, []).append(self._capture(i, b, tensors, shifted, raws[b]))
        caps = []
        for pos, i in enumerate(indices):
            where = f"sample {i} ({Path(self.file(i)).name}, batch position {pos})"
            if i in bad:
                caps.append(Capture(PATH, where, torch.zeros(0, dtype=torch.long), torch.zeros(0, 0),
                                    torch.zeros(0, dtype=torch.long), unavailable=bad[i], stored=True,
                                    provenance={"sample": i, "file": self.file(i)}))
            else:
                cap = out_by_pos[i].pop(0)
                cap.where = where
                caps.append(cap)
        return caps

    @staticmethod
    def _preprocess(t: dict) -> dict:
        """``TargetHead.preprocess`` and ``_prepare_position_ids``, SpecForge's own code."""
        with torch_env.quiet_specforge_import():  # its draft module warns that flash_attn (unused here) is absent
            from specforge.algorithms.eagle3.model import OnlineEagle3Model
            from specforge.modeling.target.target_head import TargetHead

        head = TargetHead.__new__(TargetHead)  # preprocess reads nothing from the instance
        ids, target, mask = TargetHead.preprocess(head, t["input_ids"], t["target"], t["loss_mask"])
        T = int(t["input_ids"].shape[1])
        pos = OnlineEagle3Model._prepare_position_ids(SimpleNamespace(attention_backend="sdpa"), None, seq_length=T,
                                                      past_key_values_length=0, device=torch.device("cpu"))
        return {"input_ids": ids, "target": target, "loss_mask": mask[..., 0], "position_ids": pos[0]}

    def _capture(self, i: int, b: int, t: dict, s: dict, raw: dict):
        from eagle3_conformance.core.capture import Capture

        T = int(t["attention_mask"][b].sum())  # normalize_offline_sample: ones over the sample; the collator pads 0
        n = T - 1
        src_ids = raw["input_ids"].reshape(-1).long()
        ids = src_ids[:T]  # the sequence the file's states were computed on (the reference runs on it)
        tail = 0
        m = raw["loss_mask"].reshape(-1)
        while tail < T - 1 and int(src_ids[T - 1 - tail]) == 0 and int(m[T - 1 - tail]) == 0:
            tail += 1
        return Capture(
            path=PATH,
            stored=True,
            where=f"sample {i}",
            token_ids=ids,
            feature=t["hidden_state"][b, :n],
            rows=torch.arange(n, dtype=torch.long),
            verifier_last=s["target"][b, :n],
            draft_input_ids=s["input_ids"][b, :n].long(),
            loss_mask=s["loss_mask"][b, :n],
            source_loss_mask=m,
            position_ids=s["position_ids"][:n].long(),
            source_token_ids=src_ids,
            provenance={"sample": i, "file": self.file(i), "loader": LOADER,
                        "on_disk_dtype": str(raw["aux_hidden_state"].dtype).replace("torch.", ""),
                        "padded_tail": tail},
        )


# --- writing ------------------------------------------------------------------------------------


def sample_file(out: Path, i: int, compress: bool = False) -> Path:
    """``out/rows_{g}-{g+2000}/data_{i}.ckpt[.gz]`` (scripts/prepare_hidden_states.py:446-480)."""
    g = (i // GROUP) * GROUP
    return Path(out) / f"rows_{g}-{g + GROUP}" / (f"data_{i}.ckpt" + (".gz" if compress else ""))


def save_sample(path: Path, sample: dict) -> Path:
    """``torch.save`` one sample dict (gzip for ``.gz``) as SpecForge's writer does; refuses to
    overwrite."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; refusing to overwrite")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        buf = io.BytesIO()
        torch.save(sample, buf)
        with gzip.open(path, "wb") as f:
            f.write(buf.getvalue())
    else:
        torch.save(sample, str(path))
    return path


def pad_batch(samples: Sequence[Sequence[int]], masks: Sequence[Sequence[int]]) -> list[tuple[list[int], list[int]]]:
    """Rows as SpecForge's capture batches them: ``DataCollatorWithPadding`` right-pads every row
    of a batch to the longest with zeros (data/utils.py), and the writer stores the padded row."""
    from specforge.data.utils import DataCollatorWithPadding

    feats = [{"input_ids": torch.tensor([list(s)]), "attention_mask": torch.ones(1, len(s), dtype=torch.long),
              "loss_mask": torch.tensor([list(m)])} for s, m in zip(samples, masks)]
    b = DataCollatorWithPadding()(feats)
    return [(b["input_ids"][j].tolist(), b["loss_mask"][j].tolist()) for j in range(len(samples))]


def capture_dtype(checkpoint: Any) -> torch.dtype:
    """The dtype SpecForge 0.2.0's ``scripts/prepare_hidden_states.py`` captures and stores for a target.

    ``build_target_model`` passes ``AutoConfig.from_pretrained(target).dtype`` (``torch_dtype`` on older
    transformers) as ``load_offline_capture(torch_dtype=...)``; ``OfflineSGLangCaptureBackend.build``
    hands it to ``ServerArgs(dtype=...)``, or ``"auto"`` when it is None
    (specforge/offline_capture/sglang_backend/capture.py:41-56), which SGLang resolves by
    ``_get_and_verify_dtype(config, "auto")``; ``_save_tensor_sync`` saves the captured tensors as they are.

    ``checkpoint``: the target's directory (its ``config.json``) or a ``transformers.PretrainedConfig``.
    Raises :class:`DataError` for a directory without a readable config.
    """
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(checkpoint, PretrainedConfig):
        cfg = checkpoint
    else:
        try:
            cfg = AutoConfig.from_pretrained(str(checkpoint))
        except (OSError, ValueError) as e:
            raise DataError(f"{checkpoint}: no readable config.json for SpecForge's capture dtype ({e})") from e
    d = getattr(cfg, "dtype", None) or getattr(cfg, "torch_dtype", None)
    if d is None:
        from sglang.srt.configs.model_config import _get_and_verify_dtype

        d = _get_and_verify_dtype(cfg, "auto")
    return getattr(torch, d) if isinstance(d, str) else d


def write_dataset(out: Path, capture: Callable[[list[int]], Any], samples: Sequence[Sequence[int]],
                  masks: Sequence[Sequence[int]], *, aux: Sequence[str], checkpoint: Any, target: str = "F",
                  dtype: Optional[torch.dtype] = None, batch_size: int = 1, compress: Sequence[int] = (),
                  hs_transform: Optional[Callable] = None, rows_from: Optional[Callable] = None,
                  vocab: Optional[tuple[int, int]] = None) -> Path:
    """Write samples in SpecForge 0.2.0's offline layout from a target's forward, as
    ``scripts/prepare_hidden_states.py`` does: a sample whose tensors hold a NaN is not written (its
    ``_save_tensor_sync``: "NaN found ... Skipping save"; its index stays a gap), and with ``vocab`` the
    draft vocab mapping is written beside the samples as ``vocab_mapping/vocab_mapping.pt`` by SpecForge's
    own ``specforge.data.preprocessing.generate_vocab_mapping_file`` (``_generate_shared_vocab_mapping``).
    The script stores the checkpoint's dtype (``build_target_model``: ``torch_dtype=model_config.dtype``),
    and so does this writer, from ``checkpoint`` (:func:`capture_dtype`); ``capture`` should run the
    forward in that dtype too, as SpecForge's capture does.

    Args:
        out: the directory to create (refused if it exists).
        capture: ``ids -> Reference`` (``ReferenceModel.capture``): every boundary of the forward.
        samples / masks: token ids and assistant loss masks, one list per sample.
        aux: the aux boundaries, in the order concatenated (``["B_2", "B_4", "B_5"]``).
        checkpoint: the target's directory or ``PretrainedConfig``: the stored dtype is SpecForge's for it
            (:func:`capture_dtype`).
        target: the boundary stored as ``hidden_state`` (SpecForge: ``"F"``).
        dtype: fault injection only (the kill matrix's ``dtype-cast`` and the column's stated data dtype):
            store this dtype instead of the checkpoint's. None (default): the checkpoint's, as SpecForge.
        batch_size: capture batch size: rows of a batch are padded to its longest
            (:func:`pad_batch`), as SpecForge's capture with ``--batch-size > 1`` does.
        compress: sample indices written as ``.ckpt.gz`` (``--compress``).
        vocab: ``(target_vocab_size, draft_vocab_size)``: write the vocab mapping (None: none).
        hs_transform / rows_from: fault injection only (see :class:`eagle3_conformance.faults.example.Knobs`):
            ``hs_transform(ref, hs [T, N, d]) -> hs`` on the stacked slots (aux then target),
            ``rows_from(list of hs) -> list`` across samples.

    Returns:
        ``out``.
    """
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists; refusing to overwrite")
    dtype = capture_dtype(checkpoint) if dtype is None else dtype
    rows: list[tuple[list[int], list[int]]] = []
    for idx in every_sample(len(samples), batch_size):
        xs, ms = [samples[i] for i in idx], [masks[i] for i in idx]
        rows += pad_batch(xs, ms) if batch_size > 1 else [(list(map(int, x)), list(map(int, m))) for x, m in zip(xs, ms)]
    slots = list(aux) + [target]
    stacks = []
    for ids, _ in rows:
        r = capture(ids)
        hs = torch.stack([r.boundary(b) for b in slots], dim=1)
        if hs_transform is not None:
            hs = hs_transform(r, hs)
        stacks.append(hs)
    if rows_from is not None:
        stacks = rows_from(stacks)
    out.mkdir(parents=True)
    for i, ((ids, mask), hs) in enumerate(zip(rows, stacks)):
        record = {"input_ids": torch.tensor(ids, dtype=torch.long), "loss_mask": torch.tensor(mask, dtype=torch.long),
                  "hidden_state": hs[:, -1].to(dtype).unsqueeze(0).contiguous(),
                  "aux_hidden_state": hs[:, :-1].flatten(1).to(dtype).unsqueeze(0).contiguous()}
        if any(t.is_floating_point() and bool(torch.isnan(t).any()) for t in record.values()):
            continue  # prepare_hidden_states.py _save_tensor_sync skips a record holding a NaN
        save_sample(sample_file(out, i, i in compress), record)
    if vocab is not None:
        _write_vocab_mapping(out, rows, *vocab)
    return out


def _write_vocab_mapping(out: Path, rows: list[tuple[list[int], list[int]]], target_vocab: int,
                         draft_vocab: int) -> Path:
    """``out/vocab_mapping/vocab_mapping.pt`` by SpecForge's own ``generate_vocab_mapping_file`` over the
    written rows (token frequency under the loss mask), as prepare_hidden_states.py writes it."""
    from datasets import Dataset
    from specforge.data.preprocessing import generate_vocab_mapping_file

    ds = Dataset.from_dict({"input_ids": [r[0] for r in rows], "loss_mask": [r[1] for r in rows]})
    ds.set_format(type="torch")
    return Path(generate_vocab_mapping_file(ds, target_vocab, draft_vocab, cache_dir=str(out / "vocab_mapping"),
                                            cache_key="vocab_mapping"))
