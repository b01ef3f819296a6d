"""Contract authoring: init / calibrate / translate and the shipped public-pair contracts.

Expected boundaries come from REFERENCE.md sections 2.1-2.3 and 3.2 (worked by hand here), not
from the code under test.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from eagle3_conformance.cli import main
from eagle3_conformance.contract import load_contract

REPO = Path(__file__).resolve().parent.parent
CONTRACTS = sorted((REPO / "contracts").glob("*.yaml"))
PUBLIC = [p for p in CONTRACTS if p.name != "tiny-llama.yaml" and "fixture:" not in p.read_text()]


def B(*ks):
    return [f"B_{k}" for k in ks]


def write_pair(tmp: Path, target: dict, draft: dict) -> tuple[Path, Path]:
    (tmp / "target").mkdir(parents=True, exist_ok=True)
    (tmp / "draft").mkdir(parents=True, exist_ok=True)
    (tmp / "target" / "config.json").write_text(json.dumps(target))
    (tmp / "draft" / "config.json").write_text(json.dumps(draft))
    return tmp / "target", tmp / "draft"


def tcfg(arch="LlamaForCausalLM", L=8, d=64, V=512, model_type="llama"):
    return {"architectures": [arch], "model_type": model_type, "num_hidden_layers": L, "hidden_size": d,
            "vocab_size": V, "torch_dtype": "bfloat16"}


def dcfg(layout, ids, d=64, arch="LlamaForCausalLMEagle3", **extra):
    c = {"architectures": [arch], "model_type": "llama", "hidden_size": d, "target_hidden_size": d,
         "vocab_size": 512, "draft_vocab_size": 256, **extra}
    if layout == "nested":
        c["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}
    elif layout == "top":
        c["eagle_aux_hidden_state_layer_ids"] = ids
    return c


def run_init(tmp, target, draft, *extra, out="c.yaml"):
    t, d = write_pair(tmp, target, draft)
    o = tmp / "contracts" / out
    o.parent.mkdir(exist_ok=True)  # init creates no directory (tests/test_authoring_seams.py)
    rc = main(["init", "--target", str(t), "--draft", str(d), "-o", str(o), *extra])
    return rc, o


def init_ok(tmp, target, draft, *extra):
    rc, o = run_init(tmp, target, draft, *extra)
    assert rc == 0, f"init exited {rc}"
    return load_contract(o), o


# --- init: key layouts ----------------------------------------------------------------------


def test_init_nested_llama_applies_plus_one(tmp_path):
    c, o = init_ok(tmp_path, tcfg(), dcfg("nested", [1, 3, 4]))
    assert c.capture.boundaries == B(2, 4, 5)
    assert c.draft.layer_ids.location == "nested" and c.draft.layer_ids.values == [1, 3, 4]
    assert c.capture.feature_width == 3 * 64
    assert c.verifier_last.tensor == "B_8" and c.verifier_last.norm == "pre"
    assert c.norm_bands.status == "uncalibrated"
    assert c.engines.sglang_model_file == "llama"
    text = o.read_text()
    first = text.splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema=")
    schema = (o.parent / first.split("$schema=")[1]).resolve()
    assert schema == (REPO / "contracts" / "schema" / "contract.schema.json").resolve()
    assert "# L," in text and "K x target_hidden_size = 3 x 64" in text  # derived values explained


@pytest.mark.parametrize("edits,expect", [
    # d changed throughout the contract (consistent in itself), the configs say 64
    ([("hidden_size: 64 ", "hidden_size: 48 "), ("feature_width: 192", "feature_width: 144")],
     [("hidden_size: 48", "target.hidden_size", "target", "hidden_size = 64"),
      ("hidden_size: 48", "draft.hidden_size", "draft", "hidden_size = 64"),
      ("target_hidden_size: 48", "draft.target_hidden_size", "draft", "target_hidden_size = 64")]),
    ([("num_hidden_layers: 8 ", "num_hidden_layers: 9 "), ("tensor: B_8", "tensor: B_9")],
     [("num_hidden_layers: 9", "target.num_hidden_layers", "target", "num_hidden_layers = 8")]),
    ([("  vocab_size: 512 ", "  vocab_size: 500 ")],
     [("vocab_size: 500", "target.vocab_size", "target", "vocab_size = 512")]),
    ([("draft_vocab_size: 256 ", "draft_vocab_size: 200 ")],
     [("draft_vocab_size: 200", "draft.draft_vocab_size", "draft", "draft_vocab_size = 256")]),
])
def test_validate_compares_the_contract_with_the_local_configs(tmp_path, capsys, edits, expect):
    _, o = init_ok(tmp_path, tcfg(), dcfg("nested", [1, 3, 4]))
    assert main(["validate", str(o)]) == 0  # what init derived agrees with the configs
    text = o.read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    o.write_text(text)
    capsys.readouterr()
    assert main(["validate", str(o)]) == 2
    out = capsys.readouterr().out
    seen: dict[str, int] = {}
    for prefix, key, section, config_key in expect:  # the n-th line starting with prefix
        n = seen[prefix] = seen.get(prefix, -1) + 1
        line = [i for i, ln in enumerate(text.splitlines(), 1) if ln.lstrip().startswith(prefix)][n]
        cfg = tmp_path / section / "config.json"
        assert f"{o}:{line}:3: {key}: " in out and f"{cfg} has {config_key}" in out, out
    assert len(out.strip().splitlines()) == len(expect), out


def test_validate_reads_the_draft_configs_ids_by_the_engine_rule(tmp_path, capsys):
    _, o = init_ok(tmp_path, tcfg(), dcfg("nested", [1, 3, 4]))
    # the contract stays consistent in itself (ids 2,4,5 give B_3,B_5,B_6 under llama.py's +1),
    # but the draft config still holds [1, 3, 4], which SGLang reads as B_2, B_4, B_5
    text = o.read_text().replace("values: [1, 3, 4]", "values: [2, 4, 5]")
    text = text.replace("boundaries: [B_2, B_4, B_5]", "boundaries: [B_3, B_5, B_6]")
    o.write_text(text)
    capsys.readouterr()
    assert main(["validate", str(o)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.lstrip().startswith("boundaries:"))
    assert f"{o}:{line}:3: capture.boundaries:" in out
    assert "eagle_config.eagle_aux_hidden_state_layer_ids = [1, 3, 4]" in out
    assert "capture ['B_2', 'B_4', 'B_5']" in out and "says ['B_3', 'B_5', 'B_6']" in out


def test_validate_without_local_configs_is_schema_only(tmp_path, capsys):
    _, o = init_ok(tmp_path, tcfg(), dcfg("nested", [1, 3, 4]))
    o.write_text(o.read_text().replace("  vocab_size: 512 ", "  vocab_size: 500 "))
    shutil.rmtree(tmp_path / "target")
    shutil.rmtree(tmp_path / "draft")
    assert main(["validate", str(o)]) == 0  # target.path / draft.path not on this machine: nothing to compare


def test_init_writes_every_gate_with_its_resolved_default(tmp_path):
    """init writes the gates block (nulls, each commented with the value it resolves to for the
    target's dtype) so that a user sees what can be tuned; the nulls resolve as the comments say."""
    from eagle3_conformance.core import gates

    c, o = init_ok(tmp_path, tcfg(), dcfg("nested", [1, 3, 4]))
    text = o.read_text()
    for key in ("identity_noise_deg", "resolvable_max_cosine", "slot_identity_min_cosine",
                "cross_path_min_cosine", "min_accept_length"):
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(key + ":"))
        assert "#" in line and "null" in line.split("#", 1)[1], line
    dt = c.target.dtype
    assert f"null = {gates.identity_noise_deg(c)} deg for {dt}" in text
    assert gates.identity_noise_deg(c) == gates.IDENTITY_NOISE_DEG[dt]
    assert c.gates.slot_identity_margin is None


