"""The kill matrix's ``vllm-engine`` column: each fault caused the way a user causes it, through the
real ``vllm.LLM`` (a draft config, or the ``model`` / ``speculative_config`` arguments), never
injected after the engine.

The baseline is the SmolLM2 pair's trained draft in vLLM's form (the contract's B_2, B_15, B_27 as
vLLM's ids [2, 15, 27]: :func:`eagle3_conformance.paths.vllm_engine.vllm_form_draft`). Every config
fault is a copy of that directory (weights linked, ``config.json`` rewritten); vLLM 0.32.0 reads the
top-level ``eagle_aux_hidden_state_layer_ids`` first, then ``eagle_config``'s
(``v1/worker/gpu_model_runner.py:5268-5283``), and with neither the defaults (2, L//2, L-3). What the
engine applied is read off the worker (``aux_hidden_state_layers``) and each slot of the ``fc`` input
is identified in the target's own residual stream (``engine_slot_boundaries``), so a fault's report
says which boundaries vLLM fed the draft. Judged with :func:`eagle3_conformance.faults.matrix.judge`
against the baseline of the same run: caught only if the baseline passes the check and the fault fails
it. A fault whose engine does not start (or whose generation fails) is caught by the engine itself
(``engine start`` / ``engine run``, with vLLM's reason). A fault after which the engine applied the
baseline's ids is a ``noop`` on this pair and says so.

One engine start per fault (~90-120 s on the shared 2-core machine): the column runs in the slow
tier (tests/test_vllm_engine.py) and from :func:`run_vllm_engine_column`.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from eagle3_conformance.faults.engine_runtime import fp8_raw_draft, overflow_draft
from eagle3_conformance.faults.matrix import Verdict, judge

KEY = "eagle_aux_hidden_state_layer_ids"
CHECKS = ("engine_slot_boundaries", "slot_identity", "row_fingerprint")


@dataclass(frozen=True)
class VLLMFault:
    """One fault: ``name``, ``kind`` (fault-kinds.md), ``how`` (what the user did), ``checks`` (the
    checks expected to catch it), and ``config`` (vLLM-form draft config, SGLang-form shipped config
    -> the config given) or ``target`` (baseline target dir, workdir -> the target given) or
    ``draft_dir`` (vLLM-form draft dir, target dir, a fresh directory -> the draft given); ``dtype``: the
    engine's ``--dtype`` for this run (None: float32); ``runtime``: a fault of the draft's own runtime,
    which leaves the applied ids as the baseline's (judged, never a ``noop``)."""

    name: str
    kind: str
    how: str
    checks: tuple[str, ...]
    config: Optional[Callable[[dict, dict], dict]] = None
    target: Optional[Callable[[Path, Path], Path]] = None
    draft_dir: Optional[Callable[[Path, Path, Path], Path]] = None
    dtype: Optional[str] = None
    runtime: bool = False


def _set(cfg: dict, top: Optional[list], nested: Optional[list]) -> dict:
    out = json.loads(json.dumps(cfg))
    out.pop(KEY, None)
    out.setdefault("eagle_config", {}).pop(KEY, None)
    if top is not None:
        out[KEY] = top
    if nested is not None:
        out["eagle_config"][KEY] = nested
    return out


def _ids(cfg: dict) -> list[int]:
    return list(cfg[KEY])


def _wrong_target(target: Path, workdir: Path) -> Path:
    """The tiny-llama fixture's target (8 layers, d = 64, vocab 512): a draft served with a target it
    was not trained for (``LLM(model=...)`` names another model)."""
    from eagle3_conformance.testbed.fixtures import build_fixture

    return build_fixture("tiny-llama").target_dir


FAULTS: tuple[VLLMFault, ...] = (
    VLLMFault("sglang-ids-to-vllm", "K2", "the project's shipped draft config (SGLang's form: nested [1, 14, 26] for "
              "B_2, B_15, B_27) given to vLLM, which reads nested ids as boundary ids: B_1, B_14, B_26",
              CHECKS + ("no_embedding",), config=lambda v, s: s),
    VLLMFault("ids-shifted", "K2", "draft config ids shifted by +1 ([3, 16, 28]: the SGLang +1 applied twice)",
              CHECKS, config=lambda v, s: _set(v, [i + 1 for i in _ids(v)], [i + 1 for i in _ids(v)])),
    VLLMFault("ids-top-level-stale", "K1", "ids at the top level and nested disagree: the right ids nested "
              "([2, 15, 27]) and SGLang's [1, 14, 26] left at the top level, which vLLM reads first",
              CHECKS, config=lambda v, s: _set(v, [i - 1 for i in _ids(v)], _ids(v))),
    VLLMFault("ids-nested-only", "K1", "the right ids only under eagle_config (no top-level key); vLLM 0.32.0 "
              "reads the nested key too (older releases ignored it, vllm-project/vllm#50170)",
              CHECKS, config=lambda v, s: _set(v, None, _ids(v))),
    VLLMFault("embedding-tapped", "K2", "draft config ids [0, 2, 15]: vLLM's id 0 is B_0, the embedding output "
              "(the last aux slot dropped)", ("no_embedding",) + CHECKS,
              config=lambda v, s: _set(v, [0] + _ids(v)[:-1], [0] + _ids(v)[:-1])),
    VLLMFault("wrong-target", "K1", "LLM(model=) a target the draft was not trained for (the tiny-llama fixture: "
              "8 layers, d = 64, vocab 512)", ("engine start", "engine run"), target=_wrong_target),
    # issue 45 item 2: the draft's own runtime (faults/engine_runtime.py)
    VLLMFault("draft-fp16-overflow", "K12", "LLM(dtype='float16') (vLLM runs the draft in the target's dtype) for a "
              "draft trained in float32 (draft.dtype) whose normed rows exceed float16's range (final-norm gain "
              "x2^17): NaN logits, drafts of id 0, nothing accepted (R89, vllm#55250)",
              ("draft_logits_finite", "draft_dtype"), draft_dir=overflow_draft, dtype="float16", runtime=True),
    VLLMFault("draft-fp8-loaded-raw", "K12", "the checkpoint storing its MLP weights float8_e4m3fn with scales under "
              "a quantization_config (fp8) whose ignored_layers covers every layer (R94): vLLM 0.32.0 builds the "
              "layers unquantized and refuses the stray weight_scale at load", ("engine start", "draft_quantization"),
              draft_dir=fp8_raw_draft, dtype="bfloat16", runtime=True),
)


