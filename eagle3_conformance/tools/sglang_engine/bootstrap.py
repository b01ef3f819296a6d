"""Process start-up for the engine tool's processes (called from ``site/sitecustomize.py``).

In every process: :func:`eagle3_conformance.environment.torch_env.prepare` (the torchvision schema shim; a
CUDA torchvision wheel beside a CPU torch fails ``import sglang`` otherwise,
docs/REFERENCE.md section 4). With ``EAGLE3_CONFORMANCE_SGLANG_STANDINS=1`` (CPU only, set
by :mod:`.launch`): the version and source guards, then the ``sgl_kernel`` stand-in and the two
patches. On CUDA nothing else is installed: one code path, no stand-ins.

CPU seconds (issue 42 item 4; docs/timings.md, "The real engine's processes"):

* the guards read and hash SGLang's source (about 0.3 s of CPU): once per engine start, in the driver,
  which hands its result to the processes SGLang spawns (:data:`GUARDED_ENV`, :func:`install_standins`);
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
    """In the engine tool's own processes only (``EAGLE3_CONFORMANCE_SGLANG_ENGINE=1``, :mod:`.launch`; never a
    user's server): ``gc.freeze()`` (module docstring). What is frozen is never collected: the objects built
    so far (modules, the model) live as long as the process anyway."""
    if os.environ.get(ENGINE_ENV) == "1":
        gc.freeze()


def process_start() -> None:
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    if os.environ.get(STANDINS_ENV) == "1":
        install_standins()
