"""Which row of a DFlash draft block predicts (R91), as each tool reads it from a draft's ``config.json``.

A DFlash draft block is ``[anchor, mask, mask, ...]``: the anchor is the last verified token. Two
layouts are trained (sgl-project/sglang-jax#1619, vllm-project/speculators#760, sgl-project/sglang#40203):

- **row 1 first** (``sample_from_anchor: false``): row 0 predicts nothing, row k predicts the token at
  anchor + k; the first draft comes from row 1 (z-lab DFlash, SpecForge's and speculators' DFlash
  defaults);
- **anchor first** (``sample_from_anchor: true``): row 0 predicts the token after the anchor (DeepSpec /
  DSpark). DeepSeek's ``dflash_qwen3_8b_block7`` declares no key at all (sglang-jax#1619): a reader that
  assumes row 1 serves every draft one position off, silently (acceptance ~1.06 instead of ~2.76 in
  sglang#40203).

What the installed tools read (their code; ``tests/test_field_2026b.py`` keeps the cited lines equal to
the installed files):

==============  ===========================================================================================
SGLang 0.5.23   DFlash worker: rows ``1:`` of every block (``speculative/dflash_worker_v2.py:183`` "draft tokens
                are block positions 1:", ``:301`` "pos 0 = anchor"), for every DFlash checkpoint: no key read.
                Domino projectors: ``dflash_config.shift_label`` (``speculative/domino_utils.py:350``
                ``start = 0 if shift_label else 1``). DSpark: ``sample_from_anchor``, default true
                (``speculative/dspark_components/dspark_config.py:29-31``).
speculators     ``DFlashConfig.sample_from_anchor``, default false (``models/dflash/config.py:73``);
0.9.0           ``DSparkConfig``: default true (``models/dspark/config.py:28``); its DFlash model warns that
                true "may not be supported in all inference engines (e.g., vLLM)" (``models/dflash/core.py:138-143``).
SpecForge       DFlash labels: row k predicts anchor + k, row 0 excluded from the loss
0.2.0           (``algorithms/common/dflash_family_model.py:406-425``); ``dflash_config.shift_label``, default
                false, for Domino (``modeling/draft/dflash.py:374``).
==============  ===========================================================================================

Not installed here, stated from their threads: sglang-jax's ``--speculative-sample-from-anchor`` (default
false, #1619); SGLang's ``query_zero_predicts_next`` / ``sample_from_anchor`` reading for DFlash
(sglang#40203, open, not in 0.5.23).
"""

from __future__ import annotations

from typing import Any, Optional

KEYS = ("sample_from_anchor", "shift_label", "query_zero_predicts_next")
"""Keys that say which row predicts; every one means "the anchor row predicts" when true."""

SOURCES = {
    "sglang": ("sglang/srt/speculative/dflash_worker_v2.py", (183, 301)),
    "sglang-domino": ("sglang/srt/speculative/domino_utils.py", (350,)),
    "sglang-dspark": ("sglang/srt/speculative/dspark_components/dspark_config.py", (31,)),
    "speculators": ("speculators/models/dflash/config.py", (73,)),
    "speculators-dspark": ("speculators/models/dspark/config.py", (28,)),
    "specforge": ("specforge/algorithms/common/dflash_family_model.py", (406, 425)),
    "specforge-shift": ("specforge/modeling/draft/dflash.py", (374,)),
}
"""Installed file and line(s) behind each reading (a test compares them with the installed code)."""

CONVENTIONS = (
    "SGLang 0.5.23 samples every DFlash block from row 1 and reads no key (dflash_worker_v2.py:183, 301; "
    "only Domino reads dflash_config.shift_label and DSpark sample_from_anchor, default true)",
    "speculators 0.9.0 trains DFlash with sample_from_anchor default false (models/dflash/config.py:73) and "
    "DSpark with default true (models/dspark/config.py:28)",
    "SpecForge 0.2.0 trains DFlash labels anchor + k with row 0 excluded, i.e. from row 1 "
    "(dflash_family_model.py:406-425); shift_label (default false) only for Domino",
    "sglang-jax serves row 1 unless --speculative-sample-from-anchor (sgl-project/sglang-jax#1619, not installed)",
    "vLLM: speculators warns that sample_from_anchor true may not be supported (models/dflash/core.py:138-143)",
)
"""Which convention each engine and trainer assumes when a draft config says nothing."""


class BlockKeyConflict(ValueError):
    """Two keys of :data:`KEYS` in one config that say different rows."""


def declared_block_alignment(cfg: dict[str, Any]) -> Optional[tuple[bool, str]]:
    """``(anchor row predicts, "dflash_config.<key>" | "<key>")`` from the first key of :data:`KEYS`
    found nested under ``dflash_config`` or at the top level of a draft config; None: no key says.

    Raises:
        BlockKeyConflict: two keys (or one key in both places) that disagree, or a key whose value is
            not a boolean.
    """
    raw = cfg.get("dflash_config")
    nested: dict[str, Any] = raw if isinstance(raw, dict) else {}
    found: list[tuple[bool, str]] = []
    places: tuple[tuple[str, dict[str, Any]], ...] = (("dflash_config.", nested), ("", cfg))
    for where, d in places:
        for k in KEYS:
            if k in d:
                v = d[k]
                if not isinstance(v, bool):
                    raise BlockKeyConflict(f"{where}{k} = {v!r}: not a boolean")
                found.append((v, f"{where}{k}"))
    if len({v for v, _ in found}) > 1:
        raise BlockKeyConflict("keys disagree on which row predicts: "
                               + ", ".join(f"{k} = {str(v).lower()}" for v, k in found))
    return found[0] if found else None


def refusal(cfg_name: str) -> str:
    """Why ``init`` will not guess the block alignment of a DFlash draft config that states none."""
    return (f"{cfg_name}: no key says which row of a DFlash block predicts ({', '.join(KEYS)}; R91): "
            "DeepSpec checkpoints predict from the anchor row with no key, z-lab/SpecForge ones from row 1. "
            "Each tool assumes its own: " + "; ".join(CONVENTIONS) + ". Write dflash_config.sample_from_anchor: "
            "false (trained from row 1) or true (trained from the anchor row) into the draft's config.json, or "
            "pass init --dflash-sample-from-anchor true|false")


def serving_problem(sample_from_anchor: Optional[bool], engine: str) -> Optional[str]:
    """Why ``engine`` serves a draft of this block alignment one row off, or None (also when unknown).
    Only SGLang's rule is installed here (its plain DFlash worker samples row 1 and reads no key)."""
    if sample_from_anchor is True and engine == "sglang":
        return ("the draft predicts from the anchor row (sample_from_anchor: true) but SGLang 0.5.23's DFlash "
                "worker samples every block from row 1 and reads no key (dflash_worker_v2.py:183, 301): every "
                "draft served one position off (R91; sglang-jax#1619, sglang#40203)")
    return None
