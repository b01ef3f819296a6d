"""Deprecated aliases of moved module paths (docs/compatibility.md: a moved or renamed module path keeps
an alias for at least one minor release).

The modules that sat directly in ``eagle3_conformance/`` moved into packages that name their concept
(issue 36, docs/migration.md). ``import eagle3_conformance.findings`` (and ``python -m
eagle3_conformance.serve``) still work in 0.2.x: :class:`MovedFinder`, installed by the package's
``__init__``, answers the old name with the module at its new path (the same module object, so
``isinstance`` and monkeypatching see one module) and raises a :class:`DeprecationWarning` naming the
new path. The aliases may be removed in 0.3.0.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings

P = "eagle3_conformance"
REMOVAL = "0.3.0"

MOVED: dict[str, str] = {f"{P}.{old}": f"{P}.{new}" for old, new in {
    "notation": "core.notation", "errors": "core.errors", "findings": "core.findings", "capture": "core.capture",
    "batches": "core.batches", "gates": "core.gates",
    "installed": "environment.installed", "engines": "environment.engines", "shipped": "environment.shipped",
    "torch_env": "environment.torch_env", "validated": "environment.validated", "procgroup": "environment.procgroup",
    "engine_reference": "reference.engine", "greedy": "reference.greedy",
    "fixtures": "testbed.fixtures", "fixtures_real": "testbed.fixtures_real", "fixture_base": "testbed.fixture_base",
    "corpus": "testbed.corpus", "datagen": "testbed.datagen", "trained_draft": "testbed.trained_draft",
    "self_distill": "testbed.self_distill", "model_cache": "testbed.model_cache",
    "acceptance_stats": "acceptance.stats", "acceptance_estimate": "acceptance.estimate",
    "acceptance_attribution": "acceptance.attribution",
    "merge": "report.merge",
    "session": "suite.session", "runner": "suite.runner", "assess": "suite.assess", "pairs": "suite.pairs",
    "profiles": "suite.profiles", "strategies": "suite.strategies", "plugin": "suite.plugin",
    "server_captures": "serving.captures", "serve": "serving.serve",
    "config_ids": "draft_config.config_ids", "draft_norms": "draft_config.draft_norms",
    "draft_dir": "draft_config.draft_dir", "dflash_fallback": "draft_config.dflash_fallback",
    "final_boundary": "engine_ids.final_boundary",
    "cpu_harness": "tools.shared.cpu_harness", "fp8_payload": "tools.shared.fp8_payload",
    "datacheck": "checks.dataset", "ray_tasks": "scan.ray_tasks", "local_configs": "authoring.local_configs",
}.items()}
"""Old module path -> new module path (docs/migration.md's table, issue 36). ``reference``, ``report`` and
``upgrade`` kept their import paths (modules that became packages) and need no alias."""


def message(old: str) -> str:
    return (f"{old} moved to {MOVED[old]} in 0.2.0 (docs/migration.md); the old path is a deprecated alias that "
            f"may be removed in {REMOVAL}: import {MOVED[old]}")


class MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A meta path finder and loader for the names of :data:`MOVED` only: the old name's module *is* the
    new one (``sys.modules[old] is sys.modules[new]``)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        warnings.warn(message(spec.name), DeprecationWarning, stacklevel=2)
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module) -> None:
        """Nothing to run: the new module ran when it was imported. The module keeps its own
        ``__name__`` and ``__spec__``."""

    def get_code(self, fullname):
        """``python -m <old path>`` runs the new module's code (runpy asks the loader for it); a command
        line is a user's, so the warning is a :class:`FutureWarning` (shown by default)."""
        warnings.warn(message(fullname).replace(": import ", ": run python -m "), FutureWarning, stacklevel=2)
        return importlib.util.find_spec(MOVED[fullname]).loader.get_code(MOVED[fullname])

    def is_package(self, fullname) -> bool:
        return False


def install() -> None:
    """Put :class:`MovedFinder` on :data:`sys.meta_path` once (after the default finders: an old name is
    only looked up when no file answers it)."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