def test_init_top_level_under_sglang_gives_defaults_and_says_so(tmp_path):
    # SGLang reads the nested key only: top-level [2,4,5] is ignored -> defaults [2, L//2, L-3], the same
    # boundaries (a list naming others is refused: tests/test_authoring_seams.py)
    c, o = init_ok(tmp_path, tcfg(), dcfg("top", [2, 4, 5]), "--engine", "sglang")
    assert c.capture.boundaries == B(2, 4, 5)
    assert c.draft.layer_ids.location == "top_level" and c.draft.layer_ids.values == [2, 4, 5]
    text = o.read_text()
    assert "IGNORED" in text and "IGNORES" in c.provenance["layer_ids_source"]


def test_init_top_level_under_vllm_reads_boundary_ids(tmp_path):
    c, _ = init_ok(tmp_path, tcfg(), dcfg("top", [3, 4, 5]), "--engine", "vllm")
    assert c.capture.boundaries == B(3, 4, 5)


def test_init_absent_with_engine_uses_engine_default(tmp_path):
    c, _ = init_ok(tmp_path, tcfg(L=32, d=64), dcfg("absent", None), "--engine", "sglang")
    assert c.capture.boundaries == B(2, 16, 29)  # REFERENCE 2.3 Llama-3.1-8B example
    assert c.draft.layer_ids.location == "absent" and c.draft.layer_ids.values is None


