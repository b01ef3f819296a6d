"""The public API (docs/api.md): every name in ``eagle3_conformance.__all__`` imports, has a docstring,
and is on the API page; importing the package loads no torch; the page's example runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import eagle3_conformance

REPO = Path(__file__).resolve().parents[1]
API_PAGE = REPO / "docs" / "api.md"


def test_every_public_name_imports_and_is_documented() -> None:
    page = API_PAGE.read_text()
    names = [n for n in eagle3_conformance.__all__ if n != "__version__"]
    assert len(names) == len(set(names))
    undocumented = []
    for name in names:
        obj = getattr(eagle3_conformance, name)
        assert callable(obj), name
        doc = (getattr(obj, "__doc__", None) or "").strip()
        if len(doc) < 20:
            undocumented.append(f"{name}: no docstring")
        if not re.search(rf"`{re.escape(name)}`", page):
            undocumented.append(f"{name}: not on docs/api.md")
    assert undocumented == []


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        eagle3_conformance.no_such_name  # noqa: B018


def test_import_is_cheap() -> None:
    code = "import sys, eagle3_conformance; print('torch' in sys.modules, len(eagle3_conformance.__all__))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False"


def test_py_typed_ships() -> None:
    assert (Path(eagle3_conformance.__file__).parent / "py.typed").is_file()


def test_example_runs(tmp_path: Path) -> None:
    """The page's example, run as written from the checkout."""
    block = re.search(r"```python\n(.*?)```", API_PAGE.read_text(), re.S)
    assert block is not None
    out = subprocess.run([sys.executable, "-c", block.group(1)], capture_output=True, text=True, cwd=REPO,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.match(r"conforms \d+ findings, 0 diagnoses", out.stdout), out.stdout  # the fixture conforms


def test_all_matches_the_lazy_table() -> None:
    assert set(eagle3_conformance.__all__) == {"__version__", *eagle3_conformance._PUBLIC}


def test_the_stub_types_every_public_name() -> None:
    """``__init__.pyi`` (what mypy and IDEs read) re-exports the same names from the same modules."""
    stub = (Path(eagle3_conformance.__file__).parent / "__init__.pyi").read_text()
    for name, (module, attr) in eagle3_conformance._PUBLIC.items():
        assert f"from {module} import {attr} as {name}\n" in stub, name
