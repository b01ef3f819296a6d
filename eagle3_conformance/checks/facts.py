"""Facts of a whole run (:attr:`eagle3_conformance.paths.base.Observation.facts`): the engine
release the contract was validated with, the measured accept length against the release gate."""

from __future__ import annotations

from typing import Any, Optional

from eagle3_conformance.checks.registry import FACT, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import Finding, Status


@check(FACT, ("K1", "K2"), fact="sglang_version")
def check_engine_version(c: Contract, installed: Optional[str]) -> list[Finding]:
    """K1/K2 version awareness: id rules change between SGLang releases (deepseek_v2's first-id
    rule arrived in 0.5.13; REFERENCE.md section 3.2), so a contract lists the SGLang versions
    it was validated with. An unlisted installed version is reported (skip), never passed."""
    listed = c.engines.sglang_validated
    where = f"sglang {installed or 'not installed'}"
    if not listed:
        return [Finding("engine_version", "skip", "sglang", None, "validated versions listed", installed, where,
                        f"the contract lists no validated SGLang version; installed: {installed}", "K1")]
    ok = installed in listed
    return [Finding("engine_version", "pass" if ok else "skip", "sglang", None, listed, installed, where,
                    f"SGLang {installed} is one of the validated versions {listed}" if ok else
                    f"SGLang {installed} is not among the validated versions {listed}: id rules may differ",
                    "K1")]


@check(FACT, ("K1",), emits=("engine_version",), fact="vllm_version")
def check_vllm_version(c: Contract, installed: Optional[str]) -> list[Finding]:
    """vLLM's id readers differ between releases and runners (vllm-project/vllm#46788, #46973,
    #50170), so a contract served with vLLM names the release its ids were resolved with
    (``engines.vllm.version``). Another installed release is reported (skip), never passed."""
    declared = c.engines.vllm.version if c.engines.vllm is not None else None
    where = f"vllm {installed or 'not installed'}"
    if declared is None:
        return [Finding("engine_version", "skip", "vllm", None, "engines.vllm.version", installed, where,
                        f"the contract declares no vLLM release; installed: {installed}", "K1")]
    ok = installed == declared
    return [Finding("engine_version", "pass" if ok else "skip", "vllm", None, declared, installed, where,
                    f"vLLM {installed} is the release the contract's ids were resolved with" if ok else
                    f"vLLM {installed} is not {declared}, the release the contract names: id readers may differ",
                    "K1")]


@check(FACT, (), gates=("gates.min_accept_length",), fact="avg_accept_length")
def check_accept_length(c: Contract, avg_accept_length: Optional[float | dict[str, Any]],
                        path: str = "sglang-engine") -> list[Finding]:
    """Release gate: the mean accept length (tokens committed per verify step, bonus included:
    SGLang's ``avg_spec_accept_length``) >= ``gates.min_accept_length``. Acceptance is the only
    symptom most field reports had (fault-kinds.md); it gates, it does not diagnose.

    Args:
        avg_accept_length: the measured mean (>= 1), None when nothing was measured, ``{"skip": why}``
            when the path could not measure it (a server's records without decode: CUDA graphs), or a mapping
            with ``spec_accept_length``, ``spec_correct_drafts_histogram`` and
            ``per_position_acceptance`` (sglang-engine: ``captures.accept_figures``, SGLang's counters;
            cpu-accept: the loop's, :mod:`eagle3_conformance.acceptance.stats`): per-position
            acceptance in the locator.
        path: the path that measured it: ``sglang-engine`` (a real engine's server info, GPU) or
            ``cpu-accept`` (the greedy speculative loop on the SGLang CPU harness).
    """
    detail = ""
    if isinstance(avg_accept_length, dict) and "skip" in avg_accept_length:  # nothing this path could measure
        return [Finding("accept_length", "skip", path, None, c.gates.min_accept_length, None, f"{path}: accept length",
                        f"acceptance not judged: {avg_accept_length['skip']}", "")]
    if isinstance(avg_accept_length, dict):  # SGLang's meta_info counters, or the cpu-accept loop's same figures
        per_pos = avg_accept_length.get("per_position_acceptance") or []
        detail = (f"; per-position acceptance {[round(x, 3) for x in per_pos]} from spec_correct_drafts_histogram "
                  f"{avg_accept_length.get('spec_correct_drafts_histogram')}")
        avg_accept_length = avg_accept_length.get("spec_accept_length")
    floor = c.gates.min_accept_length
    where = ("sglang.Engine meta_info: completion_tokens / spec_verify_ct" + detail) if path == "sglang-engine" \
        else f"{path}: mean tokens per verify step" + detail
    if floor is None:
        return [Finding("accept_length", "skip", path, None, None, avg_accept_length, where,
                        "the contract sets no gates.min_accept_length: acceptance not gated", "")]
    if avg_accept_length is None:
        return [Finding("accept_length", "fail", path, None, floor, None, where,
                        "no accept length was measured" if path != "sglang-engine" else
                        "the engine reported no avg_spec_accept_length", "")]
    ok = avg_accept_length >= floor
    name = "avg_spec_accept_length" if path == "sglang-engine" else "mean accept length"
    return [Finding("accept_length", "pass" if ok else "fail", path, None, floor, avg_accept_length,
                    where, f"{name} {avg_accept_length:.3f} (floor {floor})", "")]


