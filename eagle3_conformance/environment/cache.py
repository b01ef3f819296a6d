"""Where converted models, the reference's captured boundaries and fetched release code are cached:
one root outside the repository.

The cache root is ``$CONFORMANCE_MODEL_CACHE``, else ``$XDG_CACHE_HOME/eagle3-conformance``, else
``~/.cache/eagle3-conformance``; a root inside the source checkout is refused. Read by the reference
(:func:`eagle3_conformance.reference.model.default_cache_dir`), the released-code fetcher and the test
bed's model cache (:mod:`eagle3_conformance.testbed.model_cache`, which re-exports these names). Here,
in the lowest layer, so that the reference never imports the test bed (docs/architecture.md, "The
self-test wall"). Standard library only.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from eagle3_conformance.environment.fixture_specs import REPO_ROOT, FixtureError

CACHE_ENV = "CONFORMANCE_MODEL_CACHE"
"""The environment variable that names the cache root."""

REFERENCE_CACHE_ENV = "CONFORMANCE_REFERENCE_CACHE"
"""``0``: the reference's disk caches are off (the suite's boundaries,
:func:`eagle3_conformance.reference.suite_model.suite_reference_model`, and the target's greedy decode,
:func:`eagle3_conformance.reference.greedy.target_greedy`)."""


def model_cache_root() -> Path:
    """Where converted models live (created on first use by
    :func:`eagle3_conformance.testbed.model_cache.ensure_model`), resolved.

    Raises:
        FixtureError: the root resolves to a folder inside this repository.
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        root = Path(env).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "eagle3-conformance"
    root = root.resolve()
    repo = REPO_ROOT.resolve()
    if root == repo or repo in root.parents:
        raise FixtureError(f"model cache {root} is inside the repository {repo}; converted weights are never "
                           f"kept in the repo (set {CACHE_ENV} to a folder outside it)")
    return root


def write_json_atomically(path: Path, doc: object) -> None:
    """Write ``doc`` as JSON to ``path`` (its folder created) through a temporary file beside it and
    ``os.replace``, so a concurrent reader never sees a partial file. For cache entries: an ``OSError``
    (a read-only or full cache) is swallowed, since a missing entry only costs recomputation."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except OSError:
        pass
