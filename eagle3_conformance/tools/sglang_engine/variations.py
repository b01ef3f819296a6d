"""The real ``sglang.Engine`` against itself: the same held-out prompts under each variation SGLang
offers, every request observed through the same ``forward_hooks`` (issue 45 item 1; the variations,
prompts and pairing: :mod:`eagle3_conformance.tools.shared.variations`).

Engine starts (each runs :func:`.launch.run_engine` with ``phases``, recording through the server
factory so prefix-cache hits and later prefill chunks are attributed, :mod:`.server_hooks`):

* ``base`` (always: the plain run lives here): the plain phase (each prompt of P and S alone, the
  radix cache flushed before each), then, as asked, ``batch`` (P in one ``generate`` call),
  ``input-logprobs`` (P alone, ``return_logprob=True, logprob_start_len=0, top_logprobs_num=2``), and
  per prompt i: P[i] once to fill the cache, ``prefix-cache-repeat`` (P[i] again) and
  ``prefix-cache-shared`` (S[i], whose first half is P[i]'s);
* ``chunked``: ``chunked_prefill_size`` :data:`CHUNK` (chunk ends at 16 and 32 inside each 48-token
  prompt), P alone;
* ``tp2``: ``tp_size`` 2 (on CPU: gloo, each rank on its own core, :func:`.launch.cpu_bind`), P alone.

The engine runs go one after the other, in the order above. They were started at once for a while (issue
42 item 4: the chunked run was the main job's tail on 2 cores), and SGLang's memory profiling then refused
to start them: each ``sglang.Engine`` measures the memory available before and after loading its weights,
and another engine loading beside it counts as its own weights ("Loaded weights leave no GPU memory for the
KV cache under --mem-fraction-static=0.3", seen on the 2-core machine, 2026-12-05), so the runs never load
at once.

A variation whose engine run fails is reported, never dropped: ``failed`` when generation broke under
it (the plain run did not), ``unavailable`` when SGLang refused to start with it or the machine lacks
what it needs (TP 2 on one core).
"""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

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

