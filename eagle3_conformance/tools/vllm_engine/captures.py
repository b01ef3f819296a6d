"""Hook records of one vLLM engine run (:mod:`.hooks`) -> :class:`~eagle3_conformance.core.capture.Capture`
objects, vLLM's own acceptance counters, and the engine as its own reference.

Rows are attributed to requests by vLLM's own batch layout, never guessed: each target forward
record carries the runner's ``input_batch.req_ids`` and ``query_start_loc``
(``gpu_model_runner.py:2029-2034``); the ``fc`` record that follows it is ``combine_hidden_states``
of that forward's aux concat (one row per scheduled token, ``llm_base_proposer.py:550``), and the
draft forward right after it the first draft pass (its ``input_ids`` are the target's shifted left by
one). A request is the prompt whose tokens its first segment carries (position 0 onward).

Conventions are those of the SGLang engine path (:mod:`eagle3_conformance.tools.sglang_engine.captures`):
an extend capture (the request's first step) is judged on ``token_ids`` = the prompt, ``rows`` = the
positions; a verify capture on ``token_ids`` = the committed prefix + the verified tokens, ``rows`` =
their positions, ``provenance["accepted"]`` = vLLM's per-step accepted draft count
(``spec_decode_metrics.per_step_accepted``) + 1 (the bonus token).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import torch

from eagle3_conformance.core.capture import Capture

PATH = "vllm-engine"


def load_records(records_dir: Path) -> list[dict[str, Any]]:
    """The records in call order (one worker)."""
    return [torch.load(f, weights_only=True) for f in sorted(Path(records_dir).glob("*.pt"))]


def steps(records: list[dict]) -> list[tuple[dict, dict, Optional[dict]]]:
    """(target forward, fc record, first draft forward) per propose, in order.

    Raises:
        ValueError: an ``fc`` record with no target forward before it, or more rows than it.
    """
    out, target = [], None
    for k, rec in enumerate(records):
        if rec["role"] == "target":
            target = rec
        elif rec["role"] == "fc":
            if target is None or rec["fc_input"].shape[0] > target["positions"].shape[-1]:
                raise ValueError(f"record {k}: an fc input with no target forward of at least its rows before it")
            nxt = records[k + 1] if k + 1 < len(records) and records[k + 1]["role"] == "draft" else None
            out.append((target, rec, nxt))
    return out


def _segments(target: dict, n: int) -> list[tuple[str, slice]]:
    q = target["query_start_loc"]
    return [(rid, slice(q[j], min(q[j + 1], n))) for j, rid in enumerate(target["req_ids"]) if q[j] < n]


def _owner(rid, ids, pos, prompts, owner) -> Optional[int]:
    if rid in owner:
        return owner[rid]
    if pos and pos[0] == 0:
        for r, p in enumerate(prompts):
            if r not in owner.values() and list(p[:len(ids)]) == ids:
                owner[rid] = r
                return r
    return None


def build_captures(records: list[dict], prompts: list[list[int]], outputs: list[dict], boundaries: list[str],
                   engine_ids: list[int], provenance: dict) -> tuple[list[Capture], list[Capture]]:
    """(extend captures, verify captures) from one run's records.

    Raises:
        ValueError: a segment matches no prompt (the message names the step and request id).
    """
    full = [list(p) + list(o["output_ids"]) for p, o in zip(prompts, outputs)]
    accepted = [(o.get("spec_decode_metrics") or {}).get("per_step_accepted") or [] for o in outputs]
    owner: dict[str, int] = {}
    count = [0] * len(prompts)
    extend, decode = [], []
    for s, (tgt, fc, draft) in enumerate(steps(records)):
        n = fc["fc_input"].shape[0]
        pos_all = tgt["positions"].reshape(-1)
        for rid, sl in _segments(tgt, n):
            ids, pos = tgt["input_ids"][sl].tolist(), pos_all[sl].tolist()
            r = _owner(rid, ids, pos, prompts, owner)
            if r is None:
                raise ValueError(f"propose {s}: rows of request id {rid!r} match no prompt")
            k = count[r]
            count[r] += 1
            prov = {**provenance, "request": r, "request_id": rid, "step": k, "engine_step": s}
            fields = dict(
                path=PATH, feature=fc["hidden"][sl], rows=torch.tensor(pos, dtype=torch.int64),
                fc_input=fc["fc_input"][sl], fc_source=fc["hidden"][sl], fc_ran=True,
                draft_input_width=int(fc["hidden"].shape[-1]), engine_ids=list(engine_ids),
                engine_boundaries=list(boundaries),
                position_ids=None if draft is None else draft["positions"].reshape(-1)[sl].long(),
                draft_input_ids=None if draft is None or draft["input_ids"] is None else draft["input_ids"][sl].long())
            if k == 0:
                extend.append(Capture(where=f"engine extend, request {r}", token_ids=torch.tensor(full[r][:len(ids)]),
                                      provenance={**prov, "mode": "EXTEND"}, **fields))
                continue
            acc = accepted[r][k - 1] + 1 if k - 1 < len(accepted[r]) else None
            tokens = full[r][:pos[0]] + ids
            # vLLM's padded drafter batch shifts input ids across the whole batch and writes the sampled token
            # at the last accepted row (llm_base_proposer.py set_inputs_first_pass): rows after it carry other
            # tokens, which vLLM discards; so verify captures carry no draft_input_ids
            fields["draft_input_ids"] = None
            decode.append(Capture(where=f"engine verify step {k - 1}, request {r}", token_ids=torch.tensor(tokens),
                                  provenance={**prov, "mode": "TARGET_VERIFY", "verify_tokens": ids,
                                              "num_draft_tokens": len(ids),
                                              **({} if acc is None else {"accepted": acc, "select_row": acc - 1})},
                                  **fields))
    return extend, decode


def engine_slot_boundaries(records: list[dict], slot_width: int, num_layers: int) -> dict[str, Any]:
    """The engine as its own reference: for each slot of the fc input, the boundary B_k of the
    target's own residual stream in the same forward (B_0 = ``embed_tokens`` output, B_k = layer
    k-1's ``hidden + residual``) that it equals, over every propose. ``slots``: ``"B_k"`` per slot
    (None: no boundary within 1e-5 of it at every row); ``max_abs_diff``: per slot, the largest
    difference to that boundary; ``rows``: fc rows compared. Empty without residual records."""
    best: list[dict[int, float]] = []
    rows = 0
    for tgt, fc, _ in steps(records):
        res = tgt.get("residual") or {}
        if len(res) < num_layers + 1:
            return {}
        x = fc["hidden"].float()
        n = x.shape[0]
        rows += n
        slots = torch.split(x, slot_width, dim=-1)
        if not best:
            best = [{} for _ in slots]
        for j, sx in enumerate(slots):
            for k in range(num_layers + 1):
                d = float((sx - res[k][:n].float()).abs().max()) if sx.shape == res[k][:n].shape else float("inf")
                best[j][k] = max(best[j].get(k, 0.0), d)
    out_slots, diffs = [], []
    for b in best:
        k = min(b, key=lambda i: b[i])
        out_slots.append(f"B_{k}" if b[k] <= 1e-5 else None)
        diffs.append(b[k])
    return {"slots": out_slots, "max_abs_diff": diffs, "rows": rows}


def accept_figures(outputs: list[dict], metrics: dict) -> dict[str, Any]:
    """vLLM's own acceptance counters, per request and for the batch.

    ``spec_accept_length``: tokens per verify step, bonus included (1 + accepted / drafts, from
    ``vllm:spec_decode_num_accepted_tokens`` and ``vllm:spec_decode_num_drafts``: what vLLM logs as
    "Mean acceptance length"); ``per_position_acceptance``: ``vllm:spec_decode_num_accepted_tokens_per_pos``
    / ``num_drafts``; ``per_request``: the same mean from each request's ``spec_decode_metrics``
    histogram; ``spec_correct_drafts_histogram``: the histograms summed (entry j: verify steps that
    accepted exactly j drafts).
    """
    drafts = metrics.get("vllm:spec_decode_num_drafts") or 0
    acc = metrics.get("vllm:spec_decode_num_accepted_tokens") or 0
    per_pos = metrics.get("vllm:spec_decode_num_accepted_tokens_per_pos") or []
    hists = [(o.get("spec_decode_metrics") or {}).get("histogram") or [] for o in outputs]
    width = max((len(h) for h in hists), default=0)
    hist = [sum(h[j] for h in hists if j < len(h)) for j in range(width)]
    per_req = []
    for h in hists:
        steps_ = sum(h)
        per_req.append(1 + sum(j * c for j, c in enumerate(h)) / steps_ if steps_ else None)
    return {"spec_accept_length": 1 + acc / drafts if drafts else None, "per_request": per_req,
            "spec_correct_drafts_histogram": hist,
            "per_position_acceptance": [p / drafts for p in per_pos] if drafts else [],
            "num_drafts": drafts, "num_accepted_tokens": acc, "accepted_per_pos": list(per_pos)}
