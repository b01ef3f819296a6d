"""Offline hidden-state files: legacy speculators ``.pt`` and SpecForge ``data_{idx}.ckpt``.

The project's own reader, kept only for files SpecForge's real loader chain cannot read here
(``eagle3-conformance check-offline``: a single file or a glob, legacy speculators ``.pt`` files, mixed
directories). SpecForge directories are read by SpecForge 0.2.0's own chain in
:mod:`eagle3_conformance.tools.specforge_loader` (the ``specforge`` path), which also reads
``.ckpt.gz``.

Both formats are pickles written by ``torch.save``. They are read ONLY through
``torch.load(path, map_location="cpu", weights_only=True)``: tensors and plain containers load,
and a pickle that would import or call anything else (``os.system``, any class) is refused by
torch's restricted unpickler before anything runs. A refused file becomes an unavailable
:class:`eagle3_conformance.core.capture.Capture` (reported as a failed ``sample_available`` finding); it is
never retried with ``weights_only=False``. Files are opened read-only and never written.

Formats (docs/REFERENCE.md sections 5.1 and 6):

- **legacy speculators** (0.3/0.4, one ``.pt`` per sample; path ``"training-legacy"``): a dict
  with ``input_ids`` [T], ``hidden_states`` a list of N [T, H] tensors (aux slots, the verifier
  last) and ``loss_mask`` [T]. The legacy loader routes it like ``ArrowDataset`` does:
  ``cat(hidden_states[:-1], -1)`` to fc, ``hidden_states[-1]`` to the verifier.
- **SpecForge offline** (``rows_{g}-{g+group}/data_{idx}.ckpt``; path ``"training-specforge"``):
  ``input_ids`` [T], ``loss_mask`` [T], ``hidden_state`` [1, T, d] (the SGLang
  ``LogitsProcessor`` input, i.e. **F**, post-norm) and ``aux_hidden_state`` [1, T, K*d].
  ``OfflineEagle3Dataset.process_data`` (specforge/data/preprocessing.py:441-458) renames
  ``aux_hidden_state`` to the batch ``hidden_state`` (the feature: ``aux_hidden_state[0]``) and
  ``hidden_state`` to ``target`` (the verifier: ``hidden_state[0]``, F), zeroes the last loss-mask
  position, and the draft shifts ``target`` and ``input_ids`` left by one.

Pairing: the files store unshifted per-token tensors; the pairing is done by the trainer. Row t
of the feature is the aux state of token t (``rows = t``); it is paired with the verifier row,
input id, loss-mask entry and position at the offsets the contract's ``alignment`` declares
(both trainers shift by one). Rows whose paired index would fall outside the sequence are
dropped, as the shift drops the last token. The fingerprint checks then verify, against the
reference, that the stored verifier rows really sit at ``t + alignment.target`` and the feature
rows at ``t + alignment.feature``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.core.errors import DataError
from eagle3_conformance.environment import torch_env
from eagle3_conformance.tools.shared import file_spec

torch_env.prepare()
import torch  # noqa: E402

PATH_LEGACY = "training-legacy"
PATH_SPECFORGE = "training-specforge"  # "training*": checks judge it as training data (dtype, positions)
SUFFIXES = (".pt", ".ckpt")


class OfflineFilesError(DataError):
    """The ``--files`` argument names no readable offline file at all."""


def find_files(spec: str | Path) -> list[Path]:
    """The ``.pt`` / ``.ckpt`` files named by a directory (searched recursively) or a glob.

    Raises:
        OfflineFilesError: nothing matches.
    """
    # SpecForge's vocab_mapping/vocab_mapping.pt is no sample (prepare_hidden_states.py writes it beside them);
    # tools.specforge_layout lists it as skipped
    return file_spec.find_files(spec, lambda p: [q for q in p.rglob("*") if q.suffix in SUFFIXES and q.is_file()
                                                 and "vocab_mapping" not in q.relative_to(p).parts[:-1]],
                                "no *.pt or *.ckpt files in this directory", OfflineFilesError)


def safe_load(path: Path) -> tuple[Optional[Any], Optional[str]]:
    """``torch.load(weights_only=True)`` on CPU. Returns (object, None) or (None, why not).

    Never executes code from the file: weights_only's unpickler refuses every global that is not
    a tensor type or a plain container, and a refused file is reported, not retried."""
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True), None
    except Exception as e:
        text = str(e)
        m = re.search(r"GLOBAL ([\w.]+)", text)
        if m:
            return None, (f"{path.name}: refused: the pickle would call {m.group(1)}; it was loaded with "
                          "weights_only=True and nothing in it was executed")
        if "Weights only load failed" in text:  # keep torch's own reason, drop its advice to disable safety
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            text = next((ln for ln in lines[1:] if "weights_only" not in ln and "torch.load" not in ln),
                        "not a torch.save file")
        msg = " ".join(text.split())[:200] or "empty or truncated file"
        return None, f"{path.name} could not be read: {type(e).__name__}: {msg}"


def _t(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def _shape(x: Any) -> str:
    return str(list(x.shape)) if _t(x) else type(x).__name__


def detect_format(obj: Any) -> Optional[str]:
    """PATH_SPECFORGE, PATH_LEGACY or None (not a dict of either format)."""
    if not isinstance(obj, dict):
        return None
    if "aux_hidden_state" in obj or "hidden_state" in obj:
        return PATH_SPECFORGE
    if "hidden_states" in obj:
        return PATH_LEGACY
    return None


def _structure(obj: Any, name: str) -> tuple[Optional[str], Optional[str], dict]:
    """Validate one loaded object. Returns (path, problem, tensors {ids, mask, feature, verifier})."""
    fmt = detect_format(obj)
    if fmt is None:
        keys = sorted(map(str, obj)) if isinstance(obj, dict) else None
        return None, (f"{name}: not a legacy speculators .pt or SpecForge .ckpt sample "
                      f"({'keys ' + str(keys) if keys is not None else type(obj).__name__})"), {}
    need = ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state") if fmt == PATH_SPECFORGE else (
        "input_ids", "loss_mask", "hidden_states")
    missing = [k for k in need if k not in obj]
    if missing:
        return fmt, f"{name}: {fmt} sample without {missing}", {}
    ids, mask = obj["input_ids"], obj["loss_mask"]
    if not (_t(ids) and ids.dim() == 1) or not (_t(mask) and mask.dim() == 1):
        return fmt, f"{name}: input_ids {_shape(ids)} and loss_mask {_shape(mask)} must be [T]", {}
    T = int(ids.shape[0])
    if int(mask.shape[0]) != T:
        return fmt, f"{name}: loss_mask holds {mask.shape[0]} entries but input_ids {T}", {}
    if ids.is_floating_point() or ids.is_complex():
        return fmt, f"{name}: input_ids are {str(ids.dtype).replace('torch.', '')}, not integers", {}
    if fmt == PATH_SPECFORGE:
        hs, aux = obj["hidden_state"], obj["aux_hidden_state"]
        for key, x in (("hidden_state", hs), ("aux_hidden_state", aux)):
            if not (_t(x) and x.dim() == 3 and x.shape[0] == 1 and x.shape[1] == T):
                return fmt, f"{name}: {key} is {_shape(x)}, expected [1, T={T}, width]", {}
        return fmt, None, {"ids": ids, "mask": mask, "feature": aux[0], "verifier": hs[0]}
    hs = obj["hidden_states"]
    if not isinstance(hs, (list, tuple)) or not hs or not all(_t(h) for h in hs):
        return fmt, f"{name}: hidden_states is {_shape(hs)}, expected a list of N [T, H] tensors", {}
    for k, h in enumerate(hs):
        if h.dim() != 2 or int(h.shape[0]) != T:
            return fmt, f"{name}: hidden_states[{k}] is {_shape(h)}, expected [T={T}, H]", {}
    if len(hs) < 2:
        return fmt, f"{name}: hidden_states holds {len(hs)} tensor; need the aux slots and the verifier", {}
    try:
        feature = torch.cat(list(hs[:-1]), dim=-1)
    except Exception as e:  # slot widths or dtypes that do not concatenate
        return fmt, f"{name}: hidden_states slots do not concatenate ({' '.join(str(e).split())[:120]})", {}
    return fmt, None, {"ids": ids, "mask": mask, "feature": feature, "verifier": hs[-1]}


def load_capture(path: str | Path, contract, index: Optional[int] = None):
    """Read one offline file into a :class:`Capture` (unavailable, with the reason, when it cannot be
    read or is not a sample of either format). Never raises for a bad file."""
    from eagle3_conformance.core.capture import Capture

    path = Path(path)
    where = f"{path.name}" if index is None else f"sample {index} ({path.name})"
    empty_ids = torch.zeros(0, dtype=torch.long)
    K_d = contract.capture.feature_width

    def unavailable(reason: str, fmt: Optional[str] = None):
        return Capture(fmt or (PATH_SPECFORGE if path.suffix == ".ckpt" else PATH_LEGACY), where, empty_ids,
                       torch.zeros(0, K_d), empty_ids.clone(), unavailable=reason, stored=True,
                       provenance={"file": str(path)})

    obj, why = safe_load(path)
    if why:
        return unavailable(why)
    fmt, problem, t = _structure(obj, path.name)
    if problem:
        return unavailable(problem, fmt)
    assert fmt is not None  # _structure names a problem for an object of neither format
    ids = t["ids"].long()
    T = int(ids.shape[0])
    a = contract.alignment
    offs = [a.input_token, a.target, a.loss_mask]
    # row t survives when every paired index t + offset lies inside the sequence
    rows = torch.tensor([r for r in range(T) if all(0 <= r + o < T for o in offs)], dtype=torch.long)
    feature, verifier, mask = t["feature"], t["verifier"], t["mask"]
    return Capture(
        path=fmt,
        stored=True,
        where=where,
        token_ids=ids,
        feature=feature[rows] if rows.numel() else feature[:0],
        rows=rows,
        verifier_last=verifier[rows + a.target] if rows.numel() else verifier[:0],
        draft_input_ids=ids[rows + a.input_token],
        loss_mask=mask[rows + a.loss_mask],
        source_loss_mask=mask,
        position_ids=rows + a.position,
        provenance={"file": str(path), "format": fmt,
                    "on_disk_dtype": str(feature.dtype).replace("torch.", ""),
                    "loader": "torch.load(weights_only=True); pairing at the contract's alignment offsets"},
    )
