"""The user's own server, for real (docs/own-server.md): ``eagle3-conformance serve -- <sglang.launch_server
args> --forward-hooks <serve-hooks' value>`` (the correct pair; the seed incident through the module path
``python -m eagle3_conformance.serving.serve --``, which keeps working) starts SGLang 0.5.23's real HTTP
server (CPU recipe), a real HTTP client posts to its native ``/generate`` (greedy, short prompts), the
server is stopped, and ``check-captures`` judges what it recorded.

Four server starts (one per module-scoped case): the correct SmolLM2 pair -> exit 0; the seed incident
caused through the draft config (``eagle_aux_hidden_state_layer_ids`` [-1, 1, 14]: SGLang's rule
captures B_0, the embedding, into slot 0) -> exit 1 naming slot 0 = B_0. The correct pair's records,
with one record truncated as a server killed mid-write leaves it, -> the rest judged, the broken
record named. Issue 41 on the same records: acceptance judged and a floor written from them; float32
served on a float16 contract -> the serving-dtype diagnosis; and two more servers: the pair served in
bfloat16 against the float32 contract (the other direction), and the trained draft with its d2t
scrambled (a conforming boundary, nothing accepted) -> the draft-accepts-nothing diagnosis.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from eagle3_conformance.cli import main
from eagle3_conformance.environment.ports import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "contracts" / "smollm2-135m.yaml"
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village",
           "Water boils at a temperature of", "The three primary colours are"]
FOLLOW_UP = "Once upon a time, in a small village by the sea"  # shares a cached prefix with PROMPTS[2]
START_TIMEOUT = 600
REQUEST_TIMEOUT = 300


def _post(port: int, body: dict) -> object:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT) as r:
        return json.loads(r.read())


def _wait_ready(proc: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health_generate", timeout=60) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(3)
    raise RuntimeError(f"the server was not ready within {START_TIMEOUT} s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the launcher (it kills the server's group), then SIGKILL to both groups."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
    for pg in (proc.pid,):
        try:
            os.killpg(pg, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait(timeout=30)


LAUNCHERS = {"verb": [sys.executable, "-m", "eagle3_conformance.cli", "serve", "--"],
             "module": [sys.executable, "-m", "eagle3_conformance.serving.serve", "--"]}
"""The two ways to start the server (issue 41): the ``serve`` verb, and the module path it keeps working."""


def _post_wave(port: int, bodies: list[dict]) -> list:
    """Post ``bodies`` concurrently (one client thread each, so the scheduler batches them); outputs in order."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(bodies)) as ex:
        outs = list(ex.map(lambda b: _post(port, b), bodies))
    return [o for out in outs for o in (out if isinstance(out, list) else [out])]


