"""Issue 45 items 2-4: the field reports R84-R106 that need new contract fields or checks (docs/field-reports-2026.md).

Each check is shown failing on its fault, caused the way a user causes it: two writers' data concatenated
(R90), a text-only generation for a multimodal contract (R92), a DFlash config that does not say which
block row predicts (R91), an MTP contract of a hyper-connection target (R93), and the draft's own runtime
on an engine (R89, R94: the checks here; the engine runs are in tests/test_sglang_engine.py and
tests/test_vllm_engine.py).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from eagle3_conformance.cli import main
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.testbed.fixtures import sample_token_ids
from tests.test_check_data_vllm import _check_with as _check_data

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"


def _contract(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def _concat(parts: list[Path], out: Path) -> Path:
    """Concatenate speculators datasets as a user joins two generation jobs' outputs: the Arrow rows in
    order, shard ``hs_{i}`` renumbered to its new row."""
    from datasets import concatenate_datasets, load_from_disk

    dss = [load_from_disk(str(p)) for p in parts]
    concatenate_datasets(dss).save_to_disk(str(out))
    (out / "hidden_states").mkdir()
    k = 0
    for p, ds in zip(parts, dss):
        for i in range(len(ds)):
            shutil.copyfile(p / "hidden_states" / f"hs_{i}.safetensors", out / "hidden_states" / f"hs_{k}.safetensors")
            k += 1
    return out


# --- R90: writers that disagree --------------------------------------------------------------------------


def test_writer_table_and_transformers_ties_the_last_hidden_state():
    """The three writers agree on every id but L - 1 and -1; the HF writer's F for id L - 1 is asked of the
    installed transformers (its output_hidden_states[L] is the final norm's output)."""
    from eagle3_conformance.core.notation import Boundary
    from eagle3_conformance.engine_ids.writers import WRITERS, disputed, transformers_ties_final, writer_boundary

    L = 8
    assert transformers_ties_final()
    got = {w: [str(writer_boundary(w, i, L)) for i in (-1, 0, 6, 7)] for w in WRITERS}
    assert got == {"sglang-online": ["B_0", "B_1", "B_7", "B_8"], "hf-offline": ["B_0", "B_1", "B_7", "F"],
                   "old-logprob": ["F", "B_1", "B_7", "F"]}
    assert [i for i in range(-1, L) if disputed(i, L)] == [-1, 7]
    with pytest.raises(ValueError, match="outside -1..7"):
        writer_boundary("hf-offline", 8, L)
    assert Boundary(3) == writer_boundary("old-logprob", 2, L)


def test_init_names_which_boundary_each_writer_stores_for_id_l_minus_1(tmp_path, capsys):
    """init on a draft whose last aux slot is B_L (speculators' boundary id 8 = output-of id 7 = L - 1):
    one note naming each writer's tensor for it; the draft's dtype and quantization written; a target
    with an image token noted (the contract's multimodal block is the user's to write)."""
    (tmp_path / "t").mkdir()
    (tmp_path / "d").mkdir()
    (tmp_path / "t" / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 8, "hidden_size": 64,
        "vocab_size": 512, "torch_dtype": "float32", "image_token_id": 500}))
    (tmp_path / "d" / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "target_hidden_size": 64, "vocab_size": 512,
        "draft_vocab_size": 256, "torch_dtype": "bfloat16", "eagle_aux_hidden_state_layer_ids": [2, 4, 8]}))
    rc = main(["init", "--target", str(tmp_path / "t"), "--draft", str(tmp_path / "d"), "--engine", "speculators",
               "-o", str(tmp_path / "c.yaml")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert re.search(r"slot 2 \(B_8\) is output-of id 7.*SGLang's online capture stores B_8; an HF offline writer "
                     r".* stores F; verl's old-logprob writer stores F", out), out
    assert "the target is multimodal (config.json image_token_id 500)" in out  # R92: say it, never guess it
    from eagle3_conformance.contract import load_contract

    c = load_contract(tmp_path / "c.yaml")
    assert c.draft.dtype == "bfloat16" and c.draft.quantization == "none" and c.multimodal is None


@pytest.fixture(scope="module")
def mixed_writers(tiny, tiny_ref, tmp_path_factory):
    """A contract whose last aux slot is B_8 = B_L (output-of id 7 = L - 1), and data for it written by
    SGLang's online capture (B_8) and by an HF offline writer (F): each alone, and both concatenated."""
    from eagle3_conformance.testbed.datagen import write_speculators_dataset

    tmp = tmp_path_factory.mktemp("writers")
    text = TINY.read_text().replace("boundaries: [B_2, B_4, B_5]", "boundaries: [B_2, B_4, B_8]")
    text = text.replace("values: [1, 3, 4]", "values: [2, 4, 8]").replace("location: nested", "location: top_level")
    text = text.replace('sglang_validated: ["0.5.23"]', "sglang_validated: []")  # boundary ids: speculators / vLLM
    contract = _contract(tmp, "final.yaml", text)
    a = sample_token_ids(tiny.spec, 3, 8, 16, seed=5)
    b = sample_token_ids(tiny.spec, 3, 8, 16, seed=6)
    online = write_speculators_dataset(tmp / "online", tiny_ref, a, slots=["B_2", "B_4", "B_8", "B_8"])
    offline = write_speculators_dataset(tmp / "offline", tiny_ref, b, slots=["B_2", "B_4", "F", "B_8"])
    return contract, online, offline, _concat([online, offline], tmp / "mixed")


def test_check_data_names_the_writer_and_fails_a_dataset_mixing_two(mixed_writers, tiny, tmp_path, capsys):
    """R90: one writer's data passes writer_consistency, naming it; the two concatenated fail it, naming the
    samples of each and which writer stores what they hold (about 10 s)."""
    contract, online, _, mixed = mixed_writers
    rc, doc, _ = _check_data(tmp_path, capsys, contract, online, "--reference", tiny.target_dir, "--sample", -1)
    wc = [f for f in doc["findings"] if f["check"] == "writer_consistency" and f["slot"] == "slot 2"]
    assert rc == 0 and [f["status"] for f in wc] == ["pass"], wc
    assert "holds B_8 in all 3 samples (SGLang's online capture for id 7)" in wc[0]["message"]
    rc, doc, _ = _check_data(tmp_path, capsys, contract, mixed, "--reference", tiny.target_dir, "--sample", -1)
    wc = [f for f in doc["findings"] if f["check"] == "writer_consistency" and f["status"] == "fail"]
    assert rc == 1 and [f["slot"] for f in wc] == ["slot 2"], wc
    m = wc[0]["message"]
    assert "B_8 in 3" in m and "F in 3" in m and "mixes writers" in m
    assert "SGLang's online capture for id 7" in m and "an HF offline writer" in m


def test_writer_consistency_fails_only_a_mix():
    from eagle3_conformance.checks.writers import writer_findings
    from eagle3_conformance.contract import load_contract

    c = load_contract(TINY)

    def f(where, obs, status="pass"):
        return Finding("slot_identity", status, "training", "slot 1", "B_4", obs, where)

    one = writer_findings(c, [f("s0", "B_4"), f("s1", "B_4"), f("s2", "none", "fail")])
    assert [x.status for x in one] == ["pass"] and "holds B_4 in all 2 samples" in one[0].message
    two = writer_findings(c, [f("s0", "B_4"), f("s1", "B_5", "fail")])
    assert [x.status for x in two] == ["fail"] and "B_4 in 1 (s0)" in two[0].message
    assert writer_findings(c, [f("s0", "B_4")]) == []  # one sample shows no mix
    assert writer_findings(c, []) == []


# --- R92: a multimodal target's data without vision features --------------------------------------------


@pytest.fixture(scope="module")
def vl_data(tiny, tiny_ref, tmp_path_factory):
    """Speculators data whose sample 0 (and ``n`` - 1 others) hold token ``tok`` (the contract's image placeholder), with a
    ``messages`` column as speculators' preprocessing of a multimodal processor writes it: ``text`` (every
    turn a plain string: a text-only generation) or ``images`` (the placeholder samples' turns carry an
    image part); and ``none``: no sample holds the placeholder."""
    from datasets import load_from_disk

    from eagle3_conformance.testbed.datagen import write_speculators_dataset

    tmp = tmp_path_factory.mktemp("vl")
    samples = sample_token_ids(tiny.spec, 4, 8, 16, seed=11)
    tok = min(samples[0], key=lambda t: sum(t in s for s in samples))  # held by sample 0 and the fewest others
    holding = tuple(i for i, s in enumerate(samples) if tok in s)
    base = write_speculators_dataset(tmp / "base", tiny_ref, samples, slots=["B_2", "B_4", "B_5", "B_8"])

    def with_messages(name, image_rows):
        ds = load_from_disk(str(base))
        text = {"type": "text", "text": "describe", "image_url": None}
        image = {"type": "image_url", "text": None, "image_url": {"url": "file:///x.png"}}
        if image_rows:  # typed parts in every row (one Arrow type); the placeholder rows carry an image part
            msgs = [[{"role": "user", "content": [image, text] if i in image_rows else [text]}] for i in range(len(ds))]
        else:  # a text-only processor run: every turn a plain string
            msgs = [[{"role": "user", "content": "describe"}] for _ in range(len(ds))]
        out = tmp / name
        ds.add_column("messages", msgs).save_to_disk(str(out))
        shutil.copytree(base / "hidden_states", out / "hidden_states")
        return out

    text = TINY.read_text() + f"multimodal:\n  image_token_id: {tok}\n  image_tokens_served: true\n"
    return {"contract": _contract(tmp, "vl.yaml", text), "tok": tok, "base": base, "text": with_messages("text", ()),
            "images": with_messages("images", holding), "n": len(holding),
            "none_contract": _contract(tmp, "vl-none.yaml", TINY.read_text() + "multimodal:\n  image_token_id: 511\n"
                                                                                  "  image_tokens_served: true\n")}


@pytest.mark.parametrize("case, rc, status, words", [
    ("images", 0, "pass", "all {n} samples holding image token"),
    ("text", 1, "fail", "{n} of {n} samples holding the image placeholder id"),
    ("base", 1, "fail", "no messages column"),
    ("none", 1, "fail", "text-only data: none of 4 samples holds the image placeholder id 511"),
])
def test_check_data_refuses_text_only_data_for_a_contract_serving_image_tokens(vl_data, tmp_path, capsys, case,
                                                                              rc, status, words):
    """R92: the data generated from requests without their images (speculators' build_client_item sends the
    messages only when they carry a non-text part) fail vision_features, naming the samples; data whose
    placeholder samples carried their images pass; data with no image position at all fail (about 5 s)."""
    contract = vl_data["none_contract"] if case == "none" else vl_data["contract"]
    data = vl_data["base"] if case == "none" else vl_data[case]
    got_rc, doc, _ = _check_data(tmp_path, capsys, contract, data)
    vf = [f for f in doc["findings"] if f["check"] == "vision_features"]
    assert got_rc == rc and [f["status"] for f in vf] == [status], vf
    assert words.format(n=vl_data["n"]) in vf[0]["message"] + vf[0]["where"], vf[0]


def test_vision_features_is_silent_for_a_text_pair_and_skips_when_not_served():
    from eagle3_conformance.checks.multimodal import check_vision_features
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.contract.models import Multimodal

    c = load_contract(TINY)
    assert check_vision_features(c, {"samples": 3, "with_image_token": []}) == []
    c2 = c.model_copy(update={"multimodal": Multimodal(image_token_id=5, image_tokens_served=False)})
    assert [f.status for f in check_vision_features(c2, {"samples": 3, "with_image_token": []})] == ["skip"]
    c3 = c.model_copy(update={"multimodal": Multimodal(image_token_id=5, image_tokens_served=True)})
    fs = check_vision_features(c3, {"samples": 3, "with_image_token": ["sample 0"], "with_vision_request": None})
    assert [f.status for f in fs] == ["skip"] and "records no request" in fs[0].message


# --- R91: which row of a DFlash block predicts --------------------------------------------------------------


def test_dflash_block_readings_are_the_installed_code():
    """Every line draft_config/dflash_block.py cites says what the module says it does."""
    import importlib.util

    from eagle3_conformance.draft_config.dflash_block import SOURCES

    want = {"sglang": ("[:, 1:, :]", "pos 0 = anchor"), "sglang-domino": ("start = 0 if shift_label else 1",),
            "sglang-dspark": ('"sample_from_anchor", True',), "speculators": ("sample_from_anchor: bool",),
            "speculators-dspark": ("sample_from_anchor: bool",), "specforge": ("pos_in_block > 0", "label_offsets"),
            "specforge-shift": ('dflash_config.get("shift_label", False)',)}
    for key, (rel, lines) in SOURCES.items():
        pkg = rel.split("/")[0]
        spec = importlib.util.find_spec(pkg)
        if spec is None:
            pytest.skip(f"{pkg} is not installed")
        text = (Path(spec.origin).parent / rel.split("/", 1)[1]).read_text().splitlines()
        span = "\n".join(text[min(lines) - 1:max(lines)])
        assert all(w in span for w in want[key]), (key, rel, lines, span[:300])
    from eagle3_conformance.draft_config.dflash_block import declared_block_alignment

    assert declared_block_alignment({"dflash_config": {"shift_label": True}}) == (True, "dflash_config.shift_label")


def test_init_refuses_a_dflash_config_that_does_not_say_which_row_predicts(tmp_path, capsys):
    """R91: no key -> exit 2 naming every engine's convention; the option or the config's key -> written."""
    from tests.test_families import dflash_cfg, run_init, tcfg

    rc, out = run_init(tmp_path, tcfg(), dflash_cfg([0, 3, 6], n=3, anchor=None))
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert "no key says which row of a DFlash block predicts" in err
    assert "SGLang 0.5.23 samples every DFlash block from row 1" in err and "--dflash-sample-from-anchor" in err
    rc, out = run_init(tmp_path, tcfg(), dflash_cfg([0, 3, 6], n=3, anchor=None), "--dflash-sample-from-anchor", "true")
    from eagle3_conformance.contract import load_contract

    assert rc == 0 and load_contract(out).dflash.sample_from_anchor is True
    rc, out = run_init(tmp_path, tcfg(), dflash_cfg([0, 3, 6], n=3, anchor=True))
    assert rc == 0 and load_contract(out).dflash.sample_from_anchor is True
    rc, _ = run_init(tmp_path, tcfg(), dflash_cfg([0, 3, 6], n=3, anchor=True), "--dflash-sample-from-anchor", "false")
    assert rc == 2 and "says dflash_config.sample_from_anchor = true" in capsys.readouterr().err
    bad = dflash_cfg([0, 3, 6], n=3, anchor=True)
    bad["shift_label"] = False
    rc, _ = run_init(tmp_path, tcfg(), bad)
    assert rc == 2 and "keys disagree" in capsys.readouterr().err


def test_validate_refuses_an_anchor_predicting_draft_for_sglang(tmp_path, capsys):
    text = (REPO / "contracts" / "tiny-llama-dflash.yaml").read_text()
    assert main(["validate", str(REPO / "contracts" / "tiny-llama-dflash.yaml")]) == 0
    bad = _contract(tmp_path, "a.yaml", text.replace("  block_size: 4\n", "  block_size: 4\n  sample_from_anchor: true\n")
                    .replace("  sglang_validated: []", "  sglang_validated: []\n  sglang_model_file: llama"))
    capsys.readouterr()
    assert main(["validate", str(bad)]) == 2
    assert "dflash_worker_v2.py:183, 301" in capsys.readouterr().out


# --- R93: an MTP head's input streams on a hyper-connection target --------------------------------------


def test_mtp_input_streams_on_a_hyper_connection_target(tmp_path, capsys):
    """validate: unstated streams on a 4-stream target refused; 4 streams need width 4 x d and B_L; init
    for DeepSeek-V4 under SGLang writes 4 streams (deepseek_v4_nextn.py reads them all), refuses another
    hyper-connection architecture."""
    text = (REPO / "contracts" / "tiny-llama-mtp-sglang.yaml").read_text()
    hc = text.replace("  final_norm: rmsnorm", "  final_norm: rmsnorm\n  residual_streams: 4", 1)
    assert "residual_streams: 4" in hc
    capsys.readouterr()
    assert main(["validate", str(_contract(tmp_path, "u.yaml", hc))]) == 2
    assert "state mtp.input_streams" in capsys.readouterr().out
    four = hc.replace("mtp:\n", "mtp:\n  input_streams: 4\n")
    assert main(["validate", str(_contract(tmp_path, "f.yaml", four))]) == 2
    out = capsys.readouterr().out
    assert "F is one stream" in out and "feature_width: 64 != K x target_hidden_size x mtp.input_streams 4" in out
    from tests.test_families import mtp_cfg, run_init, tcfg

    rc, out = run_init(tmp_path, {**tcfg(arch="DeepseekV4ForCausalLM"), "hc_mult": 4}, mtp_cfg(), "--engine", "sglang")
    from eagle3_conformance.contract import load_contract

    assert rc == 0, capsys.readouterr().err
    c = load_contract(out)
    assert (c.target.residual_streams, c.mtp.input_streams, c.capture.feature_width) == (4, 4, 256)
    assert c.capture.boundaries == ["B_8"]
    rc, _ = run_init(tmp_path, {**tcfg(arch="Glm5NextForCausalLM"), "hc_mult": 4}, mtp_cfg(), "--engine", "sglang")
    assert rc == 2 and "refused rather than guessed" in capsys.readouterr().err


# --- R89, R94: the draft's own runtime (the engine runs: test_sglang_engine.py, test_vllm_engine.py) -------


@pytest.mark.parametrize("trained, run, status", [
    ("float32", "torch.float16", "fail"), ("bfloat16", "torch.float16", "fail"), ("float32", "torch.bfloat16", "pass"),
    ("bfloat16", "torch.float32", "pass"), ("float16", "torch.float16", "pass"), (None, "torch.float16", "skip")])
def test_draft_dtype_holds_the_trained_dtypes_range(trained, run, status):
    from eagle3_conformance.checks.runtime import check_draft_runtime
    from eagle3_conformance.contract import load_contract

    c = load_contract(TINY)
    c = c.model_copy(update={"draft": c.draft.model_copy(update={"dtype": trained})})
    d, fin = check_draft_runtime(c, {"dtype": run, "forwards": 3, "nonfinite_forwards": 0, "rows": 9})
    assert (d.check, d.status, fin.status) == ("draft_dtype", status, "pass")


def test_draft_logits_finite_names_the_first_nan_forward():
    from eagle3_conformance.checks.runtime import check_draft_runtime
    from eagle3_conformance.contract import load_contract

    _, fin = check_draft_runtime(load_contract(TINY), {
        "dtype": "torch.float32", "forwards": 5, "nonfinite_forwards": 2, "nonfinite_rows": 4, "rows": 20,
        "first_nonfinite": {"mode": "DECODE", "forward": 3, "argmax": [0, 0]}})
    assert fin.status == "fail" and "2 of 5 draft forwards" in fin.message and "ids [0, 0]" in fin.message


@pytest.mark.parametrize("contract_q, declared, layers, status, words", [
    (None, "none", {"a": {"method": "UnquantizedLinearMethod", "stored": ["BF16"]}}, ["pass"], "unquantized"),
    (None, "fp8", {"a": {"method": "UnquantizedLinearMethod", "stored": ["F8_E4M3"]}}, ["fail", "fail"], "read raw"),
    (None, "fp8", {"a": {"method": "Fp8LinearMethod", "stored": ["F8_E4M3"]}}, ["pass"], "Fp8LinearMethod"),
    (None, "none", {"a": {"method": "Fp8LinearMethod", "stored": ["BF16"]}}, ["fail"], "declares no quantization"),
    ("fp8", "none", {"a": {"method": "UnquantizedLinearMethod", "stored": ["BF16"]}}, ["fail", "fail"], "declares fp8"),
])
def test_draft_quantization_compares_the_checkpoint_with_what_the_engine_built(contract_q, declared, layers, status,
                                                                               words):
    from eagle3_conformance.checks.runtime import check_draft_quantization
    from eagle3_conformance.contract import load_contract

    c = load_contract(TINY)
    c = c.model_copy(update={"draft": c.draft.model_copy(update={"quantization": contract_q})})
    fs = check_draft_quantization(c, {"declared": declared, "source": "config.json", "layers": layers})
    assert [f.status for f in fs] == status and words in " ".join(f.message for f in fs), [f.message for f in fs]


def test_checkpoint_tensors_map_onto_the_modules_both_engines_load_them_into():
    """The renames eagle3_module_of applies are the installed SGLang's own (llama_eagle3.py:328-343)."""
    import importlib.util

    from eagle3_conformance.tools.shared.draft_runtime import eagle3_module_of

    assert eagle3_module_of("midlayer.mlp.gate_proj.weight") == "layers.0.mlp.gate_up_proj"
    assert eagle3_module_of("model.layers.0.self_attn.v_proj.weight_scale") == "layers.0.self_attn.qkv_proj"
    assert eagle3_module_of("fc.weight") == "fc"
    spec = importlib.util.find_spec("sglang")
    if spec is None:
        pytest.skip("sglang is not installed")
    src = (Path(spec.origin).parent / "srt" / "models" / "llama_eagle3.py").read_text().splitlines()
    span = "\n".join(src[327:343])
    for a, b in ((".q_proj", ".qkv_proj"), (".gate_proj", ".gate_up_proj"), ("midlayer", "layers.0")):
        assert a in span and b in span, (a, b)


def test_the_logits_hook_records_non_finite_rows_and_the_draft_model(tmp_path):
    """The forward_hooks recorder on a fake draft: the model record (dtype, each layer's quant method) once,
    then each logits forward's summary attributed to the draft."""
    import torch

    from eagle3_conformance.tools.sglang_engine import hooks
    from eagle3_conformance.tools.sglang_engine.runtime import draft_runtime, load_runtime

    class Q:  # a quant method
        pass

    class Lin(torch.nn.Linear):
        pass

    model = torch.nn.Module()
    model.fc = torch.nn.Linear(4, 2)
    model.layer = Lin(2, 2)
    model.layer.quant_method = Q()
    rec = hooks.draft_model_record(model)
    assert rec["dtype"] == "torch.float32" and rec["layers"] == {"layer": {"method": "Q", "module": "Lin",
                                                                           "weight_dtype": "torch.float32"}}
    st = hooks._state(str(tmp_path))
    hook = hooks.logits_recorder({"out_dir": str(tmp_path)})
    hooks._runtime_record(str(tmp_path), rec)
    st["last"] = {"role": "draft", "mode": "DECODE"}
    out = type("O", (), {"next_token_logits": torch.tensor([[1.0, 2.0], [float("nan"), 0.0]])})()
    hook(None, (), out)
    fig = draft_runtime(load_runtime(tmp_path), "test")
    assert fig is not None and (fig["forwards"], fig["nonfinite_rows"], fig["first_nonfinite"]["argmax"]) == (1, 1, [0])


def test_the_catalogue_accounts_for_every_report_r84_to_r106():
    """Item 5: docs/field-reports-2026.md has exactly one row per report number R84-R106 (R88 and R104, which
    the fault catalogue keeps out on purpose, say so), every row with a status and what it is, none a
    placeholder; a row 'not carried' on a GPU path names scripts/gpu-check.sh or why no engine here runs it."""
    text = (REPO / "docs" / "field-reports-2026.md").read_text()
    table = text[text.index("## R84–R106, one line each"):]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.splitlines()
            if re.match(r"\| R\d+ \|", line)]
    assert [r[0] for r in rows] == [f"R{n}" for n in range(84, 107)]
    for num, status, what in rows:
        assert status and len(what) > 20, num
        assert not re.search(r"TODO|TBD|XXX|placeholder", status + what, re.I), num
    by = {r[0]: r for r in rows}
    assert all(by[n][1] == "not in the catalogue" for n in ("R88", "R104"))
    assert all(by[n][1] == "built (engine invariance, issue 45 item 1)" and "`engine_invariance`" in by[n][2]
               and "faults/invariance_column.py" in text for n in ("R84", "R95", "R102"))
    for num, status, what in rows:
        if status == "not carried" and "GPU" in what:
            assert "gpu-check.sh" in what or "gpu_field_check.py" in what, num
