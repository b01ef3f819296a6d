"""The engine as its own reference against the transformers reference, through the real ``sglang.Engine``
on CPU (docs/engine-reference.md): the same engine runs judged both ways, finding for finding, on the
correct pair and on every fault of the engine kill-matrix column; plus what recording costs.

    PYTHONPATH=. python benchmarks/bench_engine_reference.py smollm2 [--faults none|all] [--tp 2] [--json OUT]
    PYTHONPATH=. python benchmarks/bench_engine_reference.py gemma   [--faults none|all] [--json OUT]
    PYTHONPATH=. python benchmarks/bench_engine_reference.py smollm2 --http [--json OUT]
    python benchmarks/bench_engine_reference.py --render agreement|numeric|cost --from JSON [--from JSON ...]

``gemma``: the held-out Gemma-3-270M fixture with a random-weight draft
(:mod:`eagle3_conformance.tools.sglang_engine.random_draft`): SGLang 0.5.23 captures its aux states
without the residual (sgl-project/sglang#39286), so its baseline fails slot identity with either
reference. One engine start per run (~100-200 s on the shared 2-core machine; ``--faults all``: 7 runs).

``--tp 2``: every engine run at ``tp_size`` 2 (gloo, one core per rank; needs 2 cores).

``--http``: SGLang's real HTTP server (``python -m eagle3_conformance.serving.serve``, the user's flow of
docs/own-server.md) with ``serve-hooks --conformance-reference engine``, batched traffic (``--clients``
concurrent ``/generate`` requests of 2 prompts each, then a follow-up sharing a cached prefix), stopped,
its records attributed without the prompts (``serving.captures``) and judged both ways.

``--render``: the Markdown tables of docs/engine-reference.md from the JSON files the runs wrote
(docs/measured/engine-reference-*.json); cheap, no engine: ``tox -e docs`` and
tests/test_docs_generated.py run it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = {"smollm2": ROOT / "contracts" / "smollm2-135m.yaml",
             "gemma": ROOT / "contracts" / "heldout" / "heldout-gemma3-270m.yaml"}
LABELS = {"smollm2": "SmolLM2-135M (trained draft)", "gemma": "Gemma-3-270M (random-weight draft)"}


def pair(name: str, work: Path):
    from eagle3_conformance.contract import load_contract

    if name == "smollm2":
        from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft

        t = ensure_trained_draft(RECIPE)
        return load_contract(CONTRACTS[name]), Path(t.target_dir), Path(t.draft_dir)
    from eagle3_conformance.testbed.fixtures import build_fixture
    from eagle3_conformance.tools.sglang_engine.random_draft import write_random_draft

    g = build_fixture("heldout-gemma3-270m")
    draft = write_random_draft(g.draft_dir, work / "gemma-draft")
    return load_contract(CONTRACTS[name]), Path(g.target_dir), draft


def _machine() -> dict:
    import platform

    return {"cpus": len(os.sched_getaffinity(0)), "load_avg": [round(x, 1) for x in os.getloadavg()],
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")}


def _sglang_version() -> str:
    from importlib.metadata import version

    return version("sglang")


def engine_run(a, c, target: Path, draft: Path, work: Path) -> tuple[dict, int]:
    """One batch per run through ``sglang.Engine``: the correct pair, then each fault (``--faults all``)."""
    from eagle3_conformance.faults.engine_column import FAULTS, run_engine_column
    from eagle3_conformance.paths.sglang_engine import reference_config
    from eagle3_conformance.testbed.trained_draft import eval_prompts

    ref = reference_config(c, target)
    prompts = eval_prompts(target, a.prompts, 48)
    t0 = time.perf_counter()
    res = run_engine_column(c, target, draft, prompts, work, max_new_tokens=a.tokens,
                            faults=FAULTS if a.faults == "all" else (), reference=ref,
                            log=lambda line: print(line, file=sys.stderr, flush=True),
                            extra={"tp_size": a.tp} if a.tp > 1 else None)
    out = {"mode": "engine", "boundaries": ref["boundaries"], "wall_s": time.perf_counter() - t0,
           "tp_size": a.tp, "prompts": a.prompts, "tokens": a.tokens,
           "timings": res["timings"], "judge_s": res["judge_s"], "captured": res["captured"],
           "verdicts": {k: [v.status, v.check] for k, v in res["verdicts"].items()},
           "engine_verdicts": {k: [v.status, v.check] for k, v in res["engine_verdicts"].items()},
           "agreement": res["agreement"], "reference_stats": res["reference_stats"], "numeric": res["numeric"],
           "baseline_failures": sorted({(f.check, f.slot, str(f.observed)) for f in res["baseline_failures"]}),
           "engine_baseline_failures": sorted({(f.check, f.slot, str(f.observed))
                                               for f in res["engine_baseline_failures"]})}
    bad = [k for k, v in res["agreement"].items() if v["differ"]]
    return out, 1 if bad or out["verdicts"] != out["engine_verdicts"] else 0


def http_run(a, c, target: Path, draft: Path, work: Path) -> tuple[dict, int]:
    """SGLang's HTTP server under batched traffic, judged both ways from the same records."""
    sys.path.insert(0, str(ROOT))
    from eagle3_conformance.faults.engine_column import agreement, numeric_agreement_of
    from eagle3_conformance.reference.engine import final_norm_weight, judged_rows
    from eagle3_conformance.serving.captures import _attribute_all, engine_reference, judge, read_dir
    from eagle3_conformance.suite.assess import reference_loader
    from eagle3_conformance.testbed.trained_draft import eval_prompts
    from tests.test_own_server_live import serve_and_record

    prompts = eval_prompts(target, 2 * a.clients, 48)
    sp = {"temperature": 0, "max_new_tokens": a.tokens}
    wave = [{"input_ids": prompts[2 * i:2 * i + 2], "sampling_params": sp} for i in range(a.clients)]
    follow = [{"input_ids": prompts[0] + prompts[1][:8], "sampling_params": sp}]  # a cached prefix
    t0 = time.perf_counter()
    served = serve_and_record(work, draft, target, contract=CONTRACTS[a.pair], waves=[wave, follow])
    sd = read_dir(served["dir"], c, engine_reference=True)
    extend, decode, _unatt, modes, row_tokens = _attribute_all(sd, {"engine": "sglang HTTP server"})
    eref = engine_reference(c, sd, row_tokens, final_norm_weight(target))
    caps = [j for j in (judged_rows(cap, eref) for cap in extend + decode) if j is not None]
    numeric = numeric_agreement_of(c, caps, eref, target)
    tf, _ = judge(c, sd, reference_loader(c, target), max_captures=-1)
    ef, _ = judge(c, sd, "engine", max_captures=-1, final_norm_weight=final_norm_weight(target))
    agree = agreement(tf, ef)
    out = {"mode": "http", "boundaries": [str(b) for b in eref.present], "wall_s": time.perf_counter() - t0,
           "clients": a.clients, "requests": a.clients + 1, "prompts": 2 * a.clients + 1, "tokens": a.tokens,
           "server_start_s": served["start_s"], "requests_s": served["requests_s"], "forward_modes": modes,
           "captures": {"extend": len(extend), "decode": len(decode), "judged": len(caps)},
           "reference_stats": {k: v for k, v in eref.stats.items() if k != "missing"},
           "numeric": numeric, "agreement": {"http": agree},
           "verdicts": {"http": sorted({f.status for f in tf if f.status == "fail"}) or ["pass"]},
           "engine_verdicts": {"http": sorted({f.status for f in ef if f.status == "fail"}) or ["pass"]}}
    return out, 1 if agree["differ"] else 0


