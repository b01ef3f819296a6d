"""``check-invariance`` on the user's own server, for real (docs/own-server.md, "Your server against itself"):
SGLang 0.5.23's real HTTP server (the CPU recipe, ``eagle3-conformance serve --``) started with ``serve-hooks``'
``--forward-hooks`` value, the held-out prompts sent plain and under each request-level variation, the records
read back and compared row by row.

Five server starts (the soak tier, ``tox -e soak``: each start is 1.5-3 min on the shared 2-core machine):

* the correct SmolLM2 pair: exit 0, every request-level variation compared and exercised (the records show a
  batch, logprobs, a cache hit), chunked prefill and TP reported as fixed per server with the server's values;
* a second server launched like the first but with ``--chunked-prefill-size 16`` (chunk ends at rows 15 and 31
  of the 48-token prompts), given as ``--second-server``: its plain run is the ``chunked-prefill`` variation;
  clean, then with the column's ``chunk-end-target-guess`` (R84: SGLang before #26329) in its hooks, caught
  as the draft's input token at row 15;
* the same pair with two of the invariance column's in-engine faults added to the ``--forward-hooks`` list
  the way the in-process kill matrix adds them (:mod:`eagle3_conformance.faults.invariance_column`):
  ``logprob-aux-stale`` (R102) and ``cache-hit-normed-state`` (R95), whose conditions never meet in one
  request here: exit 1, each caught on its own variation naming the row and slot, the batch variation clean.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eagle3_conformance.cli import main
from eagle3_conformance.environment.ports import free_port
from tests.test_own_server_live import CONTRACT, LAUNCHERS, ROOT, _stop, _wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.soak]  # two real server starts: `tox -e soak`, not CI


@contextlib.contextmanager
def running_server(tmp: Path, target_dir: Path, draft_dir: Path, faults: tuple[str, ...] = (), extra=()):
    """serve-hooks into ``tmp/records``, the server started with that value plus ``faults``' hook specs
    (:func:`eagle3_conformance.tools.sglang_engine.fault_hooks.spec`) and ``extra`` launch arguments; yields
    ``(url, records dir)``."""
    from eagle3_conformance.tools.sglang_engine.fault_hooks import spec

    out = tmp / "records"
    hooks = subprocess.run([sys.executable, "-m", "eagle3_conformance.cli", "serve-hooks", str(CONTRACT), "--out",
                            str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert hooks.returncode == 0, hooks.stderr
    value = json.dumps(json.loads(hooks.stdout) + [spec(f) for f in faults])
    port, log = free_port(), tmp / "server.log"
    args = ["--model-path", str(target_dir), "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
            str(draft_dir), "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4", "--dtype", "float32", "--host", "127.0.0.1", "--port", str(port),
            "--mem-fraction-static", "0.3", "--max-total-tokens", "4096", "--forward-hooks", value, *extra]
    import os

    t0 = time.monotonic()
    with open(log, "wb") as lf:
        proc = subprocess.Popen([*LAUNCHERS["verb"], *args], stdout=lf, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        _wait_ready(proc, port, log)
        print(f"server ready in {time.monotonic() - t0:.0f} s", flush=True)
        yield f"http://127.0.0.1:{port}", out
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def pair():
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft

    return ensure_trained_draft(RECIPE)


def _check(url: str, d: Path, tmp: Path, *extra: str) -> tuple[int, dict, float]:
    out = tmp / "report.json"
    t0 = time.monotonic()
    rc = main(["check-invariance", str(CONTRACT), "--server", url, "--captures", str(d), "--json", str(out), *extra])
    return rc, json.loads(out.read_text()), time.monotonic() - t0


def _fails(doc: dict) -> list[dict]:
    return [f for f in doc["findings"] if f["status"] == "fail"]


def test_the_correct_pair_on_its_own_server_is_invariant(pair, tmp_path, capsys):
    with running_server(tmp_path, pair.target_dir, pair.draft_dir) as (url, d):
        rc, doc, secs = _check(url, d, tmp_path)
        # the same directory again, a second run: its requests are told apart by their tag, never paired across runs
        (tmp_path / "again").mkdir()
        rc2, doc2, _ = _check(url, d, tmp_path / "again")
    out = capsys.readouterr().out
    print(out)
    print(f"check-invariance: {secs:.1f} s; seconds per variation: {doc['meta']['seconds_per_variation']}")
    assert rc == 0 and rc2 == 0, _fails(doc) + _fails(doc2)
    inv = [f for f in doc["findings"] if f["check"] == "engine_invariance"]
    for name in ("batch", "input-logprobs", "prefix-cache-repeat", "prefix-cache-shared"):
        mine = [f for f in inv if f["where"].startswith(name + ":")]
        assert mine and all(f["status"] == "pass" for f in mine), (name, mine)
        assert any(f["slot"] == "variation" for f in mine), f"{name}: the records do not show it happened"
    fixed = {f["where"].split(": ")[-1]: f for f in doc["findings"] if f["check"] == "engine_variations"}
    assert fixed["chunked-prefill"]["status"] == "skip" and "chunked_prefill_size" in fixed["chunked-prefill"]["message"]
    assert fixed["tp2"]["status"] == "skip" and "tp_size 1" in fixed["tp2"]["message"]
    assert "not varied: chunked-prefill" in out
    _stand_in_writes_what_the_real_hooks_write(d)


def _stand_in_writes_what_the_real_hooks_write(d: Path) -> None:
    """The fast tier's stand-in server (tests/test_own_server_invariance.py ``StandIn``) against the thing it
    replaces: every field it writes in a target / draft EXTEND record is one the real server's hooks wrote."""
    import torch

    from tests.test_own_server_invariance import StandIn

    real = {}
    for f in sorted(d.glob("*.pt")):
        rec = torch.load(f, weights_only=True)
        if rec.get("mode") == "EXTEND":
            real.setdefault(rec["role"], set(rec))
    fake_dir = d.parent / "stand-in"
    fake_dir.mkdir()
    with StandIn(fake_dir) as s:
        s.generate({"input_ids": [[1, 2, 3, 4]], "rid": ["x:plain/p0"]})
    fake = {r["role"]: set(r) for r in (torch.load(f, weights_only=True) for f in sorted(fake_dir.glob("*.pt")))}
    assert fake["target"] <= real["target"] and fake["draft"] <= real["draft"], (fake, real)


