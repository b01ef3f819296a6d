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


def test_names_moved_below_the_test_bed_keep_their_import_paths():
    """The fixture lookup and the model cache's root moved to ``environment/`` (issue 43 item 5); the
    test bed's modules re-export the same objects, so every old import keeps working."""
    from eagle3_conformance.environment import cache, fixture_specs
    from eagle3_conformance.testbed import fixture_base, fixtures, model_cache

    for name in ("REPO_ROOT", "FIXTURES_DIR", "FixtureError", "fixture_spec", "known_fixtures"):
        assert getattr(fixture_base, name) is getattr(fixture_specs, name), name
    assert fixtures.FixtureError is fixture_specs.FixtureError and fixtures.fixture_spec is fixture_specs.fixture_spec
    assert (model_cache.model_cache_root, model_cache.CACHE_ENV) == (cache.model_cache_root, cache.CACHE_ENV)


def test_judging_runs_without_the_self_test():
    """What tests/test_structure.py reads from the source holds at run time: importing every judging
    package and running the two calls that used to import the test bed (the contract's fixture check,
    on a known and a misspelled fixture, and the reference's cache folder) loads no self-test module."""
    sys.path.insert(0, str(REPO / "tests"))
    from layers import JUDGING_LAYERS, SELF_TEST

    code = (f"import importlib, sys\nfor m in {list(JUDGING_LAYERS)!r}: importlib.import_module(m)\n"
            "from eagle3_conformance.contract import load_contract\n"
            "from eagle3_conformance.contract.validation import fixture_problems\n"
            "from eagle3_conformance.reference.model import default_cache_dir\n"
            "c = load_contract('contracts/tiny-llama.yaml')\n"
            "print(fixture_problems(c), len(fixture_problems(c.model_copy(update={'fixture': 'tiny-lama'}))))\n"
            "print(default_cache_dir().name)\n"
            f"print(sorted(m for m in sys.modules if any(m == p or m.startswith(p + '.') for p in {list(SELF_TEST)!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-3:] == ["[] 1", "reference", "[]"]
