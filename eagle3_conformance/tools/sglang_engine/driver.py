"""The engine process: ``python -m eagle3_conformance.tools.sglang_engine.driver SPEC.json``.

Started by :func:`.launch.run_engine` in its own process group. Starts the real ``sglang.Engine``
(EAGLE3, topk 1; ``spec["engine_extra"]``: more ``sglang.Engine`` arguments, e.g.
``chunked_prefill_size``), generates greedily for the spec's prompts in one batch (or runs the
spec's ``phases``, :func:`run_phase`, or those handed over once the engine is up, :func:`late_phases`),
shuts the engine down and writes ``spec["result"]`` (JSON). Phases have their own timeouts (SIGALRM): a
phase that runs over raises, the engine is shut down, and the exit status says which phase failed:

* 0: done; 2: bad input (the engine refused to start: ``error`` in the result names why);
* 3: generation failed; 4: a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback


class PhaseTimeout(Exception):
    pass


def _alarm(seconds: float, phase: str) -> None:
    def on_alarm(signum, frame):
        raise PhaseTimeout(f"{phase} did not finish within {seconds:.0f} s")
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(max(1, int(seconds)))


def engine_kwargs(spec: dict) -> dict:
    """``sglang.Engine`` keyword arguments for ``spec`` (one code path; CPU adds only its backend)."""
    kw = dict(
        model_path=spec["target_dir"], speculative_algorithm="EAGLE3",
        speculative_draft_model_path=spec["draft_dir"], speculative_num_steps=spec["num_steps"],
        speculative_eagle_topk=1, speculative_num_draft_tokens=spec["num_draft_tokens"],
        dtype=spec["dtype"], skip_tokenizer_init=True, tp_size=int(spec.get("tp_size", 1)), log_level=spec.get("log_level", "warning"),
        mem_fraction_static=spec.get("mem_fraction_static", 0.3), random_seed=0,
        disable_cuda_graph=not spec.get("cuda_graph", False), max_total_tokens=spec.get("max_total_tokens", 4096),
    )
    if spec["device"] == "cpu":
        kw.update(device="cpu", attention_backend="torch_native")
    if spec.get("forward_hooks"):
        kw["forward_hooks"] = spec["forward_hooks"]
    kw.update(spec.get("engine_extra") or {})
    kw.update(spec.get("server_args") or {})  # more ServerArgs fields, as given (e.g. disable_prefill_cuda_graph)
    return kw


def _meta(o: dict) -> dict:
    m = o.get("meta_info", {})
    keep = ("completion_tokens", "prompt_tokens", "cached_tokens", "spec_verify_ct", "spec_accept_length",
            "spec_accept_rate", "spec_correct_drafts_histogram", "spec_accept_token_num", "spec_draft_token_num",
            "finish_reason")
    return {k: m[k] for k in keep if k in m}


#: request options a phase may set (``sglang.Engine.generate`` keywords: ``GenerateReqInput``'s fields)
PHASE_OPTIONS = ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_hidden_states")


def run_phase(engine, spec: dict, phase: dict) -> list[dict]:
    """One phase of generate calls: ``phase["prompts"]`` with ``phase["rids"]`` (SGLang's request ids,
    which the hooks record), all in one batch or each ``alone`` (one call per prompt), the radix cache
    flushed before the phase (``flush``) or before each call (``flush_each``), and the request options
    of :data:`PHASE_OPTIONS` in ``phase["options"]``, ``phase["max_new_tokens"]`` new tokens (default: the
    spec's). Returns one output per prompt, in order, with its ``rid`` and ``phase``."""
    sp = {"temperature": 0.0, "max_new_tokens": int(phase.get("max_new_tokens", spec["max_new_tokens"])),
          "ignore_eos": spec.get("ignore_eos", True)}
    opts = {k: v for k, v in (phase.get("options") or {}).items() if k in PHASE_OPTIONS}
    prompts, rids = phase["prompts"], phase["rids"]
    groups = [[i] for i in range(len(prompts))] if phase.get("alone") else [list(range(len(prompts)))]
    if phase.get("flush"):
        flush(engine)
    out = []
    for g in groups:
        if phase.get("flush_each"):
            flush(engine)
        outs = engine.generate(input_ids=[prompts[i] for i in g], sampling_params=sp, rid=[rids[i] for i in g], **opts)
        out += [{"output_ids": list(o.get("output_ids") or []), "meta_info": _meta(o), "rid": rids[i],
                 "phase": phase["name"]} for i, o in zip(g, outs)]
    return out


def flush(engine, timeout: float = 60.0) -> None:
    """Empty the radix cache (``Engine.flush_cache``). SGLang refuses while a request is still
    running ("Cache not flushed because there are pending requests"), which it briefly is after
    ``generate`` returned; so retry until it succeeds.

    Raises:
        RuntimeError: not flushed within ``timeout`` seconds (SGLang's message)."""
    end = time.monotonic() + timeout
    while True:
        r = engine.flush_cache()
        if getattr(r, "success", True):
            return
        if time.monotonic() > end:
            raise RuntimeError(f"the radix cache could not be flushed within {timeout:.0f} s: "
                               f"{getattr(r, 'message', '') or 'requests pending'}")
        time.sleep(0.05)


def late_phases(spec: dict, poll_s: float = 0.05) -> list[dict]:
    """The phases of a run whose phases are handed over once the engine is up (``spec["phases_file"]``,
    :mod:`.shared`): write ``spec["ready_file"]``, then wait for the phases file (JSON list; written whole,
    by rename). Bounded by the generation alarm of :func:`run`."""
    with open(spec["ready_file"], "w") as f:
        f.write(str(os.getpid()))
    while not os.path.exists(spec["phases_file"]):
        time.sleep(poll_s)
    with open(spec["phases_file"]) as f:
        return json.load(f)


def _generate(engine, spec: dict, timings: dict) -> list[dict]:
    if spec.get("phases_file"):
        spec = {**spec, "phases": late_phases(spec)}
    if spec.get("phases"):
        out = []
        for ph in spec["phases"]:
            t = time.perf_counter()
            out += run_phase(engine, spec, ph)
            timings[f"phase {ph['name']}_s"] = timings.get(f"phase {ph['name']}_s", 0.0) + time.perf_counter() - t
        return out
    outs = engine.generate(input_ids=spec["prompts"], sampling_params={
        "temperature": 0.0, "max_new_tokens": spec["max_new_tokens"], "ignore_eos": spec.get("ignore_eos", True)})
    return [{"output_ids": list(o.get("output_ids") or []), "meta_info": _meta(o)} for o in outs]


def run(spec: dict) -> tuple[int, dict]:
    res: dict = {"timings": {}}
    t0 = time.perf_counter()
    try:
        _alarm(spec["start_timeout"], "engine start")
        if spec["device"] == "cpu":
            from eagle3_conformance.tools.sglang_engine import bootstrap
            bootstrap.install_standins()  # guards first: a mismatch is reported here, before SGLang starts
        import sglang
        res["sglang_version"] = sglang.__version__
        engine = sglang.Engine(**engine_kwargs(spec))
        signal.alarm(0)
        from eagle3_conformance.tools.sglang_engine import bootstrap

        bootstrap.engine_built()  # the imports are done: gc.freeze() (bootstrap.py)
    except PhaseTimeout as e:
        return 4, {**res, "error": str(e), "phase": "start"}
    except BaseException as e:  # noqa: BLE001 - reported to the parent as bad input
        return 2, {**res, "error": f"{type(e).__name__}: {e}", "phase": "start", "traceback": traceback.format_exc()}
    res["timings"]["start_s"] = time.perf_counter() - t0
    try:
        t1 = time.perf_counter()
        _alarm(spec["generate_timeout"], "generation")
        res["outputs"] = _generate(engine, spec, res["timings"])
        signal.alarm(0)
        res["timings"]["generate_s"] = time.perf_counter() - t1
        code = 0
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
            engine.shutdown()
        except BaseException as e:  # noqa: BLE001 - the parent kills the group anyway
            res["shutdown_error"] = repr(e)
        remove_load_snapshot(engine, res)
        res["timings"]["shutdown_s"] = time.perf_counter() - t2
    return code, res


def remove_load_snapshot(engine, res: dict) -> None:
    """Remove this engine's own load-snapshot file, which SGLang 0.5.23 leaves in /dev/shm after
    ``shutdown()``: ``/dev/shm/sglang_loads_<name>_<digest>.shm``, named by SGLang's own
    ``managers/load_snapshot.py::shm_path_for(port_args.instance_id)`` (a fresh uuid per engine), so
    only the file this run created is touched (other engines, other users' runs keep theirs).
    ``res["load_snapshot"]``: the path removed; ``res["load_snapshot_error"]``: why it could not be."""
    try:
        from sglang.srt.managers.load_snapshot import shm_path_for

        path = shm_path_for(engine.port_args.instance_id)
    except (ImportError, AttributeError):  # another SGLang release: nothing known to clean
        return
    try:
        os.unlink(path)
        res["load_snapshot"] = path
    except FileNotFoundError:
        pass
    except OSError as e:
        res["load_snapshot_error"] = f"{path}: {e}"


def main(argv: list[str]) -> int:
    with open(argv[0]) as f:
        spec = json.load(f)
    code, res = run(spec)
    with open(spec["result"], "w") as f:
        json.dump(res, f)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
