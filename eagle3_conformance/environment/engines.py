"""The engine releases each part is tested with, and whether the installed ones match.

A path runs a tool's real classes (SGLang's model and draft classes on the project's CPU harness,
vLLM's, speculators' loader, SpecForge's loader chain); those internals move between releases, so
a path is run only on the release it is tested with. pyproject.toml's extras pin the same releases
(tests/test_packaging.py keeps the two equal). Versions are read from package metadata, nothing is
imported. A path whose engine is missing or of another release is skipped with the reason
(:meth:`eagle3_conformance.paths.base.Needs.unmet`); ``CONFORMANCE_UNTESTED_ENGINES=1`` runs it on
the installed release anyway (the report's engine-version facts still say which ran).
"""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version
from typing import Callable, Optional

TESTED: dict[str, str] = {
    "sglang": "==0.5.23",       # requirements/cpu-lock.txt; tools/sglang_cpu (harness, stand-in attention)
    "vllm": "==0.33.0",         # requirements/vllm-lock.txt; tools/vllm_cpu
    "speculators": "==0.9.0",   # tools/speculators_loader.py (ArrowDataset, CollateFn, shift_batch)
    "specforge": "==0.2.0",     # tools/specforge_loader.py (its offline loader chain)
}
"""Distribution name -> the version specifier the project's tests run it at."""

HARNESS_RELEASES: tuple[str, ...] = ("0.5.23", "0.5.14")
"""The SGLang releases the in-process CPU harness has a branch for
(``tools/sglang_cpu/releases/``): 0.5.23 (the lock) and 0.5.14 (the release SpecForge 0.2.0 pins;
``tox -e sglang-0.5.14``, requirements/sglang-0.5.14-lock.txt). A path that runs on every one of
them says so with ``Needs(also_on={"sglang": HARNESS_RELEASES})``; the others run on :data:`TESTED` only."""

BASE: dict[str, str] = {
    "torch": "pip install 'eagle3-conformance[reference]': every path runs the reference forward",
    "transformers": "pip install 'eagle3-conformance[reference]': the reference model classes",
    "hypothesis": "pip install 'eagle3-conformance[pytest]': it draws the suite's inputs",
}
"""Modules every path needs, with the words that say how to get them."""

NAMES = {"sglang": "SGLang", "speculators": "speculators", "vllm": "vLLM", "specforge": "SpecForge"}

UNTESTED_ENV = "CONFORMANCE_UNTESTED_ENGINES"


def installed(dist: str) -> Optional[str]:
    """The installed version of distribution ``dist`` (package metadata), or None."""
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def problem(dist: str, also: tuple[str, ...] = ()) -> Optional[str]:
    """Why ``dist`` cannot be used here (not installed; a release other than :data:`TESTED` and
    not one of ``also``, the further releases the asking path is tested on, unless
    ``CONFORMANCE_UNTESTED_ENGINES=1``), or None."""
    import importlib.util

    name = NAMES.get(dist, dist)
    have = installed(dist)
    if have is None or importlib.util.find_spec(dist) is None:
        how = BASE.get(dist) or f"pip install 'eagle3-conformance[{dist}]'"
        return f"{name} is not installed in this environment ({how})"
    spec = TESTED.get(dist)
    if spec is None or os.environ.get(UNTESTED_ENV) == "1" or have in also:
        return None
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        ok = Version(have) in SpecifierSet(spec)
    except InvalidVersion:
        ok = False
    if ok:
        return None
    tested = " or ".join([f"{dist}{spec}", *(f"{dist}=={v}" for v in also if f"=={v}" != spec)])
    return (f"{name} {have} is installed; this path is tested with {tested} and runs only there "
            f"({UNTESTED_ENV}=1 runs it on {have} anyway)")


EXTRA_OF: dict[str, str] = {
    "torch": "reference", "transformers": "reference", "safetensors": "reference", "numpy": "reference",
    "speculators": "speculators", "datasets": "speculators", "pyarrow": "speculators", "hs_connectors": "speculators",
    "sglang": "sglang", "vllm": "vllm", "specforge": "specforge", "ray": "ray", "hypothesis": "pytest",
    "pytest": "pytest", "jinja2": "html", "markupsafe": "html", "matplotlib": "html", "playwright": "browser-test",
    "prometheus_client": "monitor",
}
"""Top-level module -> the extra of pyproject.toml that installs it."""


def missing_dependency(e: ModuleNotFoundError) -> Optional[str]:
    """What to install for a ``ModuleNotFoundError`` of an optional dependency (one line), or
    None when ``e`` names no optional dependency (a bug, then)."""
    top = (e.name or "").split(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return None
    return f"{top} is not installed in this environment (pip install 'eagle3-conformance[{extra}]')"


def needs_extra(name: str, e: ModuleNotFoundError) -> Callable[..., object]:
    """What a public function (``name``) whose module could not be imported for ``e`` is on this install:
    a function that raises ``ModuleNotFoundError`` (an ``ImportError``) naming the extra to install
    when called. So on a core-only install ``from eagle3_conformance import *`` and every other name
    still work (newuser finding 7); ``check_data`` and ``load_reference_model`` need ``[reference]``.

    Raises:
        ModuleNotFoundError: ``e`` itself when it names no optional dependency (a bug, shown as it is).
    """
    why = missing_dependency(e)
    if why is None:
        raise e
    module = e.name

    def stand_in(*args: object, **kwargs: object) -> object:
        raise ModuleNotFoundError(f"{name} cannot run here: {why}", name=module)

    stand_in.__name__ = stand_in.__qualname__ = name.rpartition(".")[2]
    stand_in.__module__ = name.rpartition(".")[0]
    stand_in.__doc__ = f"Not usable on this install: {why}. Calling it raises ModuleNotFoundError saying so."
    return stand_in
