"""What the engine resolved and the draft's fc: the engine's ids mapped to the contract's
boundaries, fc ran on the aux input, fc is sized from the target width."""

from __future__ import annotations

from eagle3_conformance.checks.common import finding
from eagle3_conformance.checks.registry import CAPTURE, TENSORS, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding


@check(CAPTURE, ("K1", "K2"), stored=TENSORS)
def check_engine_mapping(c: Contract, cap: Capture) -> list[Finding]:
    """K1/K2: the boundaries the engine resolved from the draft config equal the contract's."""
    if cap.engine_boundaries is None:
        return []
    want = [str(b) for b in c.aux]
    ok = list(cap.engine_boundaries) == want
    # engine_ids None: the engine read no ids (in-process harnesses: its setter's defaults), unless the
    # path says it did not record them (provenance "engine_ids": why; the real engine's records)
    ids = cap.engine_ids if cap.engine_ids is not None else cap.provenance.get("engine_ids", "none (its defaults)")
    return [finding("engine_mapping", "pass" if ok else "fail", cap, None, want, list(cap.engine_boundaries),
                    f"engine ids {ids} -> {list(cap.engine_boundaries)}"
                    + ("" if ok else f"; contract says {want}"), "K1")]


@check(CAPTURE, ("K5", "K7", "K9"), stored=TENSORS)
def check_fc_ran(c: Contract, cap: Capture) -> list[Finding]:
    """K5: the draft's fc actually ran on the aux input (SGLang skips fc silently when the input
    is as wide as the draft's embedding, python/sglang/srt/models/llama_eagle3.py:237-247)."""
    if cap.fc_ran is None:
        return []
    return [finding("fc_ran", "pass" if cap.fc_ran else "fail", cap, "feature", True, cap.fc_ran,
                    "the draft's fc ran on the input" if cap.fc_ran else
                    f"the draft's fc did not run: a {cap.draft_input_width}-wide input skipped it", "K5")]


@check(CAPTURE, ("K6",), stored=TENSORS)
def check_fc_shape(c: Contract, cap: Capture) -> list[Finding]:
    """K6: the draft's fc is [draft hidden, K x target_hidden_size] (sized from the target width,
    not the draft width; python/sglang/srt/models/llama_eagle3.py:151-167)."""
    fin, fout = cap.provenance.get("fc_in_features"), cap.provenance.get("fc_out_features")
    if fin is None:
        return []
    want = (c.capture.feature_width, c.draft.hidden_size)
    ok = (fin, fout) == want
    return [finding("fc_shape", "pass" if ok else "fail", cap, "fc", f"in {want[0]}, out {want[1]}",
                    f"in {fin}, out {fout}",
                    f"draft fc maps {fin} -> {fout}" + ("" if ok else f"; contract says {want[0]} -> {want[1]}"), "K6")]
