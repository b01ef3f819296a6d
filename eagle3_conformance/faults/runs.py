"""One run of a matrix path with a fault's knobs: the injector of each path.

A path joins the kill matrix when it has an injector here (and its operators say how each fault
applies on it); the matrix's columns are the registered paths (:mod:`eagle3_conformance.paths`) that
have one, in registry order.
"""

from __future__ import annotations

from typing import Callable, Optional

from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.faults.example import Example, Knobs
from eagle3_conformance.faults.inject_sglang import HarnessPool, run_sglang
from eagle3_conformance.faults.inject_specforge import run_specforge, specforge_contract
from eagle3_conformance.faults.inject_training import run_training
from eagle3_conformance.faults.scenario import Scenario


def _run_vllm(scn, c, ex, k):
    from eagle3_conformance.faults.inject_vllm import run_vllm  # imports vLLM's harness only when run

    return run_vllm(scn, c, ex, None, k)


Injector = Callable[[Scenario, Contract, Example, Optional[HarnessPool], Knobs], list[Finding]]


def _on_sglang(path: str) -> Injector:
    """The injector of an SGLang CPU path: it runs on the pool's harness (one is needed)."""
    def run(scn: Scenario, c: Contract, ex: Example, pool: Optional[HarnessPool], k: Knobs) -> list[Finding]:
        if pool is None:
            raise ValueError(f"{path}: the SGLang CPU paths run on a HarnessPool; none was given")
        return run_sglang(scn, c, ex, path, pool, k)
    return run


INJECTORS: dict[str, Injector] = {
    "training": lambda scn, c, ex, pool, k: run_training(scn, c, ex, k),
    "specforge": lambda scn, c, ex, pool, k: run_specforge(scn, c, ex, k),
    "sglang-extend": _on_sglang("sglang-extend"),
    "sglang-decode": _on_sglang("sglang-decode"),
    "vllm-extend": lambda scn, c, ex, pool, k: _run_vllm(scn, c, ex, k),
}
"""Path name -> ``(scenario, contract, example, harness pool, knobs) -> findings``."""

POOLED = frozenset({"sglang-extend", "sglang-decode"})
"""The paths whose injector runs on the :class:`~eagle3_conformance.faults.inject_sglang.HarnessPool` (one
SGLang CPU harness alive at a time, rebuilt when the scenario or the build variant changes)."""


CONTRACTS: dict[str, Callable[[Scenario, Contract], Contract]] = {
    "specforge": specforge_contract,
}
"""Path name -> the scenario contract restated for that path's tool (its pairing and verifier);
paths not listed use the scenario's contract as it is."""


def path_contract(scn: Scenario, contract: Contract, path: str) -> Contract:
    """The contract the column of ``path`` is judged against (and its operators built from)."""
    f = CONTRACTS.get(path)
    return f(scn, contract) if f is not None else contract


def run_path(scn: Scenario, contract: Contract, ex: Example, path: str, pool: Optional[HarnessPool],
             k: Knobs = Knobs()) -> list[Finding]:
    """The findings of ``path`` on ``ex`` with ``k``'s faults (the good input by default).

    Raises:
        eagle3_conformance.faults.example.NoOp: the fault changes nothing on this example.
        KeyError: ``path`` has no injector.
    """
    return INJECTORS[path](scn, contract, ex, pool, k)
