"""What every fixture kind shares: the built result, the draft config writer, and :func:`build_once`
(every cached build of the package: fixtures, converted models, the trained draft, SpecForge data).
Where fixtures live, the spec reader and the error type are
:mod:`eagle3_conformance.environment.fixture_specs` (the contract reads them there, below the test
bed), re-exported here. Imported by the seeded builder (:mod:`eagle3_conformance.testbed.fixtures`)
and the real-model builder (:mod:`eagle3_conformance.testbed.fixtures_real`), which never import each other's
internals."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from eagle3_conformance.environment.fixture_specs import (  # noqa: F401  (re-exported: their old import path)
    FIXTURES_DIR,
    REPO_ROOT,
    FixtureError,
    fixture_spec,
    known_fixtures,
)


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


def write_draft(spec: dict[str, Any], out: Path, target_dir: Path | None = None) -> None:
    """Write the draft ``config.json`` (SGLang style: ids nested under ``eagle_config``).

    No weights are written: the SGLang path seeds the draft's weights deterministically, since
    the suite observes what *reaches* the draft (width, blocks, whether fc runs), not its output.
    """
    out.mkdir(parents=True, exist_ok=True)
    cfg = dict(spec["draft"])
    for key, val in list(cfg.items()):
        if val == "from_target":  # e.g. rope_parameters as transformers wrote them for the target
            if target_dir is None:
                raise FixtureError(f"draft.{key}: 'from_target' needs the target's directory")
            cfg[key] = json.loads((target_dir / "config.json").read_text())[key]
    (out / "config.json").write_text(json.dumps(cfg, indent=2))

