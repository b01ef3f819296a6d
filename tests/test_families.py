"""DFlash and MTP / NextN contracts (issue 14): schema, validation, init, and each tool's DFlash
id rule asked of its own code. Expected taps come from the published conventions (DFlash ids are
output-of ids, issue 14 / vllm-project/vllm#40727), never from the code under test."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from eagle3_conformance.cli import main
from eagle3_conformance.contract import ContractError, load_contract, parse_contract

REPO = Path(__file__).resolve().parent.parent
TINY = (REPO / "contracts" / "tiny-llama.yaml").read_text()


def tcfg(L=8, d=64, arch="LlamaForCausalLM"):
    return {"architectures": [arch], "model_type": "llama", "num_hidden_layers": L, "hidden_size": d,
            "vocab_size": 512, "torch_dtype": "float32"}


def dflash_cfg(ids=None, d=64, n=5, where="dflash_config", anchor=False, **extra):
    """A DFlash draft config; ``anchor``: its ``sample_from_anchor`` (None: no key, R91)."""
    c = {"architectures": ["DFlashDraftModel"], "num_hidden_layers": n, "hidden_size": d, "vocab_size": 512, **extra}
    block = {} if anchor is None else {"sample_from_anchor": anchor}
    if where == "dflash_config":
        c["dflash_config"] = {"block_size": 16} | ({"target_layer_ids": ids} if ids is not None else {}) | block
    elif where == "top_level":
        c["target_layer_ids"] = ids
        c.update(block)
    return c


def mtp_cfg(n=1, d=64):
    return {"architectures": ["DeepseekV3ForCausalLMNextN"], "num_hidden_layers": 8, "hidden_size": d,
            "vocab_size": 512, "num_nextn_predict_layers": n}


def run_init(tmp: Path, target: dict, draft: dict, *extra):
    (tmp / "t").mkdir(exist_ok=True)
    (tmp / "d").mkdir(exist_ok=True)
    (tmp / "t" / "config.json").write_text(json.dumps(target))
    (tmp / "d" / "config.json").write_text(json.dumps(draft))
    out = tmp / "c.yaml"
    if out.exists():
        out.unlink()
    rc = main(["init", "--target", str(tmp / "t"), "--draft", str(tmp / "d"), "-o", str(out), *extra])
    return rc, out


def B(*ks):
    return [f"B_{k}" for k in ks]


# --- init: DFlash ------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", [[], ["--engine", "sglang"], ["--engine", "vllm"], ["--engine", "specforge"]])
def test_init_dflash_reads_target_layer_ids_output_of(tmp_path, engine):
    """Five taps, read output-of (id i = B_{i+1}) by every engine; never a 3-slot EAGLE default."""
    ids = [0, 2, 3, 5, 6]
    rc, out = run_init(tmp_path, tcfg(), dflash_cfg(ids), *engine)
    assert rc == 0
    c = load_contract(out)
    assert c.method == "dflash"
    assert c.capture.boundaries == B(*[i + 1 for i in ids])
    assert c.capture.feature_width == 5 * 64
    assert c.dflash.target_layer_ids == ids and c.dflash.location == "dflash_config"
    assert c.draft.layer_ids.location == "absent"


def test_init_dflash_top_level_key(tmp_path):
    rc, out = run_init(tmp_path, tcfg(), dflash_cfg([1, 4], n=2, where="top_level"))
    assert rc == 0
    c = load_contract(out)
    assert c.dflash.location == "top_level" and c.capture.boundaries == B(2, 5)


@pytest.mark.parametrize("draft, extra, reason", [
    (dflash_cfg(None), [], r"no dflash_config.target_layer_ids: sglang would derive \[1, 2, 3, 4, 5\]"),
    (dflash_cfg(None), ["--engine", "specforge"], r"specforge would derive \[1, 2, 3, 4, 5\]"),
    (dflash_cfg([0, 2, 8]), [], r"out-of-range layer id"),  # tap beyond depth: B_9 of an L=8 target
    (dflash_cfg([0, 2, 8]), ["--engine", "vllm"], r"tap B_9, beyond the target's L = 8"),
    ({**dflash_cfg([0, 2, 6]), "dflash_config": {"target_layer_ids": [0, 2, 6], "num_target_layers": 36}},
     [], r"num_target_layers is 36 but the target has 8"),
    ({**dflash_cfg([0, 2, 6]), "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}}, [],
     r"more than one draft method"),
    (dflash_cfg([0, 2, 6], d=96), [], r"hidden_size is 96 but the target's is 64"),
    (dflash_cfg("0,2,6"), ["--engine", "vllm"], r"config.json: dflash_config.target_layer_ids must be a non-empty list"),
    (dflash_cfg([0, True, 6]), [], r"must be a non-empty list of integers"),
    ({**dflash_cfg([0, 2, 6]), "num_hidden_layers": "five"}, [], r"num_hidden_layers must be a positive integer"),
])
def test_init_dflash_refusals(tmp_path, capsys, draft, extra, reason):
    rc, out = run_init(tmp_path, tcfg(), draft, *extra)
    assert rc == 2
    assert not out.exists()
    assert re.search(reason, capsys.readouterr().err)


# --- init: MTP ---------------------------------------------------------------------------------


def test_init_mtp_sglang_is_post_norm_nextn(tmp_path):
    rc, out = run_init(tmp_path, tcfg(), mtp_cfg(), "--engine", "sglang")
    assert rc == 0
    c = load_contract(out)
    assert c.method == "mtp" and c.capture.boundaries == ["F"]
    assert c.verifier_last.tensor == "F" and c.mtp.layer_sources == ["target"]


def test_init_mtp_speculators_is_pre_norm_chained(tmp_path):
    rc, out = run_init(tmp_path, tcfg(), mtp_cfg(n=3), "--engine", "speculators")
    assert rc == 0
    c = load_contract(out)
    assert c.capture.boundaries == ["B_8"] and c.verifier_last.tensor == "B_8"
    assert c.mtp.layer_sources == ["target", "previous", "previous"]


@pytest.mark.parametrize("extra, reason", [
    ([], r"mtp draft and no --engine"),
    (["--engine", "vllm"], r"MTP draft under --engine vllm"),
    (["--engine", "specforge"], r"MTP draft under --engine specforge"),
])
def test_init_mtp_refusals(tmp_path, capsys, extra, reason):
    rc, out = run_init(tmp_path, tcfg(), mtp_cfg(), *extra)
    assert rc == 2 and not out.exists()
    assert re.search(reason, capsys.readouterr().err)


# --- contract validation -----------------------------------------------------------------------


def _dflash_doc(ids, bds, L=8, location="dflash_config"):
    doc = yaml.safe_load(TINY)
    L = doc["target"]["num_hidden_layers"]
    d = doc["target"]["hidden_size"]
    doc["method"] = "dflash"
    doc["draft"]["layer_ids"] = {"values": None, "location": "absent"}
    doc["capture"] = {"boundaries": bds, "allow_embedding": False, "feature_width": len(bds) * d}
    doc["dflash"] = {"target_layer_ids": ids, "location": location, "num_draft_layers": len(bds)}
    doc["engines"] = {"sglang_validated": []}
    doc["norm_bands"] = {"status": "uncalibrated"}
    doc.pop("gates", None)
    return doc, L


def _problems(doc) -> list[str]:
    with pytest.raises(ContractError) as e:
        parse_contract(yaml.safe_dump(doc), "c.yaml")
    return [p.message for p in e.value.problems]


def test_dflash_contract_valid():
    doc, L = _dflash_doc([0, 2, 4], B(1, 3, 5))
    c = parse_contract(yaml.safe_dump(doc), "c.yaml")
    assert c.method == "dflash" and c.num_slots == 3


def test_dflash_contract_wrong_rule_named():
    """The EAGLE boundary rule applied to DFlash ids: every tap one layer early."""
    doc, L = _dflash_doc([1, 3, 5], B(1, 3, 5))
    msgs = _problems(doc)
    assert any("wrong one of the two rules" in m and "write [0, 2, 4]" in m for m in msgs), msgs


def test_dflash_contract_tap_beyond_depth():
    L = yaml.safe_load(TINY)["target"]["num_hidden_layers"]
    doc, _ = _dflash_doc([0, 2, L], B(1, 3, L))
    msgs = _problems(doc)
    assert any(f"id {L} taps B_{L + 1}" in m and "beyond the target's depth" in m for m in msgs), msgs


def test_dflash_contract_count_against_fc_width():
    doc, L = _dflash_doc([0, 2, 4, 5], B(1, 3, 5))
    assert any("4 ids but the draft's fc reads 3 taps" in m for m in _problems(doc))


def test_dflash_contract_formula_fallback_refused():
    doc, L = _dflash_doc(None, B(1, 3, 5), location="absent")
    assert any("build_target_layer_ids" in m for m in _problems(doc))


def test_dflash_contract_with_eagle_key_refused():
    doc, L = _dflash_doc([0, 2, 4], B(1, 3, 5))
    doc["draft"]["layer_ids"] = {"values": [0, 2, 4], "location": "nested"}
    assert any("another method's key" in m for m in _problems(doc))


def test_eagle3_contract_with_dflash_block_refused():
    doc = yaml.safe_load(TINY)
    doc["dflash"] = {"target_layer_ids": [0], "location": "dflash_config", "num_draft_layers": 1}
    assert any("a dflash block in a eagle3 contract" in m for m in _problems(doc))


def test_missing_method_means_eagle3():
    c = parse_contract(TINY, "tiny.yaml")
    assert c.method == "eagle3" and c.dflash is None and c.mtp is None


def _mtp_doc(sources, n, bds=None):
    doc = yaml.safe_load(TINY)
    L = doc["target"]["num_hidden_layers"]
    d = doc["target"]["hidden_size"]
    doc["method"] = "mtp"
    doc["draft"]["layer_ids"] = {"values": None, "location": "absent"}
    bds = bds or [f"B_{L}"]
    doc["capture"] = {"boundaries": bds, "allow_embedding": False, "feature_width": len(bds) * d}
    doc["mtp"] = {"num_layers": n, "layer_sources": sources}
    doc["engines"] = {"sglang_validated": []}
    doc["norm_bands"] = {"status": "uncalibrated"}
    doc.pop("gates", None)
    return doc


def test_mtp_contract_valid_and_problems():
    parse_contract(yaml.safe_dump(_mtp_doc(["target", "previous"], 2)), "c.yaml")
    assert any("one per layer" in m for m in _problems(_mtp_doc(["target"], 2)))
    assert any("layer 0 has no previous" in m for m in _problems(_mtp_doc(["previous"], 1)))
    assert any("last hidden state only" in m for m in _problems(_mtp_doc(["target"], 1, bds=["B_2"])))


# --- the tools' own DFlash rules -----------------------------------------------------------------


@pytest.mark.parametrize("tool", ["sglang", "specforge", "vllm"])
def test_dflash_tool_rules_are_output_of(tool):
    from eagle3_conformance.engine_ids.dflash import dflash_boundaries_to_tool, dflash_tool_to_boundaries

    ids = [0, 3, 5, 6]
    assert [str(b) for b in dflash_tool_to_boundaries(tool, ids, 7)] == B(1, 4, 6, 7)
    assert dflash_boundaries_to_tool(tool, B(1, 4, 6, 7), 7).ids == ids


def test_dflash_formula_fallback_is_the_tools_own_and_can_differ_from_trained_taps():
    """SGLang and SpecForge derive taps from their own formula when the key is missing (one per
    draft layer). For a drafter trained on other layers the count is right and the layers are
    not, so the load succeeds; the contract's declared taps then disagree with what is served."""
    from eagle3_conformance.engine_ids.dflash import dflash_formula, dflash_tool_to_boundaries

    L, trained = 36, [2, 10, 18, 26, 34]  # a 5-tap drafter trained on other layers than the formula's
    served = {}
    for tool in ("sglang", "specforge"):
        f = dflash_formula(tool, L, 5)
        assert len(f) == len(trained) and f != trained
        served[tool] = [b.index for b in dflash_tool_to_boundaries(tool, None, L, num_draft_layers=5)]
        assert served[tool] == [i + 1 for i in f] != [i + 1 for i in trained]
    assert served["sglang"] == served["specforge"]