@check(FACT, (), emits=("lossless",), fact="engine_lossless")
def check_engine_lossless(c: Contract, greedy: dict, path: str = "sglang-engine") -> list[Finding]:
    """Greedy speculative decoding is lossless: every request's output ids equal the target's own
    greedy decode of the same prompt (float32 only; bf16 diverges at near-ties and is no oracle,
    docs/REFERENCE.md section 4.1).

    Args:
        greedy: ``{"engine": [[ids]...], "reference": [[ids]...]}`` (same length per request; optional
            ``"note"``: why the engine ran in another dtype than the contract's), or ``{"skip": why}``.
    """
    if "skip" in greedy:
        return [Finding("lossless", "skip", path, None, "engine output == target greedy", None, "all requests",
                        greedy["skip"], "")]
    bad = [i for i, (a, b) in enumerate(zip(greedy["engine"], greedy["reference"])) if list(a) != list(b)]
    n = len(greedy["engine"])
    note = f" ({greedy['note']})" if greedy.get("note") else ""
    if not bad:
        return [Finding("lossless", "pass", path, None, "engine output == target greedy", f"{n} of {n} equal",
                        "all requests", f"all {n} outputs equal the target's greedy decode{note}", "")]
    i = bad[0]
    a, b = list(greedy["engine"][i]), list(greedy["reference"][i])
    j = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return [Finding("lossless", "fail", path, None, "engine output == target greedy", f"{n - len(bad)} of {n} equal",
                    f"request {i}, output token {j}",
                    f"{len(bad)} of {n} outputs differ from the target's greedy decode; request {i} first at output "
                    f"token {j} (engine {a[j] if j < len(a) else None}, target {b[j] if j < len(b) else None}){note}", "")]


