"""``training``: what speculators 0.9.0 hands its EAGLE-3 draft during training.

The pair's stored dataset (the embedded fixtures have one) goes through speculators' own loader
(:class:`eagle3_conformance.tools.speculators_loader.TrainingLoader`: ``ArrowDataset`` ->
``CollateFn(shift_batch)``): first every sample once in consecutive batches, then batch
compositions hypothesis draws (which samples, how many, in which order;
``strategies.sample_batches``). Users' own datasets are checked with ``eagle3-conformance check-data``.
"""

from __future__ import annotations

from eagle3_conformance.paths.base import Needs, Path, Skipped, StoredData, stored_first, stored_observe


def prepare(c, pair):
    from eagle3_conformance.suite.pairs import torch_dtype

    if c.training.tool != "speculators":
        return Skipped(f"this contract's training data goes through {c.training.tool} (training.tool); the "
                       f"{c.training.tool} path reads it")
    from eagle3_conformance.tools.speculators_loader import TrainingLoader

    loader = TrainingLoader(pair.data_dir, c.draft.target_hidden_size, c.num_slots, torch_dtype(c.data_dtype),
                            transfer=c.training.transfer)
    return StoredData(loader, len(loader))


PATH = Path(
    name="training",
    summary="speculators 0.9.0 ArrowDataset -> CollateFn(shift_batch): hidden_states, verifier_last_hidden_states, "
            "ids, mask, positions",
    needs=Needs(modules=("speculators",), data=True),
    prepare=prepare,
    first=stored_first,
    observe=stored_observe,
)
