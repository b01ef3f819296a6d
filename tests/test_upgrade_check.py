"""``eagle3-conformance upgrade-check``: each version's own code decides what a contract captures.

Two tiers:

* offline (fast): made-up releases ``sglang 9.9.x`` written into a temporary engine-code cache
  (the layout :mod:`eagle3_conformance.released.fetch` writes). They exist to exercise the
  isolation machinery (delegation through ``__init__``, the reader's ``try`` block, a setter that
  raises, a rule that needs the engine) and the command's verdicts and exit codes without a
  network; they are shaped like SGLang's files but are not a statement of SGLang's behaviour.
* real (slow, needs PyPI once; the cache is reused): the actual wheels. 0.5.12 -> 0.5.13 changes
  the Kimi-K2.5 draft's slots (sgl-project/sglang#25454); the released 0.5.23 run in isolation
  agrees with the installed 0.5.23's own setter for every shipped contract.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
KIMI = REPO / "contracts" / "kimi-k2.5--eagle3-mla.yaml"
DSV3 = REPO / "contracts" / "deepseek-v3--specforge-eagle3.yaml"
MTP = REPO / "contracts" / "tiny-llama-mtp-sglang.yaml"

_KIMI = """
from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM


class KimiK25ForConditionalGeneration:
    def __init__(self, config):
        self.language_model = None
        self.language_model = DeepseekV3ForCausalLM(config.text_config)

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.language_model.set_eagle3_layers_to_capture(layer_ids)


EntryClass = [KimiK25ForConditionalGeneration]
"""

_DEEPSEEK = """
from typing import List, Optional


class DeepseekV2Model:
    def __init__(self):
        self.layers_to_capture = []


class DeepseekV2ForCausalLM:
    def __init__(self, config):
        self.model = DeepseekV2Model()

    def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):
        if not self.pp_group.is_last_rank:
            return
        if layer_ids is None:
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
{body}


class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
    pass


EntryClass = [DeepseekV2ForCausalLM, DeepseekV3ForCausalLM]
"""

_BODIES = {  # the explicit-ids branch of each made-up release
    "9.9.1": "self.model.layers_to_capture = [val + 1 for val in layer_ids]",
    "9.9.2": "self.model.layers_to_capture = [v + 1 for v in layer_ids] if layer_ids[0] == 1 else list(layer_ids)",
    "9.9.3": "raise ValueError('layer ids are not supported by this release')",
    "9.9.4": "self.model.layers_to_capture = torch.tensor(layer_ids).tolist()",
    "9.9.5": "self.model.layers_to_capture = [val + 1 for val in layer_ids]",
}

_RUNNER = """
class ModelRunner:
    def __init__(self, draft_model_config):
        self.eagle_use_aux_hidden_state = True
        try:
            eagle_config = getattr(draft_model_config.hf_config, "eagle_config", None)
            self.eagle_use_aux_hidden_state = eagle_config.get("use_aux_hidden_state", True)
            self.eagle_aux_hidden_state_layer_ids = eagle_config["eagle_aux_hidden_state_layer_ids"]
        except:
            self.eagle_aux_hidden_state_layer_ids = None
"""

_GRAPH = """
class CudaGraphRunner:
    def __init__(self, model_runner):
        self.model_runner = model_runner
        self.model_runner.model.set_eagle3_layers_to_capture()
"""


def _write_release(cache: Path, version: str) -> None:
    root = cache / "engine-code" / f"sglang-{version}"
    files = {
        "sglang/srt/models/kimi_k25.py": _KIMI,
        "sglang/srt/models/deepseek_v2.py": _DEEPSEEK.format(body=textwrap.indent(_BODIES[version], " " * 12)),
        "sglang/srt/model_executor/model_runner.py": _RUNNER,
    }
    if version == "9.9.5":  # CUDA graphs captured with the default ids, as <= 0.5.10.post1
        files["sglang/srt/model_executor/cuda_graph_runner.py"] = _GRAPH
    digests = {}
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
        digests[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    (root / "manifest.json").write_text(json.dumps({"tool": "sglang", "version": version, "wheel": f"made-up-{version}",
                                                    "sha256": "0" * 64, "files": digests}))


# made-up training releases, shaped like speculators 0.4 (its own capture loop) and SpecForge 0.2
# (a resolver, then the SGLang release its METADATA pins: here the made-up 9.9.2)
_GENERATOR = """
from transformers import AutoConfig, AutoTokenizer

log = None


