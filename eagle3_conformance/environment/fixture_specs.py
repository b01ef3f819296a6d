"""Where the checkout's fixtures live and how a fixture name resolves to its ``fixture.json``: the
lookup behind a contract's ``fixture:`` key (:func:`eagle3_conformance.contract.validation.fixture_problems`)
and the fixture builders of the test bed (:mod:`eagle3_conformance.testbed.fixtures`, which re-export
these names from :mod:`eagle3_conformance.testbed.fixture_base`).

Here, in the lowest layer, so that the contract and the reference read a fixture name without
importing the test bed (docs/architecture.md, "The self-test wall"). Standard library only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The source checkout's root (the folder holding ``eagle3_conformance/``)."""

FIXTURES_DIR = REPO_ROOT / "fixtures"
"""The checkout's fixture folders (absent from an installed wheel)."""


class FixtureError(Exception):
    """A fixture folder is missing or malformed."""


def known_fixtures() -> list[str]:
    """Names of the fixtures under :data:`FIXTURES_DIR` (folders holding ``fixture.json``; build
    output ``_build`` and hidden folders excluded), sorted."""
    if not FIXTURES_DIR.is_dir():
        return []
    return sorted(p.name for p in FIXTURES_DIR.iterdir()
                  if p.is_dir() and not p.name.startswith(("_", ".")) and (p / "fixture.json").is_file())


def fixture_spec(name_or_dir: str | Path) -> tuple[str, dict[str, Any]]:
    """``(name, the parsed fixture.json)`` of a fixture named by a folder of :data:`FIXTURES_DIR` or
    by a folder path holding ``fixture.json``.

    Raises:
        FixtureError: no such fixture ("no such fixture" in the message), or its ``fixture.json`` is
            not JSON (the message names the file, line and column).
    """
    p = Path(name_or_dir)
    if not p.is_dir():
        p = FIXTURES_DIR / str(name_or_dir)
    f = p / "fixture.json"
    if not f.is_file():
        raise FixtureError(f"{f}: no such fixture (expected a folder under {FIXTURES_DIR})")
    try:
        return p.name, json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise FixtureError(f"{f}:{e.lineno}:{e.colno}: {e.msg}") from None