def test_init_speculators_format_draft(tmp_path):
    draft = {"architectures": ["Eagle3Speculator"], "transformer_layer_config": {"hidden_size": 64, "vocab_size": 512},
             "draft_vocab_size": 128, "eagle_aux_hidden_state_layer_ids": [2, 16, 29], "norm_before_fc": True,
             "speculators_config": {"verifier": {"name_or_path": "x"}}}
    c, _ = init_ok(tmp_path, tcfg(L=32), draft)
    assert c.capture.boundaries == B(2, 16, 29)  # speculators >= 0.5: id i = B_i
    assert c.draft.pre_fc_norm == "norm_before_fc" and c.draft.layer_ids.location == "top_level"


def test_init_verifier_F(tmp_path):
    c, _ = init_ok(tmp_path, tcfg(), dcfg("nested", [1, 3, 4]), "--verifier", "F")
    assert c.verifier_last.tensor == "F" and c.verifier_last.norm == "post"
    assert "(--verifier F)" in _.read_text()


def test_init_provenance_of_a_defaulted_F_names_specforge_not_the_flag(tmp_path):
    c, o = init_ok(tmp_path, tcfg(), dcfg("nested", [1, 3, 4]), "--engine", "specforge==0.2.0")
    assert c.verifier_last.tensor == "F"
    text = o.read_text()
    assert "--verifier F" not in text and "SpecForge's offline hidden_state" in text


# --- init: architecture families ---------------------------------------------------------------


@pytest.mark.parametrize("arch,model_type,L,ids,engine,want", [
    ("Qwen3ForCausalLM", "qwen3", 36, [1, 17, 32], None, B(2, 18, 33)),
    ("Qwen3MoeForCausalLM", "qwen3_moe", 94, [1, 46, 90], None, B(2, 47, 91)),
    # deepseek_v2 >= 0.5.13: +1 only if ids[0] == 1, else raw (REFERENCE 3.2, L = 40 table)
    ("DeepseekV3ForCausalLM", "deepseek_v3", 61, [1, 29, 57], None, B(2, 30, 58)),
    ("DeepseekV3ForCausalLM", "deepseek_v3", 61, [2, 30, 58], None, B(2, 30, 58)),
    # <= 0.5.12: +1 always
    ("DeepseekV3ForCausalLM", "deepseek_v3", 61, [2, 30, 58], "sglang==0.5.12", B(3, 31, 59)),
    ("KimiK25ForConditionalGeneration", "kimi_k25", 61, [2, 30, 58], None, B(2, 30, 58)),
    # gpt_oss: raw if max(ids) == L, else +1
    ("GptOssForCausalLM", "gpt_oss", 24, [1, 11, 21], None, B(2, 12, 22)),
    ("GptOssForCausalLM", "gpt_oss", 24, [2, 12, 24], None, B(2, 12, 24)),
])
def test_init_families(tmp_path, arch, model_type, L, ids, engine, want):
    extra = ["--engine", engine] if engine else []
    c, _ = init_ok(tmp_path, tcfg(arch, L=L, d=64, model_type=model_type), dcfg("nested", ids), *extra)
    assert c.capture.boundaries == want
    assert c.target.architecture == arch


def test_init_reads_text_config(tmp_path):
    target = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
              "text_config": {"num_hidden_layers": 61, "hidden_size": 64, "vocab_size": 1000, "model_type": "kimi_k2"}}
    c, _ = init_ok(tmp_path, target, dcfg("nested", [2, 30, 58]))
    assert (c.L, c.target.hidden_size, c.target.vocab_size) == (61, 64, 1000)


