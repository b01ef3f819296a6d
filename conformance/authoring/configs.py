"""Reading the target's and the draft's ``config.json`` for ``conformance init`` (no weights)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from conformance.errors import DataError

DTYPES = {"float32", "bfloat16", "float16"}
"""Config dtypes a contract can name as they are."""


def read_config(arg: str, role: str) -> tuple[dict[str, Any], Path, Optional[Path]]:
    """Read a config.json given a directory or the file itself.

    Returns (config dict, the config file, the model directory or None when a file was given).

    Raises:
        DataError: missing file, invalid JSON (with line:column), or not a JSON object.
    """
    p = Path(arg)
    if p.is_dir():
        f, d = p / "config.json", p
    else:
        # a config.json next to its weights names the model directory too (target.path / draft.path)
        f = p
        d = p.parent if p.name == "config.json" and any(p.parent.glob("*.safetensors")) else None
    if not f.is_file():
        raise DataError(f"{f}: no such {role} config.json")
    try:
        cfg = json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(f"{f}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{f}: cannot read: {e}") from None
    if not isinstance(cfg, dict):
        raise DataError(f"{f}: a config.json must hold a JSON object")
    return cfg, f, d


def int_field(cfg: dict, key: str, f: Path, *, sub: Optional[str] = None) -> tuple[int, str]:
    """An int field, falling back to ``sub`` (e.g. ``text_config``). Returns (value, key path).

    Raises:
        DataError: no integer under ``key`` (nor ``sub.key``).
    """
    if isinstance(cfg.get(key), int) and not isinstance(cfg.get(key), bool):
        return int(cfg[key]), key
    if sub and isinstance(cfg.get(sub), dict) and isinstance(cfg[sub].get(key), int):
        return int(cfg[sub][key]), f"{sub}.{key}"
    raise DataError(f"{f}: no integer {key!r}" + (f" (nor {sub}.{key})" if sub else ""))


def dir_name(p: Path) -> str:
    """A model's name from its directory: ``parent/name`` when the name alone says nothing."""
    p = p.resolve()
    return f"{p.parent.name}/{p.name}" if p.name in ("target", "draft", "model", ".") else p.name


def one_plus_norm(model_type: str) -> bool:
    """Whether the final norm is ``x*(1+w)``: Gemma family, Qwen3.5 / Qwen3-Next (REFERENCE.md 5.3)."""
    return model_type.startswith("gemma") or model_type.startswith("qwen3_5") or model_type == "qwen3_next"


def draft_ids(cfg: dict) -> tuple[Optional[list[int]], Optional[list[int]]]:
    """(nested ids, top-level ids) as written, each None when absent."""
    eagle = cfg.get("eagle_config")
    nested = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, dict) else None
    top = cfg.get("eagle_aux_hidden_state_layer_ids")
    return (list(nested) if nested is not None else None), (list(top) if top is not None else None)


def is_speculators(cfg: dict) -> bool:
    """Whether a draft config is in the speculators format (``Eagle3Speculator``)."""
    return ("speculators_config" in cfg or "transformer_layer_config" in cfg
            or (cfg.get("architectures") or [None])[0] == "Eagle3Speculator")
