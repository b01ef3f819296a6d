"""What an ``accept`` run can decide, measured on SGLang 0.5.23's real HTTP server (CPU recipe) with the
SmolLM2-135M pair: the correct draft, every fault of the engine kill-matrix column
(:data:`eagle3_conformance.faults.engine_column.FAULTS`, each caused the way a user causes it: a draft
directory whose config says it) and drafts that accept (almost) nothing with a conforming boundary
(an untrained draft, the trained draft with its d2t scrambled or missing).

    PYTHONPATH=. python benchmarks/bench_accept_decision.py run --out DIR [--variants a,b,...]
    PYTHONPATH=. python benchmarks/bench_accept_decision.py table DIR [--sizes 8x32,16x64,32x64]

``run``: one server start per variant (``python -m eagle3_conformance.serving.serve``), then the accept
session (:func:`eagle3_conformance.server_accept.session.measure`) on the CI subset (8 prompts x 32 tokens)
and the full set (32 x 64), 8 in flight; each variant's per-prompt counters go to ``DIR/<variant>.json``.
``table``: for each variant and prompt-set size, the paired decision against the correct draft
(:func:`eagle3_conformance.acceptance.decision.decide_paired`, tolerance 5%): the change, MET / DROPPED /
INCONCLUSIVE, the smallest detectable drop and the prompts that would decide it; a size N x 64 with N < 32
is the first N prompts of the full run (round-robin over the domains, as ``--prompts N`` selects them: the
engine is deterministic on CPU, docs/accept.md), and each variant's accepted drafts per verify step with
its interval over verify steps (the useless-draft threshold, docs/accept.md "A draft that accepts
nothing").
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from eagle3_conformance.environment.ports import free_port
from eagle3_conformance.environment.procgroup import kill_group

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "contracts" / "smollm2-135m.yaml"
SIZES = ((8, 32), (32, 64))
USELESS = ("untrained", "d2t-scrambled", "d2t-missing")
START_TIMEOUT = 900


def _start(target: Path, draft: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    args = ["--model-path", str(target), "--dtype", "float32", "--port", str(port), "--host", "127.0.0.1",
            "--mem-fraction-static", "0.3", "--max-total-tokens", "4096", "--random-seed", "0",
            "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(draft),
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    with open(log, "w") as lf:
        proc = subprocess.Popen([sys.executable, "-m", "eagle3_conformance.serving.serve", "--", *args], cwd=ROOT,
                                stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    t0 = time.time()
    while time.time() - t0 < START_TIMEOUT:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}): {log.read_text()[-600:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            pass
        time.sleep(2)
    kill_group(proc)
    raise RuntimeError(f"no /health within {START_TIMEOUT} s")


def useless_draft(name: str, base: Path, out: Path) -> Path:
    """A draft whose boundary conforms and which accepts (almost) nothing: ``untrained`` (random weights
    for the shipped config, :func:`eagle3_conformance.tools.sglang_engine.random_draft.write_random_draft`),
    ``d2t-scrambled`` (the trained weights, d2t offsets permuted with a fixed seed: every draft id maps to
    another target token), ``d2t-missing`` (the trained weights without d2t/t2d: SGLang then reads the draft's
    ids as target ids)."""
    import torch
    from safetensors.torch import load_file, save_file

    from eagle3_conformance.tools.sglang_engine.random_draft import write_random_draft

    if name == "untrained":
        return write_random_draft(base, out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(base / "config.json", out / "config.json")
    w = load_file(str(base / "model.safetensors"))
    if name == "d2t-scrambled":
        g = torch.Generator().manual_seed(0)
        w["d2t"] = w["d2t"][torch.randperm(w["d2t"].numel(), generator=g)].contiguous()
    else:
        w.pop("d2t")
        w.pop("t2d", None)
    save_file(w, str(out / "model.safetensors"))
    return out


def variants(base: Path, target: Path, work: Path) -> dict[str, Path]:
    from eagle3_conformance.faults.engine_column import FAULTS, fault_draft_dir

    out = {"correct": base}
    for f in FAULTS:
        out[f.name] = fault_draft_dir(base, f, work / "faults", target)
    for name in USELESS:
        out[name] = work / name
    return out


def run(out: Path, names: list[str], sizes=SIZES) -> None:
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.server_accept.session import Options, measure
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft

    t = ensure_trained_draft(RECIPE)
    c = load_contract(CONTRACT)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-accept-decision-"))
    try:
        vs = variants(Path(t.draft_dir), Path(t.target_dir), work)
        for name in names:
            draft = vs[name] if name not in USELESS else useless_draft(name, Path(t.draft_dir), vs[name])
            doc: dict = {"variant": name, "draft": str(draft), "runs": {}}
            t0 = time.time()
            try:
                proc, url = _start(Path(t.target_dir), draft, out / f"{name}.log")
            except RuntimeError as e:
                doc["start_error"] = str(e)[-400:]
                (out / f"{name}.json").write_text(json.dumps(doc, indent=1))
                print(f"{name}: server did not start ({time.time() - t0:.0f} s)", flush=True)
                continue
            doc["start_s"] = time.time() - t0
            try:
                for n, tok in sizes:
                    o = measure(Options(server=url, prompts=n, max_tokens=tok, concurrency=8), c)
                    doc["runs"][f"{n}x{tok}"] = {"wall_s": o.res.wall_s, "figures": o.fig,
                                                 "per_prompt": [r.to_json() for r in o.res.results]}
                    print(f"{name} {n}x{tok}: accept length {o.fig['accept_length']['value']:.3f} "
                          f"({o.res.wall_s:.0f} s)", flush=True)
            finally:
                kill_group(proc)
            (out / f"{name}.json").write_text(json.dumps(doc, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _pairs(results: list[dict], pos: int = 0) -> list[tuple[int, int]]:
    """(numerator, steps) per prompt: accept length without the prefill token (steps + accepted drafts)
    for ``pos`` 0 (the definition every source shares), else position ``pos``'s accepted steps."""
    if pos == 0:
        return [(r["steps"] + sum(r["accepted_per_pos"]), r["steps"]) for r in results]
    return [(r["accepted_per_pos"][pos - 1], r["steps"]) for r in results]