def fault_draft_dir(vllm_form: Path, shipped_cfg: dict, fault: VLLMFault, workdir: Path,
                    target_dir: Optional[Path] = None) -> Path:
    """The draft directory the user would hand vLLM for ``fault`` (weights linked, never modified)."""
    if fault.draft_dir is not None:
        return fault.draft_dir(vllm_form, Path(target_dir or "."), workdir / fault.name)
    if fault.config is None:
        return vllm_form
    d = workdir / fault.name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for f in vllm_form.iterdir():
        if f.name != "config.json":
            (d / f.name).symlink_to(f.resolve())
    base = json.loads((vllm_form / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(fault.config(base, shipped_cfg), indent=2))
    return d


def findings(c, obs) -> list:
    """Every check of the path on one engine observation (all verify steps judged)."""
    from eagle3_conformance.paths.vllm_engine import observation
    from eagle3_conformance.suite.assess import assess, reference_loader

    return assess(c, observation(obs, all_decode=False), reference_loader(c, obs.run.spec["target_dir"]),
                  path="vllm-engine")


def _one(c, f: VLLMFault, target_dir: Path, draft: Path, prompts, workdir: Path, new: int, base, base_ids):
    from eagle3_conformance.tools.vllm_engine import EngineRunError, EngineStartError, observe_engine

    tdir = f.target(target_dir, workdir) if f.target else target_dir
    try:
        obs = observe_engine(tdir, draft, prompts, max_new_tokens=new, lossless=False, workdir=workdir / f.name,
                             dtype=f.dtype or "float32")
    except (EngineStartError, EngineRunError) as e:
        which = "engine start" if isinstance(e, EngineStartError) else "engine run"
        if not {"engine start", "engine run"} & set(f.checks):  # an engine that did not run judges nothing
            return Verdict("missed", None, f"the engine failed, which this fault should not cause ({which}): "
                                           f"{e.reason}"), None
        return Verdict("caught", which, e.reason), None
    slots = obs.slot_boundaries.get("slots")
    applied = obs.run.applied.get("aux_layers")
    if applied == base_ids and not f.runtime:
        return Verdict("noop", detail=f"vLLM applied ids {applied}, as the baseline (slots {slots})"), slots
    fs = findings(c, obs)
    v = judge(f.checks, base, fs)
    failed = sorted({x.check for x in fs if x.status == "fail"})
    return Verdict(v.status, v.check, f"vLLM applied ids {applied} and fed the draft {slots}: {v.detail} [failed: "
                                      f"{', '.join(failed)}]", v.baseline_failures), slots


def run_vllm_engine_column(c, target_dir: Path, draft_dir: Path, prompts: list[list[int]], workdir: Path, *,
                           max_new_tokens: int = 8, faults=FAULTS, log=lambda s: None) -> dict:
    """Baseline (``draft_dir`` in vLLM's form), then every fault; returns ``{"verdicts": {name: Verdict},
    "timings": {...}, "slots": {name: [B_k...]}, "baseline_failures": [...]}``."""
    from eagle3_conformance.paths.vllm_engine import vllm_form_draft
    from eagle3_conformance.tools.vllm_engine import observe_engine

    shipped = json.loads((Path(draft_dir) / "config.json").read_text())
    vform = vllm_form_draft(c, Path(draft_dir), workdir)
    timings, slots, verdicts = {}, {}, {}
    t0 = time.perf_counter()
    base_obs = observe_engine(target_dir, vform, prompts, max_new_tokens=max_new_tokens, workdir=workdir / "base")
    base = findings(c, base_obs)
    slots["baseline"] = base_obs.slot_boundaries.get("slots")
    base_ids = base_obs.run.applied.get("aux_layers")
    shutil.rmtree(workdir / "base", ignore_errors=True)  # records (the captures are in memory)
    timings["baseline"] = time.perf_counter() - t0
    for f in faults:
        t1 = time.perf_counter()
        d = fault_draft_dir(vform, shipped, f, workdir / "drafts", Path(target_dir))
        verdicts[f.name], slots[f.name] = _one(c, f, Path(target_dir), d, prompts, workdir, max_new_tokens, base,
                                               base_ids)
        shutil.rmtree(workdir / f.name, ignore_errors=True)
        timings[f.name] = time.perf_counter() - t1
        log(f"{f.kind:>3} {f.name:<22} {verdicts[f.name].status} {verdicts[f.name].check or ''} "
            f"({timings[f.name]:.0f} s) {verdicts[f.name].detail}")
    return {"verdicts": verdicts, "timings": timings, "slots": slots,
            "baseline_failures": [x for x in base if x.status == "fail"]}