class VllmHiddenStatesGenerator:
    def __init__(self, model_path, layer_ids=None, max_model_len=2048):
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        config = AutoConfig.from_pretrained(model_path, trust_remote_code=True)
        num_layers = config.num_hidden_layers
        if layer_ids is None:
            self.layer_ids = [2, num_layers // 2, num_layers - 3, num_layers - 1]
        else:
            self.layer_ids = layer_ids
        for layer_id in self.layer_ids:
            if layer_id < 0 or layer_id >= {bound}:
                raise ValueError(f"Layer index {{layer_id}} out of bounds [0, {{num_layers - 1}}]")
        self.vllm_config = self._create_vllm_config(model_path)

    def _create_vllm_config(self, model_path):
        return VllmConfig(model=model_path)
"""

_WORKER = """
from itertools import islice

from vllm.distributed import get_pp_group, get_tp_group


def _patched_forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None, **_kwargs):
    hidden_states = inputs_embeds if inputs_embeds is not None else self.embed_input_ids(input_ids)
    residual = None
    aux_hidden_states = []
    extension = self._extension
    target_layers = extension._layer_ids if get_tp_group().rank_in_group == 0 else frozenset()
    for idx, layer in enumerate(islice(self.layers, self.start_layer, self.end_layer)):
        hidden_states, residual = layer(hidden_states=hidden_states, positions=positions, residual=residual)
        if self.start_layer + idx in target_layers:
            aux_hidden_states.append((hidden_states + residual{shift}).clone())
    hidden_states, _ = self.norm(hidden_states, residual)
    if aux_hidden_states:
        extension._store_captured_states(aux_hidden_states)
    return hidden_states


class HiddenStatesWorkerExtension:
    def _setup_hidden_states_capture(self, layer_ids):
        self._layer_ids = frozenset(layer_ids)
        model = self.model_runner.model
        model.model.forward = _patched_forward
