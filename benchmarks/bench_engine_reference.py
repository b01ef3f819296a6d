"""The engine as its own reference against the transformers reference, through the real ``sglang.Engine``
on CPU (docs/engine-reference.md): the same engine runs judged both ways, finding for finding, on the
correct pair and on every fault of the engine kill-matrix column; plus what recording costs.

    PYTHONPATH=. python benchmarks/bench_engine_reference.py smollm2 [--faults none|all] [--json OUT]
    PYTHONPATH=. python benchmarks/bench_engine_reference.py gemma   [--faults none|all] [--json OUT]

``gemma``: the held-out Gemma-3-270M fixture with a random-weight draft
(:mod:`eagle3_conformance.tools.sglang_engine.random_draft`): SGLang 0.5.23 captures its aux states
without the residual (sgl-project/sglang#39286), so its baseline fails slot identity with either
reference. One engine start per run (~100-200 s on the shared 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pair(name: str, work: Path):
    from eagle3_conformance.contract import load_contract

    if name == "smollm2":
        from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft

        t = ensure_trained_draft(RECIPE)
        return load_contract(ROOT / "contracts" / "smollm2-135m.yaml"), Path(t.target_dir), Path(t.draft_dir)
    from eagle3_conformance.testbed.fixtures import build_fixture
    from eagle3_conformance.tools.sglang_engine.random_draft import write_random_draft

    g = build_fixture("heldout-gemma3-270m")
    draft = write_random_draft(g.draft_dir, work / "gemma-draft")
    return load_contract(ROOT / "contracts" / "heldout" / "heldout-gemma3-270m.yaml"), Path(g.target_dir), draft


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("pair", choices=("smollm2", "gemma"))
    ap.add_argument("--faults", choices=("none", "all"), default="all")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    from eagle3_conformance.faults.engine_column import FAULTS, run_engine_column
    from eagle3_conformance.paths.sglang_engine import reference_config
    from eagle3_conformance.testbed.trained_draft import eval_prompts

    work = Path(tempfile.mkdtemp(prefix="bench-engine-ref-"))
    try:
        c, target, draft = pair(a.pair, work)
        c = c.model_copy(update={"reference": "engine"})
        ref = reference_config(c, target)
        prompts = eval_prompts(target, a.prompts, 48)
        t0 = time.perf_counter()
        res = run_engine_column(c, target, draft, prompts, work, max_new_tokens=a.tokens,
                                faults=FAULTS if a.faults == "all" else (), reference=ref, log=print)
        out = {"pair": a.pair, "boundaries": ref["boundaries"], "wall_s": time.perf_counter() - t0,
               "timings": res["timings"], "judge_s": res["judge_s"], "captured": res["captured"],
               "verdicts": {k: [v.status, v.check] for k, v in res["verdicts"].items()},
               "engine_verdicts": {k: [v.status, v.check] for k, v in res["engine_verdicts"].items()},
               "agreement": res["agreement"], "reference_stats": res["reference_stats"], "numeric": res["numeric"],
               "baseline_failures": sorted({(f.check, f.slot, str(f.observed)) for f in res["baseline_failures"]}),
               "engine_baseline_failures": sorted({(f.check, f.slot, str(f.observed))
                                                   for f in res["engine_baseline_failures"]})}
        text = json.dumps(out, indent=1, default=str)
        print(text)
        if a.json:
            Path(a.json).write_text(text)
        bad = [k for k, v in res["agreement"].items() if v["differ"]]
        return 1 if bad or out["verdicts"] != out["engine_verdicts"] else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
