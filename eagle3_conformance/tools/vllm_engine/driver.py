"""The engine process: ``python -m eagle3_conformance.tools.vllm_engine.driver SPEC.json``.

Started by :func:`.launch.run_engine` in its own process group. Starts the real ``vllm.LLM`` with
``speculative_config={"method": "eagle3", ...}``, registers :mod:`.hooks` in the worker through
``LLM.collective_rpc``, generates greedily for the spec's prompts (token ids) in one batch, writes
the hook records, reads vLLM's own counters (``LLM.get_metrics()``; per request
``RequestOutput.outputs[0].spec_decode_metrics`` with ``per_request_spec_decode_metrics="detailed"``,
``vllm/v1/metrics/stats.py:350``), shuts the engine down and writes ``spec["result"]`` (JSON).
Phases have their own timeouts (SIGALRM); the exit status says which phase failed:

* 0: done; 2: the engine refused to start (bad input: ``error`` in the result names vLLM's reason);
* 3: generation failed; 4: a timeout.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import traceback

GENERATION_STARTED = "eagle3-conformance: generation started"


class PhaseTimeout(Exception):
    pass


def _alarm(seconds: float, phase: str) -> None:
    def on_alarm(signum, frame):
        raise PhaseTimeout(f"{phase} did not finish within {seconds:.0f} s")
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(max(1, int(seconds)))


def llm_kwargs(spec: dict) -> dict:
    """``vllm.LLM`` keyword arguments for ``spec``: one code path on CPU and GPU (eager: on the
    CPU build ``torch.compile`` costs 150-175 s a start and its cache reload fails,
    docs/vllm-engine.md; hooks never fire on graph replay)."""
    sc = {"method": "eagle3", "model": spec["draft_dir"], "num_speculative_tokens": spec["num_spec_tokens"]}
    kw = dict(model=spec["target_dir"], dtype=spec["dtype"], max_model_len=spec.get("max_model_len", 512),
              max_num_seqs=max(1, len(spec["prompts"])), enforce_eager=True, seed=0, disable_log_stats=False,
              per_request_spec_decode_metrics="detailed", speculative_config=sc, skip_tokenizer_init=True)
    kw.update(spec.get("llm_extra") or {})
    return kw


def _metrics(llm) -> dict:
    """vLLM's spec-decode counters from ``LLM.get_metrics()`` (``vllm:spec_decode_*``)."""
    out = {}
    for m in llm.get_metrics():
        if "spec_decode" in m.name:
            out[m.name] = list(m.values) if hasattr(m, "values") else getattr(m, "value", None)
    return out


def _outputs(outs) -> list[dict]:
    res = []
    for o in outs:
        c = o.outputs[0]
        sd = c.spec_decode_metrics
        res.append({"request_id": o.request_id, "prompt_token_ids": list(o.prompt_token_ids or []),
                    "output_ids": list(c.token_ids), "finish_reason": c.finish_reason,
                    "spec_decode_metrics": None if sd is None else {
                        "num_spec_tokens": sd.num_spec_tokens, "histogram": list(sd.histogram),
                        "num_draft_tokens": sd.num_draft_tokens, "per_step_accepted": list(sd.per_step_accepted),
                        "per_step_drafted": list(sd.per_step_drafted)}})
    return res


def _start(spec: dict, res: dict):
    import vllm
    from vllm import LLM

    res["vllm_version"] = vllm.__version__
    llm = LLM(**llm_kwargs(spec))
    if spec.get("faults"):  # before the hooks: their fc pre-hook then records what the fault handed the draft
        from eagle3_conformance.tools.vllm_engine import fault_hooks
        llm.collective_rpc(fault_hooks.install, args=(list(spec["faults"]),))
    if spec.get("records"):
        from eagle3_conformance.tools.vllm_engine import hooks
        res["applied"] = llm.collective_rpc(hooks.install, kwargs={"residual": spec.get("residual", True)})[0]
    return llm


def _generate(llm, spec: dict, res: dict) -> None:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    if spec.get("phases"):
        run_phases(llm, spec, res)
        return

    sp = SamplingParams(temperature=0.0, max_tokens=spec["max_new_tokens"], ignore_eos=spec.get("ignore_eos", True))
    print(GENERATION_STARTED, flush=True)
    outs = llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in spec["prompts"]], sp, use_tqdm=False)
    res["outputs"] = _outputs(outs)
    res["metrics"] = _metrics(llm)
    if spec.get("records"):
        from eagle3_conformance.tools.vllm_engine import hooks
        res["n_records"] = llm.collective_rpc(hooks.collect, args=(spec["records"],))[0]


