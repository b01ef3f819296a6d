"""The suite's derandomized profiles draw the same inputs whatever local source is loaded.

hypothesis (6.131+) mixes literals from local modules' source into its draws; before
``profiles.source_independent_draws`` one added literal anywhere in this package changed the
prompts the suite drew (the identity snapshot's sglang-decode counts moved on every edit, and CI
failed on it). The fault is injected the way a user causes it: a module of their own project,
full of integer literals, imported between two runs.
"""

from __future__ import annotations

import importlib
import sys

import pytest

from eagle3_conformance.suite import profiles
from eagle3_conformance.suite.session import drive

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import strategies as st  # noqa: E402


def _draws(run) -> list:
    """Every token list the body was handed, in order."""
    seen: list = []

    def body(data):
        seen.append(data.draw(st.lists(st.integers(3, 255), min_size=8, max_size=8)))
        return []

    run(body)
    return seen


def _plain(body) -> None:
    """The same search as ``drive`` without the guard: hypothesis' own behaviour."""
    from hypothesis import Phase, given, settings

    @settings(profiles.get("ci"), phases=[Phase.explicit, Phase.reuse, Phase.generate], database=None)
    @given(st.data())
    def prop(data):
        body(data)

    prop()


def _import_user_module(tmp_path, name: str) -> None:
    """A module of the user's own project (outside site-packages: local to hypothesis) whose
    source holds 200 integer literals inside the drawn range."""
    src = tmp_path / "userproj"
    src.mkdir()
    (src / f"{name}.py").write_text("TABLE = (" + ", ".join(str(v) for v in range(40, 240)) + ")\n")
    sys.path.insert(0, str(src))
    try:
        importlib.import_module(name)
    finally:
        sys.path.remove(str(src))


def test_ci_profile_draws_do_not_depend_on_local_source(tmp_path):
    guarded = lambda body: drive(body, "ci")  # noqa: E731
    before, before_plain = _draws(guarded), _draws(_plain)
    _import_user_module(tmp_path, "conformance_user_constants_a")
    after, after_plain = _draws(guarded), _draws(_plain)
    assert after == before and len(before) >= 5
    # the fault the guard exists for: hypothesis' own search draws other inputs once the module is loaded
    assert after_plain != before_plain


def test_guard_restores_hypothesis_for_the_users_own_tests(tmp_path):
    from hypothesis.internal.conjecture import providers

    own = providers._get_local_constants
    with profiles.source_independent_draws() as emptied:
        assert emptied is True
        assert len(providers._get_local_constants()) == 0
    assert providers._get_local_constants is own
    _import_user_module(tmp_path, "conformance_user_constants_b")
    assert 117 in providers._get_local_constants().integers


def test_dev_profile_keeps_hypothesis_constants(monkeypatch):
    """``dev`` is random and exploratory: hypothesis' constants stay (the guard is not entered)."""
    entered = []
    real = profiles.source_independent_draws
    monkeypatch.setattr(profiles, "source_independent_draws", lambda: (entered.append(1), real())[1])
    drive(lambda data: [], "dev")
    assert entered == []
    drive(lambda data: [], "ci")
    assert entered == [1]