def test_the_invariance_columns_faults_are_caught_on_a_real_server(pair, tmp_path, capsys):
    with running_server(tmp_path, pair.target_dir, pair.draft_dir,
                        faults=("logprob-aux-stale", "cache-hit-normed-state")) as (url, d):
        rc, doc, secs = _check(url, d, tmp_path, "--variations", "batch,input-logprobs,prefix-cache-repeat")
    print(capsys.readouterr().out)
    print(f"check-invariance with 2 faults: {secs:.1f} s")
    assert rc == 1
    bad = _fails(doc)
    by = {name: [f for f in bad if f["where"].startswith(name + ":")]
          for name in ("batch", "input-logprobs", "prefix-cache-repeat")}
    assert by["input-logprobs"] and by["prefix-cache-repeat"], bad
    assert not by["batch"], by["batch"]  # each fault stays inside its condition
    f = by["prefix-cache-repeat"][0]
    assert f["check"] == "engine_invariance" and f["slot"].startswith("slot") and "row " in f["message"], f
    assert any(x["slot"].startswith("slot") and "row " in x["message"] for x in by["input-logprobs"]), by


def test_a_second_server_with_chunked_prefill_is_compared_and_its_r84_fault_caught(pair, tmp_path, capsys):
    chunked = ("--chunked-prefill-size", "16")
    with contextlib.ExitStack() as st:
        url, d = st.enter_context(running_server(tmp_path / "plain", pair.target_dir, pair.draft_dir))
        url2, d2 = st.enter_context(running_server(tmp_path / "chunked", pair.target_dir, pair.draft_dir, extra=chunked))
        rc, doc, secs = _check(url, d, tmp_path, "--variations", "batch", "--second-server", url2,
                               "--second-captures", str(d2))
        st.close()  # the clean chunked server down before the faulty one starts
        (tmp_path / "fault").mkdir()
        with running_server(tmp_path / "fault", pair.target_dir, pair.draft_dir, faults=("chunk-end-target-guess",),
                            extra=chunked) as (url3, d3), \
                running_server(tmp_path / "plain2", pair.target_dir, pair.draft_dir) as (url4, d4):
            rc2, doc2, secs2 = _check(url4, d4, tmp_path / "fault", "--variations", "batch", "--second-server", url3,
                                      "--second-captures", str(d3))
    print(capsys.readouterr().out)
    print(f"check-invariance with a second server: {secs:.1f} s clean, {secs2:.1f} s with chunk-end-target-guess; "
          f"seconds per variation: {doc['meta']['seconds_per_variation']}")
    mine = [f for f in doc["findings"] if f["where"].startswith("chunked-prefill:")]
    assert rc == 0 and mine and all(f["status"] == "pass" for f in mine), _fails(doc)
    assert any(f["slot"] == "variation" and f["observed"]["chunks"] == 3 for f in mine), mine  # chunk ends inside
    assert rc2 == 1
    bad = [f for f in _fails(doc2) if f["where"].startswith("chunked-prefill:")]
    assert bad and bad[0]["slot"] == "token" and bad[0]["message"].startswith("row 15:"), bad
