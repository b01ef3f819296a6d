"""What every fixture kind shares: where fixtures live, the spec reader, the built result, the
error type, the draft config writer, and :func:`build_once` (every cached build of the package:
fixtures, converted models, the trained draft, SpecForge data). Imported by the seeded builder (:mod:`eagle3_conformance.testbed.fixtures`)
and the real-model builder (:mod:`eagle3_conformance.testbed.fixtures_real`), which never import each other's
internals."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES_DIR = REPO_ROOT / "fixtures"


class FixtureError(Exception):
    """A fixture folder is missing or malformed."""


def build_once(root: Path, build: Callable[[Path], None], marker: str = "DONE") -> Path:
    """``root``, built at most once and never seen half-built.

    When ``root / marker`` exists, ``root`` is returned as it is. Otherwise ``build(stage)``
    writes the folder ``stage`` (it does not exist yet; a sibling of ``root`` in a fresh hidden
    temporary folder of ``root``'s parent) and writes ``stage / marker`` last; ``stage`` is then
    renamed to ``root`` (atomic on one file system). When another process renamed its copy
    first, that copy is kept. The temporary folder is removed whatever happens.

    Raises:
        whatever ``build`` raises; OSError: the rename failed and no complete ``root`` exists.
    """
    root = Path(root)
    if (root / marker).is_file():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".tmp", dir=root.parent))
    try:
        stage = tmp / root.name
        build(stage)
        try:
            stage.rename(root)
        except OSError:  # another process renamed its copy first
            if not (root / marker).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


@dataclass(frozen=True)
class BuiltFixture:
    name: str
    root: Path
    target_dir: Path
    draft_dir: Path
    data_dir: Path
    spec: dict[str, Any]


def known_fixtures() -> list[str]:
    """Names of the fixtures under :data:`FIXTURES_DIR` (folders holding ``fixture.json``; build
    output ``_build`` and hidden folders excluded), sorted."""
    if not FIXTURES_DIR.is_dir():
        return []
    return sorted(p.name for p in FIXTURES_DIR.iterdir()
                  if p.is_dir() and not p.name.startswith(("_", ".")) and (p / "fixture.json").is_file())


def fixture_spec(name_or_dir: str | Path) -> tuple[str, dict[str, Any]]:
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



def write_draft(spec: dict[str, Any], out: Path, target_dir: Path | None = None) -> None:
    """Write the draft ``config.json`` (SGLang style: ids nested under ``eagle_config``).

    No weights are written: the SGLang path seeds the draft's weights deterministically, since
    the suite observes what *reaches* the draft (width, blocks, whether fc runs), not its output.
    """
    out.mkdir(parents=True, exist_ok=True)
    cfg = dict(spec["draft"])
    for key, val in list(cfg.items()):
        if val == "from_target":  # e.g. rope_parameters as transformers wrote them for the target
            cfg[key] = json.loads((target_dir / "config.json").read_text())[key]
    (out / "config.json").write_text(json.dumps(cfg, indent=2))

