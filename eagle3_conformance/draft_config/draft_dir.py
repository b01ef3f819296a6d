"""A draft directory whose ``config.json`` holds the EAGLE-3 layer ids under another key.

Engines read the ids from different keys (SGLang 0.5.23: ``eagle_config`` only; vLLM 0.33.0's V1
runner: top level then ``eagle_config``, its V2 runner: top level only), so the CPU harnesses can
rebuild a draft with the ids moved to the key under test. The weights are symlinked, never copied
or modified.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

IDS_KEY = "eagle_aux_hidden_state_layer_ids"
KEYS = ("nested", "top_level", "absent")


def with_ids_at(draft_dir: Path, key: str, *, prefer: str, prefix: str) -> Path:
    """A new temporary directory (the caller removes it) holding ``draft_dir``'s files as
    symlinks and a ``config.json`` with the layer ids only at ``key``: ``"nested"``
    (``eagle_config.eagle_aux_hidden_state_layer_ids``), ``"top_level"``, or ``"absent"``.

    Args:
        prefer: which existing key gives the ids when both are present (``"nested"`` or
            ``"top_level"``: the reading order of the engine under test).
        prefix: the temporary directory's name prefix.

    Raises:
        ValueError: ``key`` is not one of :data:`KEYS`.
    """
    if key not in KEYS:
        raise ValueError(f"draft_ids_key must be nested/top_level/absent, got {key!r}")
    cfg = json.loads((draft_dir / "config.json").read_text())
    eagle = dict(cfg.get("eagle_config") or {})
    top, nested = cfg.pop(IDS_KEY, None), eagle.pop(IDS_KEY, None)
    first, second = (nested, top) if prefer == "nested" else (top, nested)
    ids = first if first is not None else second
    if key == "nested" and ids is not None:
        eagle[IDS_KEY] = ids
    elif key == "top_level" and ids is not None:
        cfg[IDS_KEY] = ids
    cfg["eagle_config"] = eagle
    out = Path(tempfile.mkdtemp(prefix=prefix))
    for f in draft_dir.iterdir():
        if f.name != "config.json" and f.is_file():
            os.symlink(f.resolve(), out / f.name)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    return out
