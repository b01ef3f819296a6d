"""The inputs of one matrix run (:class:`Example`) and what a fault operator changes in them
(:class:`Knobs`); :class:`NoOp` when a fault changes nothing on an example."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from eagle3_conformance.environment import torch_env

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.core.capture import Capture  # noqa: E402
from eagle3_conformance.faults.scenario import Scenario  # noqa: E402


@dataclass
class Example:
    """The inputs of one run: training batches (sample indices), an extend batch (prompts) and a
    verify layout (prefixes, draft tokens, accepted counts). ``boundaries`` overrides the
    scenario's aux boundaries (same K on SGLang paths: the draft's fc is sized at build)."""

    batches: list[list[int]]
    extend: list[list[int]]
    prefixes: list[list[int]]
    drafts: list[list[int]]
    accepted: list[int]
    boundaries: Optional[tuple[int, ...]] = None

    def tokens(self) -> list[list[int]]:
        return [list(x) for x in self.extend] + [list(p) + list(d) for p, d in zip(self.prefixes, self.drafts)]


def default_example(scn: Scenario) -> Example:
    """A fixed example for the matrix: every sample in one training batch, a batch of 3 prompts
    and a verify step over 2 requests with 3 draft tokens, consistent with the target."""
    from eagle3_conformance.paths.sglang_decode import consistent_drafts

    ext = [list(x) for x in scn.samples[:3] if len(x) >= 2] or [[1, 5, 6, 7]]
    prefixes = [list(scn.samples[0][:5]), list(scn.samples[1][:4])]
    accepted = [2, 3]
    drafts = [consistent_drafts(scn.ref, p, 3, a, [7 + i, 9 + i, 11 + i]) for i, (p, a) in enumerate(zip(prefixes, accepted))]
    return Example([list(range(len(scn.samples)))], ext, prefixes, drafts, accepted)



@dataclass
class Knobs:
    """What an operator changes for one path run. Defaults: the good input.

    Training (the data generator / trainer): ``slots`` (on-disk slot list, aux then verifier),
    ``hs_transform(scn, ref, hs [T,N,d] f32) -> hs``, ``rows_from`` (flat-buffer row
    reassignment across samples), ``disk_dtype``, ``mapping`` (good/absolute/missing),
    ``train_template``, ``transfer_write`` (the hs-connectors backend that writes the files:
    ``"fp8"`` as ``FP8HiddenStatesConnector``), ``transfer_read`` (the backend the trainer reads
    with, restated as the run's ``training.transfer``).
    Serving (the engine): ``draft_config`` (the config SGLang's resolver reads), ``d2t``
    (good/absolute/missing in the draft checkpoint), ``handoff`` (the tensor handed to the draft
    after verify -> tensor: a side-path buffer), ``feed_draft_states``, ``serving_template``,
    ``variant`` (a harness rebuild: ``{"draft": {...}, "dtype": "bfloat16"}``).
    SpecForge (its loader chain): ``sf_transform(sample) -> sample`` after
    ``normalize_offline_sample`` (a trainer fault), ``alignment`` (the pairing the contract states
    for the run, e.g. the loss mask shifted as SpecForge#895 would).
    Both: ``capture(scn, caps) -> caps`` (after the engine / loader, in memory).
    """

    slots: Optional[list[str]] = None
    hs_transform: Optional[Callable] = None
    rows_from: Optional[Callable] = None
    disk_dtype: Optional[str] = None
    mapping: str = "good"
    train_template: Optional[str] = None
    draft_config: Optional[dict] = None
    d2t: str = "good"
    handoff: Optional[Callable] = None
    feed_draft_states: bool = False
    serving_template: Optional[str] = None
    variant: Optional[dict] = None
    capture: Optional[Callable] = None
    sf_transform: Optional[Callable] = None
    alignment: Optional[dict] = None
    transfer_write: Optional[str] = None
    transfer_read: Optional[str] = None



class EngineRefuses(Exception):
    """The engine release's own code raises on the faulty configuration before anything reaches the
    draft (SGLang 0.5.14's ``LlamaModel.forward`` cannot capture the embedding: ``hidden_states +
    residual`` with no residual yet, ``llama.py:407-409``): on that release the fault is loud, so
    there is nothing for a check to catch. The matrix records ``n/a`` with the engine's words."""


class NoOp(Exception):
    """The fault changes nothing on this example (e.g. a row shift on a 1-row capture, rows
    permuted between identical requests): there is nothing to catch."""


def _same_caps(a: list[Capture], b: list[Capture]) -> bool:
    def eq(x, y):
        if x is None or y is None:
            return x is y
        return x.shape == y.shape and bool(torch.equal(x, y))

    return len(a) == len(b) and all(
        eq(x.feature, y.feature) and eq(x.position_ids, y.position_ids) and eq(x.rows, y.rows)
        for x, y in zip(a, b))


def apply_capture(k: "Knobs", scn: "Scenario", caps: list[Capture]) -> list[Capture]:
    """``k.capture`` applied in memory; raises :class:`NoOp` when it changed nothing."""
    if k.capture is None:
        return caps
    new = k.capture(scn, caps)
    if _same_caps(caps, new):
        raise NoOp("the in-memory fault changed no row of this example")
    return new