def serve_and_record(tmp: Path, draft_dir: Path, target_dir: Path, contract: Path = CONTRACT,
                     waves: "list[list[dict]] | None" = None, launcher: str = "module", dtype: str = "float32") -> dict:
    """Prepare DIR with serve-hooks (recording the target's boundaries too, so both references can
    judge the same records), serve the pair (``launcher``: a key of :data:`LAUNCHERS`; ``dtype``: its
    ``--dtype``), post the prompts, stop; timings in seconds.

    ``waves``: request bodies for SGLang's native ``/generate``; the bodies of one wave are posted
    concurrently, waves one after another (default: the three prompts in one request, then the follow-up).
    benchmarks/bench_engine_reference.py --http serves batched traffic through this function."""
    if waves is None:
        waves = [[{"text": PROMPTS, "sampling_params": {"temperature": 0, "max_new_tokens": 16}}],
                 [{"text": FOLLOW_UP, "sampling_params": {"temperature": 0, "max_new_tokens": 12}}]]
    out = tmp / "records"
    hooks = subprocess.run([sys.executable, "-m", "eagle3_conformance.cli", "serve-hooks", "--contract", str(contract),
                            "--out", str(out), "--conformance-reference", "engine"],
                           capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert hooks.returncode == 0, hooks.stderr
    port, log = free_port(), tmp / "server.log"
    args = ["--model-path", str(target_dir), "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
            str(draft_dir), "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4", "--dtype", dtype, "--host", "127.0.0.1", "--port", str(port),
            "--mem-fraction-static", "0.3", "--max-total-tokens", "4096", "--forward-hooks", hooks.stdout.strip()]
    t0 = time.monotonic()
    with open(log, "wb") as lf:
        proc = subprocess.Popen([*LAUNCHERS[launcher], *args], stdout=lf,
                                stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        _wait_ready(proc, port, log)
        t1 = time.monotonic()
        outputs = [o for wave in waves for o in _post_wave(port, wave)]
        t2 = time.monotonic()
    finally:
        _stop(proc)
    return {"dir": out, "outputs": outputs, "start_s": t1 - t0, "requests_s": t2 - t1,
            "stop_s": time.monotonic() - t2, "pgid": proc.pid}


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def pair():
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft

    return ensure_trained_draft(RECIPE)


@pytest.fixture(scope="module")
def correct(pair, tmp_path_factory):
    return {**serve_and_record(tmp_path_factory.mktemp("correct"), pair.draft_dir, pair.target_dir,
                               launcher="verb"),
            "draft": pair.draft_dir}


@pytest.fixture(scope="module")
def seed_incident(pair, tmp_path_factory):
    """The draft config's ids [-1, 1, 14]: SGLang's llama rule (+1) captures B_0, B_2, B_15."""
    tmp = tmp_path_factory.mktemp("seed")
    draft = tmp / "draft"
    shutil.copytree(pair.draft_dir, draft)
    cfg = json.loads((draft / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [-1, 1, 14]
    (draft / "config.json").write_text(json.dumps(cfg, indent=1))
    return serve_and_record(tmp, draft, pair.target_dir)


@pytest.fixture(scope="module")
def useless(pair, tmp_path_factory):
    """A draft whose boundary conforms and which accepts nothing: the trained export with its d2t offsets
    permuted (seeded), as a conversion that reorders the vocabulary leaves it."""
    import torch
    from safetensors.torch import load_file, save_file

    tmp = tmp_path_factory.mktemp("useless")
    draft = tmp / "draft"
    draft.mkdir()
    shutil.copy(pair.draft_dir / "config.json", draft / "config.json")
    w = load_file(str(pair.draft_dir / "model.safetensors"))
    w["d2t"] = w["d2t"][torch.randperm(w["d2t"].numel(), generator=torch.Generator().manual_seed(0))].contiguous()
    save_file(w, str(draft / "model.safetensors"))
    return {**serve_and_record(tmp, draft, pair.target_dir), "draft": draft}


@pytest.fixture(scope="module")
def bf16(pair, tmp_path_factory):
    """The correct pair served with --dtype bfloat16 (the float32 contract's serving precision is float32)."""
    return serve_and_record(tmp_path_factory.mktemp("bf16"), pair.draft_dir, pair.target_dir, dtype="bfloat16")


def _check(d: Path, tmp: Path, *extra, contract: Path = CONTRACT) -> tuple[int, dict, float]:
    out = tmp / "report.json"
    t0 = time.monotonic()
    rc = main(["check-captures", str(d), "--contract", str(contract), "--json", str(out), *extra])
    return rc, json.loads(out.read_text()), time.monotonic() - t0


def _edited(tmp: Path, extra: str) -> Path:
    p = tmp / "edited.yaml"
    p.write_text(CONTRACT.read_text() + extra)
    return p


@pytest.mark.parametrize("reference", ["transformers", "engine"])
def test_the_correct_pair_conforms_on_its_own_server(correct, tmp_path, capsys, reference):
    assert _group_gone(correct["pgid"])
    assert all(o["meta_info"]["completion_tokens"] > 0 for o in correct["outputs"])
    assert correct["outputs"][-1]["meta_info"]["cached_tokens"] > 0  # a radix-cache prefix was attributed
    rc, doc, secs = _check(correct["dir"], tmp_path, "--conformance-reference", reference)
    text = capsys.readouterr().out
    print(f"timings: start {correct['start_s']:.0f} s, requests {correct['requests_s']:.1f} s, "
          f"check-captures ({reference}) {secs:.0f} s")
    assert rc == 0, text
    meta = doc["meta"]
    assert meta["decode"] == "observed" and meta["forward_modes"]["target TARGET_VERIFY"] > 0
    assert meta["unattributed_records"] == 0
    assert meta["reference"].startswith("engine" if reference == "engine" else "transformers")
    ident = [f for f in doc["findings"] if f["check"] == "slot_identity"]
    assert not [f for f in ident if f["status"] == "fail"]
    assert {f["slot"] for f in ident if f["status"] == "pass"} == {"slot 0", "slot 1", "slot 2"}


@pytest.mark.parametrize("reference", ["transformers", "engine"])
def test_the_seed_incident_fails_naming_slot_0_as_b0(seed_incident, tmp_path, capsys, reference):
    assert _group_gone(seed_incident["pgid"])
    page = tmp_path / "report.html"
    rc, doc, _ = _check(seed_incident["dir"], tmp_path, "--conformance-reference", reference, "--html", str(page))
    text = capsys.readouterr().out
    assert rc == 1, text
    bad = [f for f in doc["findings"] if f["check"] == "slot_identity" and f["status"] == "fail"]
    assert bad and bad[0]["slot"] == "slot 0" and "B_0" in str(bad[0]["observed"]), bad[:1]
    assert "B_0" in text
    # the page's heatmap row for slot 0: expected B_1 (the contract's first aux boundary), matched B_0
    assert re.search(r'data-slot="slot 0" data-expected="B_\d+" data-matched="B_0"', page.read_text())


def test_a_record_truncated_mid_write_is_named_and_the_rest_judged(correct, tmp_path, capsys):
    d = tmp_path / "partial"
    shutil.copytree(correct["dir"], d)
    last = sorted(d.glob("*.pt"))[-1]
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])  # what a kill during torch.save leaves
    rc, doc, _ = _check(d, tmp_path)
    assert rc == 1  # some records unreadable among readable ones: VIOLATIONS, as check-data
    broken = [f for f in doc["findings"] if f["check"] == "sample_available" and f["status"] == "fail"]
    assert [f["where"] for f in broken] == [last.name]
    assert any(f["check"] == "slot_identity" and f["status"] == "pass" for f in doc["findings"])


def test_without_decode_records_the_report_says_decode_was_not_checked(correct, tmp_path, capsys):
    """What a GPU server with CUDA graphs leaves (replayed decode forwards run no hooks): only the
    prefill/extend records. Simulated on CPU (no graphs here) by keeping only those records."""
    import torch

    d = tmp_path / "graphed"
    shutil.copytree(correct["dir"], d)
    for f in d.glob("*.pt"):
        if torch.load(f, weights_only=True)["mode"] != "EXTEND":
            f.unlink()
    rc, doc, _ = _check(d, tmp_path)
    text = capsys.readouterr().out
    assert rc == 0, text
    assert doc["meta"]["decode"].startswith("NOT observed") and "cuda_graph_setup.py:454-457" in doc["meta"]["decode"]
    skip = [f for f in doc["findings"] if f["check"] == "decode_observed"]
    assert [f["status"] for f in skip] == ["skip"] and "decode NOT checked" in skip[0]["message"]
    assert not [f for f in doc["findings"] if f["check"] == "decode_observed" and f["status"] == "pass"]


def test_records_made_for_a_contract_validate_refuses_are_refused_too(correct, tmp_path, capsys):
    """Issue 41's seam, on the records of the real server: a contract validate refuses (the trained draft's
    config carrying a second, different id list at the top level; SGLang reads the nested one, so the server
    captured exactly what the correct pair's did). Before the gate, serve-hooks prepared a directory for it
    (exit 0) and check-captures judged the records CONFORMS (exit 0, measured on SGLang's real server).
    Here the correct pair's records stand in for that run's (the same server, draft weights and nested ids),
    under a manifest written for the refused contract as serve-hooks wrote it."""
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.serving.captures import MANIFEST, write_manifest

    draft = tmp_path / "draft"
    shutil.copytree(_trained_draft(), draft)
    cfg = json.loads((draft / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [2, 15, 27]
    (draft / "config.json").write_text(json.dumps(cfg, indent=2))
    text = CONTRACT.read_text().replace("  name: fixtures/smollm2-135m/draft\n",
                                        "  name: fixtures/smollm2-135m/draft\n  path: draft\n")
    refused = tmp_path / "pair.yaml"
    refused.write_text(text)
    d = tmp_path / "records"
    write_manifest(d, str(refused), load_contract(refused), "engine")  # the library loader: no gate
    for f in correct["dir"].iterdir():
        if f.name != MANIFEST:
            (shutil.copytree if f.is_dir() else shutil.copy)(f, d / f.name)  # records/runtime: the draft's runtime
    capsys.readouterr()
    assert main(["serve-hooks", str(refused), "--out", str(tmp_path / "again")]) == 2
    assert main(["check-captures", str(refused), str(d), "--conformance-reference", "engine"]) == 2
    out, err = capsys.readouterr()
    assert "CONFORMS" not in out and f"{refused}:" in err and "draft.layer_ids.values" in err
    assert "eagle_aux_hidden_state_layer_ids = [2, 15, 27] differ" in err and not (tmp_path / "again").exists()


def _trained_draft() -> Path:
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft

    return ensure_trained_draft(RECIPE).draft_dir


def test_acceptance_is_judged_and_a_floor_is_written_from_the_records(correct, tmp_path, capsys):
    """Issue 41: the records' acceptance is part of the verdict (the draft accepts, by SGLang's own
    num_accept_tokens; the served draft's vocabulary read from the directory the server loaded), the
    directory is judged with the reference it recorded (serve-hooks --conformance-reference engine) when
    none is asked, and --write-floor writes a floor from these records that a contract without calibrated
    bands carries and the same records meet."""
    floored = tmp_path / "floored.yaml"
    rc, doc, _ = _check(correct["dir"], tmp_path, "--write-floor", str(floored))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert doc["meta"]["reference"].startswith("engine")  # recorded with the engine's boundaries: judged with them
    by = {f["check"]: f for f in doc["findings"] if f["check"] in ("draft_acceptance", "draft_vocab")}
    assert by["draft_acceptance"]["status"] == "pass", by
    assert by["draft_vocab"]["status"] == "pass" and str(correct["draft"]) in by["draft_vocab"]["where"], by
    assert f"floor written to {floored}: gates.min_accept_length: " in out
    assert main(["validate", str(floored)]) == 0
    rc, doc, _ = _check(correct["dir"], tmp_path, contract=floored)
    gate = [f for f in doc["findings"] if f["check"] == "accept_length"]
    assert rc == 0 and [f["status"] for f in gate] == ["pass"], gate


def test_float32_served_on_the_float16_contract_fails_with_the_diagnosis_and_its_fix(correct, tmp_path, capsys):
    """The issue's case: init writes precision.serving float16 (SGLang's dtype=auto rule); the server ran
    --dtype float32. The contract was edited after serve-hooks: the records are judged, the edit reported."""
    rc, doc, _ = _check(correct["dir"], tmp_path, contract=_edited(tmp_path, "precision:\n  serving: float16\n"))
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 1, out
    (d,) = [x for x in doc["diagnoses"] if x["kind"] == "serving-dtype"]
    assert d["title"] == "the target was served in float32; the contract declares precision.serving: float16"
    assert d["fix"][0].startswith("if float32 is what you deploy: set precision.serving: float32") and \
        "--dtype float16" in d["fix"][1]
    assert "contract_changes: edited since serve-hooks: precision.serving None -> 'float16'" in out, out


def test_bfloat16_served_on_the_float32_contract_fails_with_the_diagnosis_and_its_fix(bf16, tmp_path, capsys):
    rc, doc, _ = _check(bf16["dir"], tmp_path)
    out = capsys.readouterr().out
    assert rc == 1, out
    (d,) = [x for x in doc["diagnoses"] if x["kind"] in ("serving-dtype", "production-precision")]
    assert d["kind"] == "serving-dtype", doc["diagnoses"]
    assert d["title"] == "the target was served in bfloat16; the contract declares precision.serving: float32"
    assert "set precision.serving: bfloat16" in d["fix"][0] and "--dtype float32" in d["fix"][1]


def test_a_conforming_draft_that_accepts_nothing_fails_with_the_causes_after_the_boundary(useless, tmp_path, capsys):
    """The trained draft with its d2t scrambled: every check of what reaches the draft passes, SGLang's
    counters say it accepts nothing, and the diagnosis points after the boundary, at the mapping first."""
    rc, doc, _ = _check(useless["dir"], tmp_path)
    out = capsys.readouterr().out
    assert rc == 1, out
    ident = [f["status"] for f in doc["findings"] if f["check"] == "slot_identity"]
    assert "pass" in ident and "fail" not in ident, ident
    acc = [f for f in doc["findings"] if f["check"] == "draft_acceptance"]
    assert [f["status"] for f in acc] == ["fail"] and acc[0]["observed"]["drafts_per_step"] < 0.05, acc
    vocab = [f for f in doc["findings"] if f["check"] == "draft_vocab"]
    assert vocab[0]["status"] == "fail" and "not strictly increasing" in vocab[0]["message"], vocab
    (d,) = [x for x in doc["diagnoses"] if x["kind"] == "draft-accepts-nothing"]
    assert d["fix"][0].startswith("fix the draft's vocabulary mapping first")
    assert any("weights" in f for f in d["fix"]) and any("lm_head" in f for f in d["fix"])
    assert "DIAGNOSIS 1/1: input draft-accepts-nothing" in out


def test_the_seed_incident_is_a_boundary_fault_not_a_useless_draft(seed_incident, tmp_path, capsys):
    rc, doc, _ = _check(seed_incident["dir"], tmp_path)
    capsys.readouterr()
    assert rc == 1 and "draft-accepts-nothing" not in {d["kind"] for d in doc["diagnoses"]}

