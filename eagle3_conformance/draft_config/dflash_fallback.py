"""A DFlash draft without explicit tap ids, and a local DFlash draft config against its contract
(issue 37, R58; ``validate``).

R58 (z-lab/dflash#157, sgl-project/sglang#37475, #37476): with no ``target_layer_ids`` a DFlash reader
derives the taps from a formula: ``[1, 16, 31, 46, 61]`` instead of the trained ``[5, 19, 33, 47, 61]``;
the draft loads cleanly and acceptance collapses. Here each tool's fallback is asked of that tool's
own code (:func:`eagle3_conformance.engine_ids.dflash.dflash_formula`: SGLang's
``build_target_layer_ids``, ``dflash_utils.py:348-385``, via its ``resolve_target_layer_ids``;
SpecForge's ``build_target_layer_ids``), and ``validate`` names, per engine, what it would resolve to.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.engine_ids.base import TranslationError


def fallback_words(L: int, num_draft_layers: int, declared: Optional[list[str]] = None) -> str:
    """One clause per DFlash reader: what it taps when ``target_layer_ids`` is missing, asked of its
    code (``"sglang 0.5.23: build_target_layer_ids(L=8, 3) = [1, 3, 5] -> B_2, B_4, B_6"``); readers whose
    code is not installed or has no fallback say so."""
    from eagle3_conformance.engine_ids.dflash import DFLASH_TOOLS, dflash_formula

    parts = []
    for tool in DFLASH_TOOLS:
        try:
            ids = dflash_formula(tool, L, num_draft_layers)
        except TranslationError as e:
            parts.append(str(e) if str(e).startswith(tool) else f"{tool}: {e}")
            continue
        except Exception as e:  # the tool cannot be imported here
            parts.append(f"{tool}: not asked ({type(e).__name__}: {' '.join(str(e).split())[:120]})")
            continue
        taps = [f"B_{i + 1}" for i in ids]
        same = "" if declared is None else (" = the declared taps" if taps == list(declared) else
                                            f", not the declared {declared}")
        parts.append(f"{tool}: build_target_layer_ids(L={L}, num_draft_layers={num_draft_layers}) = {list(ids)} "
                     f"-> taps {', '.join(taps)}{same}")
    try:  # the z-lab reference code, when its package is installed (engine_ids/zlab.py)
        from eagle3_conformance.engine_ids.zlab import zlab_formula

        ids = zlab_formula(L, num_draft_layers)
        taps = [f"B_{i + 1}" for i in ids]
        same = "" if declared is None else (" = the declared taps" if taps == list(declared) else
                                            f", not the declared {declared}")
        parts.append(f"zlab: build_target_layer_ids(L={L}, num_draft_layers={num_draft_layers}) = {ids} -> taps "
                     f"{', '.join(taps)}{same}")
    except TranslationError as e:
        parts.append(str(e).split(" (pip")[0])
    return "; ".join(parts)


def dflash_config_problems(c: Any, d_dir: Optional[Path]) -> list[tuple[tuple, str]]:
    """Problems of a DFlash contract ``c`` that need a tool's code or its local draft config: the
    fallbacks each engine would use when the contract says the ids are absent (R58); the local draft
    config (``d_dir/config.json``) without ids, with ids that differ from the contract's, or with bad
    ids (:func:`eagle3_conformance.draft_config.config_ids.id_problems`). ``(contract key path, message)`` pairs."""
    d = c.dflash
    if c.method != "dflash" or d is None:
        return []
    n = max(1, int(getattr(d, "num_draft_layers", None) or len(c.capture.boundaries) or 1))
    declared = [str(b) for b in c.capture.boundaries]
    want = [b.index - 1 for b in c.aux if not b.final]
    out: list[tuple[tuple, str]] = []
    if d.location == "absent":
        out.append((("dflash", "location"),
                    f"R58: with no target_layer_ids every reader falls back to its formula and loads cleanly: "
                    f"{fallback_words(c.L, n, declared)}; write dflash_config.target_layer_ids: {want} (the taps "
                    f"{declared} as output-of ids)"))
    if d_dir is None:
        return out
    f = d_dir / "config.json"
    try:
        text = f.read_text()
        cfg = json.loads(text)
    except (OSError, ValueError):
        return out
    from eagle3_conformance.draft_config.config_ids import DFLASH, id_problems, key_lines, raw_ids

    ids = raw_ids(cfg).get(DFLASH, cfg.get("target_layer_ids") if isinstance(cfg, dict) else None)
    if ids is None:
        out.append((("dflash", "target_layer_ids"),
                    f"the draft config {f} has no dflash_config.target_layer_ids: {fallback_words(c.L, n, declared)}; "
                    f"write dflash_config.target_layer_ids: {want} there (R58: SGLang and z-lab now require it)"))
        return out
    out += [(("dflash", "target_layer_ids"), m) for _, m in id_problems(f, c.L, 0, text=text)]
    if d.target_layer_ids is not None and list(ids) != list(d.target_layer_ids):
        line = key_lines(text).get(DFLASH, "?")
        out.append((("dflash", "target_layer_ids"),
                    f"{list(d.target_layer_ids)} here, but the draft config {f}:{line} has dflash_config."
                    f"target_layer_ids = {ids}"))
    return out


def absent_ids_note(contract_file: str | Path, problems: list) -> Optional[str]:
    """For ``validate``: when a DFlash contract was refused for ``dflash.location: absent`` (a contract
    problem found before any tool is asked), the line naming what each engine's fallback resolves to
    (R58), read from the contract file's own target depth, draft depth and taps; None otherwise."""
    if not any(tuple(getattr(p, "loc", ())) == ("dflash", "location") for p in problems):
        return None
    import yaml

    try:
        doc = yaml.safe_load(Path(contract_file).read_text())
        L = int(doc["target"]["num_hidden_layers"])
        d = doc.get("dflash") or {}
        declared = list((doc.get("capture") or {}).get("boundaries") or []) or None
        n = int(d.get("num_draft_layers") or len(declared or []) or 1)
    except Exception:  # a contract too broken to read: its other problems are already printed
        return None
    want = ""
    if declared and all(str(b).startswith("B_") for b in declared):
        want = f"; write dflash_config.target_layer_ids: {[int(str(b)[2:]) - 1 for b in declared]}"
    return f"R58, each engine's fallback without ids (asked of its code): {fallback_words(L, n, declared)}{want}"
