"""Training data written by writers that disagree (R90, verl-project/verl-SpeCo#20, #21): SGLang's online
capture, an HF offline writer and verl's old-logprob writer store different tensors for the same layer id
(id L - 1: B_L vs F; id -1: B_0 vs F; :mod:`eagle3_conformance.engine_ids.writers`), so a dataset written by
two of them holds two tensors under one slot. Each sample's slot is identified by fingerprint
(``slot_identity``); this check reads those verdicts across the samples of one dataset: every slot must
hold one boundary in every sample, and it names the writer(s) that store what each sample holds.
"""

from __future__ import annotations

from typing import Iterable, Optional

from eagle3_conformance.checks.registry import FACT, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.core.notation import Boundary

_LIST = 6  # sample names listed per group before "and N more"


def slot_observations(findings: Iterable[Finding]) -> dict:
    """The fact :func:`check_writer_consistency` judges, from ``slot_identity`` findings of stored
    samples: ``{"slots": {label: {"declared": str, "samples": {where: observed boundary}}}}``; samples
    whose slot matched no boundary, or was undecidable (skip), are left out."""
    slots: dict[str, dict] = {}
    for f in findings:
        if f.check != "slot_identity" or f.status == "skip" or not (f.slot or "").startswith("slot"):
            continue
        try:
            Boundary.parse(str(f.observed))
            Boundary.parse(str(f.expected))
        except ValueError:
            continue  # "none" / "no slot": a slot matching no boundary, or none declared (their findings say so)
        s = slots.setdefault(str(f.slot), {"declared": str(f.expected), "samples": {}})
        s["samples"][f.where] = str(f.observed)
    return {"slots": slots}


def _names(xs: list[str]) -> str:
    more = f" and {len(xs) - _LIST} more" if len(xs) > _LIST else ""
    return ", ".join(xs[:_LIST]) + more


def _writers(c: Contract, declared: str, observed: str) -> str:
    """`` (what <writers> store for id i)`` when the declared boundary's output-of id is one the writers
    read differently, else ``""``."""
    from eagle3_conformance.engine_ids.writers import disputed, output_of_id, who_wrote

    i = output_of_id(Boundary.parse(declared))
    if i is None or not -1 <= i <= c.L - 1 or not disputed(i, c.L):
        return ""
    return f" ({who_wrote(i, Boundary.parse(observed), c.L)} for id {i})"


@check(FACT, ("K4", "K2"), fact="slot_writers")
def check_writer_consistency(c: Contract, fig: dict, path: str = "training") -> list[Finding]:
    """R90: in one dataset each aux slot holds the same boundary in every fingerprinted sample. A slot
    holding two (B_L in some samples, F in others) was written by two writers that read its layer id
    differently; the finding names the samples of each and which writer stores what they hold. A slot
    identified in fewer than 2 samples gives no finding.

    Args:
        fig: :func:`slot_observations` of the dataset's ``slot_identity`` findings.
    """
    out = []
    for label, s in sorted(fig.get("slots", {}).items()):
        samples: dict[str, str] = s["samples"]
        where = f"{len(samples)} fingerprinted samples"
        if len(samples) < 2:  # one sample (a drawn batch of one, --sample 1) shows no mix: nothing to judge
            continue
        groups: dict[str, list[str]] = {}
        for w, b in samples.items():
            groups.setdefault(b, []).append(w)
        if len(groups) == 1:
            (b, ws), = groups.items()
            out.append(Finding("writer_consistency", "pass", path, label, "one boundary in every sample", b, where,
                               f"{label} holds {b} in all {len(ws)} samples{_writers(c, s['declared'], b)}", "K4"))
            continue
        parts = [f"{b} in {len(ws)} ({_names(ws)}){_writers(c, s['declared'], b)}"
                 for b, ws in sorted(groups.items(), key=lambda kv: -len(kv[1]))]
        out.append(Finding("writer_consistency", "fail", path, label, "one boundary in every sample",
                           sorted(groups), where,
                           f"{label} holds different tensors across samples: {'; '.join(parts)}. The dataset mixes "
                           f"writers that read one layer id differently (R90, verl-SpeCo#20/#21); the contract "
                           f"declares {s['declared']}: regenerate the others with the writer that stores it", "K4"))
    return out


def writer_findings(c: Contract, findings: Iterable[Finding], path: Optional[str] = None) -> list[Finding]:
    """:func:`check_writer_consistency` on the ``slot_identity`` verdicts among ``findings`` (one
    dataset's samples): what ``check-data``, ``check-offline`` and the stored-data paths add after the
    per-sample checks. ``path``: the findings' path (default: the first ``slot_identity`` finding's)."""
    findings = list(findings)
    fig = slot_observations(findings)
    if not fig["slots"]:
        return []
    if path is None:
        path = next(f.path for f in findings if f.check == "slot_identity")
    return check_writer_consistency(c, fig, path=path)
