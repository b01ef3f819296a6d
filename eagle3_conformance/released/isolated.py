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
"""

from __future__ import annotations

import ast
import builtins
import copy
import logging
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

LOG = logging.getLogger("eagle3_conformance.released.isolated")

#: standard-library modules a rule may import (they neither load an engine nor touch a device)
STDLIB = ("typing", "logging", "collections", "itertools", "functools", "bisect", "math", "warnings", "types")


class Unavailable(Exception):
    """The function needs something that only the real engine provides (a name, a module, a class
    instance). One line: what, and in which file."""


class StubMissing(AttributeError, Unavailable):
    """A stub lacks an attribute the rule reads. An AttributeError, so that ``hasattr`` and
    ``getattr(x, name, default)`` in the rule behave as on an object without it; an
    :class:`Unavailable` when it escapes the rule."""


class Unsupported(Exception):
    """The version's own code has no rule for this input (no setter for the architecture, no
    EAGLE-3 support): the engine would refuse it. One line."""


@dataclass
class Module:
    """One parsed source file: ``name`` (dotted), ``path``, ``rel`` (path in the wheel), AST."""

    name: str
    path: Path
    rel: str
    tree: ast.Module
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # local name -> (module, name)
    constants: dict[str, Any] = field(default_factory=dict)


def _resolve_relative(module: str, is_pkg: bool, level: int, target: Optional[str]) -> str:
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _index(m: Module, is_pkg: bool) -> None:
    for node in m.tree.body:
        if isinstance(node, ast.ClassDef):
            m.classes[node.name] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            m.functions[node.name] = node
        elif isinstance(node, ast.ImportFrom):
            src = _resolve_relative(m.name, is_pkg, node.level, node.module) if node.level else (node.module or "")
            for a in node.names:
                m.imports[a.asname or a.name] = (src, a.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is None:
                continue
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, TypeError):
                continue
            for t in targets:
                if isinstance(t, ast.Name):
                    m.constants[t.id] = value


class SourceTree:
    """The extracted ``.py`` files of one released version (``root`` holds the top package).

    Raises on use:
        Unavailable: a module that is not in the tree (not extracted, or not in this release).
    """

    def __init__(self, root: Path, label: str) -> None:
        self.root = Path(root)
        self.label = label
        self._modules: dict[str, Module] = {}

    def has(self, name: str) -> bool:
        return self._file(name) is not None

    def _file(self, name: str) -> Optional[tuple[Path, bool]]:
        p = self.root.joinpath(*name.split("."))
        if p.with_suffix(".py").is_file():
            return p.with_suffix(".py"), False
        if (p / "__init__.py").is_file():
            return p / "__init__.py", True
        return None

    def module(self, name: str) -> Module:
        if name not in self._modules:
            found = self._file(name)
            if found is None:
                raise Unavailable(f"{self.label}: module {name} is not in the extracted source")
            path, is_pkg = found
            text = path.read_text(encoding="utf-8-sig", errors="replace")
            try:
                parsed = ast.parse(text, filename=str(path))
            except SyntaxError as e:
                raise Unavailable(f"{self.label}: {path.relative_to(self.root)} does not parse here ({e.msg}, "
                                  f"line {e.lineno})") from None
            m = Module(name, path, path.relative_to(self.root).as_posix(), parsed)
            _index(m, is_pkg)
            self._modules[name] = m
        return self._modules[name]

    def modules_under(self, package: str) -> list[str]:
        """Dotted names of the ``.py`` files directly in ``package`` (sorted)."""
        d = self.root.joinpath(*package.split("."))
        return sorted(f"{package}.{f.stem}" for f in d.glob("*.py") if f.stem != "__init__") if d.is_dir() else []

    def lookup(self, module: str, name: str, _depth: int = 0) -> Optional[tuple[Module, ast.AST]]:
        """Where ``name`` as seen from ``module`` is defined in the tree: ``(module, ClassDef or
        FunctionDef)``, following ``from x import name`` within the tree; None if not in the tree."""
        if _depth > 8 or not self.has(module):
            return None
        m = self.module(module)
        if name in m.classes:
            return m, m.classes[name]
        if name in m.functions:
            return m, m.functions[name]
        if name in m.imports:
            src, orig = m.imports[name]
            if self.has(f"{src}.{orig}"):  # `from pkg import submodule`
                return None
            return self.lookup(src, orig, _depth + 1)
        return None

    def bases(self, m: Module, cls: ast.ClassDef) -> list[tuple[Optional[Module], str, Optional[ast.ClassDef]]]:
        """The class's bases as written: ``(module, name, ClassDef)``; module/ClassDef None when the
        base is outside the tree (``nn.Module``)."""
        out = []
        for b in cls.bases:
            name = b.id if isinstance(b, ast.Name) else (b.attr if isinstance(b, ast.Attribute) else None)
            if name is None:
                continue
            found = self.lookup(m.name, name) if isinstance(b, ast.Name) else None
            if found and isinstance(found[1], ast.ClassDef):
                out.append((found[0], name, found[1]))
            else:
                out.append((None, name, None))
        return out

    def mro(self, m: Module, cls: ast.ClassDef) -> list[tuple[Module, ast.ClassDef]]:
        """The class and its in-tree bases, depth first, left to right, each once."""
        seen, out = set(), []

        def walk(mm: Module, c: ast.ClassDef) -> None:
            key = (mm.name, c.name)
            if key in seen:
                return
            seen.add(key)
            out.append((mm, c))
            for bm, _, bc in self.bases(mm, c):
                if bc is not None:
                    walk(bm, bc)

        walk(m, cls)
        return out

    def base_names(self, m: Module, cls: ast.ClassDef) -> set[str]:
        """Every base name reachable from the class (in-tree and outside), the class included."""
        names = {cls.name}
        for mm, c in self.mro(m, cls):
            names |= {n for _, n, _ in self.bases(mm, c)}
        return names

    def method(self, m: Module, cls: ast.ClassDef, name: str) -> Optional[tuple[Module, ast.ClassDef, ast.FunctionDef]]:
        for mm, c in self.mro(m, cls):
            for node in c.body:
                if isinstance(node, ast.FunctionDef) and node.name == name:
                    return mm, c, node
        return None

    def compile(self, m: Module, fn: ast.FunctionDef):
        """The function, compiled alone from its source, its globals :class:`_Globals` of ``m``."""
        return _compile(self, m, fn)


def _strip(fn: ast.FunctionDef) -> ast.FunctionDef:
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


def _compile(tree: SourceTree, m: Module, fn: ast.FunctionDef):
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
            return ClassProxy(self._tree, fm, node) if isinstance(node, ast.ClassDef) else self._tree.compile(fm, node)
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
    f = sys._getframe(2)
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
            f = self._tree.compile(fm, fn)
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
    if cls is not None:
        c = m.classes.get(cls)
        found = tree.method(m, c, name) if c is not None else None
        if found is None:
            raise Unavailable(f"{tree.label}: no method {cls}.{name} in {m.rel}")
        fm, _, fn = found
    else:
        fn, fm = m.functions.get(name), m
        if fn is None:
            raise Unavailable(f"{tree.label}: no function {name} in {m.rel}")
    if overrides:
        g = _Globals(tree, fm.name)
        g.update(overrides)
        exec(compile(ast.Module(body=[_strip(fn)], type_ignores=[]), str(fm.path), "exec"), g)  # noqa: S102
        return g[fn.name], f"{fm.rel}:{fn.lineno}"
    return tree.compile(fm, fn), f"{fm.rel}:{fn.lineno}"
