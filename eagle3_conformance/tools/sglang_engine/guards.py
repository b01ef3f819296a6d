"""Version and source guards for the stand-ins of the CPU engine recipe.

Every stand-in op and patch in this package replaces or extends one piece of SGLang 0.5.23. Before
any is installed, :func:`check_all` confirms that the installed SGLang is exactly that release and
that the source of every function the stand-ins serve or patch (the call site of each ``sgl_kernel``
op, its Triton twin, the patched methods) still hashes to what was read when the stand-in was
written. A mismatch raises :class:`GuardError` naming the file and function: never a silent run of
an old copy. The check reads source files as text (``ast``), so it runs before SGLang is imported
(SGLang's modules import ``sgl_kernel`` at import time).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path

SGLANG_VERSION = "0.5.23"
"""The one SGLang release the stand-ins were written for."""

# (module, dotted name inside the module) -> sha256 prefix of the source segment. Generated with
# :func:`source_digest` on sglang 0.5.23 when the stand-ins were written; see the module docstrings
# of sgl_kernel_standin.py and patches.py for what each guards.
GUARDED: dict[tuple[str, str], str] = {}


class GuardError(RuntimeError):
    """The installed SGLang is not the one a stand-in was written for (version or source)."""


def sglang_root() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise GuardError("SGLang is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def _segment(tree: ast.Module, text: str, dotted: str) -> str:
    nodes: list = list(tree.body)
    node: ast.AST = tree
    for part in dotted.split("."):
        found = next((n for n in nodes if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and n.name == part), None)
        if found is None:
            raise GuardError(f"{dotted}: not found")
        node, nodes = found, list(found.body)
    return ast.get_source_segment(text, node) or ""


def source_digest(module: str, dotted: str) -> str:
    """sha256 (first 16 hex digits) of the source of ``module``'s ``dotted`` function or class.

    Raises:
        GuardError: the module file or the name is missing (message names both).
    """
    path = sglang_root().parent / (module.replace(".", "/") + ".py")
    if not path.is_file():
        raise GuardError(f"{path}: missing (guarded {module}.{dotted})")
    text = path.read_text()
    try:
        seg = _segment(ast.parse(text), text, dotted)
    except GuardError as e:
        raise GuardError(f"{path}: {e}") from None
    return hashlib.sha256(seg.encode()).hexdigest()[:16]


def check_version() -> str:
    """The installed SGLang version; raises :class:`GuardError` unless it is :data:`SGLANG_VERSION`."""
    try:
        v = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        raise GuardError("SGLang is not installed") from None
    if v != SGLANG_VERSION:
        raise GuardError(f"SGLang {v} is installed; the CPU engine stand-ins were written for {SGLANG_VERSION} "
                         f"and checked against its source only (eagle3_conformance/tools/sglang_engine)")
    return v


def check_all(guarded: dict[tuple[str, str], str] | None = None) -> None:
    """Version, then every guarded source hash.

    Raises:
        GuardError: the first mismatch, naming the SGLang file, the function and both digests.
    """
    check_version()
    for (module, dotted), want in (GUARDED if guarded is None else guarded).items():
        got = source_digest(module, dotted)
        if got != want:
            raise GuardError(f"{module.replace('.', '/')}.py:{dotted} changed (source digest {got}, the stand-in "
                             f"was written against {want}): re-read it and update the stand-in")
