"""Process start-up for the engine tool's processes (called from ``site/sitecustomize.py``).

In every process: :func:`eagle3_conformance.environment.torch_env.prepare` (the torchvision schema shim; a
CUDA torchvision wheel beside a CPU torch fails ``import sglang`` otherwise,
docs/REFERENCE.md section 4). With ``EAGLE3_CONFORMANCE_SGLANG_STANDINS=1`` (CPU only, set
by :mod:`.launch`): the version and source guards, then the ``sgl_kernel`` stand-in and the two
patches. On CUDA nothing else is installed: one code path, no stand-ins.

CPU seconds (issue 42 item 4; docs/timings.md, "The real engine's processes"):

* the guards read and hash SGLang's source (about 0.3 s of CPU): once per engine start, in the driver,
  which hands its result to the processes SGLang spawns (:data:`GUARDED_ENV`, :func:`install_standins`);
* from :func:`process_start` to :func:`engine_built`, the collector's thresholds are
  :data:`START_THRESHOLDS`: the imports (torch, transformers, SGLang: about 6 s of CPU in each of the three
  processes of a start) create some 750,000 objects that all live, and Python's default thresholds
  (700, 10, 10) walk them again and again on the way (about 1 s of CPU per process; ``gc.disable()`` around
  the same imports saved 1-1.7 s of 5-6 s, 2026-12-06). A process that never gets to :func:`engine_built`
  (SGLang's detokenizer) keeps them: it still collects, less often;
* :func:`engine_built` (the recorder's factory calls it in the scheduler once SGLang has built a model
  runner; the driver once ``sglang.Engine`` is up): ``gc.freeze()``, so Python's cyclic collector no longer
  walks the ~600,000 objects of the imports and the model again and again. SGLang's CPU ``flush_cache``
  runs a full ``gc.collect()`` on every flush (``platforms/cpu.py:84-97``, "a GC pass at the teardown
  points"), and the engine runs flush before every prompt run alone.
"""

from __future__ import annotations

import gc
import os

STANDINS_ENV = "EAGLE3_CONFORMANCE_SGLANG_STANDINS"
ENGINE_ENV = "EAGLE3_CONFORMANCE_SGLANG_ENGINE"
#: set by the process that ran the guards (the driver) for the processes it starts: the SGLang release and
#: install directory it checked (:func:`guard_stamp`); :mod:`.launch` removes it from the driver's own environment
GUARDED_ENV = "EAGLE3_CONFORMANCE_SGLANG_GUARDED"
#: the cyclic collector's thresholds while an engine process starts (module docstring): a young collection
#: every 50,000 allocations, an older one after 50 of those, a full one after 1,000 older ones
START_THRESHOLDS = (50_000, 50, 1_000)
_thresholds: list[tuple[int, ...]] = []  # the thresholds before process_start (restored by engine_built)


def all_guards() -> dict:
    from eagle3_conformance.tools.sglang_engine.patches import GUARDS as PATCHED
    from eagle3_conformance.tools.sglang_engine.sgl_kernel_standin import GUARDS as STOOD_IN

    return {**STOOD_IN, **PATCHED}


def guard_stamp() -> str:
    """What a guard check covered: the guarded release and the SGLang install directory it read."""
    from eagle3_conformance.tools.sglang_engine.guards import SGLANG_VERSION, sglang_root

    return f"{SGLANG_VERSION}:{sglang_root()}"


def install_standins() -> None:
    """Guards (raise :class:`~.guards.GuardError` on a mismatch), then the stand-in and the patches. The
    guards run once per process tree: skipped where :data:`GUARDED_ENV` says this process's SGLang was
    checked already (by the driver that started it), set once they pass (for the processes started after)."""
    import eagle3_conformance.tools.sglang_engine.guards as guards
    import eagle3_conformance.tools.sglang_engine.patches as patches
    import eagle3_conformance.tools.sglang_engine.sgl_kernel_standin as standin

    stamp = guard_stamp()
    if os.environ.get(GUARDED_ENV) != stamp:
        guards.check_all(all_guards())
        os.environ[GUARDED_ENV] = stamp
    standin.install()
    patches.install()


def engine_built() -> None:
    """In the engine tool's own processes only (``EAGLE3_CONFORMANCE_SGLANG_ENGINE=1``, :mod:`.launch`: the
    engine paths and the servers ``eagle3-conformance serve`` starts; never a server you launch yourself):
    ``gc.freeze()``, then the thresholds :func:`process_start` found (module docstring). What
    is frozen is never collected: the objects built so far (modules, the model) live as long as the process."""
    if os.environ.get(ENGINE_ENV) == "1":
        gc.freeze()
        if _thresholds:
            gc.set_threshold(*_thresholds.pop())


def process_start() -> None:
    """The start-up hook's work (module docstring): the collector's start thresholds, the torchvision shim,
    the stand-ins where asked."""
    from eagle3_conformance.environment import torch_env

    if not _thresholds:
        _thresholds.append(gc.get_threshold())
    gc.set_threshold(*START_THRESHOLDS)
    torch_env.prepare()
    if os.environ.get(STANDINS_ENV) == "1":
        install_standins()
