"""A contract checked against the ``config.json`` files its ``target.path`` / ``draft.path`` name,
where those exist on this machine (``eagle3-conformance validate``).

The target's L, d, vocabulary and architecture are compared by
:func:`~eagle3_conformance.contract.validation.target_mismatches`, the
comparison the reference model is also held to (:func:`eagle3_conformance.reference.load_reference_model`).
The configs are read as ``eagle3-conformance init`` reads them (:func:`~eagle3_conformance.authoring.init.target_facts`,
:func:`~eagle3_conformance.authoring.init.draft_facts`), and the draft's layer ids are read through
the rule of the tool that reads them (:func:`eagle3_conformance.engine_ids.layer_id_problems`), never
compared raw. No weights are read and nothing imports torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.contract import contract_source
from eagle3_conformance.contract.validation import target_mismatches
from eagle3_conformance.core.errors import DataError


def _local_dir(c: Any, p: Optional[str]) -> Optional[Path]:
    """``p`` resolved as :func:`eagle3_conformance.suite.pairs.resolve_pair` resolves it, when it is a
    directory holding a ``config.json``; else None (absent, or not on this machine)."""
    if not p:
        return None
    q = _resolved(c, p)
    return q if (q / "config.json").is_file() else None


def _resolved(c: Any, p: str) -> Path:
    """``p`` relative to the contract file (absolute paths as they are), normalised."""
    src = contract_source(c)
    q = Path(p)
    return Path(os.path.normpath(q if q.is_absolute() else (src.parent if src else Path.cwd()) / q))


def unchecked_paths(c: Any) -> list[str]:
    """``target.path`` / ``draft.path`` values the contract names that hold no ``config.json`` on this
    machine (a typo, or a contract written on another machine): :func:`config_problems` could not
    cross-check them. One line each, naming the key and the directory it resolved to."""
    out = []
    for key, p in (("target.path", c.target.path), ("draft.path", c.draft.path)):
        if p and _local_dir(c, p) is None:
            q = _resolved(c, p)
            why = "no such directory" if not q.is_dir() else "no config.json in it"
            out.append(f"{key} {p}: {why} ({q}); the contract was not checked against its config")
    return out


def config_problems(c: Any) -> list[tuple[tuple, str]]:
    """Where the contract disagrees with the target's and the draft's ``config.json`` (found at
    ``target.path`` / ``draft.path``, relative to the contract file). Returns ``(contract key
    path, message naming the config file and key)`` pairs; empty when they agree or when neither
    config is on this machine."""
    from eagle3_conformance.authoring.configs import read_config
    from eagle3_conformance.authoring.init import target_facts

    out: list[tuple[tuple, str]] = []
    t = None
    t_dir = _local_dir(c, c.target.path)
    if t_dir is not None:
        try:
            cfg, f, d = read_config(str(t_dir), "target")
            t = target_facts(cfg, f, d)
        except DataError as e:
            out.append((("target", "path"), f"the target config cannot be read: {e}"))
        else:
            archs = cfg.get("architectures") or (cfg.get("text_config") or {}).get("architectures") or []
            keys = {"num_hidden_layers": t.L_key, "hidden_size": t.d_key, "vocab_size": t.V_key,
                    "architecture": "architectures"}
            got = {"num_hidden_layers": t.L, "hidden_size": t.d, "vocab_size": t.V}
            out += [(("target", k), f"{want} here, but the target config {f} has {keys[k]} = {v}")
                    for k, v, want in target_mismatches(got, list(archs), c.target)]
    d_dir = _local_dir(c, c.draft.path)
    if c.method in ("eagle3", "eagle1", "eagle2"):
        role = _role_problem(t_dir, d_dir)
        if role:  # init refuses it with the same words; nothing else about these configs means anything
            return out + [((role[0], "path"), role[1])]
        if d_dir is not None:
            out += _draft_problems(c, d_dir, t)
    if c.method == "dflash":  # issue 37, R58: the fallbacks each engine would use; the local DFlash config
        from eagle3_conformance.draft_config.dflash_fallback import dflash_config_problems

        out += dflash_config_problems(c, d_dir)
    return out


def _role_problem(t_dir: Optional[Path], d_dir: Optional[Path]) -> Optional[tuple[str, str]]:
    """:func:`eagle3_conformance.authoring.capture_checks.role_problem` on the configs at ``target.path`` /
    ``draft.path`` (either may be absent); an unreadable config is left to the readers."""
    import json

    from eagle3_conformance.authoring.capture_checks import role_problem

    def read(d: Optional[Path]) -> tuple[Optional[dict], Optional[Path]]:
        if d is None:
            return None, None
        try:
            cfg = json.loads((d / "config.json").read_text())
        except (OSError, ValueError):
            return None, None
        return (cfg, d / "config.json") if isinstance(cfg, dict) else (None, None)

    return role_problem(*read(t_dir), *read(d_dir), names=("target.path", "draft.path"))


def _draft_problems(c: Any, d_dir: Path, t: Any) -> list[tuple[tuple, str]]:
    """The draft section against the draft's config (read as ``init`` reads it; ``t`` the target's
    facts, or the contract's target sizes when its config is not here)."""
    from eagle3_conformance.authoring.capture_checks import contract_top_level_problems, num_aux_problem
    from eagle3_conformance.authoring.configs import read_config
    from eagle3_conformance.authoring.init import draft_facts
    from eagle3_conformance.authoring.init_facts import TargetSizes

    try:
        cfg, f, d = read_config(str(d_dir), "draft")
        dr = draft_facts(cfg, f, d, t or TargetSizes(d=c.target.hidden_size, V=c.target.vocab_size))
    except DataError as e:
        return [(("draft", "path"), f"the draft config does not fit: {e}")]
    sizes = [("hidden_size", dr.width, f"{dr.width_key} = "),
             ("target_hidden_size", dr.slot_width, f"{dr.slot_width_key} = " if dr.slot_width_key
              else "no target_hidden_size, so a slot width of "),
             ("draft_vocab_size", dr.vocab, "draft_vocab_size = " if dr.vocab_note == "draft_vocab_size"
              else "no draft_vocab_size, so a shared vocabulary of ")]
    out = [(("draft", k), f"{getattr(c.draft, k)} here, but the draft config {f} has {how}{v}")
           for k, v, how in sizes if v != getattr(c.draft, k)]
    from eagle3_conformance.draft_config.draft_norms import norm_problems

    out += norm_problems(c, cfg, f)  # issue 37: Eagle3.1 norms as each tool reads them
    out += contract_top_level_problems(c, dr)  # K1: init refuses it with the same line
    width = num_aux_problem(dr, c.capture.boundaries, "the contract's capture.boundaries hold")
    if width:  # as init refuses it
        out.append((("capture", "boundaries"), width))
    raw = _raw_id_problems(c, f)
    ids = _id_problems(c, dr, f)
    if raw:  # the negative ids are named there with their line
        ids = [(k, m) for k, m in ids if " is negative" not in m]
    return out + raw + ids


