"""The engine-free acceptance estimate against the loop, and which path's tensors cost acceptance.

For the same tokens (held-out prompts and the loop's lossless output), the draft is run
teacher-forced (:func:`eagle3_conformance.acceptance.estimate.estimate_acceptance`: speculators'
own forward and data path) on the tensors each path hands it:

* ``training``: the speculators dataset written by the project's data path
  (:func:`eagle3_conformance.testbed.datagen.write_speculators_dataset`, the HF reference forward);
* ``sglang-extend`` / ``sglang-decode``: the aux rows SGLang 0.5.23's classes handed the draft in
  the loop, recorded by :func:`eagle3_conformance.tools.sglang_cpu.path_tensors.record_paths`.

The loop's own per-position acceptance (:mod:`eagle3_conformance.acceptance.stats`, from its
correct-drafts histogram) is what the estimate is compared with. A path whose estimate is below
the training loader's beyond a paired bootstrap interval over prompts is named with its
per-position loss (:func:`attribute`): a finding the diagnosis can use (which path, which draft
position).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Optional

PATHS = ("training", "sglang-extend", "sglang-decode")


def compare(td, prompts: list[list[int]], *, k: int = 3, max_new: int = 32, knobs_fn=None,
            log=lambda s: None) -> dict[str, Any]:
    """Loop vs estimate on ``prompts`` with the trained draft ``td``
    (:class:`eagle3_conformance.testbed.trained_draft.TrainedDraft`).

    Args:
        knobs_fn: ``fn(harness) -> LoopKnobs``: a fault injected in the loop (its tensors are then
            what the SGLang paths recorded); None: the correct wiring.

    Returns:
        ``{"loop": {...}, "estimates": {path: {...}}, "findings": [...], "prompts": n}``; each
        figure set has ``per_position``, ``mean_accept_length`` and ``per_prompt`` (sum, count).
    """
    import torch

    from eagle3_conformance.acceptance.estimate import estimate_acceptance, load_speculators_draft
    from eagle3_conformance.acceptance.stats import correct_drafts_histogram, per_position
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.testbed.datagen import write_speculators_dataset
    from eagle3_conformance.testbed.trained_draft import RECIPE
    from eagle3_conformance.tools.sglang_cpu import SGLangCPUHarness
    from eagle3_conformance.tools.sglang_cpu.path_tensors import record_paths
    from eagle3_conformance.tools.sglang_cpu.spec_loop import LoopKnobs

    h = SGLangCPUHarness(td.target_dir, td.draft_dir, dtype=torch.float32)
    try:
        knobs = knobs_fn(h) if knobs_fn is not None else LoopKnobs()
        recs = [record_paths(h, p, k=k, max_new=max_new, knobs=knobs) for p in prompts]
    finally:
        h.close()
    log(f"loop: {len(recs)} prompts recorded")
    accepts = [a for r in recs for a in r["accept_lengths"]]
    hist = correct_drafts_histogram(accepts, k)
    loop = {"per_position": per_position(hist, k), "mean_accept_length": sum(accepts) / len(accepts),
            "histogram": hist, "per_prompt": [(sum(r["accept_lengths"]) - len(r["accept_lengths"]),
                                               len(r["accept_lengths"])) for r in recs]}
    model = load_speculators_draft(td.draft_dir, td.target_dir, ttt_steps=k)
    est = {}
    with tempfile.TemporaryDirectory(prefix="accept-estimate-") as tmp:
        data = Path(tmp) / "data"
        masks = [[0] * len(p) + [1] * (len(r["tokens"]) - len(p)) for p, r in zip(prompts, recs)]
        write_speculators_dataset(data, load_reference_model(td.target_dir), [r["tokens"] for r in recs],
                                  slots=RECIPE["slots"], dtype="float32", loss_masks=masks)
        for path in PATHS:
            repl = None if path == "training" else {i: r[path] for i, r in enumerate(recs)}
            e = estimate_acceptance(model, data, k, replace_hidden=repl)
            est[path] = {"per_position": e.per_position, "mean_accept_length": e.mean_accept_length,
                         "per_prompt": e.per_document, "starts": e.starts}
            log(f"estimate on {path} tensors: {e.mean_accept_length:.3f}")
    return {"loop": loop, "estimates": est, "findings": attribute(est), "prompts": len(prompts),
            "num_draft_tokens": k, "max_new_tokens": max_new}


def _ratio(pp) -> float:
    n = sum(c for _, c in pp)
    return sum(s for s, _ in pp) / n if n else 0.0


def attribute(est: dict[str, dict[str, Any]], *, min_loss: float = 0.02) -> list[dict[str, Any]]:
    """Paths whose tensors cost acceptance against the training loader's, for the same tokens:
    the paired 95% bootstrap interval over prompts of (training - path) drafts accepted per start
    row lies above 0 and the loss is at least ``min_loss`` (accepted drafts per verify step).
    Each finding names the path, the loss in mean accept length and per draft position. With too
    few prompts for an interval the finding says so and judges by the loss alone."""
    from eagle3_conformance.acceptance.stats import TooFewPrompts, bootstrap_difference

    base = est["training"]
    out = []
    for path in PATHS[1:]:
        e = est[path]
        loss = base["mean_accept_length"] - e["mean_accept_length"]
        note: Optional[str] = None
        try:
            iv = bootstrap_difference(base["per_prompt"], e["per_prompt"])
            beyond = iv.lo > 0
            interval = (iv.lo, iv.hi)
        except TooFewPrompts as err:
            beyond, interval, note = True, None, str(err)
        if loss >= min_loss and beyond:
            out.append({"path": path, "loss_accept_length": loss, "interval": interval, "note": note,
                        "loss_per_position": [b - p for b, p in zip(base["per_position"], e["per_position"])],
                        "message": f"{path}'s tensors cost {loss:.2f} accept length against the training "
                                   f"loader's for the same tokens (per draft position: " +
                                   ", ".join(f"{b - p:+.2f}" for b, p in zip(base["per_position"],
                                                                            e["per_position"])) + ")"})
    return out


__all__ = ["PATHS", "attribute", "compare", "_ratio"]
