"""Diagnoses of the draft-fc checks (checks/draft_fc.py): the pre-fc norm missing on the path,
or there where the contract declares none."""

from __future__ import annotations

from collections import Counter

from eagle3_conformance.contract import Contract
from eagle3_conformance.diagnose.base import Diagnosis, _PathView
from eagle3_conformance.diagnose.fixes import _Fixer


def _pre_fc_norm(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    bad = v.failing("pre_fc_norm")
    if not bad:
        return []
    got = Counter(str(f.observed) for f in bad).most_common(1)[0][0]
    want = c.draft.pre_fc_norm
    words = {"none": "the raw aux concat (no pre-fc norm)", "norm_before_fc": "norm_before_fc (one RMSNorm over "
             "the K x d concat)", "fc_norm": "fc_norm (an RMSNorm per slot)",
             "other": "neither the raw aux concat nor its RMSNorm"}
    ev = [f"the fc input is {words.get(got, got)}; the contract says draft.pre_fc_norm: {want}"]
    if want != "none" and got == "none":
        title = f"the draft declares {want} but the engine path feeds fc without it"
        fix = (f"the engine must apply the draft's {want} before fc: put the flag where the serving engine reads it "
               "(SGLang 0.5.23 llama_eagle3.py: eagle_config.norm_before_fc or top-level norm_before_fc; fc_norm / "
               "use_aux_norm) and ship its weight in the checkpoint (vllm-project/vllm#38111, "
               "sgl-project/sglang#32334)",)
    elif want == "none":
        title = f"the engine path applies a pre-fc norm ({got}) the contract does not declare"
        fix = (f"if the draft was trained with it, set draft.pre_fc_norm: {got} in the contract; otherwise remove "
               "the flag from the draft config",)
    else:
        title = f"the engine path feeds fc {words.get(got, got)}; the draft declares {want}"
        fix = (f"make the engine apply exactly {want} (check the flag names it reads and the checkpoint's norm "
               "weights)",)
    used.add("pre_fc_norm")
    n_all = len([f for f in v.by_check.get("pre_fc_norm", []) if f.status != "skip"])
    return [Diagnosis("pre-fc-norm", "K4", title, tuple(ev), fix, (v.path,), ("fc input",), ("pre_fc_norm",),
                      {v.path: f"{len(bad)}/{n_all} {v.unit}"})]


#: failures a lower production precision explains (its noise, judged by gates set for float32): these
#: checks' own failures, and any check's failure decided by the per-row floor (the declared boundary is
#: the best match, only too far)
