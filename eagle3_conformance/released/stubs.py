"""What a function of a released tree runs in: its one job is the run side of isolation (see
:mod:`eagle3_conformance.released.isolated`): compiling one function alone (:func:`_compile`), its
globals resolved on first use (:class:`_Globals`), the tree's modules and classes as the function sees
them (:class:`ModuleProxy`, :class:`ClassProxy`), stubs for instances of the tree's classes
(:class:`ClassStub`, :func:`stub`, :class:`Recorder`) and what a run on them records (:class:`Run`).
The tree itself is :mod:`eagle3_conformance.released.source_tree`."""

from __future__ import annotations

import ast
import builtins
import copy
import logging
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import Any, Optional

from eagle3_conformance.released.source_tree import Module, SourceTree, Unavailable, _resolve_relative

LOG = logging.getLogger("eagle3_conformance.released.isolated")
_Def = ast.FunctionDef | ast.AsyncFunctionDef  # a function definition as a rule is written

#: standard-library modules a rule may import (they neither load an engine nor touch a device)
STDLIB = ("typing", "logging", "collections", "itertools", "functools", "bisect", "math", "warnings", "types")


class StubMissing(AttributeError, Unavailable):
    """A stub lacks an attribute the rule reads. An AttributeError, so that ``hasattr`` and
    ``getattr(x, name, default)`` in the rule behave as on an object without it; an
    :class:`Unavailable` when it escapes the rule."""


def _strip(fn: _Def) -> _Def:
    fn = copy.deepcopy(fn)
    fn.decorator_list = []
    fn.returns = None
    a = fn.args
    for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]:
        if arg is not None:
            arg.annotation = None
    for node in ast.walk(fn):  # annotated assignments in the body: keep the value, drop the type
        if isinstance(node, ast.AnnAssign):
            node.annotation = ast.Constant(value=None)
    return ast.fix_missing_locations(fn)


def _compile(tree: SourceTree, m: Module, fn: _Def):
    g = _globals(tree, m.name)
    code = compile(ast.Module(body=[_strip(fn)], type_ignores=[]), str(m.path), "exec")
    exec(code, g)  # noqa: S102 - defines the released version's own function, nothing else runs
    return g[fn.name]


class _Globals(dict):
    """A module's globals, resolved on first use (see the module docstring)."""

    def __init__(self, tree: SourceTree, module: str) -> None:
        super().__init__()
        self._tree, self._module = tree, module
        b = dict(vars(builtins))
        b["__import__"] = self._import
        self["__builtins__"] = b
        self["__name__"] = module

    def __missing__(self, name: str):
        value = self._resolve(name)
        self[name] = value
        return value

    def _resolve(self, name: str):
        m = self._tree.module(self._module)
        if name in m.constants:
            return m.constants[name]
        found = self._tree.lookup(self._module, name)
        if found is not None:
            fm, node = found
            if isinstance(node, ast.ClassDef):
                return ClassProxy(self._tree, fm, node)
            return _compile(self._tree, fm, typing.cast(ast.FunctionDef, node))
        if name in m.imports and self._tree.has(".".join(m.imports[name])):
            return ModuleProxy(self._tree, ".".join(m.imports[name]))
        if name == "logger":
            return LOG
        stdlib = self._stdlib_import(m, name)
        if stdlib is not None:
            return stdlib
        if hasattr(typing, name):
            return getattr(typing, name)
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise Unavailable(f"{self._tree.label}: {name!r} (used in {m.rel}) is not available when the rule runs "
                          "in isolation")

    @staticmethod
    def _stdlib_import(m: Module, name: str):
        """``name`` when the module binds it by a top-level import from :data:`STDLIB`, else None."""
        import importlib

        src = m.imports.get(name)
        if src is not None and src[0].split(".")[0] in STDLIB:
            return getattr(importlib.import_module(src[0]), src[1])
        for node in m.tree.body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if (a.asname or a.name) == name and a.name.split(".")[0] in STDLIB:
                        return importlib.import_module(a.name)
        return None

    def _import(self, name, globals=None, locals=None, fromlist=(), level=0):
        if level:
            name = _resolve_relative(self._module, self._tree._file(self._module)[1], level, name or None)
        if self._tree.has(name):
            return ModuleProxy(self._tree, name if fromlist else name.split(".")[0])
        if name.split(".")[0] in STDLIB:
            return __import__(name, globals, locals, fromlist, 0)
        raise Unavailable(f"{self._tree.label}: the rule imports {name}, which is not in the extracted source")


