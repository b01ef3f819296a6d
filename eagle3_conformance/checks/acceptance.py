"""The draft's own acceptance, as part of the serving verdict: a draft that receives the boundary the
contract declares but accepts almost nothing fails, whatever the tensors say (issue 41).

The figure is the engine's own: accepted draft tokens per verify step (accept length minus the bonus
token), from SGLang's ``num_accept_tokens`` in a server's hook records (``check-captures``), SGLang's
``spec_correct_drafts_histogram`` (``sglang-engine``, ``accept``) or vLLM's accept counters
(``vllm-engine``, ``accept``), all turned into one correct-drafts histogram (``h[j]``: verify steps that
accepted exactly ``j`` drafts).

"Almost nothing" is :data:`USELESS_MAX_DRAFTS_PER_STEP`, measured on SGLang 0.5.23's real HTTP server with
the SmolLM2-135M pair (docs/accept.md, "A draft that accepts nothing"; ``benchmarks/bench_accept_decision.py``):
drafts that cannot predict the target (an untrained draft, the trained draft with its d2t scrambled)
accept 0.000 drafts per verify step on all 32 prompts x 64 tokens; a boundary fault that leaves the draft
its token embedding (the seed incident, B_0 in slot 0) 0.029 to 0.049; the project's trained draft, a weak
draft (acceptance rate 17%), 0.51 [0.43, 0.61], no single prompt below 0.189 (0.145 with its ids shifted
by one). 0.1 lies between the seed incident's highest and the trained draft's lowest prompt (their
geometric mean is 0.084 to 0.096). A fail needs the
whole interval below the threshold, a pass the whole interval at or above it; a run with fewer than
:data:`MIN_STEPS` verify steps, or whose interval straddles the threshold, is not judged (skip, saying why).
"""

from __future__ import annotations

from eagle3_conformance.acceptance.stats import drafts_per_step_interval
from eagle3_conformance.checks.registry import FACT, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import Finding

USELESS_MAX_DRAFTS_PER_STEP = 0.1
"""Accepted drafts per verify step below which a draft accepts "almost nothing" (accept length 1.1)."""

MIN_STEPS = 30
"""Fewer verify steps than this are not judged: one accepted draft would move the figure by > 0.03."""


@check(FACT, (), fact="draft_acceptance")
def check_draft_acceptance(c: Contract, fig: dict, path: str = "sglang-engine") -> list[Finding]:
    """The draft accepts more than almost nothing (:data:`USELESS_MAX_DRAFTS_PER_STEP`), by the engine's own
    counters. It judges no tensor: with the boundary intact, a failure means the cause lies after it (the
    draft's vocabulary mapping, weights, shared embedding or lm_head: the ``draft-accepts-nothing``
    diagnosis says where to look).

    Args:
        fig: ``{"histogram": [h_0..h_k] (verify steps with j drafts accepted), "source": words, "requests":
            n}`` or ``{"skip": why}``.
        path: the path that measured it.
    """
    where = f"{path}: {fig.get('source', 'the engine')}"
    if "skip" in fig:
        return [Finding("draft_acceptance", "skip", path, None, "accepts more than almost nothing", None, where,
                        f"the draft's acceptance was not measured: {fig['skip']}")]
    hist = [int(x) for x in fig.get("histogram") or []]
    steps = sum(hist)
    if steps < MIN_STEPS:
        return [Finding("draft_acceptance", "skip", path, None, f">= {USELESS_MAX_DRAFTS_PER_STEP} drafts per verify step",
                        {"steps": steps, "histogram": hist}, where,
                        f"{steps} verify steps: too few to judge the draft's acceptance (needs {MIN_STEPS})")]
    mean, lo, hi = drafts_per_step_interval(hist)
    obs = {"drafts_per_step": round(mean, 4), "interval": [round(lo, 4), round(hi, 4)], "steps": steps,
           "accept_length": round(1 + mean, 4), "histogram": hist, "requests": fig.get("requests")}
    words = (f"{mean:.3f} accepted drafts per verify step [{lo:.3f}, {hi:.3f}] (accept length {1 + mean:.3f}) over "
             f"{steps} verify steps" + (f" of {fig['requests']} requests" if fig.get("requests") else "")
             + f", correct-drafts histogram {hist}")
    t = USELESS_MAX_DRAFTS_PER_STEP
    if hi < t:
        return [Finding("draft_acceptance", "fail", path, None, f">= {t} drafts per verify step", obs, where,
                        f"the draft accepts almost nothing: {words}; a draft that predicts its target accepts at least "
                        f"{t} (docs/accept.md)")]
    if lo >= t:
        return [Finding("draft_acceptance", "pass", path, None, f">= {t} drafts per verify step", obs, where,
                        f"the draft accepts: {words}")]
    return [Finding("draft_acceptance", "skip", path, None, f">= {t} drafts per verify step", obs, where,
                    f"cannot tell whether the draft accepts more than almost nothing: {words} straddles {t}")]
