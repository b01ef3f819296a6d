"""The contract: pydantic models, YAML loading with line numbers, semantic validation, the
draft-method rules.

- :mod:`.sections`: the sections' models (target, draft, capture, verifier, ... engines);
- :mod:`.models`: the root :class:`Contract` and the method, vocab, tokenizer, dtype and position sections;
- :mod:`.loading`: :func:`load_contract` / :func:`parse_contract`, every problem at its YAML line
  (:class:`ContractError`);
- :mod:`.validation`: :func:`semantic_problems`, :func:`fixture_problems`, :func:`target_mismatches`;
- :mod:`.families`: the DFlash and MTP / NextN rules (:func:`method_problems`);
- :mod:`.schema`: the JSON Schema generated from the models.

Every name is importable from ``eagle3_conformance.contract`` as before the split.
"""

from eagle3_conformance.contract.families import method_problems  # noqa: F401
from eagle3_conformance.contract.loading import (  # noqa: F401
    MAX_CONTRACT_BYTES,
    MAX_NESTING,
    Check,
    ContractError,
    Problem,
    contract_source,
    load_contract,
    parse_contract,
)
from eagle3_conformance.contract.models import (  # noqa: F401
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
from eagle3_conformance.contract.schema import (  # noqa: F401
    SCHEMA_PATH,
    json_schema,
    schema_text,
)
from eagle3_conformance.contract.sections import (  # noqa: F401
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
from eagle3_conformance.contract.validation import (  # noqa: F401
    TARGET_KEYS,
    fixture_problems,
    semantic_problems,
    target_mismatches,
)
