"""The kill matrix's ``sglang-engine`` column: each fault caused the way a user causes it, through
the real ``sglang.Engine`` (a draft config or a draft directory), never injected after the engine.

Every fault is a copy of the trained draft directory (weights linked, ``config.json`` rewritten)
or a different ``speculative_draft_model_path``; the engine runs it and the path's checks judge what
its ``forward_hooks`` saw, against the unmutated baseline of the same run
(:func:`eagle3_conformance.faults.matrix.judge`: caught only if the baseline passes the check and the
fault fails it). A fault whose engine does not start, or whose generation fails, is caught by the
engine itself when SGLang's error is loud (``engine start`` / ``engine run``). A fault that leaves
the engine's ``layers_to_capture`` equal to the baseline's (read off the hook records) is a
``noop`` on this pair and says so.

One engine start per fault (~45-110 s on the shared 2-core machine): the column runs in the slow
tier (tests/test_sglang_engine.py) and from :func:`run_engine_column`, not in the main job.
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


@dataclass(frozen=True)
class EngineFault:
    """One fault of the column: ``name`` (the matrix operator it mirrors), ``kind`` (fault-kinds.md),
    ``how`` (what the user did), ``checks`` (the checks expected to catch it), and ``config``
    (draft config -> faulty config) or ``draft_dir`` (baseline draft dir, target dir, a fresh directory
    it may fill -> the dir given); ``dtype``: the server's ``--dtype`` for this run (None: the
    column's); ``runtime``: a fault of the draft's own runtime, which leaves the captured layers as the
    baseline's (judged, never a ``noop``)."""

    name: str
    kind: str
    how: str
    checks: tuple[str, ...]
    config: Optional[Callable[[dict], dict]] = None
    draft_dir: Optional[Callable[[Path, Path, Path], Path]] = None
    dtype: Optional[str] = None
    runtime: bool = False