"""

_RESOLVER = """
def resolve_eagle_capture_layers(cfg, draft_config, target_config):
    layers = cfg.model.aux_hidden_state_layer_ids
    if layers is None:
        layers = (draft_config.get("eagle_config", {}) or {}).get("eagle_aux_hidden_state_layer_ids")
    if layers is None:
        n = int(target_config.num_hidden_layers)
        layers = [1, n // 2 - 1, n - 4]
    if len(layers) != 3:
        raise ValueError(f"resolved EAGLE capture layers must contain exactly three integers, got {layers!r}")
    return list(layers)
"""


def _write_files(cache: Path, dist: str, version: str, files: dict[str, str]) -> None:
    root = cache / "engine-code" / f"{dist}-{version}"
    digests = {}
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
        digests[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    (root / "manifest.json").write_text(json.dumps({"tool": dist, "version": version, "wheel": f"made-up-{version}",
                                                    "sha256": "0" * 64, "files": digests}))


def _write_training_releases(cache: Path) -> None:
    gen = "speculators/data_generation/vllm_hidden_states_generator.py"
    worker = "speculators/data_generation/custom_worker.py"
    # 9.9.3 reads an attribute of the captured tensor that isolation does not give; 9.9.4 refuses ids >= L - 4
    for version, shift, bound in (("9.9.1", "", "num_layers"), ("9.9.2", "", "num_layers"),
                                  ("9.9.3", ".left", "num_layers"), ("9.9.4", "", "num_layers - 4")):
        _write_files(cache, "speculators", version, {gen: _GENERATOR.format(bound=bound),
                                                     worker: _WORKER.format(shift=shift)})
    meta = "Metadata-Version: 2.4\nName: specforge\nRequires-Dist: torch\nRequires-Dist: sglang==9.9.2\n"
    _write_files(cache, "specforge", "9.9.1", {"specforge/algorithms/model_providers.py": _RESOLVER,
                                                "specforge-9.9.1.dist-info/METADATA": meta})
    _write_files(cache, "specforge", "9.9.2", {"specforge/algorithms/model_providers.py": _RESOLVER,
                                                "specforge-9.9.2.dist-info/METADATA": meta.replace("==9.9.2", ">=9.9")})


@pytest.fixture
def cache(tmp_path, monkeypatch):
    c = tmp_path / "cache"
    for v in _BODIES:
        _write_release(c, v)
    _write_training_releases(c)
    empty = tmp_path / "no-index"
    empty.mkdir()
    monkeypatch.setenv("CONFORMANCE_MODEL_CACHE", str(c))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # a version not in the cache must fail offline, as a missing release
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    return c


def _run(*argv: str) -> tuple[int, str, str]:
    from tests.test_identity import run_cli

    return run_cli(["upgrade-check", *argv])


def _json(*argv: str) -> tuple[int, dict]:
    code, out, _ = _run(*argv, "--json")
    return code, json.loads(out)


def test_a_changed_rule_is_reported_slot_by_slot_with_both_source_lines(cache):
    code, out, _ = _run(str(KIMI), "--from", "sglang==9.9.1", "--to", "sglang==9.9.2")
    assert code == 1, out
    assert "DIFFERENT TENSORS" in out
    for a, b in (("B_3", "B_2"), ("B_31", "B_30"), ("B_59", "B_58")):
        assert f"{a} -> {b}" in out
    # both versions' own rules, through the delegating wrapper, with file and line
    assert "sglang/srt/models/kimi_k25.py:10 KimiK25ForConditionalGeneration.set_eagle3_layers_to_capture" in out
    assert "sglang/srt/models/deepseek_v2.py:14 DeepseekV2ForCausalLM.set_eagle3_layers_to_capture" in out
    assert "stores at sglang/srt/models/deepseek_v2.py:21" in out


def test_rules_that_agree_for_a_contract_say_same_tensors(cache):
    code, rep = _json(str(DSV3), "--from", "sglang==9.9.1", "--to", "sglang==9.9.2")  # first id 1: both +1
    assert code == 0
    (c,) = rep["contracts"]
    assert [v["status"] for v in c["verdicts"]] == ["same tensors"]
    assert c["captures"][0]["steps"]["extend"]["boundaries"] == ["B_2", "B_30", "B_58"]
    assert c["captures"][0]["ids_read"] == [1, 29, 57]  # read by the version's own reader block


def test_json_and_markdown_carry_the_same_verdict(cache):
    code, rep = _json(str(KIMI), str(DSV3), "--from", "sglang==9.9.1", "--to", "sglang==9.9.2")
    assert code == 1 and rep["exit_code"] == 1
    kimi = rep["contracts"][0]
    (v,) = kimi["verdicts"]
    assert [(ch["slot"], ch["from_boundary"], ch["to_boundary"]) for ch in v["changes"] if ch["step"] == "extend"] == \
        [(0, "B_3", "B_2"), (1, "B_31", "B_30"), (2, "B_59", "B_58")]
    assert rep["sources"][0]["wheel"] == "made-up-9.9.1"
    code, md, _ = _run(str(KIMI), "--from", "sglang==9.9.1", "--to", "sglang==9.9.2", "--markdown")
    assert code == 1 and "| extend |" not in md and "| all steps | B_3 B_31 B_59 | B_2 B_30 B_58 |" in md


def test_one_spelling_per_output_and_the_old_ones_warn(cache, tmp_path):
    """Issue 41 item 6: --json / --markdown [OUT] as in every verb (alone: on stdout instead of the text);
    the old --format / --output still work and say on stderr which spelling to use."""
    base = [str(KIMI), "--from", "sglang==9.9.1", "--to", "sglang==9.9.2"]
    js, md = tmp_path / "r.json", tmp_path / "r.md"
    code, out, err = _run(*base, "--json", str(js), "--markdown", str(md))
    assert code == 1 and "DIFFERENT TENSORS" in out and "deprecated" not in err  # the text, and both files
    assert json.loads(js.read_text())["exit_code"] == 1 and "| all steps | B_3 B_31 B_59" in md.read_text()
    code, out, err = _run(*base, "--format", "json")
    assert code == 1 and json.loads(out)["exit_code"] == 1
    assert "warning: --format/--output are deprecated; use --json" in err
    old = tmp_path / "old.md"
    code, out, err = _run(*base, "--format", "markdown", "--output", str(old))
    assert code == 1 and old.read_text() == md.read_text() and f"use --markdown {old}" in err
    code, out, err = _run(*base, "--json", "--markdown")
    assert code == 2 and "both on stdout" in err


def test_cuda_graphs_captured_with_defaults_show_as_their_own_step(cache):
    code, rep = _json(str(DSV3), "--from", "sglang==9.9.1", "--to", "sglang==9.9.5")
    cap = rep["contracts"][0]["captures"][1]
    assert cap["steps"]["extend"]["boundaries"] == ["B_2", "B_30", "B_58"]
    assert cap["steps"]["verify/decode"]["boundaries"] == ["B_2", "B_30", "B_58"]  # L=61 defaults [2, 30, 58]
    code, rep = _json(str(KIMI), "--from", "sglang==9.9.1", "--to", "sglang==9.9.5")
    (v,) = rep["contracts"][0]["verdicts"]
    assert code == 1 and {ch["step"] for ch in v["changes"]} == {"verify/decode"}
    assert "cuda_graph_runner.py:5" in v["changes"][0]["to_rule"]


def test_a_version_whose_own_code_raises_is_a_finding_naming_it(cache):
    code, rep = _json(str(KIMI), "--from", "sglang==9.9.1", "--to", "sglang==9.9.3")
    cap = rep["contracts"][0]["captures"][1]
    assert code == 1 and cap["status"] == "refused" and "ValueError: layer ids are not supported" in cap["error"]


def test_a_rule_that_needs_the_engine_cannot_run_and_exits_2(cache):
    code, out, _ = _run(str(KIMI), str(DSV3), "--from", "sglang==9.9.1", "--to", "sglang==9.9.4")
    assert code == 2
    assert "cannot run" in out and "'torch'" in out and "deepseek_v2.py" in out
    assert out.count("cannot run") >= 2  # both contracts reported


def test_bad_input_exits_2_and_other_contracts_are_still_reported(cache, tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("schema_version: 1\nname: [\n")
    code, out, _ = _run(str(bad), str(KIMI), "--from", "sglang==9.9.1", "--to", "sglang==9.9.2")
    assert code == 2 and "broken.yaml: ERROR does not load" in out and "B_3 -> B_2" in out
    code, out, err = _run(str(KIMI), "--from", "sglang==9.9.1", "--to", "sglang==0.0.0.post999")
    assert code == 2 and "CANNOT FETCH" in out and "0.0.0.post999" in out
    for spec, words in (("trtllm==1.0", "unknown tool 'trtllm'"), ("sglang", "expected TOOL==VERSION"),
                        ("sglang==not-a-version", "not a version number"), ("vllm==0.33.0:v3", "unknown vLLM model runner"),
                        ("specforge==0.2.0:v1", "only vLLM has model runners")):
        code, out, err = _run(str(KIMI), "--from", "sglang==9.9.1", "--to", spec)
        assert code == 2 and words in err, (spec, err)


def test_contracts_of_several_methods_are_each_read_by_their_method(cache):
    code, rep = _json(str(KIMI), str(MTP), "--from", "sglang==9.9.1", "--to", "sglang==9.9.2")
    by = {c["method"]: c for c in rep["contracts"]}
    assert by["mtp"]["verdicts"][0]["status"] == "not compared"
    assert "MTP head reads no layer ids" in by["mtp"]["verdicts"][0]["reason"]
    assert by["eagle3"]["verdicts"][0]["status"] == "different tensors" and code == 1


def test_the_cache_is_checked_against_its_manifest(cache):
    p = cache / "engine-code" / "sglang-9.9.2" / "sglang" / "srt" / "models" / "deepseek_v2.py"
    p.write_text(p.read_text().replace("== 1", "== 2"))
    code, out, _ = _run(str(KIMI), "--from", "sglang==9.9.1", "--to", "sglang==9.9.2")
    assert code == 2 and "differs from its manifest" in out
    fetched = [ln for ln in out.splitlines() if "9.9.2 could not be fetched" in ln]  # the contract's lines say why too
    assert fetched and all("differs from its manifest" in ln for ln in fetched), out


# --- real wheels (PyPI once, then the shared cache) ---------------------------------------------

def test_a_training_release_runs_its_own_capture_loop_on_tagged_layers(cache):
    """speculators-shaped releases: the generator's own default and range check, the worker's own
    patched forward on stand-in layers tagged with the boundary their output is (layer i -> B_{i+1})."""
    tiny, lmsys = str(REPO / "contracts" / "tiny-llama.yaml"), str(REPO / "contracts" / "llama-3.1-8b-instruct--lmsys-eagle3.yaml")
    code, rep = _json(tiny, lmsys, "--from", "speculators==9.9.1", "--to", "speculators==9.9.2")
    t, lm = rep["contracts"]
    assert t["captures"][0]["steps"]["extend"]["boundaries"] == ["B_2", "B_4", "B_5"]  # ids [1, 3, 4], after each layer
    assert lm["captures"][0]["steps"]["extend"]["boundaries"] == ["B_3", "B_17", "B_30"]  # default [2,16,29,31] less L-1
    assert "custom_worker.py" in t["captures"][0]["steps"]["extend"]["rule"]
    assert [v["status"] for c in rep["contracts"] for v in c["verdicts"]] == ["same tensors", "same tensors"]
    assert code == 0, rep  # a training tool's reading of the serving config is not held to the contract


def test_a_training_release_whose_capture_isolation_cannot_follow_cannot_run(cache):
    code, rep = _json(str(REPO / "contracts" / "tiny-llama.yaml"), "--from", "speculators==9.9.1", "--to", "speculators==9.9.3")
    cap = rep["contracts"][0]["captures"][1]
    assert code == 2 and cap["status"] == "cannot run", cap


def test_a_training_release_refuses_ids_beyond_its_range(cache):
    code, rep = _json(str(REPO / "contracts" / "tiny-llama.yaml"), "--from", "speculators==9.9.1", "--to", "speculators==9.9.4")
    base, cand = rep["contracts"][0]["captures"]
    assert base["status"] == "ok" and cand["status"] == "refused" and "Layer index 4 out of bounds" in cand["error"], cand
    assert code == 1 and rep["contracts"][0]["verdicts"][0]["status"] == "different tensors"


def test_specforge_captures_through_the_sglang_release_its_metadata_pins(cache):
    """SpecForge-shaped release: its resolver reads the nested ids, then the pinned made-up SGLang
    9.9.2 (first-id rule) captures them; SGLang 9.9.1 (+1 always) would serve the Kimi draft deeper."""
    code, rep = _json(str(KIMI), "--from", "specforge==9.9.1", "--to", "sglang==9.9.1", "--to", "sglang==9.9.2")
    assert code == 1, rep
    (k,) = rep["contracts"]
    assert k["captures"][0]["steps"]["extend"]["boundaries"] == ["B_2", "B_30", "B_58"]
    rule = k["captures"][0]["steps"]["extend"]["rule"]
    assert "specforge/algorithms/model_providers.py:2" in rule and "specforge-9.9.1.dist-info/METADATA:4" in rule
    assert "sglang/srt/models/deepseek_v2.py" in rule
    assert [v["status"] for v in k["verdicts"]] == ["different tensors", "same tensors"]
    code, rep = _json(str(KIMI), "--from", "specforge==9.9.1", "--to", "specforge==9.9.2")
    cap = rep["contracts"][0]["captures"][1]
    assert code == 2 and cap["status"] == "cannot run" and "pins no single SGLang release" in cap["error"]


SHIPPED = sorted(str(p) for p in (REPO / "contracts").glob("*.yaml"))


@pytest.mark.slow
def test_real_sglang_0_5_12_to_0_5_13_reports_the_kimi_change():
    code, rep = _json(*SHIPPED, "--from", "sglang==0.5.12", "--to", "sglang==0.5.13")
    assert code == 1, rep
    by = {c["name"]: c for c in rep["contracts"]}
    (v,) = by["kimi-k2.5--eagle3-mla"]["verdicts"]
    assert v["status"] == "different tensors"
    assert [(c["from_boundary"], c["to_boundary"]) for c in v["changes"] if c["step"] == "extend"] == \
        [("B_3", "B_2"), ("B_31", "B_30"), ("B_59", "B_58")]
    assert "deepseek_v2.py" in v["changes"][0]["from_rule"] and "deepseek_v2.py" in v["changes"][0]["to_rule"]
    assert by["deepseek-v3--specforge-eagle3"]["verdicts"][0]["status"] == "same tensors"  # first id 1
    assert all(s["sha256"] and len(s["sha256"]) == 64 for s in rep["sources"])
    others = [c for n, c in by.items() if n != "kimi-k2.5--eagle3-mla"]
    assert {c["verdicts"][0]["status"] for c in others} <= {"same tensors", "not compared"}


@pytest.mark.slow
def test_real_released_0_5_23_agrees_with_the_installed_setter():
    """The stand-in (the released file run in isolation) against what it replaces (the installed
    SGLang's own class, through its registry): same layers_to_capture for every shipped EAGLE-3
    contract's architecture, with its ids, with none, and with the ids read raw."""
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.engine_ids import installed_sglang_version, sglang_rule
    from eagle3_conformance.released import sglang as released
    from eagle3_conformance.released.fetch import fetch
    from eagle3_conformance.released.isolated import SourceTree

    v = installed_sglang_version()
    tree = SourceTree(fetch("sglang", v).root, f"sglang {v}")
    checked = 0
    for path in SHIPPED:
        c = load_contract(path)
        if c.method != "eagle3":
            continue
        rule = sglang_rule(c.target.architecture)
        for ids in (c.draft.layer_ids.values, None, [1, c.L // 2, c.L - 4], [2, c.L // 2, c.L - 3]):
            ids = list(ids) if ids is not None else None
            got = released.run_setter(tree, c.target.architecture, c.L, ids).layers_to_capture
            assert got == rule.layers_to_capture(c.L, ids), (path, ids)
            checked += 1
    assert checked >= 40


@pytest.mark.slow
def test_real_vllm_0_33_runners_differ_on_nested_ids():
    code, rep = _json(str(REPO / "contracts" / "smollm2-135m.yaml"), "--from", "vllm==0.33.0:v1",
                      "--to", "vllm==0.33.0:v2")
    (c,) = rep["contracts"]
    caps = {x["column"]: x for x in c["captures"]}
    assert caps["vllm==0.33.0 (v1)"]["ids_read"] == [1, 14, 26]  # V1 reads the nested key
    assert caps["vllm==0.33.0 (v2)"]["ids_read"] is None  # V2 does not: the model default applies
    assert caps["vllm==0.33.0 (v2)"]["steps"]["extend"]["boundaries"] == ["B_2", "B_15", "B_27"]
    assert code == 1 and c["verdicts"][0]["status"] == "different tensors"


def test_cli_stays_importable_without_the_released_package():
    r = subprocess.run([sys.executable, "-c", "import eagle3_conformance.cli.upgrade_check as m; print(m.__doc__[:10])"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr


def test_a_missing_release_names_the_nearest_few_not_pips_whole_list():
    from eagle3_conformance.released.fetch import _nearest

    versions = ", ".join([f"0.4.{i}" for i in range(10)] + [f"0.5.{i}" for i in range(24)])
    pip = ("ERROR: Could not find a version that satisfies the requirement sglang==0.5.99 "
           f"(from versions: {versions})")
    got = _nearest("0.5.99", pip)
    assert got == "; nearest releases with a wheel: 0.5.20, 0.5.21, 0.5.22, 0.5.23 (of 34)", got
    assert _nearest("0.4.5", pip) == "; nearest releases with a wheel: 0.4.3, 0.4.4, 0.4.6, 0.4.7 (of 34)"
    assert _nearest("1.0", "ERROR: No matching distribution found for x==1.0") == ""


def test_text_report_says_none_in_words_and_counts_contracts_in_the_singular():
    """User text never shows Python's None ("ids read: None") nor "(1 contracts"."""
    from types import SimpleNamespace as NS

    from eagle3_conformance.cli.upgrade_check import plain

    steps = {"extend": NS(boundaries=["B_2"]), "verify/decode": NS(boundaries=["B_2"])}
    caps = [NS(status="ok", column=col, steps=steps, ids_read=ids, error=None)
            for col, ids in (("vllm==0.33.0 (v1)", [1]), ("vllm==0.33.0 (v2)", None))]
    ch = NS(step="extend", slot=0, from_boundary="B_1", to_boundary="B_2", from_id=[1], to_id=None,
            from_rule="a", to_rule="b")
    v = NS(base="v1", to="v2", status="different tensors", reason="", changes=[ch])
    r = NS(error=None, name="n", method="eagle3", architecture="LlamaForCausalLM", num_hidden_layers=4,
           contract="c.yaml", captures=caps, verdicts=[v])
    rep = NS(baseline="v1", candidates=["v2"], contracts=[r], seconds=0.1, sources=[], exit_code=1)
    text = plain(rep)
    assert "(1 contract," in text and "None" not in text, text
    assert "ids read: none" in text and "draft-config id [1] -> none" in text


# --- speculators and SpecForge releases (real wheels, slow: PyPI once, then the cache) ----------------

TINY = str(REPO / "contracts" / "tiny-llama.yaml")
LMSYS = str(REPO / "contracts" / "llama-3.1-8b-instruct--lmsys-eagle3.yaml")  # no ids: each release's default


@pytest.mark.slow
def test_real_speculators_0_4_to_0_5_rebased_ids_slot_by_slot():
    """speculators 0.5.0 moved data generation into vLLM's extract_hidden_states (speculators#353):
    the same ids [1, 3, 4] were captured after layers 1, 3, 4 (B_2 B_4 B_5) by 0.4.0's own patched
    forward and are vLLM's B_1 B_3 B_4 from 0.5.0; the default ids moved the same way."""
    code, rep = _json(TINY, LMSYS, "--from", "speculators==0.4.0", "--to", "speculators==0.5.0")
    assert code == 1, rep
    tiny, lmsys = rep["contracts"]
    (v,) = tiny["verdicts"]
    assert v["status"] == "different tensors"
    assert [(c["slot"], c["from_boundary"], c["to_boundary"]) for c in v["changes"] if c["step"] == "extend"] == \
        [(0, "B_2", "B_1"), (1, "B_4", "B_3"), (2, "B_5", "B_4")]
    assert "speculators/data_generation/custom_worker.py" in v["changes"][0]["from_rule"]
    assert "speculators/models/utils.py" in v["changes"][0]["to_rule"]
    assert "set_aux_hidden_state_layers" in v["changes"][0]["to_rule"]  # vLLM's own setter decides from 0.5
    caps = {c["column"]: c for c in lmsys["captures"]}
    assert caps["speculators==0.4.0"]["steps"]["extend"]["boundaries"] == ["B_3", "B_17", "B_30"]
    assert caps["speculators==0.5.0"]["steps"]["extend"]["boundaries"] == ["B_2", "B_16", "B_29"]
    assert all(len(s["sha256"]) == 64 for s in rep["sources"])
    code, out, _ = _run(TINY, "--from", "speculators==0.4.0", "--to", "speculators==0.5.0")
    assert "all steps slot 0: B_2 -> B_1" in out and "DIFFERENT TENSORS" in out


@pytest.mark.slow
def test_real_speculators_releases_on_one_side_of_the_rebase_say_same_tensors():
    eagle = [p for p in SHIPPED if "kimi" not in p]  # vLLM's Kimi wrapper cannot run in isolation (docs/upgrade.md)
    for base, to in (("0.5.0", "0.9.0"), ("0.3.0", "0.4.0")):
        code, rep = _json(*eagle, "--from", f"speculators=={base}", "--to", f"speculators=={to}")
        statuses = {c["name"]: c["verdicts"][0]["status"] for c in rep["contracts"]}
        assert code == 0, statuses
        assert set(statuses.values()) == {"same tensors", "not compared"}, statuses
        assert statuses["tiny-llama-eagle3"] == "same tensors"


@pytest.mark.slow
def test_real_speculators_releases_agree_with_the_id_conventions_engine_ids_states():
    """The released code run in isolation gives, for every shipped EAGLE-3 contract's ids, what
    :mod:`eagle3_conformance.engine_ids.speculators` states per release (output-of before 0.5,
    boundary ids from 0.5), so the two cannot drift apart unnoticed."""
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.engine_ids import tool_to_boundaries

    checked = 0
    for version in ("0.3.0", "0.4.0", "0.5.0", "0.9.0"):
        code, rep = _json(*[p for p in SHIPPED if "kimi" not in p and "gemma" not in p],
                          "--from", f"speculators=={version}", "--to", f"speculators=={version}")
        for c in rep["contracts"]:
            (cap,) = c["captures"]
            if cap["status"] != "ok":
                continue
            ct = load_contract(c["contract"])
            ids = cap["ids_read"]
            want = tool_to_boundaries("speculators", ids, ct.L, version=version)
            assert cap["steps"]["extend"]["boundaries"] == [str(b) for b in want], (version, c["name"])
            checked += 1
    assert checked >= 40


@pytest.mark.slow
def test_real_released_speculators_0_9_resolver_agrees_with_the_installed_one(monkeypatch):
    """The stand-in (0.9.0's resolve_target_layer_ids compiled from the wheel) against the installed
    speculators 0.9.0's own function, with its verifier-config loader given the same L."""
    from types import SimpleNamespace

    import speculators.models.utils as installed

    from eagle3_conformance.released.fetch import fetch
    from eagle3_conformance.released.isolated import SourceTree, function

    L = 32
    monkeypatch.setattr(installed, "get_verifier_config", lambda *a, **k: SimpleNamespace(num_hidden_layers=L))
    tree = SourceTree(fetch("speculators", "0.9.0").root, "speculators 0.9.0")
    released, _ = function(tree, "speculators.models.utils", "resolve_target_layer_ids", overrides={
        "get_verifier_config": lambda *a, **k: SimpleNamespace(num_hidden_layers=L)})
    for ids in ([1, 15, 28], [2, 16, 29], [0, 32], None):
        with pytest.warns(UserWarning) if ids is None else _nothing():
            assert released(ids, "t") == installed.resolve_target_layer_ids(ids, "t")
    for bad in ([1, 33], [3, 3], [-1, 2]):
        with pytest.raises(ValueError) as a:
            released(bad, "t")
        with pytest.raises(ValueError) as b:
            installed.resolve_target_layer_ids(bad, "t")
        assert str(a.value) == str(b.value)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.slow
def test_real_specforge_0_2_captures_through_its_pinned_sglang():
    """SpecForge 0.2.0 resolves the ids with its own resolve_eagle_capture_layers and captures them
    in the SGLang its METADATA pins (0.5.14): a Kimi-K2.5 draft trained so gets B_2 B_30 B_58, which
    SGLang 0.5.12 would serve as B_3 B_31 B_59 (exit 1), and 0.5.23 as trained (same tensors)."""
    code, rep = _json(str(KIMI), str(DSV3), "--from", "specforge==0.2.0", "--to", "sglang==0.5.12",
                      "--to", "sglang==0.5.23")
    assert code == 1, rep
    kimi, dsv3 = rep["contracts"]
    old, new = kimi["verdicts"]
    assert old["status"] == "different tensors" and new["status"] == "same tensors"
    assert [(c["from_boundary"], c["to_boundary"]) for c in old["changes"] if c["step"] == "extend"] == \
        [("B_2", "B_3"), ("B_30", "B_31"), ("B_58", "B_59")]
    rule = old["changes"][0]["from_rule"]
    assert "specforge/algorithms/model_providers.py" in rule and "specforge-0.2.0.dist-info/METADATA" in rule
    assert "sglang/srt/models/deepseek_v2.py" in rule
    assert [v["status"] for v in dsv3["verdicts"]] == ["same tensors", "same tensors"]


@pytest.mark.slow
def test_real_released_specforge_resolver_agrees_with_the_installed_one():
    """The stand-in against what it replaces: 0.2.0's resolve_eagle_capture_layers compiled from the
    wheel and the installed SpecForge 0.2.0's own (through engine_ids.specforge_layer_ids)."""
    from eagle3_conformance.engine_ids import TranslationError, specforge_layer_ids
    from eagle3_conformance.released import specforge as sf
    from eagle3_conformance.released.fetch import fetch
    from eagle3_conformance.released.isolated import SourceTree

    tree = SourceTree(fetch("specforge", "0.2.0").root, "specforge 0.2.0")
    for L, ids in ((61, [2, 30, 58]), (32, [1, 15, 28]), (32, None), (8, [1, 3, 4]), (8, [1, 3]), (8, [-1, 2, 3])):
        cfg = {} if ids is None else {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}
        try:
            want = specforge_layer_ids(ids, L)
        except TranslationError as e:
            with pytest.raises(ValueError) as got:
                sf.resolve(tree, L, cfg)
            assert str(got.value) in str(e)
            continue
        assert sf.resolve(tree, L, cfg).ids == want
    assert sf.pinned_sglang(tree)[0] == "0.5.14"


@pytest.mark.slow
def test_real_specforge_release_without_a_wheel_cannot_be_fetched_and_says_why():
    code, out, _ = _run(TINY, "--from", "specforge==0.2.0", "--to", "specforge==0.1.0")
    assert code == 2 and "CANNOT FETCH" in out and "no wheel of specforge 0.1.0" in out, out


def test_versions_that_drop_a_contract_slot_are_a_finding_not_same_tensors():
    """SpecForge 0.2.0 (through SGLang 0.5.14) and SGLang 0.5.23 both drop id 31 on a 32-layer Llama
    (layers_to_capture 32 is out of range): the same two slots on both sides, but not the contract's three."""
    from eagle3_conformance.released.result import SAME, SHORT, Capture, StepCapture
    from eagle3_conformance.upgrade import ContractResult, Report, compare

    def cap(column, bs):
        return Capture(column, "ok", ids_read=[1, 15, 31],
                       steps={s: StepCapture(bs, [1, 15][:len(bs)], "rule") for s in ("extend", "verify/decode")})

    a, b = cap("specforge==0.2.0", ["B_2", "B_16"]), cap("sglang==0.5.23", ["B_2", "B_16"])
    assert compare(a, b).status == SAME  # versions alike: nothing declared to hold them to
    v = compare(a, b, ["B_2", "B_16", "B_32"])
    assert v.status == SHORT and "contract slot 2 (B_32) not captured" in v.reason, v
    assert "specforge==0.2.0 captures 2 slots B_2 B_16" in v.reason
    r = Report("specforge==0.2.0", ["sglang==0.5.23"], [], [ContractResult("L.yaml", "L", "eagle3", "LlamaForCausalLM",
                                                                            32, [a, b], [v])], 0.0)
    assert r.exit_code == 1
    full = cap("sglang==0.5.23", ["B_2", "B_16", "B_32"])
    assert compare(full, full, ["B_2", "B_16", "B_32"]).status == SAME


def test_versions_alike_that_capture_other_slots_than_the_contract_are_a_finding():
    """A fresh user's report (2026-12-05): a contract written by ``init --engine speculators`` from a draft
    config holding only the top-level id list (B_1 B_15 B_28); ``upgrade-check --from sglang==0.5.14 --to
    sglang==0.5.23`` showed both columns B_2 B_16 B_29 (SGLang ignores the top-level key and serves its
    defaults) and said ``same tensors``, exit 0. Alike, but not the contract's: a finding, exit 1."""
    from eagle3_conformance.released.result import NOT_CONTRACT, SAME, Capture, StepCapture
    from eagle3_conformance.upgrade import ContractResult, Report, compare

    def cap(column):
        return Capture(column, "ok", ids_read=[],
                       steps={s: StepCapture(["B_2", "B_16", "B_29"], [1, 15, 28], "rule") for s in ("extend", "verify/decode")})

    a, b = cap("sglang==0.5.14"), cap("sglang==0.5.23")
    declared = ["B_1", "B_15", "B_28"]
    assert compare(a, b).status == SAME
    v = compare(a, b, declared)
    assert v.status == NOT_CONTRACT, v
    assert "sglang==0.5.14 and sglang==0.5.23 captures B_2 B_16 B_29, the contract declares B_1 B_15 B_28" in v.reason
    assert "slot 0 B_2 (contract B_1)" in v.reason and "slot 2 B_29 (contract B_28)" in v.reason
    r = Report("sglang==0.5.14", ["sglang==0.5.23"], [], [ContractResult("k1.yaml", "k1", "eagle3", "LlamaForCausalLM",
                                                                          32, [a, b], [v])], 0.0)
    assert r.exit_code == 1
    assert compare(a, b, ["B_2", "B_16", "B_29"]).status == SAME
    # a training tool reads ids translated for it, not the serving config: its reading is not held to it
    s1, s2 = cap("speculators==0.8.1"), cap("speculators==0.9.0")
    assert compare(s1, s2, declared).status == SAME
    assert compare(s1, s2, declared, serves=("sglang", "speculators")).status == NOT_CONTRACT


def test_upgrade_check_names_what_each_release_does_with_an_id_naming_b_l(cache, tmp_path):
    """Issue 37 (R53): for a contract whose deepest aux slot is B_L, each release's own setter is given the
    id naming B_L under both conventions (L - 1 under +1, L as a boundary) and the report says what its
    capture loop makes of it: the made-up 9.9.1 (+1 always) stores entries L and L + 1, both beyond its
    loop (B_0..B_{L-1}): nothing; the made-up 9.9.2 (+1 only when the first id is 1, else raw) reads id
    L - 1 as B_{L-1}, another layer."""
    text = DSV3.read_text().replace("boundaries: [B_2, B_30, B_58]", "boundaries: [B_2, B_30, B_61]")
    text = text.replace("values: [1, 29, 57]", "values: [2, 30, 61]").replace("location: nested ",
                                                                              "location: top_level ")
    text = text.replace("sglang_model_file: deepseek_v2", "sglang_model_file:")
    p = tmp_path / "c.yaml"
    p.write_text(text)
    code, out, err = _run(str(p), "--from", "sglang==9.9.1", "--to", "sglang==9.9.2")
    assert "id = L: sglang==9.9.1: id 60 -> nothing (entry 61 (B_61) from id 60 is beyond its capture loop" in out, \
        out + err
    assert "id = L: sglang==9.9.2: id 60 -> B_60 (not B_61)" in out, out


def test_html_page_highlights_the_changed_slots_with_their_rules(cache, tmp_path):
    """``--html``: the candidate's cell is flagged, its three changed slots are the highlighted
    ones, and both versions' rules (file and line) are on the page (docs/html-report.md)."""
    import re

    out = tmp_path / "upgrade.html"
    code, _, _ = _run(str(KIMI), "--from", "sglang==9.9.1", "--to", "sglang==9.9.2", "--html", str(out))
    assert code == 1
    html = out.read_text()
    # two steps (extend, verify/decode), each: 9.9.2's three slots one boundary earlier
    assert re.findall(r'<span class="diff" title="slot (\d)">(B_\d+)</span>', html) == [
        ("0", "B_2"), ("1", "B_30"), ("2", "B_58")] * 2
    assert html.count('data-differs="true"') == 2 and html.count('data-differs="false"') == 2
    assert "sglang/srt/models/kimi_k25.py:10" in html and "stores at sglang/srt/models/deepseek_v2.py:21" in html