def _globals(tree: SourceTree, module: str) -> _Globals:
    cache = tree.__dict__.setdefault("_globals", {})
    if module not in cache:
        cache[module] = _Globals(tree, module)
    return cache[module]


class ModuleProxy:
    """A module of the tree, seen from an ``import`` inside a function: attributes resolve as
    :class:`_Globals` names do."""

    def __init__(self, tree: SourceTree, name: str) -> None:
        self._tree, self._name = tree, name

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        if self._tree.has(f"{self._name}.{attr}"):
            return ModuleProxy(self._tree, f"{self._name}.{attr}")
        return _globals(self._tree, self._name)[attr]


class ClassProxy:
    """A class of the tree as a value: ``isinstance(stub, proxy)`` follows the source's bases;
    instantiating it is not possible in isolation."""

    def __init__(self, tree: SourceTree, m: Module, cls: ast.ClassDef) -> None:
        self.tree, self.module, self.cls = tree, m, cls
        self.__name__ = cls.name

    def __instancecheck__(self, inst) -> bool:
        return isinstance(inst, ClassStub) and self.cls.name in inst._names

    def __call__(self, *a, **k):
        raise Unavailable(f"{self.tree.label}: the rule builds a {self.cls.name} ({self.module.rel}); "
                          "not possible in isolation")


@dataclass
class Run:
    """What a run on stubs recorded: every assignment to a watched attribute, in order, as
    ``(attribute, value, "file:line", object)``, and each function of the tree that was entered, as
    ``"rel/path.py:line Class.method"``."""

    L: int
    watched: tuple[str, ...]
    assignments: list[tuple[str, Any, str, Any]] = field(default_factory=list)
    entered: list[str] = field(default_factory=list)


def _caller_site(tree: Optional[SourceTree]) -> str:
    """``"rel/path.py:line"`` of the innermost frame running the tree's code."""
    if tree is None:
        return "?"
    root = str(tree.root)
    f: Optional[FrameType] = sys._getframe(2)
    while f is not None:
        if f.f_code.co_filename.startswith(root):
            return f"{Path(f.f_code.co_filename).relative_to(tree.root).as_posix()}:{f.f_lineno}"
        f = f.f_back
    return "?"


class Recorder:
    """An object the rule may set attributes on (assignments to ``run.watched`` are recorded);
    reading one it never set raises AttributeError, as the real object would lack it."""

    def __init__(self, run: Optional["Run"] = None, tree: Optional[SourceTree] = None, **attrs) -> None:
        self.__dict__.update(_run=run, _tree=tree, **attrs)

    def __setattr__(self, name: str, value) -> None:
        if name.startswith("_") and name in ("_run", "_tree"):
            self.__dict__[name] = value
            return
        if self._run is not None and name in self._run.watched:
            self._run.assignments.append((name, value, _caller_site(self._tree), self))
        self.__dict__[name] = value

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise StubMissing(f"an object the rule reaches is built in a way isolation does not follow; it has no "
                          f"attribute {name!r} here")