# --- rendering the recorded JSON as the page's tables (cheap: json only) -------------------------------------

def _load(files: list[str]) -> list[dict]:
    return [json.loads(Path(f).read_text()) for f in files]


def _rng(xs: list[int]) -> str:
    return f"{min(xs):,}" if min(xs) == max(xs) else f"{min(xs):,}-{max(xs):,}"


def _label(d: dict) -> str:
    if d["mode"] == "http":
        return f"{LABELS[d['pair']]}, HTTP server"
    return LABELS[d["pair"]] + (f", tp_size {d['tp_size']}" if d.get("tp_size", 1) > 1 else "")


def render_agreement(docs: list[dict]) -> str:
    """Per recorded run set: engine runs, fault verdicts equal under both references, findings per run,
    findings equal finding for finding, and the checks of the findings that differ."""
    from collections import Counter

    rows = ["| pair | engine runs | fault verdicts equal | findings per run | findings equal | differing (check: count) |",
            "|---|---|---|---|---|---|"]
    for d in docs:
        ag = d["agreement"]
        faults = [k for k in d["verdicts"] if k != "http"]
        same = sum(d["verdicts"][k] == d["engine_verdicts"].get(k) for k in faults)
        verdicts = f"{same} of {len(faults)}" if faults else "-"
        per_run = [v["findings"] for v in ag.values()]
        equal, total = sum(v["equal"] for v in ag.values()), sum(per_run)
        differ = Counter(a[0] if isinstance(a, (list, tuple)) else a for v in ag.values() for a, _ in v["differ"])
        checks = ", ".join(f"{c}: {n}" for c, n in sorted(differ.items())) or "none"
        runs = len(d["timings"]) if d["mode"] == "engine" else 1
        rows.append(f"| {_label(d)} | {runs} | {verdicts} | {_rng(per_run)} | {equal:,} of {total:,} | {checks} |")
    return "\n".join(rows)


