"""Translation rules between canonical boundaries (``B_k``, ``F``) and each tool's layer-id integers.

A contract stores boundaries; every tool's integers are derived from them here, and read back
through the same rules (docs/REFERENCE.md sections 2.1-2.3, 3.2, 5.3, 6). Ids are never compared
raw: each tool's own code decides what an id means wherever that code can be asked.

One module per tool and draft method:

- :mod:`.base`: what they share: :class:`TranslationError`, the config keys, the engines' default
  ids (:func:`engine_default_aux_ids`, written once), the fixed ``boundary`` / ``output_of``
  conventions, :class:`ToolIds`.
- :mod:`.sglang`: SGLang's EAGLE-3 rule, asked of the installed SGLang's own setters.
- :mod:`.vllm`: vLLM (boundary ids, top-level key; the installed vLLM's own readers when pinned).
- :mod:`.speculators`: speculators (boundary ids from 0.5, output-of before).
- :mod:`.specforge`: SpecForge (three output-of ids, its own ``resolve_eagle_capture_layers``).
- :mod:`.dflash`: DFlash ids of every tool (never read with an EAGLE rule). MTP heads read no ids
  (:mod:`eagle3_conformance.contract.families`).
- :mod:`.translate`: :func:`boundaries_to_tool` / :func:`tool_to_boundaries` for any tool.
- :mod:`.static`: :func:`layer_id_problems`, a contract's ids checked without an engine.

Other releases than the installed one are run from their own released code by
:mod:`eagle3_conformance.released` (``upgrade-check``). Importing this package imports no engine.
"""

from eagle3_conformance.engine_ids.base import (
                                                CONVENTIONS,
                                                SGLANG_KEY,
                                                TOOLS,
                                                TOP_KEY,
                                                ToolIds,
                                                TranslationError,
                                                boundaries_to_ids,
                                                engine_default_aux_ids,
                                                ids_to_boundaries,
                                                version_key,
)
from eagle3_conformance.engine_ids.dflash import (
                                                DFLASH_KEY,
                                                DFLASH_TOOLS,
                                                DFlashIds,
                                                dflash_boundaries_to_tool,
                                                dflash_formula,
                                                dflash_tool_to_boundaries,
)
from eagle3_conformance.engine_ids.sglang import SGLangRule, installed_sglang_version, sglang_ids_for, sglang_rule
from eagle3_conformance.engine_ids.specforge import specforge_layer_ids
from eagle3_conformance.engine_ids.static import SGLANG_MODEL_FILES, layer_id_problems
from eagle3_conformance.engine_ids.translate import boundaries_to_tool, check_tool_version, tool_to_boundaries

__all__ = [
    "CONVENTIONS", "DFLASH_KEY", "DFLASH_TOOLS", "DFlashIds", "SGLANG_KEY", "SGLANG_MODEL_FILES", "SGLangRule",
    "TOOLS", "TOP_KEY", "ToolIds", "TranslationError", "boundaries_to_ids", "boundaries_to_tool",
    "check_tool_version", "dflash_boundaries_to_tool", "dflash_formula", "dflash_tool_to_boundaries",
    "engine_default_aux_ids", "ids_to_boundaries", "installed_sglang_version", "layer_id_problems",
    "sglang_ids_for", "sglang_rule", "specforge_layer_ids", "tool_to_boundaries", "version_key",
]
