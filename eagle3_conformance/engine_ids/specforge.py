"""SpecForge's EAGLE-3 id rule: output-of ids (i = ``B_{i+1}``) under the nested ``eagle_config``;
exactly 3 unique non-negative ids (``specforge/algorithms/model_providers.py:188-210``), asked of
the installed SpecForge's own ``resolve_eagle_capture_layers``. Other releases' own code:
:mod:`eagle3_conformance.released.specforge`.
"""

from __future__ import annotations

import re
from importlib import metadata
from types import SimpleNamespace
from typing import Optional, Sequence

from eagle3_conformance.core.notation import Boundary
from eagle3_conformance.engine_ids.base import SGLANG_KEY, ToolIds, TranslationError, read_listed_ids, version_key
from eagle3_conformance.engine_ids.sglang import sglang_rule
from eagle3_conformance.environment.installed import installed_version


def to_tool_ids(bs: list[Boundary], L: int, *, architecture: str, version: Optional[str], verifier,
                allow_embedding: bool) -> ToolIds:
    """SpecForge: exactly 3 output-of ids under the nested key."""
    names = [str(b) for b in bs]
    if len(bs) != 3:
        raise TranslationError(f"SpecForge requires exactly 3 ids (resolve_eagle_capture_layers, "
                               f"specforge/algorithms/model_providers.py:188-210); the contract has {len(bs)}")
    if any(b.index == 0 for b in bs):
        raise TranslationError("B_0 cannot be expressed in SpecForge's output-of ids (it would be -1)")
    ids = [b.index - 1 for b in bs]
    notes = ["SpecForge's offline hidden_state (the training target) is F, post-norm (REFERENCE.md 6)",
             "the HF backend concatenates in list order; keep the ids ascending"]
    try:
        rule = sglang_rule(architecture, None)
        got = rule.boundaries(L, ids)
        if got != bs:
            notes.append(f"with SpecForge's SGLang backend on sglang {rule.version} these ids capture "
                         f"{[str(b) for b in got]}, not {names} ({rule.model_file}.py rule)")
    except TranslationError as e:
        notes.append(f"SGLang backend: {e}")
    specforge_layer_ids(ids, L)  # SpecForge's own resolver accepts them (raises its words if not)
    notes.append("SpecForge 0.2.0's trainer pairs (h_t, x_t+1, F_t+1, l_t): TargetHead.preprocess shifts input_ids "
                 "and target but not loss_mask (sgl-project/SpecForge#885); state it in alignment (loss_mask: 0 "
                 "with loss_mask_reason)")
    return ToolIds("specforge", f"specforge=={version or '0.2.0'} (resolve_eagle_capture_layers, specforge/algorithms/"
                   "model_providers.py:188-211; REFERENCE.md 6)", ids,
                   f"draft config.json: {SGLANG_KEY}", "output_of", notes=notes)


def specforge_layer_ids(ids: Optional[Sequence[int]], num_layers: int) -> list[int]:
    """The ids SpecForge resolves for a draft config holding ``ids`` in its nested
    ``eagle_config`` (None: no key), asked of the installed SpecForge's own
    ``resolve_eagle_capture_layers`` (specforge 0.2.0 algorithms/model_providers.py:188-211: the run
    override, else the nested key, else ``[1, L//2-1, L-4]``; exactly three non-negative ints).
    Without SpecForge installed, that release's rule as read from the same lines.

    Raises:
        TranslationError: SpecForge refuses the ids (its ValueError's words).
    """
    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": list(ids)}} if ids is not None else {}
    try:
        from specforge.algorithms.model_providers import resolve_eagle_capture_layers
    except ImportError:
        got = list(ids) if ids is not None else [1, num_layers // 2 - 1, num_layers - 4]
        if len(got) != 3 or any(not isinstance(i, int) or i < 0 for i in got):
            raise TranslationError(f"specforge: exactly 3 non-negative ids required, got {got}") from None
        return got
    try:
        return resolve_eagle_capture_layers(SimpleNamespace(model=SimpleNamespace(aux_hidden_state_layer_ids=None)),
                                            cfg, SimpleNamespace(num_hidden_layers=num_layers))
    except ValueError as e:
        raise TranslationError(f"specforge (resolve_eagle_capture_layers): {e}") from None


def to_boundaries(ids: Optional[Sequence[int]], L: int, *, architecture: str, version: Optional[str],
                  allow_embedding: bool) -> list[Boundary]:
    """What SpecForge trains on for nested ``ids`` (None: its fallback), resolved by
    :func:`specforge_layer_ids`."""
    got = specforge_layer_ids(ids, L)
    pin = pinned_sglang(version)
    if pin:  # its data is captured by that SGLang release's setter: what it drops is not in the data
        try:
            rule = sglang_rule(architecture, pin)
        except TranslationError:
            rule = None  # no SGLang here to ask: the resolver's reading stands (as before)
        if rule is not None:
            try:
                rule.boundaries(L, got, allow_embedding=allow_embedding)
            except TranslationError as e:
                raise TranslationError(f"specforge {version or installed_version('specforge')} captures through sglang {pin}: {e}") \
                    from None
    return read_listed_ids("specforge", got, L, output_of=True, exactly=3, allow_embedding=allow_embedding)


def pinned_sglang(version: Optional[str]) -> Optional[str]:
    """The SGLang release SpecForge ``version`` (None: the installed one) captures with: the
    ``Requires-Dist: sglang==V`` of the installed SpecForge's own metadata, when that is the
    release asked about; else None (not known here)."""
    have = installed_version("specforge")
    if have is None or (version is not None and version_key(version) != version_key(have)):
        return None
    for req in metadata.requires("specforge") or []:
        m = re.match(r"sglang\s*==\s*([0-9][^\s;,]*)\s*(;|$)", req)
        if m:
            return m.group(1)
    return None