def test_mtp_post_norm_source_is_F_and_F_is_refused_elsewhere():
    doc = _mtp_doc(["target"], 1, bds=["F"])
    doc["verifier_last"] = {"tensor": "F", "norm": "post"}
    assert parse_contract(yaml.safe_dump(doc), "c.yaml").aux[0].final
    doc["verifier_last"] = {"tensor": "B_8", "norm": "pre"}
    assert any("one tensor, written the same in both" in m for m in _problems(doc))
    eagle = yaml.safe_load(TINY)
    eagle["capture"]["boundaries"][-1] = "F"
    assert any("F cannot be an aux slot" in m for m in _problems(eagle))


@pytest.mark.parametrize("tool, want", [("sglang", "output-of"), ("vllm", "output-of"), ("specforge", "output-of"),
                                        ("speculators", "boundary")])
def test_translate_dflash_contract_uses_the_dflash_rule(capsys, tool, want):
    """vLLM's EAGLE-3 ids are boundaries; its DFlash ids are output-of (vllm-project/vllm#40727):
    translate must write B_k - 1 for a DFlash contract, and speculators' DFlash config its boundary
    ids without B_L."""
    path = REPO / "contracts" / "qwen3-8b--dflash.yaml"
    c = load_contract(path)
    assert main(["translate", str(path), "--to", tool, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    idx = [int(b[2:]) for b in c.capture.boundaries]
    assert out["ids"] == ([i - 1 for i in idx] if want == "output-of" else [i for i in idx if i != c.L])


def test_translate_mtp_contract_refuses(capsys):
    assert main(["translate", str(REPO / "contracts" / "deepseek-v3--nextn-sglang.yaml"), "--to", "sglang"]) == 2
    assert "reads no layer ids" in capsys.readouterr().err