CHUNK = 16
LOGPROB_OPTIONS = {"return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 2}
RUN_EXTRA: dict[str, dict[str, Any]] = {"base": {}, "chunked": {"engine_extra": {"chunked_prefill_size": CHUNK}},
                                        "tp2": {"tp_size": 2}}
#: the variations SGLang offers here (all of :data:`~eagle3_conformance.tools.shared.variations.VARIATIONS`)
OFFERED = ("batch", "input-logprobs", "prefix-cache-repeat", "prefix-cache-shared", "chunked-prefill", "tp2")


def phases(run: str, ps: Prompts, wanted: list[Variation]) -> list[dict[str, Any]]:
    """The driver phases of one engine run (module docstring)."""
    names = {v.name for v in wanted}
    p = ps.keys("p")
    if run != "base":
        return [_phase(v.name, ps, p, alone=True, flush_each=True) for v in wanted if v.run == run]
    out = [_phase(PLAIN, ps, p + (ps.keys("s") if "prefix-cache-shared" in names else []), alone=True,
                  flush_each=True)]
    if "batch" in names:
        out.append(_phase("batch", ps, p, flush=True))
    if "input-logprobs" in names:
        out.append(_phase("input-logprobs", ps, p, alone=True, flush_each=True, options=dict(LOGPROB_OPTIONS)))
    for i, k in enumerate(p):
        if not names & {"prefix-cache-repeat", "prefix-cache-shared"}:
            break
        out.append(_phase(WARM, ps, [k], flush=True))
        if "prefix-cache-repeat" in names:
            out.append(_phase("prefix-cache-repeat", ps, [k]))
        if "prefix-cache-shared" in names:
            out.append(_phase("prefix-cache-shared", ps, [f"s{i}"]))
    return out


def first_stream(records: list[dict]) -> tuple[list[dict], int]:
    """The records of one scheduler process (the lowest pid), and how many processes wrote records:
    under TP every rank's recorder writes the same batch (no engine reference asked, so no rank is
    singled out, :mod:`.hooks`); one stream is the run, and the number of streams is the TP size the
    records show (the ``tp2`` variation's condition, read off the run, not assumed from its options)."""
    pids = sorted({str(r.get("_file", "")).split("-")[0] for r in records})
    one = [r for r in records if str(r.get("_file", "")).split("-")[0] == pids[0]] if len(pids) > 1 else records
    return one, len(pids)


def run_variations(target_dir, draft_dir, prompts: list[list[int]], *, names: Optional[list[str]] = None,
                   path: str = "sglang-engine", max_new_tokens: int = 8, device: str = "cpu",
                   dtype: str = "float32", workdir: Path, faults: tuple[str, ...] = (),
                   log=lambda s: None, started=None, share: bool = False) -> VariationObservation:
    """Run the plain run and each variation of ``names`` (all: None), pair the captures.

    Args:
        faults: in-engine faults (:mod:`.fault_hooks`) added to every engine run (the kill matrix).
        started: handed to each :func:`.launch.run_engine` call (:class:`.ahead.Job` keeps each engine's
            process to cancel the runs started ahead).
        share: the base run's phases run on an engine shared with other callers of the same configuration
            (:func:`.shared.run_shared`, member ``path``); the other runs have their own engine arguments.

    Raises:
        EngineStartError / EngineRunError: the base run (the plain run's) failed.
        ValueError: an unknown variation, or records that cannot be attributed.
    """
    from eagle3_conformance.tools.sglang_engine import fault_hooks, run_engine
    from eagle3_conformance.tools.sglang_engine.shared import run_shared

    wanted = variations(names)
    ps = prompt_set(prompts)
    hooks = [fault_hooks.spec(f) for f in faults]
    obs = VariationObservation(Paired())
    extend: list[Any] = []
    decode: list[Any] = []
    shown: dict[str, dict[str, Any]] = {}
    runs = ["base"] + sorted({v.run for v in wanted} - {"base"})
    t0 = time.perf_counter()

    def one(run: str):
        if share and run == "base":
            return run_shared(target_dir, draft_dir, phases(run, ps, wanted), name=path, workdir=workdir / run,
                              max_new_tokens=max_new_tokens, started=started, device=device, dtype=dtype,
                              extra=RUN_EXTRA[run], extra_hooks=hooks)
        return run_engine(target_dir, draft_dir, ps.p, device=device, dtype=dtype, max_new_tokens=max_new_tokens,
                          workdir=workdir / run, record_kv=True, extra_hooks=hooks, started=started,
                          extra={"phases": phases(run, ps, wanted), **RUN_EXTRA[run]})

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sglang-variation") as pool:
        futures = {run: pool.submit(one, run) for run in runs}  # one at a time (module docstring)
        for run in runs:
            _take(run, futures[run], wanted, device, workdir, obs, (extend, decode, shown), log, t0)
    ran = [v for v in wanted if v.name not in obs.failed and v.name not in obs.unavailable]
    obs.paired = pair_captures(extend, decode, ran, path, shown)
    for _plain, variant in obs.paired.pairs:
        r = variant.provenance.get("rid")
        if r in obs.meta and "cached_tokens" in obs.meta[r]:
            variant.provenance["cached_tokens"] = obs.meta[r]["cached_tokens"]
    return obs


def _take(run: str, future, wanted: list[Variation], device: str, workdir: Path, obs: VariationObservation,
          into_lists: tuple[list, list, dict], log, t0: float) -> None:
    """One engine run's result (``future``: its :func:`.launch.run_engine` call) into ``obs`` and the
    (extend, decode, shown) of :func:`run_variations`: a variation's failed run is noted, the base run's
    failure raised."""
    from eagle3_conformance.tools.sglang_engine import EngineRunError, EngineStartError
    from eagle3_conformance.tools.sglang_engine.captures import attribute, load_records

    extend, decode, shown = into_lists
    try:
        er = future.result()
    except (EngineStartError, EngineRunError, ValueError) as e:
        if run == "base":
            raise
        why = getattr(e, "reason", str(e))
        into = obs.failed if isinstance(e, EngineRunError) else obs.unavailable
        into.update({v.name: why for v in wanted if v.run == run})
        log(f"{run}: {why} ({time.perf_counter() - t0:.0f} s)")
        return
    assert er.records_dir is not None  # observed: run_engine's default
    stream, ranks = first_stream(load_records(er.records_dir))
    att = attribute(stream, {"engine": "sglang.Engine", "sglang": er.sglang_version, "device": device,
                             "engine_run": run})
    shown.update({v.name: {"tp_size": ranks} for v in wanted if v.run == run})
    if att.unattributed:
        rec, why = att.unattributed[0]
        raise ValueError(f"{run} run, record {rec.get('_file', '?')}: {why}")
    extend += att.extend
    decode += att.decode
    obs.meta.update({o["rid"]: o["meta_info"] for o in er.outputs if "rid" in o})
    obs.timings[run] = er.timings
    obs.version = er.sglang_version
    obs.cost.update(_cost(run, er.timings, wanted))
    shutil.rmtree(workdir / run / "records", ignore_errors=True)
    log(f"{run}: {len(att.extend)} extend / {len(att.decode)} verify captures ({er.timings.get('wall_s', 0):.0f} s)")
