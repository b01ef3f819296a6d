"""Contract validation without an engine: whether ``draft.layer_ids`` can give
``capture.boundaries`` under the rule of the tool that reads them (used by
:func:`eagle3_conformance.contract.semantic_problems`; no engine is imported).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from eagle3_conformance.core.notation import Boundary
from eagle3_conformance.engine_ids.sglang import PLUS_ONE_FILES

#: SGLang model files whose capture also reaches B_L (they capture at the final norm; see
#: :mod:`eagle3_conformance.engine_ids.sglang`); everywhere else an SGLang capture stops at B_{L-1}
_FINAL_CAPTURE_FILES = {"gpt_oss", "minimax_m3", "laguna", "nemotron_h"}

#: target architecture -> SGLang model file, for contracts that declare SGLang but not its file
#: (SGLang's ModelRegistry, 0.5.23; only used where asking SGLang itself is not wanted)
SGLANG_MODEL_FILES = {
    "LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
    "Qwen2MoeForCausalLM": "qwen2_moe", "Qwen3MoeForCausalLM": "qwen3_moe", "Glm4MoeForCausalLM": "glm4_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v2",
    "KimiK25ForConditionalGeneration": "deepseek_v2", "GptOssForCausalLM": "gpt_oss",
    "MiniMaxM2ForCausalLM": "minimax_m2",
}

_PLUS = ("output-of (id i captures B_{i+1})", lambda ids: [i + 1 for i in ids])
_RAW = ("boundary (id i captures B_i)", lambda ids: list(ids))


def _static_rules(location: str, model_file: Optional[str]) -> list[tuple[str, Callable[[list[int]], list[int]], int]]:
    """The id rules that can read ``draft.layer_ids`` without asking an engine: ``(name, ids ->
    boundary indices, deepest index it captures relative to L: 0 = B_L, -1 = B_{L-1})``. One rule
    when the reader is known (SGLang with a model file), two when the ids may be read either way
    (any one of them must then give the declared boundaries), none when the values are ignored."""
    if model_file is None:
        return [(_PLUS[0], _PLUS[1], 0), (_RAW[0], _RAW[1], 0)]
    if location == "top_level":
        return []  # SGLang ignores a top-level key: its defaults apply, whatever the values (K1)
    last = 0 if model_file in _FINAL_CAPTURE_FILES else -1
    if model_file in PLUS_ONE_FILES:
        return [(f"sglang {model_file}.py (id i captures B_{{i+1}})", _PLUS[1], last)]
    if model_file == "deepseek_v2":  # the rule changed at 0.5.13 (REFERENCE.md 3.2): either release's reading
        return [("sglang deepseek_v2.py >= 0.5.13 (+1 only when the first id is 1)",
                 lambda ids: [i + 1 for i in ids] if ids and ids[0] == 1 else list(ids), -1),
                ("sglang deepseek_v2.py 0.5.5-0.5.12 (id i captures B_{i+1})", _PLUS[1], -1)]
    # gpt_oss.py and files without a recorded rule: either convention
    return [(_PLUS[0], _PLUS[1], last), (_RAW[0], _RAW[1], last)]


def layer_id_problems(num_layers: int, boundaries: Sequence[str], values: Optional[Sequence[int]],
                      location: str, *, sglang: bool = False, model_file: Optional[str] = None,
                      architecture: Optional[str] = None) -> list[tuple[tuple, str]]:
    """Why a contract's ``draft.layer_ids.values`` cannot give its ``capture.boundaries`` under
    the rule of the tool that reads them, found without an engine. Returns ``(key path under
    draft.layer_ids, message)`` pairs; empty when consistent.

    The reader: SGLang when the contract declares it (``sglang``: validated versions listed, or
    ``model_file`` given), with the rule of its model file (``model_file``, else looked up from
    ``architecture`` in :data:`SGLANG_MODEL_FILES`); otherwise either id convention may apply
    (output-of or boundary) and one of them must give the boundaries.

    Checked: negative ids (no tool reads one as a layer; -1 reaches the embedding under a +1
    rule); ids that read past the target's depth under the rule (B_{L+1}, or B_L in an SGLang
    model file whose capture stops before the final norm: fault-kinds.md K3); ids whose reading is not
    the declared boundaries (the message gives the ids that are). The id count and ids beyond L
    are :func:`eagle3_conformance.contract.semantic_problems`' own checks.

    Args:
        num_layers: L.
        boundaries: ``capture.boundaries``, e.g. ``["B_2", "B_4", "B_5"]``.
        values: the ids as written (None: absent).
        location: ``"nested"``, ``"top_level"`` or ``"absent"``.
    """
    out: list[tuple[tuple, str]] = []
    if values is None or location == "absent":
        return out
    ids = [int(v) for v in values]
    L = num_layers
    for i, v in enumerate(ids):
        if v < 0:
            out.append((("values", i), f"layer id {v} is negative: no tool reads it as a layer, and under a +1 "
                                       "rule -1 reaches B_0, the embedding (fault-kinds.md K2)"))
    try:
        want = [Boundary.parse(b).index for b in boundaries]
    except ValueError:
        return out
    if len(ids) != len(want) or any(v < 0 or v > L for v in ids):
        return out  # reported above or by semantic_problems
    if sglang or model_file:
        model_file = model_file or SGLANG_MODEL_FILES.get(architecture or "")
    else:
        model_file = None
    rules = _static_rules(location, model_file)
    if len(rules) == 1:
        name, rule, last = rules[0]
        got = rule(ids)
        past = [(i, v, g) for i, (v, g) in enumerate(zip(ids, got)) if g > L + last]
        for i, v, g in past:
            why = (f"B_{g} is beyond the target's L = {L}" if g > L else
                   f"{model_file}.py never captures B_{L}: its capture loop stops before the final norm "
                   "(fault-kinds.md K3)")
            out.append((("values", i), f"layer id {v} reads as B_{g} under {name}: {why}"))
        if not past and got != want:
            fix = next((cand for cand in ([b - 1 for b in want], list(want)) if min(cand) >= 0 and rule(cand) == want),
                       None)
            out.append((("values",), f"ids {ids} capture {[f'B_{g}' for g in got]} under {name}; capture.boundaries "
                                     f"says {[f'B_{b}' for b in want]}" + (f": write {fix}" if fix else "")
                        + " (fault-kinds.md K2)"))
        return out
    if rules and not any(rule(ids) == want for _, rule, _ in rules):
        both = "; ".join(f"as {name}: {[f'B_{g}' for g in rule(ids)]}" for name, rule, _ in rules)
        out.append((("values",), f"ids {ids} cannot give capture.boundaries {[f'B_{b}' for b in want]} under any "
                                 f"reading ({both}) (fault-kinds.md K2)"))
    return out

