"""An acceptance estimate with no engine and no target forward: the draft alone, teacher-forced on
stored training data as in speculators' training-time test, against the target's own next tokens.

What runs (speculators 0.9.0, its own classes):

* the data: a speculators-format dataset (``hidden_states/*.safetensors``: ``input_ids``, the aux
  slots and the verifier slot; :func:`eagle3_conformance.testbed.datagen.write_speculators_dataset`) read
  by speculators' ``ArrowDataset`` and ``CollateFn(shift_batch)`` (``train/data.py``,
  ``models/eagle3/data.py``): the tensors its trainer hands the draft, one document per batch;
* the draft: speculators' ``Eagle3DraftModel.forward`` (``models/eagle3/core.py:193-366``) with
  ``ttt_steps = k``: step 1 reads the aux concat, steps 2..k read the draft's own states and the
  ground-truth tokens (its teacher forcing); it returns each step's draft-vocabulary argmax.

The target's next token at each row is ``argmax(lm_head(final_norm(verifier state)))`` over the
full vocabulary, from the stored verifier slot (the target's ``B_L``) and the target's own head
(its weights, no forward). Draft ids become target ids through ``d2t`` (``id + d2t[id]``,
speculators' and SGLang's convention).

Per-position estimate: a chain starting at row ``t`` has draft position ``i`` accepted when steps
``1..i`` all predict the target's token (step ``s`` at row ``t`` against the target's token of row
``t + s - 1``, speculators' ``align_for_step``); ``p_i`` is the share of start rows (loss-mask rows
with ``k`` rows after them in the document) whose first ``i`` positions are accepted. The loop
measures the same chain at the rows where each verify step starts; the estimate averages over
every row. :func:`estimate_acceptance` returns the same figures as
:mod:`eagle3_conformance.acceptance.stats` does for a loop or an engine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from eagle3_conformance.core.errors import DataError


class EstimateInputError(DataError):
    """The draft does not fit the data (vocabulary, width, slot count) or the data is unreadable;
    the message names the file and the mismatch (exit 2 in the CLI)."""


@dataclass
class Estimate:
    """Teacher-forced per-position acceptance.

    Attributes:
        per_position: ``p_1..p_k`` (share of start rows whose first ``i`` drafts are accepted).
        starts: start rows counted.
        documents: documents read.
        per_document: per document ``(sum over starts of accepted drafts, starts)``.
    """

    per_position: list[float]
    starts: int
    documents: int
    per_document: list[tuple[int, int]]

    @property
    def mean_accept_length(self) -> float:
        """``1 + sum(p_i)``: comparable with the loop's and SGLang's mean accept length."""
        return 1.0 + sum(self.per_position)


def load_speculators_draft(draft_dir: Path, target_dir: Path, *, ttt_steps: int = 3):
    """A draft directory (SGLang layout: ``config.json`` with
    ``eagle_config.eagle_aux_hidden_state_layer_ids``, ``model.safetensors`` with ``d2t``/``t2d``;
    :mod:`eagle3_conformance.testbed.trained_draft` writes one) as speculators' ``Eagle3DraftModel`` (float32,
    eval): built with ``from_training_args`` for the target's config (speculators loads the
    verifier's embedding and head), the layer count read from the checkpoint, then its tensors.

    Raises:
        EstimateInputError: the checkpoint or config is missing, or its tensors do not fit the
            target (width, vocabulary, slot count), named.
    """
    import torch
    from safetensors.torch import load_file
    from speculators.models.eagle3 import Eagle3DraftModel
    from transformers import AutoConfig

    f = Path(draft_dir) / "model.safetensors"
    if not f.is_file():
        raise EstimateInputError(f"{f}: no draft checkpoint")
    sd = load_file(str(f))
    try:
        dcfg = json.loads((Path(draft_dir) / "config.json").read_text())
        ids = list(dcfg.get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids") or [])
    except (OSError, ValueError) as e:
        raise EstimateInputError(f"{Path(draft_dir) / 'config.json'}: unreadable draft config ({e})") from e
    fc = sd.get("fc.weight")
    if fc is None or not ids or fc.shape[1] != len(ids) * fc.shape[0]:
        raise EstimateInputError(f"{f}: fc.weight {None if fc is None else tuple(fc.shape)} does not read the "
                                 f"{len(ids)} aux slots the draft config declares ({ids})")
    vcfg = AutoConfig.from_pretrained(target_dir)
    vcfg.num_hidden_layers = len({k.split(".")[1] for k in sd if k.startswith("layers.")})
    d2t, t2d = sd.get("d2t"), sd.get("t2d")
    if d2t is None or t2d is None:
        raise EstimateInputError(f"{f}: no d2t/t2d (the estimate maps draft ids to target ids with them)")
    head = sd.get("lm_head.weight")
    sizes = {"d2t": int(d2t.shape[0]), "t2d ids set": int(t2d.bool().sum()),
             "lm_head.weight rows": None if head is None else int(head.shape[0])}
    if len(set(sizes.values())) != 1 or int(t2d.shape[0]) != int(vcfg.vocab_size):
        raise EstimateInputError(f"{f}: the draft vocabulary does not fit: " + ", ".join(f"{k} {v}" for k, v in
                                 sizes.items()) + f"; t2d covers {int(t2d.shape[0])} target ids, the target "
                                 f"{target_dir} has {int(vcfg.vocab_size)}")
    model = Eagle3DraftModel.from_training_args(
        verifier_config=vcfg, t2d=t2d.bool(), d2t=d2t.long(), verifier_name_or_path=str(target_dir),
        target_layer_ids=ids, draft_vocab_size=int(d2t.shape[0]),
        norm_before_residual=False, ttt_steps=ttt_steps, draft_attn_impl="sdpa").float()
    own = model.state_dict()
    for name, t in sd.items():
        if name in own and tuple(own[name].shape) != tuple(t.shape):
            raise EstimateInputError(f"{f}: tensor {name} is {tuple(t.shape)}, the draft built from "
                                     f"{target_dir} has {tuple(own[name].shape)}")
    missing = [n for n in own if n not in sd and not n.startswith(("embed_tokens", "verifier_"))]
    if missing:
        raise EstimateInputError(f"{f}: missing tensors {', '.join(missing[:4])}")
    model.load_state_dict({k: v for k, v in sd.items() if k in own}, strict=False)
    del torch
    return model.eval()


def _fit(model, batch, where: str) -> None:
    """Exit-2 checks before any forward: slot count and width against ``fc``, vocabulary."""
    w = int(batch["hidden_states"].shape[-1])
    fc_in = int(model.fc.in_features)
    d = int(model.fc.out_features)
    if w != fc_in:
        raise EstimateInputError(f"{where}: the data hands the draft {w}-wide aux rows ({w / d:g} slots of {d}); "
                                 f"the draft's fc reads {fc_in} ({fc_in // d} slots)")
    v = int(batch["verifier_last_hidden_states"].shape[-1])
    if v != d:
        raise EstimateInputError(f"{where}: verifier slot is {v} wide, the draft's hidden size is {d}")
    vocab = int(model.embed_tokens.num_embeddings)
    ids = batch["input_ids"]
    if ids.numel() and int(ids.max()) >= vocab:
        raise EstimateInputError(f"{where}: token id {int(ids.max())} outside the draft's vocabulary "
                                 f"({vocab} target ids)")


def batches(data_dir: Path, hidden_size: int, slots: int,
            max_len: int = 4096) -> Iterable[tuple[int, dict[str, Any]]]:
    """``(document index, batch)``: one document per batch, as speculators' trainer gets it
    (``ArrowDataset`` + ``CollateFn(shift_batch)``, float32)."""
    import torch
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import ArrowDataset, CollateFn

    try:
        ds = ArrowDataset(max_len=max_len, datapath=str(data_dir), on_missing="raise",
                          hidden_states_dtype=torch.float32)
    except Exception as e:  # noqa: BLE001 - speculators raises several kinds for an unreadable dataset
        raise EstimateInputError(f"{data_dir}: not a readable speculators dataset ({type(e).__name__}: {e})") from e
    for i in range(len(ds)):
        sample = _read(ds, i, Path(data_dir), hidden_size)
        n = max(1, int(sample["input_ids"].shape[0]) - 1)  # shift_batch drops one row; no padding
        yield i, CollateFn(n, hidden_size=hidden_size, num_target_layers=slots, dtype=torch.float32,
                           preprocess=shift_batch)([sample])


def _read(ds, i: int, data_dir: Path, d: int) -> dict[str, Any]:
    """``ds[i]``, refused when unreadable, unavailable or not finite: an estimate from the other
    documents, or through NaN rows, would be a wrong figure with no sign of it.

    Raises:
        EstimateInputError: naming the shard and why, or the document, row and slot holding NaN/Inf.
    """
    import torch
    from speculators.train.recovery import SampleUnavailable

    from eagle3_conformance.checks.shape import nonfinite_rows

    shard = data_dir / "hidden_states" / f"hs_{i}.safetensors"
    try:
        sample = ds[i]
    except Exception as e:  # noqa: BLE001 - safetensors, OSError, ... for a corrupt or missing shard
        raise EstimateInputError(f"{shard}: document {i} could not be read ({type(e).__name__}: "
                                 f"{' '.join(str(e).split())[:200]})") from e
    if isinstance(sample, SampleUnavailable):
        raise EstimateInputError(f"{shard}: document {i} unavailable ({sample.reason or 'no reason given'})")
    aux, ver = sample["hidden_states"], sample["verifier_last_hidden_states"]
    for name, t in (("aux", aux), ("verifier", ver)):
        bad = ~torch.isfinite(t.float())
        if bool(bad.any()):
            row, col = (int(x) for x in bad.nonzero()[0])
            slot = f"aux slot {col // d}" if name == "aux" else "verifier slot"
            rows = nonfinite_rows(t)
            raise EstimateInputError(f"{shard}: document {i} row {row} {slot} holds NaN or Inf ({len(rows)} "
                                     f"{name} rows: {rows[:8]}); the estimate needs finite hidden states")
    return sample


def estimate_acceptance(model, data_dir: Path, k: int, *, head_weight=None,
                        replace_hidden: Optional[dict[int, Any]] = None) -> Estimate:
    """Per-position acceptance of ``model`` (a speculators ``Eagle3DraftModel``) on the dataset.

    Args:
        k: draft tokens per verify step (``ttt_steps``).
        head_weight: the target's lm_head ``[V, d]``; default the draft's verifier embedding (tied
            heads, as SmolLM2's).
        replace_hidden: document index -> aux rows ``[T, K*d]`` (unshifted, as stored) handed to the
            draft instead of the stored ones: another path's tensors for the same tokens.

    Raises:
        EstimateInputError: the draft does not fit the data.
    """
    import torch

    d = int(model.fc.out_features)
    slots = int(model.fc.in_features) // d
    W = model.embed_tokens.weight if head_weight is None else head_weight
    d2t = model.d2t.long()
    counts = [0] * k
    per_doc, starts, docs = [], 0, 0
    for i, b in batches(data_dir, d, slots):
        if replace_hidden is not None and i in replace_hidden:
            b = dict(b)
            h = replace_hidden[i]
            hs = torch.zeros(*b["hidden_states"].shape[:-1], h.shape[-1])
            hs[0, : h.shape[0] - 1] = h[:-1].float()  # shift_batch drops the last row
            b["hidden_states"] = hs
        _fit(model, b, f"{data_dir} document {i}")
        n = int((b["document_ids"][0] >= 0).sum())
        if n <= k:
            continue
        c, s = _chains(model, b, n, k, W, d2t)
        for j in range(k):
            counts[j] += c[j]
        per_doc.append((sum(c), s))
        starts += s
        docs += 1
    if not starts:
        raise EstimateInputError(f"{data_dir}: no document longer than k = {k} rows")
    return Estimate([c / starts for c in counts], starts, docs, per_doc)


def _chains(model, b, n: int, k: int, W, d2t) -> tuple[list[int], int]:
    import torch

    with torch.no_grad():
        out = model(hidden_states=b["hidden_states"], input_ids=b["input_ids"], document_ids=b["document_ids"],
                    loss_mask=b["loss_mask"],
                    position_ids=b["position_ids"], ttt_steps=k)
        drafts = out[0] if isinstance(out, tuple) else out
        v = b["verifier_last_hidden_states"][0, :n]
        want = (model.verifier_norm(v) @ W.T).argmax(-1)  # target's next token per row, full vocab
    starts = n - (k - 1)
    ok = torch.ones(starts, dtype=torch.bool)
    mask = b["loss_mask"][0, :starts].bool()
    counts = []
    for s in range(k):
        pred = drafts[s][0, :starts].long()
        pred = pred + d2t[pred]
        ok = ok & (pred == want[s:s + starts])
        counts.append(int((ok & mask).sum()))
    return counts, int(mask.sum())
