"""Reading the target's and the draft's ``config.json`` for ``eagle3-conformance init`` (no weights)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

# the contract's rule (the reference applies it too), re-exported where it was first written
from eagle3_conformance.contract.validation import TARGET_KEYS, target_mismatches  # noqa: F401
from eagle3_conformance.core.errors import DataError

DTYPES = {"float32", "bfloat16", "float16"}
"""Config dtypes a contract can name as they are."""


def read_config(arg: str, role: str) -> tuple[dict[str, Any], Path, Optional[Path]]:
    """Read a config.json given a directory or the file itself.

    Returns (config dict, the config file, the model directory or None when a file was given).

    Raises:
        DataError: missing file, invalid JSON (with line:column), or not a JSON object.
    """
    p = Path(arg)
    d: Optional[Path]
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


def sub_dict(cfg: dict, key: str, default: dict) -> dict:
    """``cfg[key]`` when it is a JSON object (e.g. ``dflash_config``), else ``default``."""
    v = cfg.get(key)
    return v if isinstance(v, dict) else default


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
    """(nested ids, top-level ids) as written, each None when absent. A value that is not a list of integers
    is returned as written (a string stays a string): :func:`eagle3_conformance.draft_config.config_ids.id_problems`
    names it with its line, and nothing reads it as ids."""
    eagle = cfg.get("eagle_config")
    nested = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, dict) else None
    top = cfg.get("eagle_aux_hidden_state_layer_ids")
    return (list(nested) if isinstance(nested, list) else nested), (list(top) if isinstance(top, list) else top)


def is_speculators(cfg: dict) -> bool:
    """Whether a draft config is in the speculators format (``Eagle3Speculator``)."""
    return ("speculators_config" in cfg or "transformer_layer_config" in cfg
            or (cfg.get("architectures") or [None])[0] == "Eagle3Speculator")


def draft_method_keys(cfg: dict) -> dict[str, list[str]]:
    """The keys of each draft method a config carries: ``{"eagle3": [...], "dflash": [...],
    "mtp": [...]}`` (only methods with at least one key). Keys looked for:

    - EAGLE-3: ``eagle_config``, top-level ``eagle_aux_hidden_state_layer_ids``, an ``*Eagle3*``
      architecture, speculators ``speculators_config.algorithm == "eagle3"``;
    - DFlash: ``dflash_config`` (SGLang 0.5.23 ``dflash_utils.py:445-459``), top-level
      ``target_layer_ids``, a ``*DFlash*`` architecture, speculators algorithm ``dflash``;
    - MTP / NextN: ``num_nextn_predict_layers`` (DeepSeek), ``mtp_num_hidden_layers`` (Qwen3.5),
      an ``*MTP*`` / ``*NextN*`` architecture, speculators algorithm ``mtp``.
    """
    archs = [str(a) for a in (cfg.get("architectures") or []) if isinstance(a, str)]
    algo = (cfg.get("speculators_config") or {}).get("algorithm") if isinstance(cfg.get("speculators_config"), dict) else None
    found: dict[str, list[str]] = {}

    def add(method: str, key: str) -> None:
        found.setdefault(method, []).append(key)

    if isinstance(cfg.get("eagle_config"), dict):
        add("eagle3", "eagle_config")
    if "eagle_aux_hidden_state_layer_ids" in cfg:
        add("eagle3", "eagle_aux_hidden_state_layer_ids")
    if any("eagle" in a.lower() for a in archs):
        add("eagle3", f"architectures {archs}")
    if algo in ("eagle3", "eagle", "eagle2"):
        add("eagle3", f"speculators_config.algorithm {algo!r}")
    if "dflash_config" in cfg:
        add("dflash", "dflash_config")
    if "target_layer_ids" in cfg:
        add("dflash", "target_layer_ids (top level)")
    if any("dflash" in a.lower() for a in archs):
        add("dflash", f"architectures {archs}")
    if algo == "dflash":
        add("dflash", "speculators_config.algorithm 'dflash'")
    weak = [k for k in ("num_nextn_predict_layers", "mtp_num_hidden_layers")
            if isinstance(cfg.get(k), int) and not isinstance(cfg[k], bool) and cfg[k] > 0]
    if any("mtp" in a.lower() or "nextn" in a.lower() for a in archs):
        add("mtp", f"architectures {archs}")
    if algo == "mtp":
        add("mtp", "speculators_config.algorithm 'mtp'")
    if weak and (not found or "mtp" in found):
        # a target's MTP layer count, often copied into other drafts' configs: evidence of MTP only
        # where nothing names another method
        for k in weak:
            add("mtp", k)
    return found


def dflash_ids(cfg: dict) -> tuple[Optional[list[int]], str]:
    """(DFlash ids as written, location): ``dflash_config.target_layer_ids`` is read first, then
    a top-level ``target_layer_ids`` (the order of SGLang 0.5.23 ``dflash_utils.py:656-660``).

    Raises:
        DataError: the ids are not a non-empty list of integers (the message names the key).
    """
    dc = sub_dict(cfg, "dflash_config", {})
    for where, key, v in (("dflash_config", "dflash_config.target_layer_ids", dc.get("target_layer_ids")),
                          ("top_level", "target_layer_ids", cfg.get("target_layer_ids"))):
        if v is None:
            continue
        if not isinstance(v, list) or not v or not all(isinstance(i, int) and not isinstance(i, bool) for i in v):
            raise DataError(f"{key} must be a non-empty list of integers, got {v!r}")
        return list(v), where
    return None, "absent"


