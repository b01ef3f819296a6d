"""The emptied package root (issue 36): docs/migration.md's table stays true (every old module path
it names is gone, every new one exists, each former root module appears once), the packages that
replaced a module keep its public import path, and the low modules of a higher package import no
more than they did at the root."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
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


def test_replaced_modules_keep_their_import_paths():
    """``reference`` and ``upgrade`` became packages; their public names still import from there."""
    from eagle3_conformance import reference, upgrade
    from eagle3_conformance.reference import Reference, load_reference_model, model, rms
    from eagle3_conformance.upgrade import gate

    assert (Reference, load_reference_model, rms) == (model.Reference, model.load_reference_model, model.rms)
    assert all(getattr(reference, n) is getattr(model, n) for n in reference.__all__)
    assert all(getattr(upgrade, n) is getattr(gate, n) for n in upgrade.__all__)


def test_a_low_module_does_not_import_its_package_s_layer():
    """``reference.greedy`` (read by the engine tools) imports neither torch nor ``reference.model``
    at import time, as ``greedy.py`` did at the root: the package's re-exports are lazy."""
    code = ("import sys, eagle3_conformance.reference.greedy, eagle3_conformance.acceptance.stats, "
            "eagle3_conformance.testbed.model_cache; "
            "print(sorted(m for m in ('torch', 'eagle3_conformance.reference.model', 'eagle3_conformance.testbed.fixtures')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