@check(FACT, ("R42",), fact="graph_acceptance")
def check_graph_acceptance(c: Contract, fig: dict, path: str = "sglang-engine") -> list[Finding]:
    """R42 class, report only: the accept length of an engine run with CUDA graphs beside the same run
    eager (hooks never fire on graph replay, so only acceptance sees the graphed decode).

    Never a gate: how far graphed acceptance may fall below eager before it is a fault has not been
    measured (no GPU run yet; prepared, never run on a GPU: scripts/gpu_accept.sh measures it with
    ``accept``'s baseline rule). The finding is a ``skip`` carrying both figures; it fails only when a
    run reported no accept length at all (the figures are missing, not judged).

    Args:
        fig: ``{"eager": float, "graphed": float}`` (SGLang's spec_accept_length of each run).
    """
    e, g = fig.get("eager"), fig.get("graphed")
    if e is None or g is None:
        return [Finding("graph_acceptance", "fail", path, None, "both runs report spec_accept_length", g,
                        "CUDA graphs", "a run reported no spec_accept_length", "R42")]
    return [Finding("graph_acceptance", "skip", path, None, "report only (no measured noise: not gated)",
                    round(g, 3), "CUDA graphs vs eager",
                    f"graphed spec_accept_length {g:.3f}, eager {e:.3f} (difference {g - e:+.3f}); not gated: "
                    "the eager-vs-graphs spread has never been measured on a GPU (scripts/gpu_accept.sh gates it "
                    "with accept's baseline rule)", "R42")]


@check(FACT, ("K1", "K2"), fact="reference")
def check_reference(c: Contract, ref: dict, path: str = "sglang-engine") -> list[Finding]:
    """Which reference judged the path's captures, and whether it held what the checks need.

    Args:
        ref: ``{"kind": "transformers" | "engine", "source": words, "needed": [boundaries], "recorded":
            [boundaries], "rows": int, "bytes": int, "missing": [...], "errors": [...], "dropped": [...]}``
            (engine: :attr:`eagle3_conformance.reference.engine.EngineReference.stats`).

    The transformers forward: pass (the independent oracle). The engine's own records: pass when
    every needed boundary was recorded on some row; fail when it recorded nothing (its hooks did not
    run, or every hook failed: the captures were then not judged); skip when some needed boundary is
    missing (identity scanned the others only; the finding names them)."""
    kind = ref.get("kind", "transformers")
    where = f"{path}: reference"
    if kind == "transformers":
        return [Finding("reference", "pass", path, None, c.reference, "transformers", where,
                        "captures judged against the project's own transformers forward of the target")]
    need, have = list(ref.get("needed", [])), list(ref.get("recorded", []))
    lack = [b for b in need if b not in have]
    figures = (f"{ref.get('rows', 0)} rows x {len(have)} boundaries, {ref.get('bytes', 0)} bytes "
               f"({ref.get('source', 'engine')})")
    if not have or not ref.get("rows"):
        errs = "; ".join(ref.get("errors", [])[:3]) or "no hook error was reported"
        return [Finding("reference", "fail", path, None, need, "nothing recorded", where,
                        f"the engine recorded no boundary of the target ({errs}): the captures could not be "
                        "judged against it", "K2")]
    if lack:
        return [Finding("reference", "skip", path, None, need, have, where,
                        f"the engine reference lacks {', '.join(lack)} (no hook fired for them; "
                        f"errors: {'; '.join(ref.get('errors', [])[:2]) or 'none'}): identity scanned {', '.join(have)} "
                        f"only; {figures}", "K2")]
    return [Finding("reference", "pass", path, None, need, have, where,
                    f"captures judged against the engine's own forward: {figures}"
                    + (f"; budget: {ref['dropped'][0]}" if ref.get("dropped") else ""))]


