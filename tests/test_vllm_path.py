"""vLLM 0.33.0 as an engine path: its real model classes on CPU, each model runner's own id reader,
the kill-matrix column, init/translate asked of vLLM's code, and its extraction-file format.

Which boundary a slot holds is always judged against an independent transformers forward
(``eagle3_conformance.reference``: hs[k] = B_k), never against a re-implementation of vLLM. Tests that run
vLLM need the vLLM environment (``tox -e vllm``) and are skipped elsewhere with the reason; the
extraction-file reader and the skip behaviour are tested in the main environment.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from eagle3_conformance.environment.torch_env import prepare

prepare()

import torch  # noqa: E402

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed in this environment (tox -e vllm)")
REPO = Path(__file__).resolve().parent.parent
VLLM_CONTRACT = REPO / "contracts" / "vllm" / "tiny-llama-vllm.yaml"
SGLANG_CONTRACT = REPO / "contracts" / "tiny-llama.yaml"


@pytest.fixture(scope="module")
def sglang_pair():
    """The tiny-llama fixture: a draft written for SGLang (ids [1, 3, 4] nested, SGLang's +1)."""
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.suite.pairs import resolve_pair

    c = load_contract(SGLANG_CONTRACT)
    return c, resolve_pair(c)


@pytest.fixture(scope="module")
def vllm_pair():
    """The tiny-llama-vllm fixture: the same target, a draft written for vLLM (top-level [1, 3, 6])."""
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.suite.pairs import resolve_pair

    c = load_contract(VLLM_CONTRACT)
    return c, resolve_pair(c)


def _judge(c, caps, ref_dir):
    from eagle3_conformance.checks import run_checks
    from eagle3_conformance.reference import load_reference_model

    ref = load_reference_model(ref_dir, c.target)
    return [f for cap in caps for f in run_checks(c, cap, ref.capture(cap.token_ids))]


def _fails(findings, check, runner=None):
    return [f for f in findings if f.check == check and f.status == "fail"
            and (runner is None or f" {runner} runner" in f.where)]


# ----------------------------------------------------------------------- main environment too


def test_registered_and_skipped_with_reason_without_vllm(sglang_pair):
    from eagle3_conformance import paths

    p = paths.get("vllm-extend")
    assert "vllm" in p.needs.modules
    why = p.needs.unmet(sglang_pair[1])
    if HAS_VLLM:
        assert why is None
    else:
        assert why == "vLLM is not installed in this environment (pip install 'eagle3-conformance[vllm]')"


def test_contract_without_vllm_serving_is_skipped(sglang_pair):
    """A contract that declares no vLLM serving is not judged on vLLM (its ids are another engine's)."""
    from eagle3_conformance.paths import Skipped, get

    c, pair = sglang_pair
    assert c.engines.vllm is None
    out = get("vllm-extend").prepare(c, pair)
    assert isinstance(out, Skipped) and "engines.vllm" in out.reason


@pytest.mark.skipif(HAS_VLLM, reason="checks the refusal outside the vLLM environment")
def test_pinned_vllm_translation_is_refused_without_vllm(capsys):
    from eagle3_conformance.cli import main

    assert main(["translate", str(VLLM_CONTRACT), "--to", "vllm", "--engine-version", "0.33.0"]) == 2
    err = capsys.readouterr().err
    assert "not installed" in err and "tox -e vllm" in err and "Traceback" not in err


def test_reading_vllms_ids_asks_for_vllm_before_torch(tmp_path):
    """A core-only install (no torch, no vLLM; scripts/check_install.py runs the real one): ``init
    --engine vllm==X`` names vLLM as what is missing, not torch (the id reader used to import the
    in-process runtime, which needs torch, before asking whether vLLM is there at all)."""
    import subprocess
    import sys

    code = ("import sys\nfor m in ('torch', 'vllm'): sys.modules[m] = None\n"
            "from eagle3_conformance.tools.vllm_cpu.ids import VLLMNotAsked, read_draft\n"
            "from eagle3_conformance.environment.installed import installed_version\n"
            "try:\n    read_draft({}, 30, 'LlamaForCausalLM', '0.33.0')\n"
            "except VLLMNotAsked as e:\n    print('REFUSED', e)\n"
            "except ModuleNotFoundError as e:\n    print('MISSING', e.name)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    if HAS_VLLM:  # installed vLLM, torch blocked: the readers get as far as importing vLLM
        assert out.startswith(("MISSING", "REFUSED")), out
    else:
        assert out.startswith("REFUSED vLLM==0.33.0 is not installed"), out


# --- vLLM's extraction files (ExampleHiddenStatesConnector: {hidden_states [T,N,H], token_ids [T]})


def _write_connector_files(out: Path, c, ref_dir, planes, dtype=torch.bfloat16, prompts=((1, 5, 9, 33, 40, 41), (1, 7, 8, 100, 3))):
    """Files as vLLM's connector writes them (example_hidden_states_connector.py:359-436: safetensors
    ``save_file`` of the stacked captured states), with the planes taken from the reference forward."""
    from safetensors.torch import save_file

    from eagle3_conformance.core.notation import Boundary
    from eagle3_conformance.reference import load_reference_model

    ref = load_reference_model(ref_dir, c.target)
    out.mkdir(parents=True, exist_ok=True)
    for i, toks in enumerate(prompts):
        r = ref.capture(torch.tensor(toks))
        hs = torch.stack([r.boundary(Boundary(b)) for b in planes], 1).to(dtype).contiguous()
        save_file({"hidden_states": hs, "token_ids": torch.tensor(toks, dtype=torch.int64)}, str(out / f"req-{i}.safetensors"))
    return out


def _offline(c, files, ref_dir):
    from eagle3_conformance.suite.runner import offline_findings

    return offline_findings(c, files, ref_dir)


def test_vllm_extraction_files_conform_and_an_off_by_one_is_caught(sglang_pair, tmp_path):
    """Good files (aux B_2, B_4, B_5 and B_L, as speculators' launcher lists them) pass slot and
    verifier identity; files captured one boundary shallower (SGLang's ids read by vLLM as B_k)
    fail slot identity."""
    from eagle3_conformance.tools.vllm_hidden_states import find_files

    c, pair = sglang_pair
    aux = [b.index for b in c.aux]
    good = find_files(_write_connector_files(tmp_path / "good", c, pair.target_dir, aux + [c.L]))
    fs = _offline(c, good, pair.target_dir)
    ident = [f for f in fs if f.check in ("slot_identity", "verifier_identity")]
    assert ident and all(f.status == "pass" for f in ident), [f.message for f in ident if f.status != "pass"]
    assert not [f for f in fs if f.status == "fail"], [f.message for f in fs if f.status == "fail"]
    bad = find_files(_write_connector_files(tmp_path / "shallow", c, pair.target_dir, [b - 1 for b in aux] + [c.L]))
    assert _fails(_offline(c, bad, pair.target_dir), "slot_identity")


def test_vllm_extraction_bad_files_are_findings_naming_the_file(sglang_pair, tmp_path):
    from safetensors.torch import save_file

    c, pair = sglang_pair
    d = _write_connector_files(tmp_path / "d", c, pair.target_dir, [2, 4, 5, 8])
    good_bytes = (d / "req-0.safetensors").read_bytes()
    (d / "truncated.safetensors").write_bytes(good_bytes[: len(good_bytes) // 2])
    save_file({"hidden_states": torch.zeros(3, 4, 64)}, str(d / "nokey.safetensors"))
    save_file({"hidden_states": torch.zeros(3, 256), "token_ids": torch.zeros(3, dtype=torch.long)}, str(d / "rank.safetensors"))
    save_file({"hidden_states": torch.zeros(3, 4, 64), "token_ids": torch.zeros(3)}, str(d / "floatids.safetensors"))
    save_file({"hidden_states": torch.zeros(3, 4, 64), "token_ids": torch.zeros(2, dtype=torch.long)}, str(d / "len.safetensors"))
    save_file({"hidden_states": torch.zeros(3, 7, 64), "token_ids": torch.zeros(3, dtype=torch.long)}, str(d / "planes.safetensors"))
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    from eagle3_conformance.tools.vllm_hidden_states import find_files

    fs = _offline(c, find_files(d), pair.target_dir)
    na = {f.where: f.message for f in fs if f.check == "sample_available" and f.status == "fail"}
    for name, words in (("truncated", "could not be read"), ("nokey", "token_ids"), ("rank", "[T, N, H]"),
                        ("floatids", "integers"), ("len", "holds 2 tokens"), ("planes", "7 planes")):
        hit = [m for w, m in na.items() if f"{name}.safetensors" in w]
        assert hit and words in hit[0], (name, na)
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before  # inputs never modified


def test_check_offline_reads_a_vllm_directory_and_exits_2_when_nothing_reads(sglang_pair, tmp_path, capsys):
    from eagle3_conformance.cli import main

    c, pair = sglang_pair
    d = tmp_path / "junk"
    d.mkdir()
    (d / "a.safetensors").write_bytes(b"not safetensors")
    assert main(["check-offline", str(SGLANG_CONTRACT), "--files", str(d), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "none of the 1 files could be read" in err and "Traceback" not in err


# ------------------------------------------------------------------------- the vLLM environment


@pytest.fixture(scope="module")
def harness_sglang_draft(sglang_pair):
    from eagle3_conformance.tools.vllm_cpu.harness import shared_harness

    c, pair = sglang_pair
    return shared_harness(pair.target_dir, pair.draft_dir)


@needs_vllm
def test_each_runner_reads_the_ids_with_its_own_reader(sglang_pair, harness_sglang_draft):
    """An SGLang-written draft (nested ids [1, 3, 4]) served on vLLM: V1 reads the nested ids as
    boundary ids (B_1, B_3, B_4: one shallower than SGLang's B_2, B_4, B_5), V2 ignores the nested
    key and captures its defaults. Judged by fingerprint against the reference forward."""
    c, pair = sglang_pair
    h = harness_sglang_draft
    assert h.config_ids["v1"] == (1, 3, 4) and h.config_ids["v2"] is None
    caps = h.extend([[1, 5, 9, 33, 40], [1, 7, 8]])
    assert {cap.provenance["runner"] for cap in caps} == {"v1", "v2"}
    fs = _judge(c, caps, pair.target_dir)
    assert _fails(fs, "slot_identity", "v1") and _fails(fs, "engine_mapping", "v1")
    v2 = [f for f in fs if " v2 runner" in f.where and f.check == "slot_identity"]
    # V2's defaults (2, L//2, L-3) happen to be this contract's boundaries for L = 8
    assert v2 and all(f.status == "pass" for f in v2), [f.message for f in v2]
    for cap in caps:  # the concat handed to combine_hidden_states reached the real fc unchanged
        assert cap.fc_ran and torch.equal(cap.fc_input, cap.fc_source)


@needs_vllm
def test_vllm_contract_conforms_and_nested_ids_fail_on_v2(vllm_pair):
    """The vLLM-written draft (top-level [1, 3, 6]) conforms on both runners; the same ids moved under
    eagle_config (FAULT) still conform on V1 and fail on V2, whose reader ignores that key."""
    from eagle3_conformance.tools.vllm_cpu.harness import shared_harness

    c, pair = vllm_pair
    batch = [[1, 5, 9, 33, 40, 41, 42], [1, 7, 8, 100]]
    good = shared_harness(pair.target_dir, pair.draft_dir)
    fs = _judge(c, good.extend(batch), pair.target_dir)
    assert not [f for f in fs if f.status == "fail"], [f.message for f in fs if f.status == "fail"]
    assert [f for f in fs if f.check == "slot_identity" and f.status == "pass"]
    nested = shared_harness(pair.target_dir, pair.draft_dir, draft_ids_key="nested")
    fs = _judge(c, nested.extend(batch), pair.target_dir)
    assert _fails(fs, "engine_mapping", "v2") and _fails(fs, "slot_identity", "v2")
    assert not _fails(fs, "slot_identity", "v1") and not _fails(fs, "engine_mapping", "v1")


@needs_vllm
@pytest.mark.slow
def test_kill_matrix_vllm_column_catches_every_applicable_fault():
    """The vllm-extend column: no baseline failure, every applicable kind caught by a named check."""
    from eagle3_conformance.faults.matrix import run_matrix

    m = run_matrix(paths=["vllm-extend"])
    assert not m["false_positives"], m["false_positives"]
    statuses = {c.kind: c.status for c in m["cells"]}
    assert set(statuses.values()) <= {"caught", "n/a"}, statuses
    # K7: the side-path buffer operator (decode-buffer-sized-d) has no vLLM extend buffer to resize, but
    # the degenerate-slot operators (slot-all-zero, slot-row-repeated; issue 37, R66) apply and are caught
    assert {k for k, s in statuses.items() if s == "n/a"} == {"K3", "K9"}
    k7 = {name: v.status for c in m["cells"] if c.kind == "K7" for name, v in c.operators}
    assert k7["slot-all-zero"] == k7["slot-row-repeated"] == "caught", k7
    for c in m["cells"]:
        if c.status == "caught":
            assert c.checks, c


@needs_vllm
@pytest.mark.slow
def test_translate_and_init_ask_vllms_code(vllm_pair, sglang_pair, tmp_path, capsys):
    """translate --engine-version 0.33.0 reports each runner's capture (asked, not written down), and
    notes that V2 ignores the nested key; init refuses the SGLang draft whose runners disagree and
    writes engines.vllm for the vLLM draft."""
    from eagle3_conformance.cli import main

    c, pair = vllm_pair
    assert main(["translate", str(VLLM_CONTRACT), "--to", "vllm", "--engine-version", "0.33.0", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ids"] == [1, 3, 6]
    assert doc["extra"]["runners"] == {"v1": ["B_1", "B_3", "B_6"], "v2": ["B_1", "B_3", "B_6"]}
    assert any("v2 runner captures ['B_2', 'B_4', 'B_5']" in n for n in doc["notes"])
    out = tmp_path / "c.yaml"
    assert main(["init", "--target", str(pair.target_dir), "--draft", str(pair.draft_dir),
                 "--engine", "vllm==0.33.0", "-o", str(out)]) == 0
    from eagle3_conformance.contract import load_contract

    made = load_contract(out)
    assert [str(b) for b in made.aux] == ["B_1", "B_3", "B_6"]
    assert made.engines.vllm.version == "0.33.0" and made.engines.vllm.runners == ["v1", "v2"]
    capsys.readouterr()
    _, spair = sglang_pair
    assert main(["init", "--target", str(spair.target_dir), "--draft", str(spair.draft_dir),
                 "--engine", "vllm==0.33.0", "-o", str(tmp_path / "d.yaml")]) == 2
    err = capsys.readouterr().err
    assert "v1 ['B_1', 'B_3', 'B_4']" in err and "v2 ['B_2', 'B_4', 'B_5']" in err
    assert not (tmp_path / "d.yaml").exists()


def test_vllm_version_fact_is_judged_against_the_contract(sglang_pair):
    """The installed release is passed only when it is the one the contract's ids were resolved with;
    another release, or a contract without vLLM serving, is reported as skipped, never passed."""
    from eagle3_conformance.checks import check_vllm_version
    from eagle3_conformance.contract import VLLMServing

    c, _ = sglang_pair
    assert [f.status for f in check_vllm_version(c, "0.33.0")] == ["skip"]
    served = c.model_copy(update={"engines": c.engines.model_copy(update={"vllm": VLLMServing(version="0.33.0")})})
    assert [f.status for f in check_vllm_version(served, "0.33.0")] == ["pass"]
    other = check_vllm_version(served, "0.32.0")
    assert [f.status for f in other] == ["skip"] and "not 0.33.0" in other[0].message


@needs_vllm
@pytest.mark.slow
def test_real_smollm2_on_vllm_runners():
    """The real SmolLM2-135M target in vLLM's own LlamaForCausalLM (float32, its own load_weights),
    with the pair's SGLang-written draft config (nested [1, 14, 26] = B_2, B_15, B_27 under SGLang's
    +1): V2 ignores the nested key and its defaults (2, L//2, L-3) = (2, 15, 27) happen to be the
    contract's boundaries, so its rows conform by fingerprint; V1 reads the nested ids as boundary ids
    and every slot is one boundary shallower, caught by slot identity and engine mapping."""
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.suite.pairs import resolve_pair
    from eagle3_conformance.tools.vllm_cpu.harness import shared_harness

    c = load_contract(REPO / "contracts" / "smollm2-135m.yaml")
    pair = resolve_pair(c)
    h = shared_harness(pair.target_dir, pair.draft_dir)
    from eagle3_conformance.testbed.corpus import prompt_pool

    pool = prompt_pool(pair.target_dir)
    batch = [list(p)[:24] for p in pool[:2]] if pool else [[1, 504, 3125, 282, 253, 1789, 30]]
    fs = _judge(c, h.extend(batch), pair.target_dir)
    v2 = [f for f in fs if " v2 runner" in f.where]
    assert [f for f in v2 if f.check == "slot_identity" and f.status == "pass"]
    assert not [f for f in v2 if f.status == "fail"], [f.message for f in v2 if f.status == "fail"]
    assert _fails(fs, "slot_identity", "v1") and _fails(fs, "engine_mapping", "v1")


@needs_vllm
def test_init_vllm_without_a_version_refuses_a_draft_the_runners_read_differently(sglang_pair, tmp_path, capsys):
    """`init --engine vllm` (no version) on the SGLang draft (ids only under eagle_config): the
    installed vLLM's runners disagree (V1 reads the nested ids, V2 ignores them), so init refuses as
    it does with a pinned version instead of writing V1's reading."""
    from eagle3_conformance.cli import main

    _, spair = sglang_pair
    out = tmp_path / "d.yaml"
    assert main(["init", "--target", str(spair.target_dir), "--draft", str(spair.draft_dir),
                 "--engine", "vllm", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "model runners capture different boundaries" in err and "v2 ['B_2', 'B_4', 'B_5']" in err, err
    assert not out.exists()


def test_init_vllm_without_vllm_installed_warns_on_nested_only_ids(sglang_pair, tmp_path, monkeypatch):
    """With no vLLM to ask, the unpinned reading is written with a warning that it is unchecked."""
    import eagle3_conformance.environment.installed as inst
    from eagle3_conformance.cli import main

    real = inst.installed_version
    monkeypatch.setattr(inst, "installed_version", lambda d: None if d == "vllm" else real(d))
    _, spair = sglang_pair
    with pytest.warns(UserWarning, match="vLLM is not installed.*v1 and v2 runners differ"):
        assert main(["init", "--target", str(spair.target_dir), "--draft", str(spair.draft_dir),
                     "--engine", "vllm", "-o", str(tmp_path / "d.yaml")]) == 0
