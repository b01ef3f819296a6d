"""scripts/wheel_contents.py, the wheel's file list by package (docs/architecture.md, "The self-test
wall"): read from a small wheel written here, so every figure it prints is known in advance."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "wheel_contents.py"

FILES = {
    "pkg/__init__.py": '"""The package."""\n',
    "pkg/judge.py": '"""Judges."""\n\nX = 1\n',                               # 3 lines, public
    "pkg/bed/__init__.py": '"""Internal: a test bed."""\n',                   # 1 line, internal package
    "pkg/bed/build.py": '"""Builds."""\nY = 2\n',                             # 2 lines, internal by its package
    "pkg/bed/NOTES.md": "a\nb\nc\nd\n",                                       # 4 lines, internal by its package
    "pkg/tools/standin.py": '"""Internal: a stand-in."""\n\nZ = 3\nW = 4\n',  # 4 lines, internal itself
    "pkg/tools/real.py": "V = 5\n",                                           # 1 line, public
    "pkg-0.1.dist-info/RECORD": "r\n",
}


def _wheel(tmp_path: Path) -> Path:
    w = tmp_path / "pkg-0.1-py3-none-any.whl"
    with zipfile.ZipFile(w, "w") as z:
        for name, text in FILES.items():
            z.writestr(name, text)
    return w


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_packages_lines_and_the_internal_share(tmp_path):
    r = _run(str(_wheel(tmp_path)))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "| package | files | lines | of them internal |", "|---|---:|---:|---:|",
        "| `pkg` | 2 | 4 | 0 |",
        "| `pkg-0.1.dist-info` | 1 | 1 | 0 |",
        "| `pkg/bed` | 3 | 7 | 7 |",
        "| `pkg/tools` | 2 | 5 | 4 |",
        "",
        "8 files, 17 lines; Python: 6 modules, 12 lines, of them marked 'Internal:': 3 modules, 7 lines (58%)",
    ]


def test_every_file_under_its_package(tmp_path):
    out = _run(str(_wheel(tmp_path)), "--files").stdout.splitlines()
    i = out.index("| `pkg/tools` | 2 | 5 | 4 |")
    assert out[i + 1:i + 3] == ["|   `standin.py` |  | 4 | internal |", "|   `real.py` |  | 1 |  |"]


def test_a_file_that_is_not_a_wheel_exits_2(tmp_path):
    bad = tmp_path / "x.whl"
    bad.write_text("not a zip")
    r = _run(str(bad))
    assert r.returncode == 2 and str(bad) in r.stderr and "Traceback" not in r.stderr


def test_the_built_wheel_marks_exactly_the_self_test(tmp_path):
    """The checkout's own wheel (built from a copy of the tracked files, about 2 s): the modules it
    counts as internal are those under tests/layers.py's SELF_TEST, every one of them shipped."""
    sys.path.insert(0, str(REPO / "scripts"))
    sys.path.insert(0, str(REPO / "tests"))
    import wheel_contents
    from layers import SELF_TEST

    rows = wheel_contents.read_wheel(wheel_contents.build_wheel(str(tmp_path)))
    marked = {f for _, f, _, internal in rows if internal and f.endswith(".py")}
    tracked = subprocess.run(["git", "ls-files", "eagle3_conformance"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    expected = set()
    for f in tracked:
        if not f.endswith(".py"):
            continue
        mod = ".".join(Path(f).with_suffix("").parts)
        mod = mod.removesuffix(".__init__")
        if any(mod == p or mod.startswith(p + ".") for p in SELF_TEST):
            expected.add(f)
    assert "eagle3_conformance/testbed/fixtures.py" in expected
    assert marked == expected
