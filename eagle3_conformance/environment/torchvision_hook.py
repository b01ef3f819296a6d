"""Start-up hook of the project's environments: ``import torchvision`` (and so ``import sglang``,
``import transformers``' image and model modules) works in any process of the environment, a user's own
script included, without calling :func:`eagle3_conformance.environment.torch_env.prepare` first.

The cause it answers (measured in ``.tox/cpu-lock``, issue 41): the environment holds torch 2.13.0's CPU
build and torchvision 0.28.0 from PyPI, which is a CUDA build (``torchvision.version.__version__ ==
'0.28.0+cu130'``; no CPU torchvision 0.28.0 is on the package registry). Its ``_C.so`` links
``libtorch_cuda.so`` and ``libc10_cuda.so``, which a CPU torch does not ship, so
``torchvision.extension._load_library("_C")`` fails silently, the operator schemas ``torchvision::nms`` /
``torchvision::qnms`` are never defined, and ``torchvision/_meta_registrations.py`` raises at import:
``RuntimeError: operator torchvision::nms does not exist``. SGLang imports torchvision at ``import sglang``
(``sglang/__init__.py:23`` -> ``srt/utils/hf_transformers_patches.py:296`` -> transformers'
``image_utils``), transformers whenever a module it loads asks for it. The project's own processes call
``prepare()``, which defines the two schemas first; a user's script does not.

What it does: ``requirements/install.py`` writes ``eagle3-conformance-torchvision.pth`` into the
environment's site-packages; Python's ``site`` runs its one line at every interpreter start, which calls
:func:`install`. That puts a finder at the front of ``sys.meta_path``; the first time anything imports
``torchvision``, the finder defines the schemas the CUDA build cannot
(:func:`eagle3_conformance.environment.torch_env.define_torchvision_schemas`), removes itself and lets the
normal import proceed. Nothing is imported at start-up but this file, read by path under a name of its own
(:data:`PTH_SOURCE`): not torch (an interpreter that never imports torchvision pays nothing), and not the
``eagle3_conformance`` package, which pytest must import itself to rewrite its plugin's assertions (a
package imported at start-up draws ``PytestAssertRewriteWarning: Module already imported so cannot be
rewritten; eagle3_conformance`` in every pytest run that marks it). No warning filter, thread count or
logging level is changed in the user's process (``prepare()`` does those for the project's own runs only).
"""

from __future__ import annotations

import sys
from typing import Any, Optional


class TorchvisionSchemaFinder:
    """A ``sys.meta_path`` finder that finds nothing: on the first lookup of ``torchvision`` it defines the
    operator schemas a CUDA torchvision beside a CPU torch lacks, then leaves ``sys.meta_path``. Told apart
    by :data:`MARK`, not by class: the start-up line loads this file under another module name."""

    eagle3_conformance_torchvision_finder = True

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Optional[Any]:
        if name != "torchvision":
            return None
        uninstall()
        from eagle3_conformance.environment.torch_env import define_torchvision_schemas

        define_torchvision_schemas()
        return None  # the regular finders import torchvision itself


def install() -> None:
    """Put :class:`TorchvisionSchemaFinder` first on ``sys.meta_path`` (once; a no-op when torchvision is
    already imported)."""
    if "torchvision" in sys.modules or any(is_finder(f) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, TorchvisionSchemaFinder())


def uninstall() -> None:
    """Take every :class:`TorchvisionSchemaFinder` off ``sys.meta_path`` (whichever copy of this file made it)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not is_finder(f)]


MARK = "eagle3_conformance_torchvision_finder"
"""The attribute every :class:`TorchvisionSchemaFinder` carries, from whichever module name it was loaded."""


def is_finder(f: Any) -> bool:
    """``f`` is a :class:`TorchvisionSchemaFinder` (this module's, or the start-up line's copy)."""
    return getattr(type(f), MARK, False) is True


PTH_NAME = "eagle3-conformance-torchvision.pth"
"""The start-up file ``requirements/install.py`` writes into site-packages (sorted after the editable
install's ``__editable__.*.pth``, so the package is importable when it runs)."""

PTH_SOURCE = """\
try:
    import importlib.util as u, os.path as p
    s = u.find_spec("eagle3_conformance")
    d = list(s.submodule_search_locations or [])[:1] if s else []
    f = p.join(d[0], "environment", "torchvision_hook.py") if d else ""
    if f and p.isfile(f):
        h = u.spec_from_file_location("_eagle3_conformance_torchvision_hook", f)
        m = u.module_from_spec(h)
        h.loader.exec_module(m)
        m.install()
except (ImportError, OSError):
    pass
"""
"""What the start-up line runs: find the installed package without importing it (``find_spec`` of a
top-level name imports nothing; the editable install's finder answers it), load this file by its path
under a name of its own and call :func:`install`. A copy of the package without this file (an older
checkout on ``PYTHONPATH`` shadowing the installed one) or no package at all: nothing, and no error at
every interpreter start."""

PTH_LINE = f"import sys; exec({PTH_SOURCE!r})\n"
"""Its one line (``site`` runs a ``.pth`` line that starts with ``import``)."""