# --- init: refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize("target,draft,extra,reason", [
    (tcfg(), dcfg("absent", None), [], "no --engine"),
    (tcfg(), dcfg("top", [1, 3, 4]), [], "name the engine"),
    (tcfg(), dcfg("nested", [4, 1, 3]), [], "layer order"),                 # SGLang reorders
    (tcfg(), dcfg("nested", [1, 3, 3]), [], "collapse"),                    # duplicates
    (tcfg(), dcfg("nested", [-1, 3, 4]), [], "B_0"),                        # -1 -> embedding under +1
    (tcfg(L=8), dcfg("nested", [1, 3, 7]), [], "outside"),                  # 8 = L unreachable in llama.py
    (tcfg(L=32), dcfg("nested", [1, 15, 31]), ["--engine", "specforge==0.2.0"],
     "captures through sglang 0.5.14"),  # SpecForge 0.2.0 captures in SGLang 0.5.14: B_32 dropped silently
    (tcfg("GptOssForCausalLM", model_type="gpt_oss"), dcfg("nested", [1, 3, 4]), ["--engine", "sglang==0.4.0"],
     "no rule is known"),
    (tcfg(), dcfg("nested", [1, 3, 4], d=32), [], "K6"),                     # target_hidden_size 32 != 64
    (tcfg(), dcfg("nested", [1, 3, 4], num_aux_hidden_states=4), [], "num_aux_hidden_states"),
    (tcfg(), dcfg("top", [2, 4, 5, 8]), ["--engine", "sglang"], "fc width"),  # 4 top-level ids ignored, 3 defaults
    (tcfg(), dcfg("nested", [1, 3, 4]), ["--engine", "tensorrt"], "--engine"),
])
def test_init_refusals(tmp_path, capsys, target, draft, extra, reason):
    rc, o = run_init(tmp_path, target, draft, *extra)
    err = capsys.readouterr().err
    assert rc == 2
    assert reason in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not o.exists()


