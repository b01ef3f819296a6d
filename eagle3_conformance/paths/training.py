"""``training``: what speculators 0.9.0 hands its EAGLE-3 draft during training.

The pair's stored dataset (the embedded fixtures have one) goes through speculators' own loader
(:class:`eagle3_conformance.tools.speculators_loader.TrainingLoader`: ``ArrowDataset`` ->
``CollateFn(shift_batch)``): first every sample once in consecutive batches, then batch
compositions hypothesis draws (which samples, how many, in which order;
``strategies.sample_batches``). Users' own datasets are checked with ``eagle3-conformance check-data``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eagle3_conformance.paths.base import Needs, Observation, Path, Skipped


@dataclass
class _State:
    loader: Any  # TrainingLoader
    n: int  # samples in the dataset


def prepare(c, pair):
    from eagle3_conformance.pairs import torch_dtype

    if c.training.tool != "speculators":
        return Skipped(f"this contract's training data goes through {c.training.tool} (training.tool); the "
                       f"{c.training.tool} path reads it")
    from eagle3_conformance.tools.speculators_loader import TrainingLoader

    loader = TrainingLoader(pair.data_dir, c.draft.target_hidden_size, c.num_slots, torch_dtype(c.data_dtype),
                            transfer=c.training.transfer)
    return _State(loader, len(loader))


def first(s: _State) -> Observation:
    """Every sample once, in consecutive batches of 4; a failure here ends the run."""
    from eagle3_conformance.tools.speculators_loader import default_batches

    caps = [cap for batch in default_batches(s.n) for cap in s.loader.batch(batch)]
    return Observation(captures=caps, stored=True, stop_on_failure=True)


def observe(s: _State, draw) -> Observation:
    """One drawn batch: ``[sample index, ...]`` (repeats allowed, any order)."""
    from eagle3_conformance import strategies

    batch = draw(strategies.sample_batches(s.n), label="batch")
    return Observation(captures=s.loader.batch(list(batch)), stored=True)


PATH = Path(
    name="training",
    summary="speculators 0.9.0 ArrowDataset -> CollateFn(shift_batch): hidden_states, verifier_last_hidden_states, "
            "ids, mask, positions",
    needs=Needs(modules=("speculators",), data=True),
    prepare=prepare,
    first=first,
    observe=observe,
)
