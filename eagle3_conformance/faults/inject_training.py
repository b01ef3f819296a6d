"""Faults injected where training data is made: the data generator writes speculators 0.9.0
files with the knobs' faults (Arrow dataset with speculators' own features,
``hidden_states/hs_{i}.safetensors`` written by the hs-connectors backend the knobs or the
contract name, ``d2t-{N}.npy`` / ``t2d-{N}.npy``), and the REAL
speculators loader (``ArrowDataset`` + ``CollateFn(shift_batch)``) and ``_load_mappings`` read
them back."""

from __future__ import annotations

import shutil
from pathlib import Path

from eagle3_conformance.environment import torch_env

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.contract import Contract  # noqa: E402
from eagle3_conformance.core.findings import Finding  # noqa: E402
from eagle3_conformance.faults.example import Example, Knobs, NoOp, apply_capture  # noqa: E402
from eagle3_conformance.faults.scenario import Scenario  # noqa: E402
from eagle3_conformance.faults.tokens import GOOD_TEMPLATE, render_ids  # noqa: E402

_FEATURES = None


def _speculators_features():
    """The Arrow features speculators' own ``build_speculator_training_dataset`` writes."""
    global _FEATURES
    if _FEATURES is None:
        import datasets
        from datasets import Dataset
        from speculators.data_generation.preprocessing import build_speculator_training_dataset

        datasets.disable_progress_bars()
        ds = build_speculator_training_dataset(Dataset.from_dict({"input_ids": [[1, 2]], "loss_mask": [[1, 1]]}),
                                               processor=None, max_length=10**9, num_proc=1)
        _FEATURES = ds.features
    return _FEATURES


def write_dataset(out: Path, scn: Scenario, contract: Contract, k: Knobs) -> Path:
    """Write a speculators 0.9.0 dataset (Arrow dir with speculators' own features, plus
    ``hidden_states/hs_{i}.safetensors`` [T, N, d] and ``token_ids`` [T], plus
    ``d2t-{N}.npy`` / ``t2d-{N}.npy``) as the data generator would, with the knobs' faults."""
    import numpy as np
    from datasets import Dataset
    from safetensors.torch import save_file

    from eagle3_conformance.environment.torch_env import torch_dtype
    from eagle3_conformance.testbed.datagen import hs_payload

    out.mkdir(parents=True)
    samples, masks = scn.samples, scn.masks
    Dataset.from_dict({"input_ids": samples, "loss_mask": masks, "seq_len": [len(x) for x in samples]},
                      features=_speculators_features()).with_format("torch").save_to_disk(str(out))
    slots = k.slots or [str(b) for b in contract.aux] + [contract.verifier_last.tensor]
    dtype = torch_dtype(k.disk_dtype or contract.data_dtype)
    hs_all = []
    for ids in samples:
        r = scn.ref.capture(ids)
        hs = torch.stack([r.boundary(b) for b in slots], dim=1)
        if k.hs_transform is not None:
            hs = k.hs_transform(scn, r, hs)
        hs_all.append(hs)
    if k.rows_from is not None:
        hs_all = k.rows_from(hs_all)
    if k.slots is None and (k.hs_transform is not None or k.rows_from is not None):
        good = [torch.stack([scn.ref.capture(ids).boundary(b) for b in slots], dim=1) for ids in samples]
        if all(g.shape == h.shape and torch.equal(g.to(dtype), h.to(dtype)) for g, h in zip(good, hs_all)):
            shutil.rmtree(out, ignore_errors=True)
            raise NoOp("the data fault changed no stored row of this example")
    (out / "hidden_states").mkdir()
    writer = k.transfer_write or contract.training.transfer  # hs-connectors backend (datagen.hs_payload)
    for i, (ids, hs) in enumerate(zip(samples, hs_all)):
        save_file(hs_payload(hs.to(dtype), torch.tensor(ids, dtype=torch.long), writer),
                  str(out / "hidden_states" / f"hs_{i}.safetensors"))
    N = scn.spec.draft_vocab
    if k.mapping != "missing":
        d2t = scn.d2t if k.mapping == "good" else scn.d2t + torch.arange(N)
        np.save(out / f"d2t-{N}.npy", d2t.numpy())
        np.save(out / f"t2d-{N}.npy", scn.t2d.numpy())
    return out


def load_mapping(data_dir: Path, draft_vocab: int):
    """(d2t, t2d) through speculators' own ``_load_mappings`` from the files the trainer looks
    for (``d2t-{N}.npy`` / ``t2d-{N}.npy`` in the data dir, train/cli.py:411-418); (None, None)
    when they are absent (the trainer then falls back to the full verifier vocab)."""
    from speculators.train.cli import _load_mappings

    d, t = data_dir / f"d2t-{draft_vocab}.npy", data_dir / f"t2d-{draft_vocab}.npy"
    if not (d.exists() and t.exists()):
        return None, None
    d2t, t2d, _ = _load_mappings(d, t, draft_vocab)
    return d2t, t2d


def run_training(scn: Scenario, contract: Contract, ex: Example, k: Knobs = Knobs()) -> list[Finding]:
    """Write the data (with ``k``'s faults), read it with the real speculators loader, check."""
    from eagle3_conformance.checks import (
        check_chat_template,
        check_golden_tokens,
        check_vocab_mapping,
        run_checks,
        writer_findings,
    )
    from eagle3_conformance.tools.speculators_loader import TrainingLoader

    if k.transfer_read is not None:  # the trainer reads with another hs-connectors backend: the run's contract says so
        contract = contract.model_copy(update={"training": contract.training.model_copy(
            update={"transfer": k.transfer_read})})
    data = write_dataset(scn.fresh_dir("data"), scn, contract, k)
    loader = TrainingLoader(data, contract.draft.target_hidden_size, contract.num_slots, torch.bfloat16,
                            transfer=contract.training.transfer)
    out: list[Finding] = []
    for batch in ex.batches:
        caps = apply_capture(k, scn, loader.batch(list(batch)))
        for cap in caps:
            ref = scn.ref.capture(cap.token_ids) if (not cap.unavailable and len(cap.token_ids)) else None
            out += run_checks(contract, cap, ref)
    out += writer_findings(contract, out)  # one boundary per slot across the samples (R90), as assess
    d2t, t2d = load_mapping(data, contract.draft.draft_vocab_size)
    out += check_vocab_mapping(contract, d2t, t2d, "training", str(data))
    tmpl = k.train_template or GOOD_TEMPLATE
    out += check_chat_template(contract, tmpl, "training")
    out += check_golden_tokens(contract, render_ids(tmpl), None, "training")
    shutil.rmtree(data, ignore_errors=True)
    return out
