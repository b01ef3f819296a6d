"""The contract model: loading, line-numbered errors, semantic validation, the checked-in schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from eagle3_conformance.contract import SCHEMA_PATH, ContractError, json_schema, load_contract, parse_contract
from eagle3_conformance.core.notation import Boundary
from eagle3_conformance.engine_ids import boundaries_to_ids, ids_to_boundaries

REPO = Path(__file__).resolve().parent.parent
TINY = (REPO / "contracts" / "tiny-llama.yaml").read_text()


def _errors(text: str) -> list:
    with pytest.raises(ContractError) as e:
        parse_contract(text, "c.yaml")
    return e.value.problems


def test_schema_checked_in_matches_models():
    """Fails when the models change and contracts/schema/contract.schema.json is not regenerated
    (`eagle3-conformance schema --write`)."""
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


# --- validate and the JSON Schema refuse the same values (strict types) -----------------------------


def _schema_errors(text: str) -> list[tuple]:
    """Key paths the checked-in JSON Schema refuses in ``text`` (jsonschema, draft 2020-12)."""
    v = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
    return [tuple(e.absolute_path) for e in v.iter_errors(yaml.safe_load(text))]


def _validate(tmp_path, text: str, capsys) -> tuple[int, str, Path]:
    from eagle3_conformance.cli import main

    p = tmp_path / "c.yaml"
    p.write_text(text)
    rc = main(["validate", str(p)])
    return rc, capsys.readouterr().out, p


@pytest.mark.parametrize("old,new", [
    ("  num_hidden_layers: 8\n", '  num_hidden_layers: "8"\n'),         # a quoted number is a string
    ("  allow_embedding: false\n", '  allow_embedding: "no"\n'),        # a quoted no is a string
    ("  allow_embedding: false\n", "  allow_embedding: 0\n"),           # a number is not a boolean
    ("  feature_width: 192 ", "  feature_width: true "),                # a boolean is not a number
    ("  input_token: 1\n", '  input_token: "1"\n'),
    ("  exclude_positions: [0]\n", '  exclude_positions: ["0"]\n'),
    ("  identity_noise_deg: ", '  identity_noise_deg: "1.5" '),         # number fields too
], ids=["int-string", "bool-string-no", "bool-number", "int-bool", "offset-string", "list-item-string",
        "number-string"])
def test_validate_and_schema_refuse_the_same_values_naming_file_and_line(tmp_path, capsys, old, new):
    assert TINY.count(old) == 1
    text = TINY.replace(old, new)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if new.strip() in ln)
    key = new.split(":")[0].strip()
    refused = _schema_errors(text)
    assert refused and all(k == key or (isinstance(k, int) and path[-2] == key) for path in refused
                           for k in path[-1:]), refused
    rc, out, p = _validate(tmp_path, text, capsys)
    assert rc == 2
    hit = [ln for ln in out.splitlines() if ln.startswith(f"{p}:{line}:")]
    assert hit and key in hit[0] and "got " in hit[0], out


def test_integral_float_is_an_integer_for_both(tmp_path, capsys):
    """JSON Schema's integer is a number with a zero fractional part (draft 2020-12; 8.0 is 8 in
    JSON's data model): both accept 8.0, and the model holds the int 8; 8.5 is refused by both."""
    text = TINY.replace("  num_hidden_layers: 8\n", "  num_hidden_layers: 8.0\n")
    assert not _schema_errors(text)
    assert parse_contract(text, "c.yaml").target.num_hidden_layers == 8
    assert type(parse_contract(text, "c.yaml").target.num_hidden_layers) is int
    half = TINY.replace("  num_hidden_layers: 8\n", "  num_hidden_layers: 8.5\n")
    assert _schema_errors(half) == [("target", "num_hidden_layers")]
    assert _validate(tmp_path, half, capsys)[0] == 2


def _leaves(d, path=()):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from _leaves(v, path + (i,))
    else:
        yield path, d