def _raw_id_problems(c: Any, f: Path) -> list[tuple[tuple, str]]:
    """Bad ids as written in the draft config (not integers, negative, past the target's depth, repeated,
    nested and top-level lists that differ, another count than the aux slots), each naming the config
    file, key and line (:func:`eagle3_conformance.draft_config.config_ids.id_problems`)."""
    from eagle3_conformance.draft_config.config_ids import id_problems

    K = len(c.capture.boundaries) if c.method in ("eagle3", "eagle1", "eagle2") else 0
    probs = id_problems(f, c.target.num_hidden_layers, K, allow_b0="B_0" in c.capture.boundaries)
    return [(("draft", "layer_ids", "values"), m) for _, m in probs]


def _id_problems(c: Any, dr: Any, f: Path) -> list[tuple[tuple, str]]:
    """The draft config's aux layer ids, read by the rule of the tool that reads them, against
    ``capture.boundaries``; and where they sit against ``draft.layer_ids.location``."""
    from eagle3_conformance.engine_ids import SGLANG_KEY, TOP_KEY, layer_id_problems

    found = {"nested": (dr.nested, SGLANG_KEY), "top_level": (dr.top, TOP_KEY)}
    loc = c.draft.layer_ids.location
    if loc != "absent" and found[loc][0] is not None:
        where = loc
    else:
        where = next((w for w in ("nested", "top_level") if found[w][0] is not None), "absent")
    if where != loc:
        has = f"the ids at {found[where][1]}" if where != "absent" else "no aux layer ids"
        return [(("draft", "layer_ids", "location"), f"{loc!r} here, but the draft config {f} has {has}")]
    if where == "absent":
        return []
    ids, key = found[where]
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return []  # not integers: _raw_id_problems names them with their line
    probs = layer_id_problems(c.target.num_hidden_layers, c.capture.boundaries, ids, where,
                              sglang=bool(c.engines.sglang_validated), model_file=c.engines.sglang_model_file,
                              architecture=c.target.architecture)
    return [(("capture", "boundaries"), f"the draft config {f} has {key} = {ids}: {msg}") for _, msg in probs]
