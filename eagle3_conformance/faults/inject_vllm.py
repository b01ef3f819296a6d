"""Faults injected in vLLM 0.33.0's engine wiring, through its real knobs on the live CPU harness
(:class:`eagle3_conformance.tools.vllm_cpu.harness.VLLMCPUHarness`): the draft config as vLLM's own
``SpeculativeConfig`` and each model runner's own id reader read it, the draft checkpoint's ``d2t``
through the real draft's ``load_weights``, and harness rebuilds for what vLLM fixes at build time
(``target_hidden_size`` and ``use_aux_hidden_state`` -> the draft's ``fc``; ``ModelConfig.dtype``).
Capture faults after the engine are applied in memory, as on the SGLang paths. Every run covers
both model runners (V1, V2): a fault is caught when either runner's rows fail the check."""

from __future__ import annotations

import json
import time
from typing import Optional

from eagle3_conformance.environment import torch_env
from eagle3_conformance.environment.torch_env import torch_dtype

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.contract import Contract  # noqa: E402
from eagle3_conformance.core.findings import Finding  # noqa: E402
from eagle3_conformance.faults.example import Example, Knobs, apply_capture  # noqa: E402
from eagle3_conformance.faults.scenario import Scenario, draft_config, write_draft_dir  # noqa: E402
from eagle3_conformance.faults.tokens import GOOD_TEMPLATE, render_ids  # noqa: E402

TOP_KEY = "eagle_aux_hidden_state_layer_ids"


def vllm_draft_config(scn: Scenario, boundaries, **over) -> dict:
    """The scenario's draft config as a vLLM deployment writes it: boundary ids (id k = B_k) at the
    top level, the key both runners read first; ``eagle_config`` keeps ``use_aux_hidden_state``."""
    cfg = draft_config(scn.spec, [], **over)
    cfg["eagle_config"] = {"use_aux_hidden_state": True}
    cfg[TOP_KEY] = [int(b) for b in boundaries]
    return cfg


def _with_variant(cfg: dict, variant: Optional[dict]) -> dict:
    cfg = json.loads(json.dumps(cfg))
    for kk, vv in ((variant or {}).get("draft") or {}).items():
        if vv is None:
            cfg.pop(kk, None)
        elif isinstance(vv, dict) and isinstance(cfg.get(kk), dict):
            cfg[kk] = {**cfg[kk], **vv}
        else:
            cfg[kk] = vv
    return cfg


class VLLMPool:
    """One vLLM CPU harness per (scenario, variant), built on first use and kept (vLLM has no
    per-process runtime to tear down; its process groups are shared)."""

    def __init__(self) -> None:
        self.harnesses: dict = {}
        self.builds = 0
        self.build_s = 0.0

    def get(self, scn: Scenario, variant: Optional[dict] = None):
        from eagle3_conformance.tools.vllm_cpu.harness import VLLMCPUHarness

        key = (str(scn.target_dir), json.dumps(variant or {}, sort_keys=True))
        if key not in self.harnesses:
            cfg = _with_variant(vllm_draft_config(scn, scn.spec.boundaries), variant)
            d = write_draft_dir(scn.fresh_dir("vllm-draft"), cfg)
            dtype = torch_dtype((variant or {}).get("dtype", "float32"))
            t0 = time.perf_counter()
            self.harnesses[key] = VLLMCPUHarness(scn.saved_dirs()[0], d, dtype=dtype)
            self.build_s += time.perf_counter() - t0
            self.builds += 1
        return self.harnesses[key]

    def close(self) -> None:
        for h in self.harnesses.values():
            h.close()
        self.harnesses.clear()


_POOL = VLLMPool()


def run_vllm(scn: Scenario, contract: Contract, ex: Example, pool: Optional[VLLMPool] = None,
             k: Knobs = Knobs()) -> list[Finding]:
    """One ``vllm-extend`` run on the live CPU harness: the draft config (``k.draft_config``, else
    the good vLLM config) re-read by vLLM's ``SpeculativeConfig`` and both runners' readers, the
    extend batch through both runners, the capture checks on every request, the vocab mapping as the
    real draft loaded it, and the serving template."""
    from eagle3_conformance.checks import check_chat_template, check_golden_tokens, check_vocab_mapping, run_checks

    pool = pool or _POOL
    h = pool.get(scn, k.variant)
    bnd = ex.boundaries or scn.spec.boundaries
    cfg = k.draft_config if k.draft_config is not None else vllm_draft_config(scn, bnd)
    h.apply_draft_config(_with_variant(cfg, k.variant))
    caps = apply_capture(k, scn, h.extend([list(x) for x in ex.extend]))
    out: list[Finding] = []
    for cap in caps:
        out += run_checks(contract, cap, scn.ref.capture(cap.token_ids))
    N = scn.spec.draft_vocab
    d2t = None if k.d2t == "missing" else (scn.d2t if k.d2t == "good" else scn.d2t + torch.arange(N))
    out += check_vocab_mapping(contract, h.load_d2t(d2t), scn.t2d, "vllm-extend", "draft draft_id_to_target_id")
    tmpl = k.serving_template or GOOD_TEMPLATE
    out += check_chat_template(contract, tmpl, "vllm-extend")
    out += check_golden_tokens(contract, None, render_ids(tmpl), "vllm-extend")
    return out
