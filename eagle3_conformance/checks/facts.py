"""Facts of a whole run (:attr:`eagle3_conformance.paths.base.Observation.facts`): the engine
release the contract was validated with, the measured accept length against the release gate."""

from __future__ import annotations

from typing import Optional

from eagle3_conformance.checks.registry import FACT, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.findings import Finding


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
def check_accept_length(c: Contract, avg_accept_length: Optional[float], path: str = "sglang-engine") -> list[Finding]:
    """Release gate: the mean accept length (tokens committed per verify step, bonus included:
    SGLang's ``avg_spec_accept_length``) >= ``gates.min_accept_length``. Acceptance is the only
    symptom most field reports had (FAULTS.md); it gates, it does not diagnose.

    Args:
        avg_accept_length: the measured mean (>= 1), or None when nothing was measured.
        path: the path that measured it: ``sglang-engine`` (a real engine's server info, GPU) or
            ``cpu-accept`` (the greedy speculative loop on the SGLang CPU harness).
    """
    floor = c.gates.min_accept_length
    where = "sglang.Engine server info" if path == "sglang-engine" else f"{path}: mean tokens per verify step"
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
