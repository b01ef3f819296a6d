"""A released tool's source tree, parsed and never imported: its one job is reading the version's files
with :mod:`ast` into :class:`Module` indexes (classes, functions, imports, literal constants) and
following names, bases and methods through the tree (:class:`SourceTree`). Compiling a function of it
and running it on stubs is :mod:`eagle3_conformance.released.stubs`' job."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional


class Unavailable(Exception):
    """The function needs something that only the real engine provides (a name, a module, a class
    instance). One line: what, and in which file."""


@dataclass
class Module:
    """One parsed source file: ``name`` (dotted), ``path``, ``rel`` (path in the wheel), AST."""

    name: str
    path: Path
    rel: str
    tree: ast.Module
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
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
        out: list[tuple[Optional[Module], str, Optional[ast.ClassDef]]] = []
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
                if bm is not None and bc is not None:  # both set for an in-tree base
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