def run_phases(llm, spec: dict, res: dict) -> None:
    """The invariance runs' phases, in order, in this one engine (:mod:`.variations`). Each phase
    ``{"name", "prompts", "rids", "alone", "flush", "flush_each", "options"}``: ``flush`` resets vLLM's
    prefix cache first (``LLM.reset_prefix_cache``), ``flush_each`` before each prompt, ``alone`` serves
    each prompt in its own ``generate`` call (else all in one batch), ``options`` are more
    ``SamplingParams`` (``prompt_logprobs``). ``res["outputs"]`` carry ``rid`` (the phase's request id)
    and vLLM's ``request_id``; ``res["phase_errors"]``: phase -> ``{"kind": "refused" | "failed",
    "error"}`` (vLLM refused the request's parameters / generation broke); a dead engine ends the phases."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    outs, errors, t = [], {}, res["timings"]
    print(GENERATION_STARTED, flush=True)
    for ph in spec["phases"]:
        t0 = time.perf_counter()
        n = len(ph["prompts"])
        groups = [[i] for i in range(n)] if ph.get("alone") else [list(range(n))]
        try:
            sp = SamplingParams(temperature=0.0, max_tokens=spec["max_new_tokens"], ignore_eos=True,
                                **(ph.get("options") or {}))
            if ph.get("flush"):
                llm.reset_prefix_cache()
            for g in groups:
                if ph.get("flush_each"):
                    llm.reset_prefix_cache()
                got = llm.generate([TokensPrompt(prompt_token_ids=list(ph["prompts"][i])) for i in g], sp,
                                   use_tqdm=False)
                outs += [{**o, "rid": ph["rids"][i]} for i, o in zip(g, _outputs(got))]
        except (ValueError, TypeError) as e:  # vLLM's validation of the request's parameters
            errors[ph["name"]] = {"kind": "refused", "error": f"{type(e).__name__}: {e}"}
        except Exception as e:  # noqa: BLE001 - generation broke under this phase; a dead engine ends them
            errors[ph["name"]] = {"kind": "failed", "error": f"{type(e).__name__}: {e}"}
            if "Dead" in type(e).__name__:
                break
        key = f"phase {ph['name']}_s"
        t[key] = t.get(key, 0.0) + time.perf_counter() - t0
    res.update(outputs=outs, phase_errors=errors, metrics=_metrics(llm))
    if spec.get("records"):
        from eagle3_conformance.tools.vllm_engine import hooks
        res["n_records"] = llm.collective_rpc(hooks.collect, args=(spec["records"],))[0]


def run(spec: dict) -> tuple[int, dict]:
    res: dict = {"timings": {}}
    t0 = time.perf_counter()
    try:
        _alarm(spec["start_timeout"], "engine start")
        llm = _start(spec, res)
        signal.alarm(0)
    except PhaseTimeout as e:
        return 4, {**res, "error": str(e), "phase": "start"}
    except BaseException as e:  # noqa: BLE001 - reported to the parent as bad input
        return 2, {**res, "error": f"{type(e).__name__}: {e}", "phase": "start", "traceback": traceback.format_exc()}
    res["timings"]["start_s"] = time.perf_counter() - t0
    code = 0
    try:
        t1 = time.perf_counter()
        _alarm(spec["generate_timeout"], "generation")
        _generate(llm, spec, res)
        signal.alarm(0)
        res["timings"]["generate_s"] = time.perf_counter() - t1
    except PhaseTimeout as e:
        res.update(error=str(e), phase="generate")
        code = 4
    except BaseException as e:  # noqa: BLE001
        res.update(error=f"{type(e).__name__}: {e}", phase="generate", traceback=traceback.format_exc())
        code = 3
    finally:
        signal.alarm(0)
        t2 = time.perf_counter()
        try:
            _alarm(spec.get("shutdown_timeout", 60), "shutdown")
            llm.llm_engine.engine_core.shutdown()
            signal.alarm(0)
        except BaseException as e:  # noqa: BLE001 - the parent kills the group anyway
            signal.alarm(0)
            res["shutdown_error"] = repr(e)
        res["timings"]["shutdown_s"] = time.perf_counter() - t2
    return code, res


def main(argv: list[str]) -> int:
    with open(argv[0]) as f:
        spec = json.load(f)
    code, res = run(spec)
    with open(spec["result"], "w") as f:
        json.dump(res, f)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
