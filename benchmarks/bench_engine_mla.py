"""The seeds' architecture (DeepSeek-V3 / Kimi-K2.5 structure: MLA + MoE) through the real ``sglang.Engine``
on CPU, judged with the engine as its own reference and with transformers: the figures of
docs/engine-reference.md, "DeepSeek-V3 / Kimi-K2.5 structure (MLA + MoE)".

    PYTHONPATH=. python benchmarks/bench_engine_mla.py [--draft mla|llama] [--tp2] [--json OUT]

Runs (one engine start each, ~20-30 s on the shared 2-core machine): the correct pair with each draft
(SGLang's Llama EAGLE-3 draft and its MLA draft, Kimi-K2.5's kind), then with ``--draft`` (default
``mla``): the embedding prepended in slot 0 (ids ``[0, 2, 4]``), the ids SGLang 0.5.12's rule reads
(``[3, 5, 6]``), the Llama-style embedding ids ``[-1, 2, 4]`` (SGLang refuses them at start), and with
``--tp2`` the correct pair at ``tp_size`` 2. The pair: :mod:`eagle3_conformance.tools.sglang_engine.mla_pair`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "tests" / "data" / "engine" / "tiny-deepseek-v3-mla.yaml"


def runs(c, tp2: bool, draft: str) -> list:
    """(name, draft kind, draft config ids or None, extra engine spec) for each run."""
    from eagle3_conformance.engine_ids.sglang import sglang_ids_for, sglang_rule

    ids = list(c.draft.layer_ids.values)
    arch = c.target.architecture
    old = sglang_rule(arch, "0.5.12").boundaries(c.L, ids)
    out = [("correct-llama-draft", "llama", None, None), ("correct-mla-draft", "mla", None, None),
           ("embedding-prepended", draft, [0] + ids[:-1], None),
           ("ids-0.5.12-rule", draft, sglang_ids_for(sglang_rule(arch), c.L, old)[0], None),
           ("llama-style-minus-one", draft, [-1] + ids[:-1], None)]
    if tp2:
        out.append(("correct-tp2", draft, None, {"tp_size": 2}))
    return out


def one(c, pair, prompts, name, kind, ids, extra, work: Path) -> dict:
    from eagle3_conformance.faults.engine_column import (
        EngineFault,
        _engine_findings,
        _findings,
        _with_ids,
        agreement,
        fault_draft_dir,
        numeric_agreement,
    )
    from eagle3_conformance.paths.sglang_engine import reference_builder, reference_config
    from eagle3_conformance.tools.sglang_engine import EngineRunError, EngineStartError, observe_engine

    base = pair.mla_draft_dir if kind == "mla" else pair.draft_dir
    if kind == "mla":
        c = c.model_copy(update={"draft": c.draft.model_copy(update={"architecture": "Eagle3DeepseekV2ForCausalLM"})})
    draft = base if ids is None else fault_draft_dir(
        base, EngineFault(name, "K2", f"ids {ids}", (), config=lambda cfg: _with_ids(cfg, ids)),
        work / "drafts", pair.target_dir)
    try:
        obs = observe_engine(pair.target_dir, draft, prompts, max_new_tokens=8, workdir=work / name,
                             reference=(ref := reference_config(c, pair.target_dir)),
                             reference_builder=reference_builder(ref, pair.target_dir), extra=extra)
    except (EngineStartError, EngineRunError) as e:
        return {"draft": kind, "ids": ids, "engine": type(e).__name__, "reason": e.reason}
    ef, tf = _engine_findings(c, obs), _findings(c, obs)
    a = agreement(tf, ef)
    res = {"draft": kind, "ids": ids, "timings": {k: round(v, 2) for k, v in obs.run.timings.items()},
           "captured": obs.extend[0].engine_boundaries, "lossless": obs.lossless["engine"] == obs.lossless["reference"],
           "engine_reference": dict(Counter(f.status for f in ef)),
           "failed_checks": dict(Counter(f.check for f in ef if f.status == "fail")),
           "agreement": {"findings": a["findings"], "equal": a["equal"],
                         "statuses_equal": [(f.check, f.where, f.slot, f.status) for f in ef]
                         == [(f.check, f.where, f.slot, f.status) for f in tf]},
           "rank": obs.engine_reference.stats["rank"], "rows": obs.engine_reference.stats["rows"],
           "bytes": obs.engine_reference.stats["bytes"]}
    if ids is None:
        res["max_rel_err"] = {b: v["max_rel_err"] for b, v in numeric_agreement(c, obs).items()}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp2", action="store_true", help="also the correct pair at tp_size 2 (2 cores)")
    ap.add_argument("--draft", choices=("mla", "llama"), default="mla", help="the draft the faults are caused in")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.testbed.trained_draft import eval_prompts
    from eagle3_conformance.tools.sglang_engine.mla_pair import ensure_mla_pair

    c, pair = load_contract(CONTRACT), ensure_mla_pair()
    prompts = eval_prompts(pair.target_dir, 2, 48)
    work = Path(tempfile.mkdtemp(prefix="bench-engine-mla-"))
    try:
        out = {name: one(c, pair, prompts, name, kind, ids, extra, work)
               for name, kind, ids, extra in runs(c, a.tp2, a.draft)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(out, indent=1, default=str)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