def _sglang_pairs(results: list[dict]) -> list[tuple[int, int]]:
    return [(r["committed"], r["steps"]) for r in results]


def table(d: Path, sizes: list[tuple[int, int]]) -> None:
    from eagle3_conformance.acceptance.decision import decide_paired
    from eagle3_conformance.acceptance.stats import bootstrap_accept_length
    from eagle3_conformance.server_accept.prompts import select

    docs = {p.stem: json.loads(p.read_text()) for p in sorted(d.glob("*.json"))}
    base = docs["correct"]

    def results(doc, n, tok):
        run = doc["runs"].get(f"{n}x{tok}") or doc["runs"].get(f"32x{tok}")
        if run is None:
            return None
        ids = [p.id for p in select(n)]
        by = {r["id"]: r for r in run["per_prompt"]}
        return [by[i] for i in ids]

    print("variant | size | accept length (SGLang) | change [95%] | tolerance | decision | detectable drop | "
          "prompts needed")
    for name, doc in docs.items():
        if "start_error" in doc:
            print(f"{name} | - | server did not start | - | - | caught at start (exit 2) | - | -")
            continue
        for n, tok in sizes:
            a, b = results(doc, n, tok), results(base, n, tok)
            if a is None:
                continue
            dec = decide_paired(_sglang_pairs(a), _sglang_pairs(b), 0.05)
            val = sum(x for x, _ in _sglang_pairs(a)) / sum(s for _, s in _sglang_pairs(a))
            print(f"{name} | {n}x{tok} | {val:.3f} | [{dec.change[0]:+.3f}, {dec.change[1]:+.3f}] | "
                  f"-{dec.tolerance:.3f} | {dec.verdict} | {dec.detectable_drop:.3f} | {dec.units_needed or '-'}")
    print("\nvariant | size | accepted drafts per verify step [95% over prompts] | steps | per-prompt min..max")
    for name, doc in docs.items():
        if "start_error" in doc:
            continue
        for n, tok in sizes:
            a = results(doc, n, tok)
            if a is None:
                continue
            drafts = [(sum(r["accepted_per_pos"]), r["steps"]) for r in a]
            iv = bootstrap_accept_length(drafts)
            per = [x / s for x, s in drafts if s]
            tot = sum(x for x, _ in drafts) / sum(s for _, s in drafts)
            print(f"{name} | {n}x{tok} | {tot:.3f} [{iv.lo:.3f}, {iv.hi:.3f}] | {sum(s for _, s in drafts)} | "
                  f"{min(per):.3f}..{max(per):.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--variants", default="")
    r.add_argument("--sizes", default="8x32,32x64", help="prompt-set sizes to run, NxTOKENS")
    t = sub.add_parser("table")
    t.add_argument("dir")
    t.add_argument("--sizes", default="8x32,8x64,16x64,24x64,32x64")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        from eagle3_conformance.faults.engine_column import FAULTS

        names = [x for x in a.variants.split(",") if x] or ["correct", *(f.name for f in FAULTS), *USELESS]
        run(Path(a.out), names, [tuple(int(x) for x in z.split("x")) for z in a.sizes.split(",")])
    else:
        table(Path(a.dir), [tuple(int(x) for x in s.split("x")) for s in a.sizes.split(",")])  # type: ignore[misc]
    return 0


if __name__ == "__main__":
    sys.exit(main())
