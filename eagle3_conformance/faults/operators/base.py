"""What an operator is, and the helpers the families share.

An :class:`Operator` turns a good input (training data, engine wiring, draft config, or a capture
after the engine) into the faulty one for one fault kind, and names the check(s) meant to catch
it. For each path of the matrix it says how it applies (:class:`Apply`: words, where it is
injected, a knob builder) or why it cannot occur there (:class:`NotApplicable`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional, Union

from eagle3_conformance.environment import torch_env

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.contract import Contract  # noqa: E402
from eagle3_conformance.faults.example import Example, Knobs  # noqa: E402
from eagle3_conformance.faults.scenario import Scenario, draft_config, sglang_ids  # noqa: E402


@dataclass(frozen=True)
class NotApplicable:
    reason: str


@dataclass(frozen=True)
class Apply:
    """How an operator applies on one path: words, where it is injected, and the knob builder
    ``fn(scn, contract, example) -> Knobs | None`` (None: the fault is a no-op on this example,
    e.g. a shift on a 1-row capture), and optionally the operator's own ``baseline`` knobs."""

    how: str
    where: str  # "data files" | "engine knob" | "engine rebuild" | "in memory (after the engine)" ...
    fn: Callable[[Scenario, Contract, Example], Optional[Knobs]]
    baseline: Optional[Callable[[Scenario, Contract, Example], Knobs]] = None
    """The operator's own unmutated input, when the path's shared baseline lacks what the fault
    changes (e.g. correct FP8 data for an FP8 fault); None: the shared baseline."""


@dataclass(frozen=True)
class Operator:
    """One fault. ``kind`` is the fault-kinds.md kind; ``checks`` the check names meant to catch it;
    ``scenario`` the matrix scenario it needs ("base", "final": aux includes B_L, "wide": target
    96 / draft 64, "four": four aux slots); ``paths`` maps each path to :class:`Apply` or :class:`NotApplicable`."""

    name: str
    kind: str
    title: str
    checks: tuple[str, ...]
    paths: dict[str, Union[Apply, NotApplicable]]
    scenario: str = "base"

    def apply_on(self, path: str) -> Apply:
        """How the operator applies on ``path``.

        Raises:
            ValueError: it does not apply there (the reason).
        """
        how = self.paths[path]
        if isinstance(how, NotApplicable):
            raise ValueError(f"operator {self.name} does not apply on {path}: {how.reason}")
        return how


def aux_indices(c: Contract) -> list[int]:
    """The contract's aux boundaries as integers (``[3, 5, 6]``)."""
    return [b.index for b in c.aux]


def serving_config(scn, ids=None, **over):
    """The scenario's SGLang draft config with engine ids ``ids`` (default: none)."""
    return draft_config(scn.spec, ids if ids is not None else [], **over)


def with_eagle(scn, c, **eagle):
    """The contract's SGLang draft config with ``eagle_config`` entries replaced."""
    cfg = draft_config(scn.spec, sglang_ids(aux_indices(c)))
    cfg["eagle_config"] = {**cfg["eagle_config"], **eagle}
    return cfg


def both(how: str, where: str, fn) -> dict[str, Apply]:
    """The same :class:`Apply` on ``sglang-extend`` and ``sglang-decode``."""
    return {"sglang-extend": Apply(how, where, fn), "sglang-decode": Apply(how, where, fn)}


def slot_map(c: Contract, j: int, fn):
    """A capture knob replacing slot ``j`` of every capture's feature by ``fn(scn, cap, slot)``."""
    d = c.draft.target_hidden_size

    def cap_fn(scn, caps):
        out = []
        for cap in caps:
            f = cap.feature.clone()
            f[:, j * d:(j + 1) * d] = fn(scn, cap, f[:, j * d:(j + 1) * d].float()).to(f.dtype)
            out.append(replace(cap, feature=f))
        return out

    return cap_fn


def rotate_rows(parts: list[torch.Tensor]) -> list[torch.Tensor]:
    """Concatenate per-request rows in a wrong request order (rotated by one, as a lexicographic
    sort of request ids does) and split them back by the original lengths."""
    lens = [p.shape[0] for p in parts]
    flat = torch.cat(parts[1:] + parts[:1])
    return list(torch.split(flat, lens))
