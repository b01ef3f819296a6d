"""Run one function of a released tool's source in isolation: no import of the tool, no torch.

A released version's model files import torch, CUDA kernels and the rest of the engine, so they
cannot be imported beside another version (or at all on this machine). The functions that decide
"which ids, which boundaries" are small, though: ``set_eagle3_layers_to_capture``, the draft-config
readers, ``get_eagle3_default_aux_hidden_state_layers``. This module parses the version's files
with :mod:`ast`, compiles *only* the requested function (annotations and decorators dropped; the
body is the version's own, line numbers kept so that a traceback cites the real file), and runs it
on stub objects (:class:`ClassStub`) that stand for instances of the version's own classes:

* a name the function reads is looked up lazily (:class:`_Globals`): builtins, the module's literal
  constants, the module's own functions and classes, names it imports from files of the same tree
  (followed), ``typing`` names and ``logger``; anything else raises :class:`Unavailable`, so a rule
  that needs the real engine fails loudly instead of guessing;
* ``self.X`` on a stub resolves a method through the class's bases as written in the source, or an
  attribute the class's ``__init__`` assigns (``self.model = DeepseekV2Model(...)``, or
  ``self.model = self._init_model(...)`` whose ``return`` builds the class) to a stub of that class;
* ``isinstance(stub, SomeClass)`` follows the source's bases (:class:`ClassProxy`);
* ``import`` statements inside a function resolve to files of the same tree (:class:`ModuleProxy`).

This is the "setter called unbound on a stub" technique SGLang's own per-model setter tests use
(and :mod:`eagle3_conformance.engine_ids` for the installed SGLang), applied to source that is not
installed.

This module's one job is the entry point, :func:`function`. The tree is
:mod:`eagle3_conformance.released.source_tree`; compiling, the lazy globals and the stubs are
:mod:`eagle3_conformance.released.stubs`. Their names stay importable from here.
"""

from __future__ import annotations

import ast
from typing import Any, Optional

from eagle3_conformance.released.source_tree import (  # noqa: F401 (re-exported: the released/ paths, tests)
    Module,
    SourceTree,
    Unavailable,
)
from eagle3_conformance.released.stubs import (  # noqa: F401 (re-exported: the released/ paths)
    LOG,
    STDLIB,
    ClassProxy,
    ClassStub,
    ModuleProxy,
    Recorder,
    Run,
    StubMissing,
    _compile,
    _Globals,
    _globals,
    _strip,
    stub,
)


class Unsupported(Exception):
    """The version's own code has no rule for this input (no setter for the architecture, no
    EAGLE-3 support): the engine would refuse it. One line."""


def function(tree: SourceTree, module: str, name: str, cls: Optional[str] = None,
             overrides: Optional[dict[str, Any]] = None):
    """``module.name`` (or ``module.cls.name``, unbound) compiled alone, and ``"rel:line"``.

    ``overrides``: names of the function's module bound to stand-ins for what only the running
    engine or a hub provides (a config loader returning L, a logger, the distributed groups of a
    single rank); the function gets its own globals then, so no other function sees them. Each
    caller says what its stand-ins stand for.

    Raises:
        Unavailable: no such function in the tree.
    """
    m = tree.module(module)
    fn: ast.FunctionDef | ast.AsyncFunctionDef
    if cls is not None:
        c = m.classes.get(cls)
        found = tree.method(m, c, name) if c is not None else None
        if found is None:
            raise Unavailable(f"{tree.label}: no method {cls}.{name} in {m.rel}")
        fm, _, fn = found
    else:
        top = m.functions.get(name)
        if top is None:
            raise Unavailable(f"{tree.label}: no function {name} in {m.rel}")
        fn, fm = top, m
    if overrides:
        g = _Globals(tree, fm.name)
        g.update(overrides)
        exec(compile(ast.Module(body=[_strip(fn)], type_ignores=[]), str(fm.path), "exec"), g)  # noqa: S102
        return g[fn.name], f"{fm.rel}:{fn.lineno}"
    return _compile(tree, fm, fn), f"{fm.rel}:{fn.lineno}"