def _ids(cfg: dict) -> list[int]:
    return list(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"])


def _with_ids(cfg: dict, ids: list[int]) -> dict:
    out = json.loads(json.dumps(cfg))
    out["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    return out


def _top_level(cfg: dict) -> dict:
    out = json.loads(json.dumps(cfg))
    out["eagle_aux_hidden_state_layer_ids"] = out["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")
    return out


def _removed(cfg: dict) -> dict:
    out = json.loads(json.dumps(cfg))
    out["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")
    return out


FAULTS: tuple[EngineFault, ...] = (
    EngineFault("embedding-prepended", "K2", "draft config ids [-1, a, b] (the known incident: llama.py's +1 maps -1 "
                "to layer 0, which captures the embedding; the last aux layer is dropped)",
                ("no_embedding", "slot_identity"), config=lambda c: _with_ids(c, [-1] + _ids(c)[:-1])),
    EngineFault("ids-shifted", "K2", "draft config ids shifted by +1 (boundary ids written where SGLang adds +1)",
                ("slot_identity", "row_fingerprint"), config=lambda c: _with_ids(c, [i + 1 for i in _ids(c)])),
    EngineFault("ids-shifted-down", "K2", "draft config ids shifted by -1", ("slot_identity", "row_fingerprint"),
                config=lambda c: _with_ids(c, [i - 1 for i in _ids(c)])),
    EngineFault("engine-default-layers", "K1", "ids removed from the draft config (SGLang falls back to its "
                "defaults [2, L//2, L-3])", ("slot_identity", "engine_mapping", "slot_count"), config=_removed),
    EngineFault("ids-top-level", "K1", "ids at the top level instead of eagle_config (SGLang reads only the nested "
                "key, spec_aux_hidden_state.py:185-196)", ("slot_identity", "engine_mapping", "slot_count"),
                config=_top_level),
    EngineFault("wrong-draft-dir", "K1", "speculative_draft_model_path = the target's directory",
                ("engine start",), draft_dir=lambda draft, target, out: target),
    # issue 45 item 2: the draft's own runtime (faults/engine_runtime.py)
    EngineFault("draft-fp16-overflow", "K12", "the server started with --dtype float16 (SGLang runs the draft in the "
                "server's dtype) for a draft trained in float32 (draft.dtype) whose normed rows exceed float16's "
                "range (final-norm gain x2^17, exact in bf16/fp32: its drafts unchanged there): NaN logits, drafts "
                "of id 0 (R89, vllm#55250)", ("draft_logits_finite", "draft_dtype"), draft_dir=overflow_draft,
                dtype="float16", runtime=True),
    EngineFault("draft-fp8-loaded-raw", "K12", "a checkpoint storing its MLP weights float8_e4m3fn with scales under a "
                "quantization_config (fp8) whose ignored_layers covers every layer, served with --dtype bfloat16 "
                "(SGLang's fp8 needs half precision): built unquantized, the FP8 values read raw (R94)",
                ("draft_quantization",), draft_dir=fp8_raw_draft, dtype="bfloat16", runtime=True),
)


def fault_draft_dir(base: Path, fault: EngineFault, workdir: Path, target_dir: Path) -> Path:
    """The draft directory the user would hand SGLang for ``fault`` (weights linked, never copied
    or modified: the baseline draft is read only)."""
    if fault.draft_dir is not None:
        return fault.draft_dir(base, target_dir, workdir / fault.name)
    if fault.config is None:  # a fault of how the engine runs the draft (its --dtype), not of the draft
        return base
    d = workdir / fault.name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for f in base.iterdir():
        if f.name != "config.json":
            (d / f.name).symlink_to(f.resolve())
    (d / "config.json").write_text(json.dumps(fault.config(json.loads((base / "config.json").read_text())), indent=2))
    return d


RUNTIME_FACTS = ("draft_runtime", "draft_quantization")


def _facts(obs) -> dict:
    """The facts the column judges: losslessness and the draft's runtime (:mod:`eagle3_conformance.checks.runtime`)."""
    return {"engine_lossless": obs.lossless, **{k: obs.extra_facts[k] for k in RUNTIME_FACTS if k in obs.extra_facts}}


def _findings(c, obs):
    from eagle3_conformance.paths.base import Observation
    from eagle3_conformance.suite.assess import assess, reference_loader

    o = Observation(captures=obs.extend + obs.decode, facts=_facts(obs))
    return assess(c, o, reference_loader(c, obs.run.spec["target_dir"]), path="sglang-engine")


def _engine_findings(c, obs):
    """The same observation judged against the engine's own records (no transformers forward)."""
    from eagle3_conformance.paths.base import Observation
    from eagle3_conformance.reference.engine import judged_rows
    from eagle3_conformance.suite.assess import assess

    eref = obs.engine_reference
    caps = [j for j in (judged_rows(cap, eref) for cap in obs.extend + obs.decode) if j is not None]
    o = Observation(captures=caps, facts=_facts(obs), reference=eref)

    def no_transformers():
        raise AssertionError("the engine reference was not used")

    return assess(c, o, no_transformers, path="sglang-engine")


def numeric_agreement(c, obs) -> dict:
    """Per recorded boundary, the engine's rows against the transformers forward's on every capture's
    tokens: ``{boundary: {"min_cos": x, "max_rel_err": y, "rows": n}}``."""
    return numeric_agreement_of(c, obs.extend + obs.decode, obs.engine_reference, obs.run.spec["target_dir"])


def numeric_agreement_of(c, captures: list, eref, target_dir) -> dict:
    """:func:`numeric_agreement` for any captures (e.g. a server's records attributed by
    :mod:`eagle3_conformance.serving.captures`) and the engine reference built from the same records;
    ``rows`` counts every (capture, row) pair compared, so a row seen by two captures counts twice."""
    import torch

    from eagle3_conformance.suite.assess import reference_loader

    model = reference_loader(c, target_dir)()
    if model is None:
        raise ValueError("numeric agreement needs the target directory (the transformers reference)")
    out: dict = {}
    for cap in captures:
        e, t = eref.capture(cap.token_ids), model.capture(cap.token_ids)
        known = eref.known(cap.token_ids)
        for b in e.names:
            x, y = e.boundary(b)[known], t.boundary(b)[known]
            cos = torch.nn.functional.cosine_similarity(x, y, dim=-1)
            rel = (x - y).norm(dim=-1) / y.norm(dim=-1).clamp_min(1e-12)
            o = out.setdefault(str(b), {"min_cos": 1.0, "max_rel_err": 0.0, "rows": 0})
            o["min_cos"] = min(o["min_cos"], float(cos.min()))
            o["max_rel_err"] = max(o["max_rel_err"], float(rel.max()))
            o["rows"] += int(known.sum())
    return out


def agreement(a: list, b: list) -> dict:
    """Finding-for-finding comparison of one observation judged against two references: each pair
    (in order) agrees when check, locator, slot, status and observed verdict are equal (messages
    differ: the engine's names the boundaries it scanned). Returns ``{"findings": n, "equal": m,
    "differ": [(a, b) summaries]}``; a different count is a difference. Floats in the observed
    values are compared to 4 significant digits."""
    import re

    def row(f):  # floats to 4 significant digits: TP > 1 sums in another order (~1e-6 relative)
        obs = re.sub(r"-?\d+\.\d+(e-?\d+)?", lambda m: format(float(m.group(0)), ".4g"), str(f.observed))
        return (f.check, f.where, f.slot, f.status, obs)

    ra, rb = [row(f) for f in a], [row(f) for f in b]
    diff = [(x, y) for x, y in zip(ra, rb) if x != y]
    if len(ra) != len(rb):
        diff.append((f"{len(ra)} findings", f"{len(rb)} findings"))
    return {"findings": len(ra), "equal": sum(x == y for x, y in zip(ra, rb)), "differ": diff,
            "statuses": dict(sorted({s: sum(r[3] == s for r in ra) for s in ("pass", "fail", "skip")}.items()))}


def _captured(obs) -> list[str]:
    caps = obs.extend + obs.decode
    return caps[0].engine_boundaries if caps else []


def run_engine_column(c, target_dir: Path, draft_dir: Path, prompts: list[list[int]], workdir: Path, *,
                      max_new_tokens: int = 8, faults=FAULTS, log=lambda s: None, reference: Optional[dict] = None,
                      dtype: str = "float32", device: str = "cpu", extra: Optional[dict] = None) -> dict:
    """Baseline, then every fault; returns ``{"verdicts": {name: Verdict}, "timings": {...},
    "captured": {name: [B_i...]}, "failed_checks": {name: the checks that failed on its run}}``.

    ``reference`` (the engine-reference config of
    :func:`eagle3_conformance.paths.sglang_engine.reference_config`): every run also records the
    target's boundaries, and each observation is judged twice, against the transformers forward and
    against the engine's own records, in the same engine run: ``engine_verdicts`` {name: Verdict},
    ``agreement`` {name: :func:`agreement`}, ``judge_s`` {name: {"transformers": s, "engine": s}}.
    ``extra``: more engine spec keys for every run (e.g. ``{"tp_size": 2}``, :func:`run_engine`)."""
    from eagle3_conformance.paths.sglang_engine import reference_builder
    from eagle3_conformance.tools.sglang_engine import EngineRunError, EngineStartError, observe_engine

    timings, captured, verdicts, everdicts, agree, judge_s, failed = {}, {}, {}, {}, {}, {}, {}

    def observe(d, name, run_dtype=None):
        return observe_engine(target_dir, d, prompts, max_new_tokens=max_new_tokens, workdir=workdir / name,
                              reference=reference, dtype=run_dtype or dtype, device=device, extra=extra,
                              reference_builder=reference_builder(reference, target_dir) if reference else None)

    def both(name, obs):
        t = time.perf_counter()
        tf = _findings(c, obs)
        judge_s[name] = {"transformers": time.perf_counter() - t}
        if reference is None:
            return tf, None
        t = time.perf_counter()
        ef = _engine_findings(c, obs)
        judge_s[name]["engine"] = time.perf_counter() - t
        agree[name] = agreement(tf, ef)
        return tf, ef

    t0 = time.perf_counter()
    base_obs = observe(draft_dir, "base")
    base, ebase = both("baseline", base_obs)
    numeric = numeric_agreement(c, base_obs) if reference is not None else None
    captured["baseline"] = _captured(base_obs)
    timings["baseline"] = time.perf_counter() - t0
    for f in faults:
        t1 = time.perf_counter()
        d = fault_draft_dir(Path(draft_dir), f, workdir / "drafts", Path(target_dir))
        try:
            obs = observe(d, f.name, f.dtype)
        except (EngineStartError, EngineRunError) as e:
            which = "engine start" if isinstance(e, EngineStartError) else "engine run"
            verdicts[f.name] = everdicts[f.name] = Verdict("caught", which, e.reason)
        else:
            captured[f.name] = _captured(obs)
            tf, ef = both(f.name, obs)
            failed[f.name] = sorted({x.check for x in tf if x.status == "fail"})
            if captured[f.name] == captured["baseline"] and not f.runtime:
                verdicts[f.name] = everdicts[f.name] = Verdict(
                    "noop", detail=f"the engine captured {captured[f.name]}, as the baseline (this pair's ids are "
                                   "SGLang's defaults)")
            else:
                verdicts[f.name] = judge(f.checks, base, tf)
                if ef is not None:
                    everdicts[f.name] = judge(f.checks, ebase, ef)
        timings[f.name] = time.perf_counter() - t1
        log(f"{f.kind:>3} {f.name:<24} {verdicts[f.name].status} {verdicts[f.name].check or ''} "
            f"({timings[f.name]:.0f} s)")
    out = {"verdicts": verdicts, "timings": timings, "captured": captured, "failed_checks": failed,
           "baseline_failures": [x for x in base if x.status == "fail"]}
    if reference is not None:
        out.update(engine_verdicts=everdicts, agreement=agree, judge_s=judge_s, numeric=numeric,
                   engine_baseline_failures=[x for x in ebase if x.status == "fail"],
                   reference_stats={k: v for k, v in base_obs.engine_reference.stats.items() if k != "missing"})
    return out
