"""The facts ``eagle3-conformance init`` reads from the target's and the draft's ``config.json``: its one
job is reading configs into :class:`TargetFacts` / :class:`DraftFacts` (no weights) and naming the
draft's method (:func:`draft_method`). :class:`CaptureFacts` is what the engine's id rule makes of them
(:func:`eagle3_conformance.authoring.init.capture_of`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.authoring.configs import (
    DTYPES,
    dir_name,
    draft_ids,
    draft_method_keys,
    int_field,
    is_speculators,
)
from eagle3_conformance.core.errors import DataError


@dataclass
class TargetFacts:
    """What ``init`` reads from the target's config.json (``*_key``: the key it came from)."""

    file: Path
    dir: Optional[Path]
    arch: str
    L: int
    L_key: str
    d: int
    d_key: str
    V: int
    V_key: str
    model_type: str
    config_dtype: Any  # as written (None when absent)
    dtype: str
    name: str


@dataclass(frozen=True)
class TargetSizes:
    """The target's hidden size ``d`` and vocabulary size ``V``: all :func:`draft_facts` reads of the
    target, when its config is not at hand (a contract's ``target.hidden_size`` / ``vocab_size``)."""

    d: int
    V: int


@dataclass
class DraftFacts:
    """What ``init`` reads from the draft's config.json.

    ``width`` is the draft's hidden size (fc output); ``slot_width`` the width of one aux slot
    (fc input / K), which must equal the target's d.
    """

    file: Path
    dir: Optional[Path]
    speculators_format: bool
    arch: str
    name: str
    width: int
    width_key: str
    slot_width: int
    slot_width_key: Optional[str]
    vocab: int
    vocab_note: str
    pre_fc: str
    nested: Optional[list[int]]
    top: Optional[list[int]]
    eagle: dict = field(default_factory=dict)
    num_aux: Any = None  # num_aux_hidden_states as written


@dataclass
class CaptureFacts:
    """The boundaries an engine captures for the draft's ids, and how we know."""

    engine: str
    tool: str
    version: Optional[str]
    inferred: str
    ids: Optional[list[int]]
    location: str  # "nested" | "top_level" | "absent"
    boundaries: list
    source: str
    rule: str
    model_file: Optional[str] = None


def target_facts(cfg: dict, f: Path, d: Optional[Path]) -> TargetFacts:
    """Raises: DataError: no architectures, or no integer L / d / vocab."""
    text = cfg.get("text_config") or {}
    archs = cfg.get("architectures") or text.get("architectures")
    if not archs or not isinstance(archs, list):
        raise DataError(f"{f}: no 'architectures' list")
    L, L_key = int_field(cfg, "num_hidden_layers", f, sub="text_config")
    hd, d_key = int_field(cfg, "hidden_size", f, sub="text_config")
    V, V_key = int_field(cfg, "vocab_size", f, sub="text_config")
    model_type = str(cfg.get("model_type") or text.get("model_type") or "")
    tdt = cfg.get("torch_dtype") or cfg.get("dtype") or text.get("torch_dtype")
    return TargetFacts(f, d, str(archs[0]), L, L_key, hd, d_key, V, V_key, model_type, tdt,
                       tdt if tdt in DTYPES else "bfloat16", str(cfg.get("_name_or_path") or dir_name(d or f.parent)))


def draft_facts(cfg: dict, f: Path, d: Optional[Path], t: TargetFacts | TargetSizes) -> DraftFacts:
    """Raises: DataError: no architectures, no width, or an aux slot width that is not the
    target's d (fc would be sized for the wrong width, fault-kinds.md K6)."""
    spec_fmt = is_speculators(cfg)
    archs = cfg.get("architectures")
    if not archs or not isinstance(archs, list):
        raise DataError(f"{f}: no 'architectures' list")
    if spec_fmt:
        tl = cfg.get("transformer_layer_config") or {}
        if not isinstance(tl.get("hidden_size"), int):
            raise DataError(f"{f}: speculators config without transformer_layer_config.hidden_size")
        dh, dh_key = int(tl["hidden_size"]), "transformer_layer_config.hidden_size"
        th = cfg.get("target_hidden_size")
        th_key = "target_hidden_size" if th is not None else None
        if th is None:  # speculators never sets it; fc is Linear(num_aux*H, H), H = verifier width
            th = t.d
    else:
        dh, dh_key = int_field(cfg, "hidden_size", f)
        th = cfg.get("target_hidden_size")
        th_key = "target_hidden_size" if th is not None else None
        if th is None:  # llama_eagle3.py:151-154: in_w = target_hidden_size if present else hidden_size
            th = dh
    if int(th) != t.d:
        raise DataError(
            f"{f}: the draft's aux slot width is {th} ({th_key or 'hidden_size, no target_hidden_size'}) "
            f"but the target hidden_size is {t.d}: fc would be sized for the wrong width (fault-kinds.md K6)")
    dv = cfg.get("draft_vocab_size")
    dv_note = "draft_vocab_size"
    if dv is None:
        dv = cfg.get("vocab_size") or (cfg.get("transformer_layer_config") or {}).get("vocab_size") or t.V
        dv_note = "draft_vocab_size null: the draft shares the target vocab (REFERENCE.md 2.2)"
    ec = cfg.get("eagle_config")
    eagle: dict = ec if isinstance(ec, dict) else {}
    if cfg.get("norm_before_fc") or eagle.get("norm_before_fc"):
        pre_fc = "norm_before_fc"
    elif cfg.get("fc_norm") or cfg.get("use_aux_norm"):
        pre_fc = "fc_norm"
    else:
        pre_fc = "none"
    nested, top = draft_ids(cfg)
    return DraftFacts(f, d, spec_fmt, str(archs[0]), str(cfg.get("_name_or_path") or dir_name(d or f.parent)),
                      dh, dh_key, int(th), th_key, dv, dv_note, pre_fc, nested, top, eagle,
                      cfg.get("num_aux_hidden_states"))


def draft_method(cfg: dict, f: Path) -> str:
    """The draft method a config is written for: ``eagle3``, ``dflash`` or ``mtp``, from its own
    keys (:func:`eagle3_conformance.authoring.configs.draft_method_keys`). A config with no method key is
    read as EAGLE-3 (the existing refusals for missing ids then apply).

    Raises:
        DataError: keys of two methods in one config (which one the engine would read depends on
            the engine; never guessed).
    """
    found = draft_method_keys(cfg)
    if len(found) > 1:
        what = "; ".join(f"{m}: {', '.join(keys)}" for m, keys in found.items())
        raise DataError(f"{f}: the draft config carries keys of more than one draft method ({what}); "
                        "remove the other method's keys so that every engine reads the same method")
    return next(iter(found), "eagle3")
