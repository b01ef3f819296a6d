"""The user's own server, for real (docs/own-server.md): ``python -m eagle3_conformance.serving.serve --
<sglang.launch_server args> --forward-hooks <serve-hooks' value>`` starts SGLang 0.5.23's real HTTP
server (CPU recipe), a real HTTP client posts to its native ``/generate`` (greedy, short prompts), the
server is stopped, and ``check-captures`` judges what it recorded.

Two server starts (one per module-scoped case): the correct SmolLM2 pair -> exit 0; the seed incident
caused through the draft config (``eagle_aux_hidden_state_layer_ids`` [-1, 1, 14]: SGLang's rule
captures B_0, the embedding, into slot 0) -> exit 1 naming slot 0 = B_0. The correct pair's records,
with one record truncated as a server killed mid-write leaves it, -> the rest judged, the broken
record named.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from eagle3_conformance.cli import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "contracts" / "smollm2-135m.yaml"
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village"]
FOLLOW_UP = "Once upon a time, in a small village by the sea"  # shares a cached prefix with PROMPTS[2]
START_TIMEOUT = 600
REQUEST_TIMEOUT = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def _post_wave(port: int, bodies: list[dict]) -> list:
    """Post ``bodies`` concurrently (one client thread each, so the scheduler batches them); outputs in order."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(bodies)) as ex:
        outs = list(ex.map(lambda b: _post(port, b), bodies))
    return [o for out in outs for o in (out if isinstance(out, list) else [out])]


def serve_and_record(tmp: Path, draft_dir: Path, target_dir: Path, contract: Path = CONTRACT,
                     waves: "list[list[dict]] | None" = None) -> dict:
    """Prepare DIR with serve-hooks (recording the target's boundaries too, so both references can
    judge the same records), serve the pair, post the prompts, stop; timings in seconds.

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
    port, log = _free_port(), tmp / "server.log"
    args = ["--model-path", str(target_dir), "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
            str(draft_dir), "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4", "--dtype", "float32", "--host", "127.0.0.1", "--port", str(port),
            "--mem-fraction-static", "0.3", "--max-total-tokens", "4096", "--forward-hooks", hooks.stdout.strip()]
    t0 = time.monotonic()
    with open(log, "wb") as lf:
        proc = subprocess.Popen([sys.executable, "-m", "eagle3_conformance.serving.serve", "--", *args], stdout=lf,
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
    return serve_and_record(tmp_path_factory.mktemp("correct"), pair.draft_dir, pair.target_dir)


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


def _check(d: Path, tmp: Path, *extra) -> tuple[int, dict, float]:
    out = tmp / "report.json"
    t0 = time.monotonic()
    rc = main(["check-captures", str(d), "--contract", str(CONTRACT), "--json", str(out), *extra])
    return rc, json.loads(out.read_text()), time.monotonic() - t0


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
