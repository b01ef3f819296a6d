"""The layer-id flag of the installed speculators release, read from its own argument parser.

Fix hints name the flag a user types; a string kept in the project goes stale when the tool renames
it (speculators 0.4's ``--layer-ids`` is 0.9.0's ``--target-layer-ids``). The installed release's
training CLI builds its parser from its config schema
(``speculators/train/config/resolution.py::build_parser``, 0.9.0); the data-generation launcher
(``scripts/launch_vllm.py``, not part of the installed package) takes the same flag for the aux ids and
appends L itself (``--include-last-layer``, default true; read in vllm-project/speculators
``scripts/launch_vllm.py:69-87,119-122``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional


@lru_cache(maxsize=None)
def target_layer_ids_flag() -> Optional[str]:
    """The option string of ``target_layer_ids`` in the installed speculators' training parser
    (``"--target-layer-ids"`` in 0.9.0); None when speculators is not importable or has no such option."""
    try:
        from eagle3_conformance.environment import torch_env

        torch_env.prepare()
        from speculators.train.config.resolution import build_parser

        parser = build_parser()
    except Exception:  # not installed, or a release without this parser: no flag to name
        return None
    for a in parser._actions:  # argparse keeps every action here; no public accessor exists
        if a.dest == "target_layer_ids" and a.option_strings:
            return max(a.option_strings, key=len)
    return None


def installed_version() -> Optional[str]:
    """The installed speculators version (package metadata), or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("speculators")
    except PackageNotFoundError:
        return None
