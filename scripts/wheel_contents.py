"""What the wheel ships, package by package: files and lines, and how much of it is the project's
self-test (docs/architecture.md, "The self-test wall").

A file is the self-test when its module docstring, or the ``__init__`` docstring of a package above
it, begins with ``Internal:`` (tests/test_structure.py keeps every module of tests/layers.py's
``SELF_TEST`` so marked); a package's other files (``NOTES.md``) follow its ``__init__``. Lines are
the file's text lines (``.py``, ``.md``, ``.yaml``, ``.json``, templates).

Usage: python scripts/wheel_contents.py [WHEEL] [--files]

Without WHEEL the wheel is built from a copy of the checkout's tracked files
(:func:`check_install.copy_tree`) with setuptools' PEP 517 backend of the running interpreter: no
network, nothing written into the checkout, a few seconds. ``--files`` lists every file under its
package with its lines. Exit 0; 2 when WHEEL cannot be read or the build fails.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import tempfile
import zipfile
from pathlib import PurePosixPath

sys.path.insert(0, str(PurePosixPath(__file__).parent))
from check_install import copy_tree  # noqa: E402

MARK = "Internal:"


def build_wheel(work: str) -> str:
    """Build the wheel of a copy of the checkout under ``work``; its path."""
    from pathlib import Path

    src = copy_tree(Path(work) / "src")
    out = Path(work) / "dist"
    out.mkdir()
    hook = "import sys; from setuptools import build_meta as b; print('BUILT', b.build_wheel(sys.argv[1]))"
    r = subprocess.run([sys.executable, "-c", hook, str(out)], cwd=src, capture_output=True, text=True, timeout=600)
    built = [line for line in r.stdout.splitlines() if line.startswith("BUILT ")]
    if r.returncode != 0 or not built:
        raise OSError(f"the wheel build failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return str(out / built[-1].split(" ", 1)[1])


def _marked(text: str) -> bool:
    try:
        doc = ast.get_docstring(ast.parse(text)) or ""
    except SyntaxError:
        return False
    return doc.startswith(MARK)


def read_wheel(path: str) -> list[tuple[str, str, int, bool]]:
    """``(package, file, lines, internal)`` for every file of the wheel at ``path``, in its order;
    ``package`` is the file's folder (``eagle3_conformance/checks``), or the ``.dist-info`` folder."""
    with zipfile.ZipFile(path) as z:
        texts = {n: z.read(n).decode("utf-8", "replace") for n in z.namelist() if not n.endswith("/")}
    inits = {str(PurePosixPath(n).parent): _marked(t) for n, t in texts.items() if n.endswith("/__init__.py")}
    out = []
    for name, text in texts.items():
        folder = PurePosixPath(name).parent
        internal = name.endswith(".py") and _marked(text)
        internal = internal or any(inits.get(str(p)) for p in (folder, *folder.parents))
        out.append((str(folder), name, len(text.splitlines()), internal))
    return out


def render(rows: list[tuple[str, str, int, bool]], files: bool) -> str:
    """The table by package (or every file under its package with ``files``) and the totals."""
    packages: dict[str, list[tuple[str, str, int, bool]]] = {}
    for row in rows:
        packages.setdefault(row[0], []).append(row)
    lines = ["| package | files | lines | of them internal |", "|---|---:|---:|---:|"]
    for pkg in sorted(packages):
        got = packages[pkg]
        inner = sum(n for *_, n, i in got if i)
        lines.append(f"| `{pkg}` | {len(got)} | {sum(r[2] for r in got):,} | {inner:,} |")
        if files:
            lines += [f"|   `{PurePosixPath(f).name}` |  | {n:,} | {'internal' if i else ''} |" for _, f, n, i in got]
    py = [r for r in rows if r[1].endswith(".py")]
    py_lines, py_inner = sum(r[2] for r in py), sum(r[2] for r in py if r[3])
    lines.append("")
    lines.append(f"{len(rows)} files, {sum(r[2] for r in rows):,} lines; Python: {len(py)} modules, {py_lines:,} "
                 f"lines, of them marked {MARK!r}: {sum(1 for r in py if r[3])} modules, {py_inner:,} lines "
                 f"({100 * py_inner / max(py_lines, 1):.0f}%)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="wheel_contents.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel", nargs="?", help="a built wheel (default: build one from the checkout)")
    ap.add_argument("--files", action="store_true", help="every file under its package")
    a = ap.parse_args(argv)
    try:
        if a.wheel:
            rows = read_wheel(a.wheel)
        else:
            with tempfile.TemporaryDirectory(prefix="eagle3-wheel-") as work:
                rows = read_wheel(build_wheel(work))
    except (OSError, zipfile.BadZipFile) as e:
        print(f"wheel_contents.py: {a.wheel or 'build'}: {e}", file=sys.stderr)
        return 2
    print(render(rows, a.files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
