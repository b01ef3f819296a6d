"""Per-release branches of the in-process SGLang harness: the few steps whose SGLang code moved
between releases, each done with the installed release's own functions.

The harness (:mod:`eagle3_conformance.tools.sglang_cpu.harness`) runs SGLang's model classes,
``ForwardBatch``, spec-info classes and ``forward_context`` the same way on every release served
here. What differs is around them:

* publishing the process-wide ``ServerArgs`` (0.5.23: ``srt/runtime_context.py`` ``publish`` /
  ``reset_context``; 0.5.14: ``srt/server_args.py:7183`` ``set_global_server_args_for_scheduler``);
* reading the draft config's capture ids (0.5.23: ``resolve_spec_aux_hidden_state_config`` in
  ``model_runner_components/spec_aux_hidden_state.py``; 0.5.14: inline in ``ModelRunner.__init__``,
  ``model_executor/model_runner.py:435-472``);
* applying them (0.5.23: ``configure_aux_hidden_state_capture``; 0.5.14:
  ``ModelRunner.init_aux_hidden_state_capture``, ``model_runner.py:1002-1018``), for EAGLE-3 ids
  (``apply_ids``) and for DFlash ids (``apply_dflash_ids``: the same function with
  ``dflash_use_aux_hidden_state``, which calls the target's ``set_dflash_layers_to_capture``).

Source lines quoted in what the harness records are read from the installed release
(:func:`site`), so a 0.5.14 run never carries 0.5.23's line numbers.

Each branch module names the releases it serves (``SERVES``) and refuses any other
(:func:`branch`). Which releases the SGLang paths are tested on is
:data:`eagle3_conformance.environment.engines.HARNESS_RELEASES` (kept equal to :data:`SERVED` by the tests).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Optional

MODULES = ("r0_5_23", "r0_5_14")
"""Branch modules of this package, newest first."""


@dataclass
class IdsRead:
    """What a release's own reader took from the draft config.

    Attributes:
        ids: ``eagle_aux_hidden_state_layer_ids`` as read (None: none found, the target's setter
            applies its defaults).
        use_aux: ``use_aux_hidden_state`` as read (False: the draft is handed the post-norm F).
        site: ``"sglang/...py:line"`` of the code that read them in the installed release.
    """

    ids: Optional[list[int]]
    use_aux: bool
    site: str


class UnservedRelease(RuntimeError):
    """The installed SGLang release has no harness branch (message names it and the served ones)."""


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")


def served() -> dict[str, str]:
    """``release -> branch module name`` for every release a branch serves."""
    out: dict[str, str] = {}
    for name in MODULES:
        for v in _module(name).SERVES:
            out[v] = name
    return out


def branch(version: str) -> ModuleType:
    """The branch module serving SGLang ``version`` (the installed one, ``sglang.__version__``).

    Raises:
        UnservedRelease: no branch serves it.
    """
    table = served()
    if version not in table:
        raise UnservedRelease(
            f"SGLang {version} is installed; the CPU harness has branches for {', '.join(sorted(table))} only "
            f"(eagle3_conformance/tools/sglang_cpu/releases/)")
    mod = _module(table[version])
    mod.check(version)
    return mod


def site(obj, line: Optional[str] = None) -> str:
    """Where ``obj`` (a function or class of the installed SGLang) is: ``"sglang/...py:first-last"``,
    or with ``line`` the first line of its source that is exactly ``line`` (stripped):
    ``"sglang/...py:N"``. Read from the installed files, so the numbers are the installed release's.

    Raises:
        RuntimeError: ``obj``'s source has no such line (the release moved the code).
    """
    from pathlib import Path

    import sglang

    lines, start = inspect.getsourcelines(obj)
    src = inspect.getsourcefile(obj)
    if src is None:
        raise RuntimeError(f"{obj!r} has no source file")
    rel = Path(src).resolve().relative_to(Path(sglang.__file__).resolve().parent.parent)
    if line is None:
        return f"{rel.as_posix()}:{start}-{start + len(lines) - 1}"
    for i, text in enumerate(lines):
        if text.strip() == line:
            return f"{rel.as_posix()}:{start + i}"
    raise RuntimeError(f"SGLang {sglang.__version__}: {rel.as_posix()} {obj.__qualname__} has no line {line!r}")
