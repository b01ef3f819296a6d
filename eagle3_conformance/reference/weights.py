"""Where a checkpoint's tensors live, read from its safetensors headers only (no tensor is loaded), and the
reference's errors: the reference model's streamed load and the engines' start checks use them. Split from
:mod:`eagle3_conformance.reference.model` (its names are re-exported there)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional


class ReferenceError(Exception):
    """The reference model directory cannot be used (missing config or weights, bad format)."""


class MissingBoundary(ReferenceError, KeyError):
    """A partial reference (the engine's own records) holds no such boundary."""


def weight_index(model_dir: str | Path) -> dict[str, dict[str, str]]:
    """Where every checkpoint tensor lives: ``{name: {"safetensors_file", "weight_name"}}``.

    Reads ``model.safetensors.index.json`` (its ``weight_map``) when present, else every
    ``*.safetensors`` file; only the headers are read.

    Raises:
        ReferenceError: a shard listed in the index is missing, a shard cannot be read, or the
            index is not JSON; the message names the file.
    """
    from safetensors import safe_open

    d = Path(model_dir)
    idx = d / "model.safetensors.index.json"
    if idx.is_file():
        try:
            wm = json.loads(idx.read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ReferenceError(f"{idx}: not a safetensors index (needs a 'weight_map'): {e}") from None
        files = sorted(set(wm.values()))
        missing = [f for f in files if not (d / f).is_file()]
        if missing:
            names = sorted(k for k, f in wm.items() if f == missing[0])
            raise ReferenceError(f"{idx}: weight shard(s) {', '.join(missing)} missing from {d} "
                                 f"({missing[0]} holds {len(names)} tensors, e.g. {names[0]})")
    else:
        files = sorted(p.name for p in d.glob("*.safetensors"))
    out: dict[str, dict[str, str]] = {}
    for f in files:
        try:
            with safe_open(str(d / f), framework="pt") as h:
                for k in h.keys():
                    out[k] = {"safetensors_file": str(d / f), "weight_name": k}
        except Exception as e:  # safetensors raises SafetensorError / OSError on a bad file
            raise ReferenceError(f"{d / f}: cannot read the safetensors header: {e}") from None
    return out


def missing_weights(model_dir: str | Path) -> Optional[str]:
    """Why ``model_dir`` cannot be the reference model, nor be loaded by an engine: it holds no
    ``*.safetensors`` file (e.g. a config-only directory made for ``init``); else None."""
    return None if any(Path(model_dir).glob("*.safetensors")) else f"{model_dir}: no *.safetensors weights"
