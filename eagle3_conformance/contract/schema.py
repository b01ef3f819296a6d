"""The contract JSON Schema, generated from the pydantic models (the single source of truth)."""

from __future__ import annotations

from typing import Any

from eagle3_conformance.contract.models import Contract
from eagle3_conformance.environment import shipped

SCHEMA_PATH = shipped.SCHEMA_PATH
"""The contract JSON Schema file: ``contracts/schema/contract.schema.json`` in a checkout, its copy in the wheel."""


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a contract file, generated from the pydantic models (the single source
    of truth). Checked in at ``contracts/schema/contract.schema.json``; a test fails on drift."""
    schema = Contract.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://github.com/eagle3-conformance/contracts/schema/contract.schema.json"
    return schema


def schema_text() -> str:
    import json

    return json.dumps(json_schema(), indent=2, sort_keys=False) + "\n"
