"""vLLM's real engine against itself: the same held-out prompts under each variation vLLM's CPU engine
offers, every request observed through the same ``collective_rpc`` hooks (:mod:`.hooks`; issue 45
item 1; the variations, prompts, request ids and pairing: :mod:`eagle3_conformance.tools.shared.variations`).

Engine starts (each :func:`.launch.run_engine` with ``phases``, :func:`.driver.run_phases`):

* ``base`` (always: the plain run lives here; ``enable_prefix_caching=True``, ``block_size``
  :data:`BLOCK`, the smallest vLLM's CPU attention takes: "No common block size for 16 (CPU_ATTN:
  [MultipleOf(32)])"; with EAGLE vLLM drops the last matched block of a hit, so the path's prompts are
  128 tokens: a repeat hits 64, a shared half of 64 hits 32, ``replay_boundaries`` in
  ``v1/core/kv_cache_coordinator.py``): the plain
  phase (each prompt of P and S alone, the prefix cache reset before each), then, as asked, ``batch`` (P
  in one ``generate`` call), ``input-logprobs`` (P alone, ``SamplingParams(prompt_logprobs=2,
  logprobs=2)``), and per prompt i: P[i] once to fill the cache, ``prefix-cache-repeat`` (P[i] again:
  the hit is 64 of 128 tokens) and ``prefix-cache-shared`` (S[i], whose first half is P[i]'s: 32 hit);
* ``chunked``: ``enable_chunked_prefill=True, max_num_batched_tokens=``:data:`CHUNK` (chunk ends at
  32, 64 and 96 inside each 128-token prompt), P alone.

The batch: ``LLM.generate`` hands vLLM's engine core (its own process) the requests one by one and the
core may schedule the first prefill before the second arrives; a request's ``batch_size`` is the most
requests of any forward that held its rows (prefill or verify), read off the batch layout.

Not offered: ``tp2`` (vLLM's CPU engine runs TP through one process per rank, each bound to its own
cores with its own KV cache: this shared 2-core machine runs one engine at a time).

A request is told apart by vLLM's own ids: ``LLM.generate`` numbers requests (``request_id``) and the
engine core appends 8 random characters (``v1/engine/input_processor.py`` ``assign_request_id``); the
worker's ``input_batch.req_ids`` carry that internal id, whose part before the last ``-`` is the
output's ``request_id``, which the driver maps to the phase's request id (``plain/p0``).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Optional

import torch

from eagle3_conformance.core.capture import Capture
from eagle3_conformance.tools.shared.variations import (
    PLAIN,
    WARM,
    Paired,
    Prompts,
    Variation,
    VariationObservation,
    pair_captures,
    prompt_set,
    variations,
)
from eagle3_conformance.tools.shared.variations import phase as _phase
from eagle3_conformance.tools.shared.variations import variation_cost as _cost

CHUNK = 32
BLOCK = 32
LOGPROB_OPTIONS = {"prompt_logprobs": 2, "logprobs": 2}
RUN_EXTRA: dict[str, dict[str, Any]] = {
    "base": {"enable_prefix_caching": True, "block_size": BLOCK},
    "chunked": {"enable_chunked_prefill": True, "max_num_batched_tokens": CHUNK, "enable_prefix_caching": False,
                "block_size": BLOCK}}
#: the variations vLLM's CPU engine offers here (module docstring: why not ``tp2``)
OFFERED = ("batch", "input-logprobs", "prefix-cache-repeat", "prefix-cache-shared", "chunked-prefill")


def phases(run: str, ps: Prompts, wanted: list[Variation]) -> list[dict[str, Any]]:
    """The driver phases of one engine run (module docstring)."""
    names = {v.name for v in wanted}
    p = ps.keys("p")
    if run != "base":
        return [_phase(v.name, ps, p, alone=True) for v in wanted if v.run == run]
    out = [_phase(PLAIN, ps, p + (ps.keys("s") if "prefix-cache-shared" in names else []), alone=True,
                  flush_each=True)]
    if "batch" in names:
        out.append(_phase("batch", ps, p, flush=True))
    if "input-logprobs" in names:
        out.append(_phase("input-logprobs", ps, p, alone=True, flush_each=True, options=dict(LOGPROB_OPTIONS)))
    if names & {"prefix-cache-repeat", "prefix-cache-shared"}:
        for i, k in enumerate(p):
            out.append(_phase(WARM, ps, [k], flush=True))
            if "prefix-cache-repeat" in names:
                out.append(_phase("prefix-cache-repeat", ps, [k]))
            if "prefix-cache-shared" in names:
                out.append(_phase("prefix-cache-shared", ps, [f"s{i}"]))
    return out


def _conditions(chunks: list[dict], batch: int, options: dict) -> dict[str, Any]:
    return {"first_row": chunks[0]["first"], "chunks": len(chunks), "batch_size": batch, "return_logprob": bool(options)}


def variation_captures(records: list[dict], outputs: list[dict], ps: Prompts, options: dict[str, dict],
                       provenance: dict) -> tuple[list[Capture], list[Capture]]:
    """(extend captures, one per prefill chunk; verify captures) of one run's records, each with
    ``provenance["rid"]`` (``<phase>/<key>``) and, on extend, ``conditions`` read off vLLM's own batch
    layout: ``first_row`` (the first scheduled position: a prefix-cache hit's cached tokens),
    ``chunks`` (forwards that held the prompt), ``batch_size`` (requests in the forward),
    ``return_logprob`` (the phase asked for prompt logprobs). ``options``: phase -> its ``options``.

    Raises:
        ValueError: rows of a request id no output names (the message names the propose and id)."""
    from eagle3_conformance.tools.vllm_engine.captures import PATH, _segments, steps

    by_ext = {str(o["request_id"]): o for o in outputs}
    extend: list[tuple[str, dict]] = []
    decode: list[tuple[str, Capture]] = []
    batch: dict[str, int] = {}
    for s, (tgt, fc, draft) in enumerate(steps(records)):
        n = fc["fc_input"].shape[0]
        segs = _segments(tgt, n)
        pos_all = tgt["positions"].reshape(-1)
        for internal, sl in segs:
            out = by_ext.get(internal.rsplit("-", 1)[0])
            if out is None:
                raise ValueError(f"propose {s}: rows of request id {internal!r} belong to no request of the phases")
            r = out["rid"]
            prompt = ps.prompt(r.rsplit("/", 1)[1])
            ids, pos = tgt["input_ids"][sl].tolist(), pos_all[sl].tolist()
            fields = dict(path=PATH, feature=fc["hidden"][sl], rows=torch.tensor(pos, dtype=torch.int64),
                          fc_input=fc["fc_input"][sl], fc_source=fc["hidden"][sl], fc_ran=True,
                          draft_input_width=int(fc["hidden"].shape[-1]),
                          position_ids=None if draft is None else draft["positions"].reshape(-1)[sl].long())
            prov = {**provenance, "rid": r, "request_id": internal, "engine_step": s}
            batch[r] = max(batch.get(r, 1), len(segs))
            if pos[-1] < len(prompt):
                fields["draft_input_ids"] = None if draft is None or draft["input_ids"] is None \
                    else draft["input_ids"][sl].long()
                cap = Capture(where=f"engine extend {r}, rows {pos[0]}-{pos[-1]}", token_ids=torch.tensor(prompt),
                              provenance={**prov, "mode": "EXTEND"}, **fields)
                extend.append((r, {"cap": cap, "first": pos[0]}))
                continue
            # verify: no draft_input_ids (vLLM's padded drafter batch shifts ids across the batch, captures.py)
            tokens = (list(prompt) + list(out["output_ids"]))[:pos[0]] + ids
            decode.append((r, Capture(where=f"engine verify {r}, rows {pos[0]}-{pos[-1]}", token_ids=torch.tensor(tokens),
                                      provenance={**prov, "mode": "TARGET_VERIFY", "verify_tokens": ids}, **fields)))
    chunks: dict[str, list[dict]] = {}
    for r, c in extend:
        chunks.setdefault(r, []).append(c)
    cond = {r: _conditions(cs, batch[r], options.get(r.rsplit("/", 1)[0]) or {}) for r, cs in chunks.items()}
    for r, c in extend:
        c["cap"].provenance["conditions"] = dict(cond[r])
    for r, cap in decode:
        if r in cond:
            cap.provenance["conditions"] = dict(cond[r])
    return [c["cap"] for _, c in extend], [cap for _, cap in decode]


def _failed_phases(obs: VariationObservation, run: str, errors: dict, wanted: list[Variation]) -> None:
    for v in wanted:
        e = errors.get(v.name) or (errors.get(WARM) if v.name.startswith("prefix-cache") else None)
        if v.run == run and e:
            (obs.unavailable if e["kind"] == "refused" else obs.failed)[v.name] = f"vLLM: {e['error']}"


def run_variations(target_dir, draft_dir, prompts: list[list[int]], *, names: Optional[list[str]] = None,
                   path: str = "vllm-engine-invariance", max_new_tokens: int = 8, device: str = "cpu",
                   dtype: str = "float32", workdir: Path, faults: tuple[str, ...] = (),
                   run_extra: Optional[dict[str, dict[str, Any]]] = None, log=lambda s: None) -> VariationObservation:
    """Run the plain run and each variation of ``names`` (all offered: None), pair the captures.

    Args:
        faults: in-worker faults (:mod:`.fault_hooks`) installed in every engine run (the kill matrix).
        run_extra: engine run -> more ``vllm.LLM`` arguments over :data:`RUN_EXTRA` (a ``speculative_config``
            replaces the driver's: ``disable_padded_drafter_batch``).

    Raises:
        EngineStartError / EngineRunError: the base run (the plain run's) failed, or its plain phase did.
        ValueError: an unknown variation, or records that cannot be attributed.
    """
    from eagle3_conformance.tools.vllm_engine import EngineRunError, EngineStartError, run_engine
    from eagle3_conformance.tools.vllm_engine.captures import load_records

    wanted = variations(list(OFFERED) if names is None else names)
    if any(v.name not in OFFERED for v in wanted):
        raise ValueError(f"vLLM's engine offers {', '.join(OFFERED)}")
    ps = prompt_set(prompts)
    obs = VariationObservation(Paired())
    extend: list[Capture] = []
    decode: list[Capture] = []
    for run in ["base"] + sorted({v.run for v in wanted} - {"base"}):
        t0 = time.perf_counter()
        ph = phases(run, ps, wanted)
        try:
            er = run_engine(target_dir, draft_dir, ps.p, device=device, dtype=dtype, max_new_tokens=max_new_tokens,
                            workdir=workdir / run, phases=ph, faults=faults,
                            llm_extra={**RUN_EXTRA[run], **(run_extra or {}).get(run, {})})
        except (EngineStartError, EngineRunError) as e:
            if run == "base":
                raise
            into = obs.failed if isinstance(e, EngineRunError) else obs.unavailable
            into.update({v.name: e.reason for v in wanted if v.run == run})
            log(f"{run}: {e.reason} ({time.perf_counter() - t0:.0f} s)")
            continue
        errors = _phase_errors(er)
        if run == "base" and PLAIN in errors:
            raise EngineRunError(f"vllm.LLM: the plain run failed: {errors[PLAIN]['error']}", er.log_tail)
        _failed_phases(obs, run, errors, wanted)
        assert er.records_dir is not None  # observed: run_engine's default
        prov = {"engine": "vllm.LLM", "vllm": er.vllm_version, "device": device, "engine_run": run}
        ext, dec = variation_captures(load_records(er.records_dir), er.outputs, ps,
                                      {p["name"]: p.get("options") or {} for p in ph}, prov)
        extend += ext
        decode += dec
        obs.timings[run] = er.timings
        obs.version = er.vllm_version
        obs.cost.update(_cost(run, er.timings, wanted))
        shutil.rmtree(workdir / run / "records", ignore_errors=True)
        log(f"{run}: {len(ext)} extend / {len(dec)} verify captures ({er.timings.get('wall_s', 0):.0f} s)")
    ran = [v for v in wanted if v.name not in obs.failed and v.name not in obs.unavailable]
    obs.paired = pair_captures(extend, decode, ran, path)
    return obs


def _phase_errors(er) -> dict:
    import json

    f = Path(er.spec["result"])
    return (json.loads(f.read_text()).get("phase_errors") or {}) if f.is_file() else {}