class ClassStub:
    """Stands for an instance of a class of the tree (``stub(tree, module, class)``): preset with
    what the setters read (``pp_group.is_last_rank`` True, ``config.num_hidden_layers`` = L,
    ``layers`` of length L, ``start_layer`` 0, ``end_layer`` L); methods and ``__init__``-built
    attributes resolve from the source. Assignments to ``run.watched`` attributes are recorded."""

    def __init__(self, tree: SourceTree, m: Module, cls: ast.ClassDef, run: Run) -> None:
        d = self.__dict__
        d.update(_tree=tree, _m=m, _cls=cls, _run=run, _names=tree.base_names(m, cls))
        cfg = SimpleNamespace(num_hidden_layers=run.L)
        cfg.text_config = cfg
        d.update(pp_group=SimpleNamespace(is_last_rank=True, is_first_rank=True, world_size=1), config=cfg,
                 layers=[SimpleNamespace() for _ in range(run.L)], start_layer=0, end_layer=run.L)

    def __setattr__(self, name: str, value) -> None:
        if name in self._run.watched:
            self._run.assignments.append((name, value, _caller_site(self._tree), self))
        self.__dict__[name] = value

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        found = self._tree.method(self._m, self._cls, name)
        if found is not None:
            fm, fc, fn = found
            f = _compile(self._tree, fm, fn)
            run, where = self._run, f"{fm.rel}:{fn.lineno} {fc.name}.{fn.name}"

            def entered(*a, **k):
                run.entered.append(where)
                return f(self, *a, **k)

            return entered
        child = self._built_in_init(name)
        if child is None:
            raise StubMissing(f"{self._tree.label}: {self._cls.name} has no attribute {name!r} that isolation can "
                              f"resolve ({self._m.rel})")
        self.__dict__[name] = child
        return child

    def _built_in_init(self, name: str):
        """A stub for ``self.<name>`` as ``__init__`` builds it (the last assignment that names a
        class of the tree), a :class:`Recorder` when it is built some other way, None if never."""
        init = self._tree.method(self._m, self._cls, "__init__")
        if init is None:
            return None
        fm, _, fn = init
        assigned, built = False, None
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Attribute) and t.attr == name and isinstance(t.value, ast.Name)
                    and t.value.id == "self" for t in node.targets):
                assigned = True
                built = self._class_built_by(fm, node.value) or built
        if built is not None:
            return ClassStub(self._tree, built[0], built[1], self._run)
        return Recorder(self._run, self._tree) if assigned else None

    def _class_built_by(self, fm: Module, value: ast.AST):
        if not isinstance(value, ast.Call):
            return None
        f = value.func
        if isinstance(f, ast.Name):
            found = self._tree.lookup(fm.name, f.id)
            return found if found and isinstance(found[1], ast.ClassDef) else None
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            attr = self._class_attribute(f.attr)  # self.model_cls(...) with `model_cls = DeepseekV2Model`
            if attr is not None:
                return attr
            meth = self._tree.method(self._m, self._cls, f.attr)  # self._init_model(...): what it returns
            if meth is not None:
                for node in ast.walk(meth[2]):
                    if isinstance(node, ast.Return) and node.value is not None:
                        got = self._class_built_by(meth[0], node.value)
                        if got:
                            return got
        return None


    def _class_attribute(self, name: str):
        """``(module, ClassDef)`` of a class body's ``name = SomeClass`` (through the bases), or None."""
        for mm, c in self._tree.mro(self._m, self._cls):
            for node in c.body:
                if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)):
                    found = self._tree.lookup(mm.name, node.value.id)
                    return found if found and isinstance(found[1], ast.ClassDef) else None
        return None


def stub(tree: SourceTree, module: str, cls_name: str, run: Run) -> ClassStub:
    """A :class:`ClassStub` of ``module.cls_name``.

    Raises:
        Unavailable: no such class in the tree.
    """
    found = tree.lookup(module, cls_name)
    if found is None or not isinstance(found[1], ast.ClassDef):
        raise Unavailable(f"{tree.label}: no class {cls_name} in {module}")
    return ClassStub(tree, found[0], found[1], run)