@check(FACT, (), fact="accept_regression")
def check_accept_regression(c: Contract, rows: list, path: str = "server") -> list[Finding]:
    """Release gate against a recorded baseline (issue 34; TensorRT-LLM's rule, fail below 95% of the
    reference), judged by what the data can decide (:func:`eagle3_conformance.acceptance.decision.decide`):
    a figure is MET (pass) when the paired bootstrap interval of ``now - baseline`` on the same prompts lies
    wholly at or above ``-tolerance``, DROPPED (fail) when it lies wholly below, and INCONCLUSIVE (skip,
    ``observed["decision"] == "INCONCLUSIVE"``: :func:`eagle3_conformance.report.inconclusive` reads it,
    exit 3) when it straddles ``-tolerance``. Every finding says the smallest drop the run could have
    detected; an inconclusive one, the prompts that would decide it. One finding per figure: the mean
    accept length and each draft position's acceptance.

    Args:
        rows: ``[{"figure", "baseline", "now", "difference": [lo, hi], "tolerance"[, "decision", "gated"]}]``
            (:func:`eagle3_conformance.server_accept.figures.compare`; a row without ``decision`` is decided
            here from its interval, with the interval's own half-width as the spread).
        path: the measuring path (``server``: a deployed server's own per-request counters).
    """
    from eagle3_conformance.acceptance.decision import decide

    out = []
    for r in rows:
        d = r.get("decision") or decide(r["difference"], (r["difference"][0] + r["difference"][1]) / 2,
                                        r["tolerance"], 1).to_json()
        lo, hi = r["difference"]
        tol, verdict = d["tolerance"], d["verdict"]
        status: Status = "pass" if verdict == "MET" else "fail" if verdict == "DROPPED" else "skip"
        gated = r.get("gated", r["figure"] == "accept length")
        if verdict == "INCONCLUSIVE":
            need = d.get("units_needed")
            tail = (f"; about {need} prompts would decide it at this spread" if need else
                    "; the change equals the tolerance: no number of prompts decides it") + \
                ("" if gated else " (a draft position: reported, not waited for)")
        else:
            tail = ""
        where = ("lies at or above" if verdict == "MET" else "lies below" if verdict == "DROPPED" else "straddles")
        observed = {"decision": verdict, "now": round(r["now"], 4), "change": [round(lo, 4), round(hi, 4)],
                    "detectable_drop": round(d["detectable_drop"], 4), "units_needed": d.get("units_needed"),
                    "gated": gated}
        out.append(Finding(
            "accept_regression", status, path, r["figure"], f">= baseline {r['baseline']:.4f} - {tol:.4f}", observed,
            "server counters against the baseline, paired over prompts",
            f"{r['figure']}: {verdict}: {r['baseline']:.3f} -> {r['now']:.3f}, paired 95% interval of the change "
            f"[{lo:+.3f}, {hi:+.3f}] {where} -{tol:.3f} (tolerance); the smallest drop this run could detect "
            f"{d['detectable_drop']:.3f}" + tail, ""))
    return out


@check(FACT, ("K1", "K2"), fact="engine_slot_boundaries")
def check_engine_slot_boundaries(c: Contract, fig: dict, path: str = "vllm-engine") -> list[Finding]:
    """K1/K2 with the engine as its own reference: each slot of what the draft's ``fc`` received
    equals a boundary of the target's residual stream in the same forward (recorded in the engine,
    ``tools/vllm_engine/hooks.py``); the slots must be the contract's ``capture.boundaries``, in order.
    Exact equality (max abs difference <= 1e-5): the fc input is a copy of those tensors.

    Args:
        fig: ``{"slots": ["B_k" | None, ...], "max_abs_diff": [...], "rows": n, "engine_ids": [...],
            "engine": "vLLM x.y"}`` (:func:`eagle3_conformance.tools.vllm_engine.captures.engine_slot_boundaries`).
    """
    want = [str(b) for b in c.aux]
    got = list(fig.get("slots") or [])
    where = f"{fig.get('engine', path)} fc input, {fig.get('rows', 0)} rows, engine ids {fig.get('engine_ids')}"
    if not got:
        return [Finding("engine_slot_boundaries", "skip", path, None, want, None, where,
                        "the engine's residual stream was not recorded", "K2")]
    if got == want:
        return [Finding("engine_slot_boundaries", "pass", path, None, want, got, where,
                        f"the draft received {', '.join(got)} (equal to the target's own residual stream)", "K2")]
    named = ", ".join(g or "no boundary" for g in got)
    return [Finding("engine_slot_boundaries", "fail", path, None, want, got, where,
                    f"{fig.get('engine', 'the engine')} fed the draft {named} (read off its own residual stream; "
                    f"engine ids {fig.get('engine_ids')}) where the contract declares {', '.join(want)}", "K2")]
