"""The contract: pydantic models, YAML loading with line numbers, semantic validation, the
draft-method rules.

- :mod:`.sections`: the sections' models (target, draft, capture, verifier, ... engines);
- :mod:`.models`: the root :class:`Contract` and the method, vocab, tokenizer, dtype and position sections;
- :mod:`.loading`: :func:`load_contract` / :func:`parse_contract`, every problem at its YAML line
  (:class:`ContractError`);
- :mod:`.validation`: :func:`semantic_problems`, :func:`fixture_problems`, :func:`target_mismatches`;
- :mod:`.families`: the DFlash and MTP / NextN rules (:func:`method_problems`);
- :mod:`.schema`: the JSON Schema generated from the models;
- :mod:`.deprecations`: the deprecated keys a committed contract may still hold, and their warning.

Every name is importable from ``eagle3_conformance.contract`` as before the split.
"""

from eagle3_conformance.contract.deprecations import (
    DEPRECATED_KEYS,
    ContractDeprecationWarning,
    DeprecatedKey,
    deprecated_in,
)
from eagle3_conformance.contract.families import method_problems
from eagle3_conformance.contract.loading import (
    MAX_CONTRACT_BYTES,
    MAX_NESTING,
    Check,
    ContractError,
    Problem,
    contract_source,
    load_contract,
    parse_contract,
)
from eagle3_conformance.contract.models import (
    Contract,
    DFlashSpec,
    GoldenConversation,
    Method,
    MTPSpec,
    Positions,
    TensorDtypes,
    TokenizerSpec,
    VocabMapping,
)
from eagle3_conformance.contract.schema import (
    SCHEMA_PATH,
    json_schema,
    schema_text,
)
from eagle3_conformance.contract.sections import (
    SCHEMA_VERSION,
    Alignment,
    Capture,
    Draft,
    DTypeName,
    Engines,
    Gates,
    LayerIds,
    NormBand,
    NormBands,
    Precision,
    Target,
    Training,
    ValidatedOn,
    VerifierLast,
    VLLMServing,
)
from eagle3_conformance.contract.validation import (
    TARGET_KEYS,
    fixture_problems,
    pipeline_refusal,
    semantic_problems,
    target_mismatches,
)

__all__ = [
    "Alignment", "Capture", "Check", "Contract", "ContractDeprecationWarning", "contract_source", "ContractError",
    "DEPRECATED_KEYS", "DeprecatedKey", "deprecated_in", "DFlashSpec", "Draft",
    "DTypeName", "Engines", "fixture_problems", "Gates", "GoldenConversation", "json_schema", "LayerIds",
    "load_contract", "MAX_CONTRACT_BYTES", "MAX_NESTING", "Method", "method_problems", "MTPSpec", "NormBand",
    "NormBands", "parse_contract", "pipeline_refusal", "Positions", "Precision", "Problem", "SCHEMA_PATH", "schema_text",
    "SCHEMA_VERSION", "semantic_problems", "Target", "TARGET_KEYS", "target_mismatches", "TensorDtypes",
    "TokenizerSpec", "Training", "ValidatedOn", "VerifierLast", "VLLMServing", "VocabMapping",
]