def test_init_bad_json_names_file_and_line(tmp_path, capsys):
    t, d = write_pair(tmp_path, tcfg(), dcfg("nested", [1, 3, 4]))
    (d / "config.json").write_text('{\n  "hidden_size": 64,\n  oops\n}')
    rc = main(["init", "--target", str(t), "--draft", str(d), "-o", str(tmp_path / "x.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and f"{d / 'config.json'}:3:" in err


def test_init_refuses_to_overwrite(tmp_path, capsys):
    rc, o = run_init(tmp_path, tcfg(), dcfg("nested", [1, 3, 4]))
    assert rc == 0
    before = o.read_bytes()
    rc, o = run_init(tmp_path, tcfg(), dcfg("nested", [1, 3, 4]))
    assert rc == 2 and o.read_bytes() == before


# --- translate ---------------------------------------------------------------------------------------


ROUND_TRIP = [
    ("LlamaForCausalLM", 32, B(2, 16, 29)),
    ("LlamaForCausalLM", 8, B(1, 4, 7)),
    ("DeepseekV3ForCausalLM", 61, B(2, 30, 58)),
    ("DeepseekV3ForCausalLM", 61, B(3, 30, 58)),
    ("GptOssForCausalLM", 24, B(2, 12, 24)),
    ("Qwen3MoeForCausalLM", 94, B(2, 47, 91)),
]


@pytest.mark.parametrize("tool", ["sglang", "vllm", "speculators", "specforge"])
@pytest.mark.parametrize("arch,L,bds", ROUND_TRIP)
def test_translate_round_trip(tool, arch, L, bds):
    from eagle3_conformance.engine_ids import TranslationError, boundaries_to_tool, tool_to_boundaries

    try:
        t = boundaries_to_tool(tool, bds, L, architecture=arch)
    except TranslationError:
        # only expected where the tool cannot express a boundary: B_1 first under deepseek_v2's
        # first-id rule, or B_L in llama-family SGLang files
        assert tool == "sglang" and bds[0] == "B_1" and arch.startswith("Deepseek")
        return
    back = tool_to_boundaries(tool, t.ids, L, architecture=arch)
    assert [str(b) for b in back] == bds


def test_translate_known_integers():
    from eagle3_conformance.engine_ids import boundaries_to_tool

    # REFERENCE 2.3: Llama-3.1-8B defaults B2,B16,B29 -> output-of [1,15,28], boundary [2,16,29]
    assert boundaries_to_tool("sglang", B(2, 16, 29), 32).ids == [1, 15, 28]
    assert boundaries_to_tool("specforge", B(2, 16, 29), 32).ids == [1, 15, 28]
    assert boundaries_to_tool("vllm", B(2, 16, 29), 32).ids == [2, 16, 29]
    s = boundaries_to_tool("speculators", B(2, 16, 29), 32)
    assert s.ids == [2, 16, 29] and s.extra["data_generation_ids"] == [2, 16, 29, 32]
    # deepseek_v2 >= 0.5.13 and B_3 first: only raw ids work ([2,..] would be read raw as B_2)
    assert boundaries_to_tool("sglang", B(3, 30, 58), 61, architecture="DeepseekV3ForCausalLM").ids == [3, 30, 58]
    # same boundaries on 0.5.12 (+1 always)
    assert boundaries_to_tool("sglang", B(3, 30, 58), 61, architecture="DeepseekV3ForCausalLM",
                              version="0.5.12").ids == [2, 29, 57]


def _contract_with(tmp_path, boundaries, arch="LlamaForCausalLM", L=8, allow_embedding=False, verifier="B_8"):
    src = (REPO / "contracts" / "tiny-llama.yaml").read_text()
    src = src.replace("boundaries: [B_2, B_4, B_5]", f"boundaries: [{', '.join(boundaries)}]")
    src = src.replace("architecture: LlamaForCausalLM\n", f"architecture: {arch}\n")
    src = src.replace("num_hidden_layers: 8", f"num_hidden_layers: {L}")
    src = src.replace("tensor: B_8", f"tensor: {verifier}")
    if verifier == "F":
        src = src.replace("norm: pre", "norm: post")
    src = src.replace("allow_embedding: false", f"allow_embedding: {str(allow_embedding).lower()}")
    src = src.replace("feature_width: 192", f"feature_width: {64 * len(boundaries)}")
    # no ids in the draft config: validate checks written ids against the boundaries (they must agree)
    src = src.replace("values: [1, 3, 4]", "values:").replace("location: nested", "location: absent")
    p = tmp_path / "c.yaml"
    p.write_text(src)
    load_contract(p)
    return p


def test_translate_cli_json(tmp_path, capsys):
    rc = main(["translate", str(REPO / "contracts" / "tiny-llama.yaml"), "--to", "sglang", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["ids"] == [1, 3, 4]
    assert out["key_path"].startswith("draft config.json: eagle_config.eagle_aux_hidden_state_layer_ids")
    assert "sglang==" in out["holds_for"]


@pytest.mark.parametrize("boundaries,arch,L,to,allow,reason", [
    (B(0, 4, 5), "LlamaForCausalLM", 8, "specforge", True, "B_0"),
    (B(0, 4, 5), "LlamaForCausalLM", 8, "sglang", True, "cannot capture"),
    (B(1, 30, 58), "DeepseekV3ForCausalLM", 61, "sglang", False, "cannot capture"),
    (B(2, 4, 8), "LlamaForCausalLM", 8, "sglang", False, "SGLang never hands the draft B_8"),  # the gate
    (B(2, 4, 5, 6), "LlamaForCausalLM", 8, "specforge", False, "exactly 3"),
])
def test_translate_refuses(tmp_path, capsys, boundaries, arch, L, to, allow, reason):
    p = _contract_with(tmp_path, boundaries, arch, L, allow, verifier=f"B_{L}")
    rc = main(["translate", str(p), "--to", to])
    err = capsys.readouterr().err
    assert rc == 2 and reason in err, err


def test_translate_speculators_refuses_F_verifier(tmp_path, capsys):
    p = _contract_with(tmp_path, B(2, 4, 5), verifier="F")
    rc = main(["translate", str(p), "--to", "speculators"])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot store F" in err
    # the verifier is what speculators refuses, not the aux list (fresh-user report 15): the message
    # names the verifier slot and does not blame the boundaries
    assert "cannot capture the verifier slot F" in err and "B_2" not in err, err


# --- calibrate ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    from eagle3_conformance.testbed.fixtures import build_fixture

    return build_fixture("tiny-llama")


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def calibrated(tiny, tmp_path_factory):
    d = tmp_path_factory.mktemp("cal")
    src = d / "tiny-llama.yaml"
    shutil.copy(REPO / "contracts" / "tiny-llama.yaml", src)
    h = _sha(src)
    out = d / "calibrated.yaml"
    png = d / "profile.png"
    rc = main(["calibrate", str(src), "--data", str(tiny.data_dir), "--reference", str(tiny.target_dir),
               "--safety-factor", "1.5", "--plot", str(png), "-o", str(out)])
    assert rc == 0
    assert _sha(src) == h, "calibrate modified its input without --in-place"
    return src, out, png


def test_calibrate_writes_bands_keeping_comments(calibrated):
    src, out, png = calibrated
    c = load_contract(out)
    assert c.norm_bands.status == "calibrated" and c.norm_bands.safety_factor == 1.5
    assert {b.slot for b in c.norm_bands.bands} == {"B_2", "B_4", "B_5", "B_8"}
    assert "speculators" in c.norm_bands.source
    text = out.read_text()
    # comments and key order survive the round trip
    assert "# SGLang llama family: explicit id i captures B_{i+1}" in text
    keys = [ln.split(":")[0] for ln in text.splitlines() if ln and not ln.startswith((" ", "#"))]
    src_keys = [ln.split(":")[0] for ln in src.read_text().splitlines() if ln and not ln.startswith((" ", "#"))]
    assert keys == src_keys
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the bands grow with depth like the fixture's residual stream (growth 1.9 per layer)
    lo = {b.slot: b.lo for b in c.norm_bands.bands}
    assert lo["B_2"] < lo["B_4"] < lo["B_5"] < lo["B_8"]


def _band_findings(contract: Path, data_dir: Path):
    from eagle3_conformance.suite.runner import default_batches, training_findings

    c = load_contract(contract)
    return [f for f in training_findings(c, data_dir, None, default_batches(12)) if f.check == "norm_band"]


def test_calibrated_bands_pass_good_data(calibrated, tiny):
    _, out, _ = calibrated
    fs = _band_findings(out, tiny.data_dir)
    assert fs and all(f.status == "pass" for f in fs), [f.message for f in fs if f.status != "pass"]


def test_calibrated_bands_fail_wrong_layer(calibrated, tiny, tmp_path):
    from eagle3_conformance.reference import ReferenceModel
    from eagle3_conformance.testbed.datagen import write_speculators_dataset
    from eagle3_conformance.testbed.fixtures import loss_mask_for, sample_token_ids

    _, out, _ = calibrated
    d = tiny.spec["data"]
    samples = sample_token_ids(tiny.spec, d["num_samples"], d["min_len"], d["max_len"], d["seed"])
    bad = tmp_path / "bad"
    write_speculators_dataset(bad, ReferenceModel(tiny.target_dir), samples, slots=["B_2", "B_7", "B_5", "B_8"],
                              loss_masks=[loss_mask_for(len(s), d["seed"] + i) for i, s in enumerate(samples)])
    fs = _band_findings(out, bad)
    by_slot = {}
    for f in fs:
        by_slot.setdefault(f.slot, set()).add(f.status)
    assert "fail" in by_slot["slot 1"]                 # B_7 where B_4 belongs
    assert by_slot["slot 0"] == {"pass"} and by_slot["slot 2"] == {"pass"}
    # the uncalibrated contract cannot see it: its band check is a skip
    un = _band_findings(REPO / "contracts" / "tiny-llama.yaml", bad)
    assert un and all(f.status == "skip" for f in un)


def test_calibrate_never_writes_input_without_in_place(tiny, tmp_path, capsys):
    src = tmp_path / "c.yaml"
    shutil.copy(REPO / "contracts" / "tiny-llama.yaml", src)
    h = _sha(src)
    assert main(["calibrate", str(src), "--data", str(tiny.data_dir)]) == 0  # no output: dry run
    assert _sha(src) == h
    assert main(["calibrate", str(src), "--data", str(tiny.data_dir), "-o", str(src)]) == 2
    assert "--in-place" in capsys.readouterr().err and _sha(src) == h
    assert main(["calibrate", str(src), "--data", str(tiny.data_dir), "--in-place"]) == 0
    assert _sha(src) != h and load_contract(src).norm_bands.status == "calibrated"


@pytest.fixture(scope="module")
def mislabelled(tiny, tmp_path_factory):
    """Data whose slots really are [B_0, B_2, B_4, B_5], labelled as the contract's [B_2, B_4, B_5, B_8]."""
    from eagle3_conformance.reference import ReferenceModel
    from eagle3_conformance.testbed.datagen import write_speculators_dataset
    from eagle3_conformance.testbed.fixtures import sample_token_ids

    out = tmp_path_factory.mktemp("mislabelled") / "data"
    samples = sample_token_ids(tiny.spec, 4, 3, 16, seed=11)
    return write_speculators_dataset(out, ReferenceModel(tiny.target_dir), samples, slots=["B_0", "B_2", "B_4", "B_5"])


@pytest.mark.parametrize("with_reference", [True, False], ids=["--reference", "contract_fixture"])
def test_calibrate_refuses_data_whose_slots_are_other_layers(with_reference, mislabelled, tiny, tmp_path, capsys):
    src = tmp_path / "c.yaml"
    shutil.copy(REPO / "contracts" / "tiny-llama.yaml", src)  # names fixture tiny-llama: a reference
    h = _sha(src)
    out = tmp_path / "calibrated.yaml"
    extra = ["--reference", str(tiny.target_dir)] if with_reference else []
    rc = main(["calibrate", str(src), "--data", str(mislabelled), "-o", str(out), *extra])
    cap = capsys.readouterr()
    assert rc == 1, cap.err
    lines = [ln for ln in cap.err.splitlines() if "contract says" in ln]
    assert any("slot 0 is B_0 (embedding output); contract says B_2" in ln for ln in lines), cap.err
    assert any("slot 1 is B_2" in ln and "contract says B_4" in ln for ln in lines)
    assert any("verifier slot is B_5" in ln and "contract says B_8" in ln for ln in lines)
    assert len(lines) == 4 and all(str(mislabelled) in ln and "sample" in ln for ln in lines)  # one per wrong slot
    assert "band B_" not in cap.out  # refused before computing bands
    # the refusal names the gate that failed and the contract key that changes it
    assert "gate that failed: slot identity, rank rule" in cap.err
    assert "contract key gates.identity_noise_deg" in cap.err
    assert all("beyond gates.identity_noise_deg" in ln for ln in lines)
    assert not out.exists() and _sha(src) == h
    assert main(["calibrate", str(src), "--data", str(mislabelled), "--in-place", *extra]) == 1
    assert _sha(src) == h


def test_calibrate_without_reference_warns_slot_identity_not_verified(mislabelled, tmp_path, capsys):
    src = tmp_path / "c.yaml"
    shutil.copy(REPO / "contracts" / "tiny-llama.yaml", src)
    assert main(["calibrate", str(src), "--data", str(mislabelled), "--no-reference"]) == 0
    assert "slot identity not verified" in capsys.readouterr().out
    bad = tmp_path / "nope.yaml"
    bad.write_text(src.read_text().replace("fixture: tiny-llama", "fixture: nope"))
    assert main(["calibrate", str(bad), "--data", str(mislabelled)]) == 2
    assert "nope.yaml:7:1: fixture: fixture 'nope' is not a known fixture" in capsys.readouterr().err


def test_calibrate_output_never_inside_the_data(tiny, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(tiny.data_dir, data)
    assert main(["calibrate", str(REPO / "contracts" / "tiny-llama.yaml"), "--data", str(data), "--no-reference",
                 "-o", str(data / "c.yaml")]) == 2
    assert "inside the input directory" in capsys.readouterr().err and not (data / "c.yaml").exists()


def test_calibrate_bad_input(tmp_path, capsys):
    rc = main(["calibrate", str(REPO / "contracts" / "tiny-llama.yaml"), "--data", str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert rc == 2 and "nope" in err and "Traceback" not in err


def test_band_recipe():
    from eagle3_conformance.authoring.calibrate import band_from

    vals = [float(i) for i in range(1, 1001)]  # p0.1 = 1.999, p99.9 = 999.001
    lo, hi = band_from(vals, 2.0)
    assert lo <= 1.999 / 2 and lo > 0.99
    assert hi >= 999.001 * 2 and hi <= 2000


def test_band_holds_every_calibration_value():
    """A lone outlier (a real SmolLM2 token at position 1 has RMS 988 among values near 1) is
    inside the band calibrate writes, so the calibration data never fails its own band."""
    from eagle3_conformance.authoring.calibrate import band_from

    vals = [1.0 + 0.001 * i for i in range(2000)] + [988.0, 0.01]
    lo, hi = band_from(vals, 2.0)
    assert lo <= 0.01 and hi >= 988.0


# --- shipped contracts --------------------------------------------------------------------------------


def test_validate_every_shipped_contract(capsys):
    assert CONTRACTS
    assert main(["validate", *map(str, CONTRACTS)]) == 0


@pytest.mark.parametrize("path", PUBLIC, ids=lambda p: p.name)
def test_public_contract_provenance(path):
    c = load_contract(path)
    assert c.fixture is None and c.target.path is None and c.draft.path is None
    assert c.norm_bands.status == "uncalibrated"
    for key in ("target", "draft", "layer_ids_source", "capture"):
        assert c.provenance.get(key), f"{path.name}: provenance.{key} missing"
    first = path.read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=schema/contract.schema.json"


@pytest.mark.parametrize("path", PUBLIC, ids=lambda p: p.name)
def test_public_contract_ids_translate_to_its_boundaries(path):
    """The ids the draft config holds, read by the engine the contract names, give its boundaries."""
    from eagle3_conformance.engine_ids import tool_to_boundaries

    c = load_contract(path)
    if c.method == "dflash":  # DFlash ids: output-of, asked of SGLang's own set_dflash_layers_to_capture
        from eagle3_conformance.engine_ids.dflash import dflash_tool_to_boundaries

        got = dflash_tool_to_boundaries("sglang", c.dflash.target_layer_ids, c.L, architecture=c.target.architecture)
        assert [str(b) for b in got] == c.capture.boundaries
        return
    if c.method == "mtp":  # no ids: the head reads one tensor (B_L or F), checked by validate
        assert [str(b) for b in c.aux] == [c.verifier_last.tensor]
        return
    li = c.draft.layer_ids
    tool = "speculators" if c.draft.architecture == "Eagle3Speculator" else "sglang"
    ids = li.values if (tool == "speculators" or li.location == "nested") else None
    got = tool_to_boundaries(tool, ids, c.L, architecture=c.target.architecture)
    assert [str(b) for b in got] == c.capture.boundaries


def test_public_pairs_present():
    names = {p.stem for p in PUBLIC}
    assert len(names) >= 9, names


def test_init_refuses_an_unknown_future_sglang_release(tiny, tmp_path, capsys):
    from eagle3_conformance.cli import main

    rc = main(["init", "--target", str(tiny.target_dir), "--draft", str(tiny.draft_dir), "--engine", "sglang==9.9.9",
               "-o", str(tmp_path / "c.yaml")])
    assert rc == 2 and "newer than 0.5.23" in capsys.readouterr().err
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize("engine,words", [
    ("specforge==9.9.9", "known: 0.2.0"), ("specforge==abc", "not a version"),
    ("speculators==7.0", "known: 0.3.0 to 0.9.0"), ("speculators==xyz", "not a version"),
    ("vllm==abc", "not a version"),
])
def test_init_refuses_malformed_and_unknown_tool_versions(engine, words, tiny, tmp_path, capsys):
    """A version the tool has no rule for is refused (exit 2, naming the known ones), never
    written into the contract as if it had been checked."""
    rc = main(["init", "--target", str(tiny.target_dir), "--draft", str(tiny.draft_dir), "--engine", engine,
               "-o", str(tmp_path / "c.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and words in err and engine in err, err
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize("to,version,words", [
    ("speculators", "7.0", "known: 0.3.0 to 0.9.0"), ("specforge", "abc", "not a version"),
    ("specforge", "0.3.0", "known: 0.2.0"),
])
def test_translate_refuses_unknown_tool_versions_like_init(to, version, words, capsys):
    tiny = Path(__file__).resolve().parents[1] / "contracts" / "tiny-llama.yaml"
    assert main(["translate", str(tiny), "--to", to, "--engine-version", version]) == 2
    assert words in capsys.readouterr().err
    assert main(["translate", str(tiny), "--to", "speculators", "--engine-version", "0.9.0"]) == 0


def test_calibrate_refuses_vllm_extraction_output_in_one_line_naming_the_file(tiny, tmp_path, capsys):
    """A fresh user's trial: calibrate --data on vLLM extraction files answered with the datasets library's
    message. Now one line naming the first file and what to do, exit 2, nothing written."""
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.testbed.datagen import write_vllm_extraction

    d = write_vllm_extraction(tmp_path / "vllm", load_reference_model(tiny.target_dir), [list(range(3, 19)), list(range(5, 30))],
                              slots=["B_2", "B_4", "B_5", "B_8"])
    out = tmp_path / "out.yaml"
    assert main(["calibrate", str(REPO / "contracts" / "tiny-llama.yaml"), "--data", str(d), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "req-0.safetensors: vLLM extraction output" in err[0] and "--reference MODEL_DIR" in err[0]
    assert "Traceback" not in err[0] and "datasets" not in err[0].split("output")[0] and not out.exists()
