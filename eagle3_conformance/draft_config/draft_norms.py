"""Eagle3.1 draft-side norms: how each tool reads ``norm_before_fc``, ``fc_norm`` (``use_aux_norm``) and
``norm_output`` from a draft config, and what a config that tools read differently costs (issue 37:
R53 ``norm_before_fc`` / ``input_norm`` ignored, accept length 1.1; R70 ``fc_norm`` weights loaded, never
applied; R71 ``norm_output`` meaning neither; R72 a speculators Eagle3.1 config vLLM fails to load).

The readings, as the installed code does them (each line is checked against the installed source by
``tests/test_field_2026.py::test_draft_norm_readings_are_the_installed_code``):

* SGLang 0.5.23 ``srt/models/llama_eagle3.py``: ``norm_before_fc`` from ``eagle_config`` first, then the
  top level (:173-175; module ``input_norm``); ``fc_norm`` or the legacy ``use_aux_norm`` at the top level
  only (:185-187); ``norm_output`` at the top level, default false (:207): true feeds the post-norm state
  back to the next draft step instead of the pre-norm one (:267-268).
* speculators 0.9.0 ``models/eagle3/config.py``: top-level ``norm_before_fc``, ``fc_norm``, ``norm_output``
  (default false, "feed post-norm hidden states back across TTT steps"); ``norm_before_fc`` with ``fc_norm``
  is refused ("mutually exclusive").
* SpecForge 0.2.0 ``specforge/modeling/draft/llama3_eagle.py``: ``fc_norm`` at the top level (:1679); no
  ``norm_before_fc`` at all; ``norm_output`` default **true** (:1690), meaning "RMSNorm before the LM head"
  (:1773-1776), not the state fed back.

Pure: reads a config dict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

#: (tool, file, line, the text that line holds) for each reading above, checked against the installed code
SOURCES = (
    ("sglang", "sglang/srt/models/llama_eagle3.py", 174, 'eagle_config.get("norm_before_fc", getattr(config, "norm_before_fc", False))'),
    ("sglang", "sglang/srt/models/llama_eagle3.py", 185, 'use_fc_norm = getattr(config, "fc_norm", None) or getattr('),
    ("sglang", "sglang/srt/models/llama_eagle3.py", 207, 'self.norm_output = getattr(config, "norm_output", False)'),
    ("sglang", "sglang/srt/models/llama_eagle3.py", 268, "aux = hidden_states_to_logits if self.norm_output else hidden_states_to_aux"),
    ("specforge", "specforge/modeling/draft/llama3_eagle.py", 1679, 'if getattr(config, "fc_norm", False):'),
    ("specforge", "specforge/modeling/draft/llama3_eagle.py", 1690, 'self.norm_output = getattr(config, "norm_output", True)'),
)


def readings(cfg: dict) -> dict[str, dict[str, Any]]:
    """tool -> {"pre_fc_norm": none|norm_before_fc|fc_norm|both|refused, "norm_output": bool,
    "norm_output_meaning": str} for the draft config ``cfg`` as each tool reads it."""
    raw = cfg.get("eagle_config")
    eagle: dict[str, Any] = raw if isinstance(raw, dict) else {}
    top_nbf, nested_nbf = bool(cfg.get("norm_before_fc")), bool(eagle.get("norm_before_fc", cfg.get("norm_before_fc")))
    fcn = bool(cfg.get("fc_norm") or cfg.get("use_aux_norm"))

    def pre(nbf: bool, fc: bool, refuse_both: bool) -> str:
        if nbf and fc:
            return "refused" if refuse_both else "both"
        return "norm_before_fc" if nbf else "fc_norm" if fc else "none"

    fed_back = "the state fed back to the next draft step is post-norm"
    return {
        "sglang": {"pre_fc_norm": pre(nested_nbf, fcn, False), "norm_output": bool(cfg.get("norm_output", False)),
                   "norm_output_meaning": fed_back},
        "speculators": {"pre_fc_norm": pre(top_nbf, bool(cfg.get("fc_norm")), True),
                        "norm_output": bool(cfg.get("norm_output", False)), "norm_output_meaning": fed_back},
        "specforge": {"pre_fc_norm": "fc_norm" if cfg.get("fc_norm") else "none",
                      "norm_output": bool(cfg.get("norm_output", True)),
                      "norm_output_meaning": "an RMSNorm is applied before the LM head"},
    }


def norm_problems(c: Any, cfg: dict, f: Path) -> list[tuple[tuple, str]]:
    """The contract's ``draft.pre_fc_norm`` / ``draft.norm_output`` against the draft config ``cfg``
    (file ``f``) as each tool reads it: ``(contract key path, message)`` pairs. Refused: a pre-fc norm the
    serving engine (SGLang) reads otherwise than the contract states; ``norm_before_fc`` with ``fc_norm``
    (speculators refuses it, SGLang applies both); a ``norm_before_fc`` only under ``eagle_config`` (SGLang
    applies it, speculators and SpecForge train without it: R53); a stated ``norm_output`` the config
    contradicts."""
    r = readings(cfg)
    out: list[tuple[tuple, str]] = []
    want = c.draft.pre_fc_norm
    got = r["sglang"]["pre_fc_norm"]
    if got != want:
        out.append((("draft", "pre_fc_norm"),
                    f"{want!r} here, but SGLang 0.5.23 reads {f} as {got!r} (llama_eagle3.py:173-187: norm_before_fc "
                    "from eagle_config then the top level; fc_norm / use_aux_norm at the top level only)"))
    if r["speculators"]["pre_fc_norm"] == "refused" or r["sglang"]["pre_fc_norm"] == "both":
        out.append((("draft", "pre_fc_norm"),
                    f"{f} sets norm_before_fc and fc_norm: speculators 0.9.0 refuses the pair (mutually exclusive), "
                    "SGLang 0.5.23 applies both (input_norm, then the per-slot fc_norm): keep the one the draft was "
                    "trained with"))
    raw = cfg.get("eagle_config")
    eagle: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if eagle.get("norm_before_fc") and not cfg.get("norm_before_fc"):
        out.append((("draft", "pre_fc_norm"),
                    f"{f} sets norm_before_fc only under eagle_config: SGLang applies it there, but speculators 0.9.0 "
                    "and SpecForge 0.2.0 read the top level (SpecForge has no norm_before_fc at all): a draft trained "
                    "by them ran without it (R53: ignored, accept length 1.1); write it at the top level too"))
    stated: Optional[bool] = getattr(c.draft, "norm_output", None)
    if stated is not None and "norm_output" in cfg and bool(cfg["norm_output"]) != stated:
        out.append((("draft", "norm_output"), f"{stated} here, but {f} has norm_output = {cfg['norm_output']}"))
    return out


def norm_notes(cfg: dict) -> list[str]:
    """Lines for ``init``: where the tools read this config's norms differently (no refusal)."""
    r = readings(cfg)
    out = []
    if "norm_output" not in cfg:
        out.append("norm_output is not in the draft config: SGLang 0.5.23 and speculators 0.9.0 default it to false "
                   "(the pre-norm state is fed back), SpecForge 0.2.0 to true with another meaning (an RMSNorm before "
                   "the LM head, llama3_eagle.py:1690, 1773-1776): state it (R71)")
    if r["specforge"]["pre_fc_norm"] != r["sglang"]["pre_fc_norm"]:
        out.append(f"pre-fc norm: SGLang applies {r['sglang']['pre_fc_norm']}, SpecForge 0.2.0 "
                   f"{r['specforge']['pre_fc_norm']} (it has no norm_before_fc)")
    return out
