"""GPU runner path: a real ``sglang.Engine`` with EAGLE3 speculation and hidden-state return.

Black-box hooks used (docs/REFERENCE.md section 8):

- ``Engine(..., enable_return_hidden_states=True)`` and ``generate(..., return_hidden_states=True)``:
  ``meta_info["hidden_states"][0]`` is the prefill block ([T, K*d] under EAGLE3) and later entries
  are decode rows ([K*d] each);
- ``Engine.get_server_info()["internal_states"][0]["avg_spec_accept_length"]``
  (python/sglang/srt/managers/scheduler_components/internal_state.py:119-125).

Needs CUDA and a GPU build of torch/SGLang; on a CPU machine :func:`gpu_available` is False and
the suite skips this path cleanly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance import torch_env

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.capture import Capture  # noqa: E402

PATH_PREFILL = "sglang-engine-prefill"
PATH_DECODE = "sglang-engine-decode"


def gpu_available() -> tuple[bool, str]:
    """(True, "") when a CUDA device and SGLang are usable here, else (False, why)."""
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        return False, "SGLang is not installed"
    if not torch.cuda.is_available():
        return False, f"no CUDA device (torch {torch.__version__})"
    return True, ""


@dataclass
class EngineResult:
    """What one engine run returned.

    Attributes:
        prefill: one Capture per request: ``feature`` [T, W] = the prefill hidden-state block.
        decode: one Capture per request: ``feature`` [N, W] = the decode rows, ``rows`` their
            token positions (T-1+i: the row produced while generating token T+i).
        avg_accept_length: ``avg_spec_accept_length`` from the server info (None if absent).
        server_info: the subset of server info recorded for the report.
    """

    prefill: list[Capture]
    decode: list[Capture]
    avg_accept_length: Optional[float]
    server_info: dict[str, Any] = field(default_factory=dict)


def run_engine(target_dir: str | Path, draft_dir: str | Path, prompts: list[list[int]], *,
               dtype: str = "bfloat16", max_new_tokens: int = 16, num_steps: int = 3,
               num_draft_tokens: int = 4, mem_fraction_static: float = 0.5) -> EngineResult:
    """Start a real engine, generate greedily for ``prompts`` (token ids), shut it down.

    Raises:
        RuntimeError: no GPU (see :func:`gpu_available`), or the engine failed to start.
    """
    ok, why = gpu_available()
    if not ok:
        raise RuntimeError(why)
    import sglang

    engine = sglang.Engine(
        model_path=str(target_dir),
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=str(draft_dir),
        speculative_num_steps=num_steps,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=num_draft_tokens,
        enable_return_hidden_states=True,
        skip_tokenizer_init=True,
        dtype=dtype,
        mem_fraction_static=mem_fraction_static,
        log_level="error",
    )
    try:
        outs = engine.generate(
            input_ids=prompts,
            sampling_params={"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True},
            return_hidden_states=True,
        )
        info = engine.get_server_info()
    finally:
        engine.shutdown()
    states = (info.get("internal_states") or [{}])[0]
    prefill, decode = [], []
    for i, (p, o) in enumerate(zip(prompts, outs)):
        hs = o["meta_info"].get("hidden_states") or []
        out_ids = list(o.get("output_ids") or [])
        toks = torch.tensor(list(p) + out_ids, dtype=torch.long)
        T = len(p)
        pre = torch.as_tensor(hs[0], dtype=torch.float32) if hs else torch.zeros(0, 0)
        pre = pre.reshape(-1, pre.shape[-1]) if pre.numel() else pre
        prov = {"sglang": sglang.__version__, "engine": "sglang.Engine", "speculative_algorithm": "EAGLE3",
                "hidden_state_entries": len(hs), "completion_tokens": len(out_ids)}
        prefill.append(Capture(PATH_PREFILL, f"engine request {i} prefill", toks, pre[-T:] if pre.numel() else pre,
                               torch.arange(min(T, pre.shape[0]) if pre.numel() else 0), provenance=prov))
        rows = [torch.as_tensor(h, dtype=torch.float32).reshape(-1) for h in hs[1:]]
        dec = torch.stack(rows) if rows else torch.zeros(0, pre.shape[-1] if pre.numel() else 0)
        n = min(dec.shape[0], len(toks) - T + 1)
        decode.append(Capture(PATH_DECODE, f"engine request {i} decode", toks, dec[:n],
                              torch.arange(T - 1, T - 1 + n), provenance=prov))
    acc = states.get("avg_spec_accept_length")
    return EngineResult(prefill, decode, float(acc) if acc is not None else None,
                        {"avg_spec_accept_length": acc, "version": info.get("version")})
