"""Process start-up for the engine tool's processes (called from ``site/sitecustomize.py``).

In every process: :func:`eagle3_conformance.environment.torch_env.prepare` (the torchvision schema shim; a
CUDA torchvision wheel beside a CPU torch fails ``import sglang`` otherwise,
docs/REFERENCE.md section 4). With ``EAGLE3_CONFORMANCE_SGLANG_STANDINS=1`` (CPU only, set
by :mod:`.launch`): the version and source guards, then the ``sgl_kernel`` stand-in and the two
patches. On CUDA nothing else is installed: one code path, no stand-ins.
"""

from __future__ import annotations

import os

STANDINS_ENV = "EAGLE3_CONFORMANCE_SGLANG_STANDINS"


def all_guards() -> dict:
    from eagle3_conformance.tools.sglang_engine import patches, sgl_kernel_standin

    return {**sgl_kernel_standin.GUARDS, **patches.GUARDS}


def install_standins() -> None:
    """Guards (raise :class:`~.guards.GuardError` on a mismatch), then the stand-in and the patches."""
    from eagle3_conformance.tools.sglang_engine import guards, patches, sgl_kernel_standin

    guards.check_all(all_guards())
    sgl_kernel_standin.install()
    patches.install()


def process_start() -> None:
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    if os.environ.get(STANDINS_ENV) == "1":
        install_standins()
