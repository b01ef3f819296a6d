"""docs/migration.md's table of the emptied package root (issue 36) stays true: every old module
path it names is gone from the package, every new one exists, and every module that was at the
root appears, so a user porting an import finds the new path there."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "eagle3_conformance"


def _rows() -> list[tuple[str, str]]:
    text = (REPO / "docs" / "migration.md").read_text(encoding="utf-8")
    section = text.split("## The package root emptied", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(eagle3_conformance\.[\w.]+)` \| `(eagle3_conformance\.[\w.]+)` \|", section, re.M)


def test_every_row_points_to_a_module_that_exists():
    rows = _rows()
    assert len(rows) == 48
    for was, now in rows:
        assert importlib.util.find_spec(now) is not None, now
        assert not (PKG / f"{was.split('.')[1]}.py").exists(), was


def test_the_old_paths_are_the_roots_former_modules():
    """The table's first column is one name per former root module, each listed once."""
    was = [w for w, _ in _rows()]
    assert len(was) == len(set(was))
    assert all(w.count(".") == 1 for w in was)