def render_numeric(docs: list[dict]) -> str:
    """The engine's recorded boundaries against the transformers forward, every row of every capture:
    ``||engine - transformers|| / ||transformers||`` per row, the worst over all rows and boundaries."""
    rows = ["| pair | traffic | boundaries | rows compared | worst relative error |", "|---|---|---|---|---|"]
    for d in docs:
        num = d["numeric"]
        traffic = (f"{d['requests']} HTTP requests ({d['clients']} at once, 2 prompts each, then a follow-up "
                   f"on a cached prefix), {d['tokens']} new tokens" if d["mode"] == "http" else
                   f"one batch of {d['prompts']} prompts, {d['tokens']} new tokens")
        worst = max(v["max_rel_err"] for v in num.values())
        rows.append(f"| {_label(d)} | {traffic} | {len(num)} | {sum(v['rows'] for v in num.values()):,} | "
                    f"{'0 (bit-identical)' if worst == 0 else f'{worst:.1e}'} |")
    return "\n".join(rows)


def render_cost(docs: list[dict]) -> str:
    """What recording and judging cost in the runs: rows and bytes of the first run, bytes per token,
    building the engine reference, and judging against each reference (seconds, shared machine)."""
    rows = ["| pair | rows recorded | bytes recorded | bytes / row | build the engine reference (s) | "
            "judge: transformers (s) | judge: engine (s) | engine run (s) |", "|---|---|---|---|---|---|---|---|"]
    for d in docs:
        st, js = d["reference_stats"], d.get("judge_s") or {}
        tr = [v["transformers"] for v in js.values() if "transformers" in v]
        en = [v["engine"] for v in js.values() if "engine" in v]
        t = list(d["timings"].values()) if d["mode"] == "engine" else [d["wall_s"]]

        def span(xs, f=".1f"):
            return "-" if not xs else f"{min(xs):{f}}" if len(xs) == 1 else f"{min(xs):{f}}-{max(xs):{f}}"
        if d["mode"] == "http":  # serving.captures counts rows, not bytes, and its build is not timed
            size, build = "- | -", "-"
        else:
            size = f"{st['bytes']:,} | {st['bytes'] // max(st['rows'], 1):,}"
            build = f"{st.get('build_s', 0):.3f}"
        rows.append(f"| {_label(d)} | {st['rows']:,} | {size} | {build} | {span(tr)} | {span(en)} | {span(t, '.0f')} |")
    return "\n".join(rows)


