"""The contract model: loading, line-numbered errors, semantic validation, the checked-in schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from conformance.contract import SCHEMA_PATH, ContractError, json_schema, load_contract, parse_contract
from conformance.notation import Boundary, boundaries_to_ids, ids_to_boundaries

REPO = Path(__file__).resolve().parent.parent
TINY = (REPO / "contracts" / "tiny-llama.yaml").read_text()


def _errors(text: str) -> list:
    with pytest.raises(ContractError) as e:
        parse_contract(text, "c.yaml")
    return e.value.problems


def test_schema_checked_in_matches_models():
    """Fails when the models change and contracts/schema/contract.schema.json is not regenerated
    (`conformance schema --write`)."""
    assert json.loads(SCHEMA_PATH.read_text()) == json_schema()


@pytest.mark.parametrize("path", sorted((REPO / "contracts").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_contracts_validate_and_point_editors_at_the_schema(path):
    c = load_contract(path)
    first = path.read_text().splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema=")
    schema_ref = first.split("$schema=")[1].strip()
    assert (path.parent / schema_ref).resolve() == SCHEMA_PATH.resolve()
    jsonschema.validate(yaml.safe_load(path.read_text()), json_schema())
    assert c.capture.feature_width == c.num_slots * c.draft.target_hidden_size


def test_malformed_yaml_gives_line_and_column():
    probs = _errors(TINY.replace("  hidden_size: 64\n  vocab_size", "  hidden_size: [64\n  vocab_size", 1))
    assert len(probs) == 1 and probs[0].line is not None and probs[0].column is not None
    assert "malformed YAML" in probs[0].message


def test_unknown_keys_and_type_errors_all_listed_with_lines():
    text = TINY.replace("  final_norm: rmsnorm", "  final_norm: rmsnorm\n  colour: blue").replace(
        "  num_hidden_layers: 8", "  num_hidden_layers: eight")
    probs = _errors(text)
    by_key = {".".join(map(str, p.loc)): p for p in probs}
    assert "target.colour" in by_key and by_key["target.colour"].message == "unknown key"
    assert "target.num_hidden_layers" in by_key
    lines = text.splitlines()
    assert "colour" in lines[by_key["target.colour"].line - 1]
    assert "num_hidden_layers" in lines[by_key["target.num_hidden_layers"].line - 1]
    assert by_key["target.colour"].format("c.yaml").startswith(f"c.yaml:{by_key['target.colour'].line}:")


@pytest.mark.parametrize("old,new,key,words", [
    ("boundaries: [B_2, B_4, B_5]", "boundaries: [B_2, B_4, B_9]", "capture.boundaries.2", "beyond B_8"),
    ("boundaries: [B_2, B_4, B_5]", "boundaries: [B_2, B_4, B_4]", "capture.boundaries", "duplicate"),
    ("boundaries: [B_2, B_4, B_5]", "boundaries: [B_4, B_2, B_5]", "capture.boundaries", "ascending"),
    ("boundaries: [B_2, B_4, B_5]", "boundaries: [B_0, B_4, B_5]", "capture.boundaries.0", "allow_embedding"),
    ("boundaries: [B_2, B_4, B_5]", "boundaries: []", "capture.boundaries", "at least 1"),
    ("feature_width: 192", "feature_width: 128", "capture.feature_width", "K x target_hidden_size"),
    ("tensor: B_8 ", "tensor: B_7 ", "verifier_last.tensor", "B_8"),
    ("  norm: pre", "  norm: post", "verifier_last.norm", "pre"),
    ("values: [1, 3, 4]", "values: [1, 3]", "draft.layer_ids.values", "2 ids written but 3"),
    ("draft_vocab_size: 256", "draft_vocab_size: 4096", "draft.draft_vocab_size", "> target vocab"),
    ("  status: uncalibrated", "  status: uncalibrated\n  bands: [{slot: B_2, lo: 0.1, hi: 1.0}]",
     "norm_bands.status", "cannot gate"),
    ("  status: uncalibrated", "  status: calibrated", "norm_bands.bands", "no band"),
])
def test_impossible_contracts_are_refused_with_the_reason(old, new, key, words):
    assert old in TINY, old
    probs = _errors(TINY.replace(old, new, 1))
    hit = [p for p in probs if ".".join(map(str, p.loc)) == key]
    assert hit, [(p.loc, p.message) for p in probs]
    assert words in hit[0].message
    assert hit[0].line is not None


def test_contract_load_does_not_modify_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(TINY)
    before = p.read_bytes()
    load_contract(p)
    assert p.read_bytes() == before


def test_missing_file():
    with pytest.raises(ContractError, match="cannot read"):
        load_contract("/nonexistent/c.yaml")


def test_yaml_loader_is_safe():
    probs = _errors(TINY + "\nevil: !!python/object/apply:os.system ['true']\n")
    assert probs and "malformed YAML" in probs[0].message


@pytest.mark.parametrize("ids,conv,want", [
    ([1, 15, 28], "output_of", ["B_2", "B_16", "B_29"]),
    ([2, 16, 29], "boundary", ["B_2", "B_16", "B_29"]),
    ([0, 3, 31], "boundary", ["B_0", "B_3", "B_31"]),
])
def test_id_conventions_round_trip(ids, conv, want):
    """REFERENCE.md 2.3: Llama-3.1-8B defaults B2,B16,B29 are [1,15,28] output-of, [2,16,29] boundary."""
    b = ids_to_boundaries(ids, conv)
    assert [str(x) for x in b] == want
    assert boundaries_to_ids(b, conv) == ids


def test_b0_cannot_be_written_as_output_of():
    with pytest.raises(ValueError, match="B_0 cannot be expressed"):
        boundaries_to_ids([Boundary(0)], "output_of")


def test_boundary_parse():
    assert Boundary.parse("F").final and Boundary.parse("B_12").index == 12
    for bad in ("B12", "b_1", "L3", "B_-1", 3):
        with pytest.raises(ValueError):
            Boundary.parse(bad)
