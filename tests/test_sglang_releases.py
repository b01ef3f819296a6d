"""The CPU harness's per-release branches (tools/sglang_cpu/releases): which SGLang releases the
SGLang extend/decode paths run on, that each branch refuses a release it does not serve, and, on
the installed release (0.5.23 in the main environment, 0.5.14 in ``tox -e sglang-0.5.14``), that
its own id reader is the one that decides: a draft whose ids are shifted by one is caught by both
paths on the embedded fixture pair, and the correct pair conforms."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from eagle3_conformance.environment import engines

ROOT = Path(__file__).resolve().parent.parent


def test_the_branches_serve_exactly_the_releases_the_paths_accept():
    from eagle3_conformance.tools.sglang_cpu import releases

    assert set(releases.served()) == set(engines.HARNESS_RELEASES) == {"0.5.23", "0.5.14"}
    with pytest.raises(releases.UnservedRelease, match=r"SGLang 0\.5\.22 is installed.*0\.5\.14, 0\.5\.23"):
        releases.branch("0.5.22")


@pytest.mark.parametrize("mod, other", [("r0_5_14", "0.5.23"), ("r0_5_23", "0.5.14")])
def test_a_branch_refuses_a_release_it_does_not_serve(mod, other):
    import importlib

    branch = importlib.import_module(f"eagle3_conformance.tools.sglang_cpu.releases.{mod}")
    with pytest.raises(RuntimeError, match=f"serves .* not {other}"):
        branch.check(other)


@pytest.mark.parametrize("have, runs", [("0.5.14", True), ("0.5.23", True), ("0.5.13", False)])
def test_which_paths_run_on_which_release(monkeypatch, have, runs):
    """The harness paths (extend, decode, cross-path, dflash, mtp, the CPU accept loop) run on every
    harness release; the real sglang.Engine path only on the lock's."""
    from eagle3_conformance.paths import get

    monkeypatch.delenv(engines.UNTESTED_ENV, raising=False)
    monkeypatch.setattr(engines, "installed", lambda dist: have if dist == "sglang" else None)
    monkeypatch.setattr(engines, "problem", _problem_with(engines.problem))
    pair = type("P", (), {"target_dir": None, "draft_dir": None, "data_dir": None})()
    for name in ("sglang-extend", "sglang-decode", "cross-path", "sglang-dflash", "sglang-mtp", "cpu-accept"):
        why = get(name).needs.unmet(pair)
        assert (why is None or "no local draft" in why) == runs, (name, why)
    for name in ("sglang-engine",):
        assert ("SGLang " + have + " is installed" in str(get(name).needs.unmet(pair))) == (have != "0.5.23"), name
    if not runs:
        assert "sglang==0.5.23 or sglang==0.5.14" in get("sglang-extend").needs.unmet(pair)


def _problem_with(real):
    """engines.problem for the non-SGLang base modules answered as installed (this test is about SGLang)."""
    def problem(dist, also=()):
        return real(dist, also) if dist == "sglang" else None
    return problem


def test_the_lock_merge_replaces_pins_by_name():
    sys.path.insert(0, str(ROOT / "requirements"))
    try:
        from install_sglang_0_5_14 import LOCKS, merged
    finally:
        sys.path.pop(0)
    out = merged(LOCKS[0].read_text(), LOCKS[1].read_text()).splitlines()
    pins = [ln for ln in out if "==" in ln and not ln.startswith("#")]
    assert "sglang==0.5.14" in pins and "sglang==0.5.23" not in pins
    assert "transformers==5.8.1" in pins and "tokenizers==0.22.2" in pins
    names = [p.split("==")[0].lower() for p in pins]
    assert len(names) == len(set(names))
    assert merged("Foo_Bar==1\nbaz==2\n", "foo-bar==3\n").split() == ["baz==2", "foo-bar==3"]


# ------------------------------------------------------------------ on the installed release


def _installed_branch():
    sglang = pytest.importorskip("sglang")
    if sglang.__version__ not in engines.HARNESS_RELEASES:
        pytest.skip(f"SGLang {sglang.__version__} has no harness branch")
    return sglang.__version__


@pytest.fixture(scope="module")
def tiny():
    _installed_branch()
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.suite.pairs import resolve_pair

    c = load_contract(ROOT / "contracts" / "tiny-llama.yaml")
    return c, resolve_pair(c)


def _shifted_draft(pair, tmp_path: Path) -> Path:
    """The fault, as a user makes it: the draft config's ids written as boundary indices
    ([2, 4, 5], the B_k the contract names) instead of the engine ids ([1, 3, 4])."""
    d = tmp_path / "draft"
    shutil.copytree(pair.draft_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    ids = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [i + 1 for i in ids]
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.slow
@pytest.mark.parametrize("path", ["sglang-extend", "sglang-decode"])
def test_installed_release_conforms_and_catches_shifted_ids(tiny, tmp_path, path):
    from eagle3_conformance.paths import get
    from eagle3_conformance.suite.pairs import LocalPair
    from eagle3_conformance.suite.session import run_path

    version = _installed_branch()
    c, pair = tiny
    good = run_path(get(path), c, pair, "ci")
    assert isinstance(good, list) and good, good
    assert not [f for f in good if f.status == "fail"], [f for f in good if f.status == "fail"][:3]
    assert any(f.status == "pass" and f.check == "slot_identity" for f in good)

    bad_pair = LocalPair(pair.target_dir, _shifted_draft(pair, tmp_path), pair.data_dir, "shifted ids")
    bad = run_path(get(path), c, bad_pair, "ci")
    failed = [f for f in bad if f.status == "fail"]
    # engine_mapping: the boundaries the engine's own setter reached are not the contract's;
    # slot_identity: a slot's tensor is not its declared boundary
    assert {f.check for f in failed} & {"engine_mapping", "slot_identity"}, (version, [f.check for f in failed])

    from eagle3_conformance.tools.sglang_cpu.harness import _SHARED

    h = _SHARED["h"]
    assert h.sglang_version == version and h.engine_ids == [2, 4, 5]
    assert h.captured_boundaries == ["B_3", "B_5", "B_6"]
    site = h.ids_read.site
    assert site.startswith("sglang/srt/model_executor/model_runner.py:" if version == "0.5.14"
                           else "sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py:")