def render_column(docs: list[dict]) -> str:
    """The engine kill-matrix column of one run set (docs/faults.md): each fault as a user causes it
    (:data:`eagle3_conformance.faults.engine_column.FAULTS`), what the engine captured, the verdict under
    each reference, the findings equal, the run's seconds."""
    from eagle3_conformance.faults.engine_column import FAULTS

    faults = {f.name: f for f in FAULTS}
    rows = ["| fault (operator it mirrors) | kind | caused by | engine captured | verdict (transformers / engine "
            "reference) | findings equal | s |", "|---|---|---|---|---|---|---|"]
    for d in docs:
        base = "every check passes" if not d["baseline_failures"] else f"{len(d['baseline_failures'])} failing"
        ag = d["agreement"]["baseline"]
        rows.append(f"| baseline | | the draft as shipped | {', '.join(d['captured']['baseline'])} | {base} | "
                    f"{ag['equal']} of {ag['findings']} | {d['timings']['baseline']:.0f} |")
        for name, (status, check) in d["verdicts"].items():
            f, e = faults[name], d["engine_verdicts"][name]
            same = "same" if [status, check] == e else f"{e[0]} ({e[1]})"
            ag = d["agreement"].get(name)
            eq = f"{ag['equal']} of {ag['findings']}" if ag else "-"
            verdict = f"{status} (`{check}`)" if check else status
            captured = ", ".join(d["captured"].get(name, [])) or "(no start)"
            rows.append(f"| {name} | {f.kind} | {f.how} | {captured} | {verdict} / {same} | {eq} | "
                        f"{d['timings'][name]:.0f} |")
    return "\n".join(rows)


RENDER = {"agreement": render_agreement, "numeric": render_numeric, "cost": render_cost, "column": render_column}


def summary(d: dict, path: str) -> str:
    """One line for the recorded block of docs/engine-reference.md: what ran, where, when."""
    m = d["machine"]
    n = len(d["timings"]) if d["mode"] == "engine" else 1
    runs = f"{n} run{'s' if n > 1 else ''}"
    how = "HTTP server" if d["mode"] == "http" else f"sglang.Engine, tp_size {d.get('tp_size', 1)}"
    return (f"wrote {path}: {LABELS[d['pair']]}, {runs} ({how}), SGLang {d['sglang']}, {m['cpus']} CPUs shared "
            f"(load average {m['load_avg'][0]}), {m['date']}, {d['wall_s']:.0f} s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pair", nargs="?", choices=("smollm2", "gemma"))
    ap.add_argument("--faults", choices=("none", "all"), default="all")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--tp", type=int, default=1, help="tp_size of every engine run (CPU: gloo, one core per rank)")
    ap.add_argument("--http", action="store_true", help="SGLang's HTTP server under batched traffic instead")
    ap.add_argument("--clients", type=int, default=3, help="--http: concurrent requests of 2 prompts each")
    ap.add_argument("--json")
    ap.add_argument("--render", choices=sorted(RENDER), help="print a table of the --from files instead of running")
    ap.add_argument("--from", dest="files", action="append", default=[], help="--render: a JSON file --json wrote")
    a = ap.parse_args(argv)
    if a.render:
        if a.pair or not a.files:
            ap.error("--render takes --from JSON files, no pair")
        print(RENDER[a.render](_load(a.files)))
        return 0
    if not a.pair:
        ap.error("name a pair (smollm2 | gemma) or --render")
    work = Path(tempfile.mkdtemp(prefix="bench-engine-ref-"))
    try:
        c, target, draft = pair(a.pair, work)
        c = c.model_copy(update={"reference": "engine"})
        out, rc = (http_run if a.http else engine_run)(a, c, target, draft, work)
        out = {"pair": a.pair, "command": "python benchmarks/bench_engine_reference.py " + " ".join(argv or sys.argv[1:]),
               "sglang": _sglang_version(), "machine": _machine(), **out}
        text = json.dumps(out, indent=1, default=str)
        if a.json:  # the page's tables are rendered from the file (--render); stdout gets one line
            Path(a.json).write_text(text + "\n")
            print(summary(out, a.json))
        else:
            print(text)
        return rc
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