def test_every_scalar_key_model_and_schema_agree_on_mistyped_values():
    """For every scalar of a contract (optional blocks included), the mistyped values a YAML author
    writes (quoted numbers and booleans, yes/no strings, 0/1 for booleans, booleans for numbers,
    integral floats, numbers for strings) are accepted by the model exactly when the schema
    accepts them."""
    import copy

    from pydantic import ValidationError

    from eagle3_conformance.contract import Contract

    base = yaml.safe_load(TINY)
    base["vocab"] = {"size": 512, "draft_size": 256, "d2t_present": True, "t2d_present": True}
    base["tokenizer"] = {"add_bos": True, "enable_thinking": False,
                         "golden": {"messages": [{"role": "user", "content": "hi"}], "ids": [1, 5]}}
    base["norm_bands"]["massive_activation_ratio"] = 4.0
    base["gates"]["identity_noise_deg"] = 1.0
    base["positions"] = {"serving_max_len": 64, "draft_max_position_embeddings": 128}
    v = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
    assert v.is_valid(base)
    Contract.model_validate(base)
    disagree, tried = [], 0
    for path, val in list(_leaves(base)):
        if isinstance(val, bool):
            bad = ["no", "yes", "true", "1", 0, 1, 1.0]
        elif isinstance(val, int):
            bad = [str(val), float(val), True, val + 0.5]
        elif isinstance(val, float):
            bad = [str(val), True, 2]
        else:
            bad = [1, True, 1.5]
        for b in bad:
            d = copy.deepcopy(base)
            node = d
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = b
            try:
                Contract.model_validate(d)
                model_ok = True
            except ValidationError:
                model_ok = False
            tried += 1
            if model_ok != v.is_valid(d):
                disagree.append((".".join(map(str, path)), b, "schema accepts" if v.is_valid(d) else "model accepts"))
    assert tried > 150 and not disagree, disagree


# --- fixture names ----------------------------------------------------------------------------------


def test_unknown_fixture_is_a_validate_error_naming_the_known_ones(tmp_path, capsys):
    from eagle3_conformance.testbed.fixture_base import known_fixtures

    text = TINY.replace("fixture: tiny-llama\n", "fixture: tiny-lama\n")
    rc, out, p = _validate(tmp_path, text, capsys)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith("fixture:"))
    assert rc == 2
    hit = [ln for ln in out.splitlines() if ln.startswith(f"{p}:{line}:")]
    assert hit and "'tiny-lama' is not a known fixture" in hit[0], out
    assert {"tiny-llama", "smollm2-135m"} <= set(known_fixtures())
    assert all(n in hit[0] for n in known_fixtures())
    # running such a contract with an explicit reference (or none) stays possible: only validate refuses
    assert load_contract(p).fixture == "tiny-lama"
    # a fixture folder given as a path is a fixture
    rc, out, _ = _validate(tmp_path, TINY.replace("fixture: tiny-llama\n", f"fixture: {REPO / 'fixtures' / 'tiny-llama'}\n"),
                           capsys)
    assert rc == 0, out


def test_the_contract_knows_the_trained_fixtures_without_the_builder():
    """shipped.TRAINED_FIXTURES (read by contract validation, below the testbed) names exactly the
    fixtures trained_draft.TRAINED builds a draft for."""
    from eagle3_conformance.environment import shipped
    from eagle3_conformance.testbed.trained_draft import TRAINED

    assert set(shipped.TRAINED_FIXTURES) == set(TRAINED)


def test_init_from_an_installed_package_points_the_schema_line_at_its_absolute_path(tmp_path, monkeypatch):
    """newuser finding 17: from an installed package, init's ``$schema`` line was the installed schema relative
    to the contract (``../../venv/lib/python3.11/site-packages/...``), broken once the contract moved. Now it
    is the installed schema's absolute path; a checkout keeps the relative path (the shipped contracts, above).
    The built wheel in a clean venv checks the same (scripts/check_install.py). Shown failing before (the
    line started with ``../``)."""
    from eagle3_conformance.authoring import yaml_doc
    from eagle3_conformance.environment import shipped

    monkeypatch.setattr(shipped, "in_checkout", lambda: False)
    ref = yaml_doc.schema_ref(tmp_path / "moved" / "c.yaml")
    assert ref == SCHEMA_PATH.resolve().as_posix() and Path(ref).is_absolute()
    monkeypatch.setattr(shipped, "in_checkout", lambda: True)
    assert yaml_doc.schema_ref(REPO / "contracts" / "c.yaml") == "schema/contract.schema.json"
