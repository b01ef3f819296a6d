"""Hook records of one engine run (:mod:`.hooks`) -> :class:`~eagle3_conformance.capture.Capture` objects.

Rows are attributed to requests by SGLang's own bookkeeping, never guessed: a draft EXTEND record
is split by ``extend_seq_lens`` and each segment belongs to the request whose ``req_pool_indices``
entry it carries; that request is the prompt whose tokens the segment's (shifted) ids and positions
match. A DRAFT_EXTEND_V2 record (``num_draft_tokens`` rows per request, in ``req_pool_indices``
order) is paired with the TARGET_VERIFY record just before it (the verify whose hidden states it
got, ``eagle_worker_v2.py:1110-1160``), whose input ids are the verified tokens.

Conventions are the harness's (:mod:`eagle3_conformance.tools.sglang_cpu.harness`): an extend capture
is judged on ``token_ids`` = the prompt, ``rows`` = the positions; a decode capture on ``token_ids`` =
the committed prefix + the verify tokens, ``rows`` = the verify positions, ``provenance["accepted"]``
= SGLang's ``num_accept_tokens`` (bonus included).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import torch

from eagle3_conformance.capture import Capture

PATH = "sglang-engine"


def load_records(records_dir: Path) -> list[dict[str, Any]]:
    """The records in the order they were written (one scheduler process)."""
    files = sorted(Path(records_dir).glob("*.pt"), key=lambda p: (p.stem.split("-")[0], p.stem.split("-")[1]))
    return [torch.load(f, weights_only=True) for f in files]


def _segments(rec: dict, n_per_req: Optional[int] = None) -> list[tuple[int, slice]]:
    lens = [n_per_req] * len(rec["req_pool_indices"]) if n_per_req else rec["extend_seq_lens"].tolist()
    out, start = [], 0
    for rp, n in zip(rec["req_pool_indices"].tolist(), lens):
        out.append((int(rp), slice(start, start + int(n))))
        start += int(n)
    return out


def _draft_fields(rec: dict, sl: slice, boundaries: list[str]) -> dict:
    fc = rec.get("fc_input")
    return dict(draft_input_ids=rec["input_ids"][sl], position_ids=rec["positions"][sl], fc_ran=fc is not None,
                fc_input=None if fc is None else fc[sl], fc_source=None if fc is None else rec["hidden"][sl],
                draft_input_width=int(rec["hidden"].shape[-1]), engine_boundaries=list(boundaries))


def _match_request(ids: list[int], pos: list[int], full: list[list[int]], taken: set) -> Optional[int]:
    """The request whose sequence has ids[j] at pos[j] + 1 (the draft's ids are shifted left by one)."""
    for r, seq in enumerate(full):
        if r in taken:
            continue
        if all(p + 1 < len(seq) and seq[p + 1] == t for t, p in zip(ids, pos)):
            return r
    return None


def build_captures(records: list[dict], prompts: list[list[int]], outputs: list[list[int]],
                   provenance: dict) -> tuple[list[Capture], list[Capture]]:
    """(extend captures, decode captures) from one run's records.

    Raises:
        ValueError: a record cannot be attributed to a request (the message says which record).
    """
    full = [list(p) + list(o) for p, o in zip(prompts, outputs)]
    owner: dict[int, int] = {}  # req_pool_idx -> request
    boundaries: list[str] = []
    last_verify: Optional[dict] = None
    extend, decode = [], []
    steps = [0] * len(prompts)
    for k, rec in enumerate(records):
        if rec["role"] == "target":
            if rec.get("layers_to_capture"):
                boundaries = [f"B_{i}" for i in sorted(set(rec["layers_to_capture"]))]
            if rec["mode"] == "TARGET_VERIFY":
                last_verify = rec
            continue
        if rec["mode"] == "EXTEND":
            extend += _extend_captures(k, rec, prompts, full, owner, boundaries, provenance)
        elif rec["mode"] == "DRAFT_EXTEND_V2":
            if last_verify is None:
                raise ValueError(f"record {k}: a draft extend after verify with no target verify before it")
            decode += _decode_captures(k, rec, last_verify, full, owner, steps, boundaries, provenance)
    return extend, decode


def _extend_captures(k, rec, prompts, full, owner, boundaries, provenance) -> list[Capture]:
    caps = []
    for rp, sl in _segments(rec):
        ids, pos = rec["input_ids"][sl].tolist(), rec["positions"][sl].tolist()
        r = _match_request(ids, pos, full, set(owner.values()) - {owner.get(rp)})
        if r is None:
            raise ValueError(f"record {k} (draft EXTEND): rows of req_pool_idx {rp} match no prompt")
        owner[rp] = r
        caps.append(Capture(
            path=PATH, where=f"engine extend, request {r}", token_ids=torch.tensor(prompts[r], dtype=torch.int64),
            feature=rec["hidden"][sl], rows=torch.tensor(pos, dtype=torch.int64),
            **_draft_fields(rec, sl, boundaries),
            provenance={**provenance, "mode": "EXTEND", "draft_mode": rec["mode"], "request": r,
                        "fc_calls": int(rec.get("fc_input") is not None)}))
    return caps


def _decode_captures(k, rec, verify, full, owner, steps, boundaries, provenance) -> list[Capture]:
    bs = len(rec["req_pool_indices"])
    n = rec["hidden"].shape[0] // bs
    vsegs = dict(_segments(verify, n))
    caps = []
    for b, (rp, sl) in enumerate(_segments(rec, n)):
        if rp not in owner or rp not in vsegs:
            raise ValueError(f"record {k} (DRAFT_EXTEND_V2): req_pool_idx {rp} has no extend or no verify rows")
        r, vsl = owner[rp], vsegs[rp]
        pos = verify["positions"][vsl]
        start = int(pos[0])
        tokens = full[r][:start] + verify["input_ids"][vsl].tolist()
        accepted = int(rec["num_accept_tokens"][b])
        caps.append(Capture(
            path=PATH, where=f"engine verify step {steps[r]}, request {r}",
            token_ids=torch.tensor(tokens, dtype=torch.int64), feature=rec["hidden"][sl],
            rows=pos.clone().long(), **_draft_fields(rec, sl, boundaries),
            provenance={**provenance, "mode": "TARGET_VERIFY", "draft_mode": rec["mode"], "request": r,
                        "accepted": accepted, "select_row": accepted - 1, "num_draft_tokens": int(n),
                        "verify_tokens": verify["input_ids"][vsl].tolist()}))
        steps[r] += 1
    return caps


def accept_figures(outputs: list[dict]) -> dict[str, Any]:
    """SGLang's own acceptance counters, per request and for the batch.

    ``spec_accept_length`` is SGLang's ``completion_tokens / spec_verify_ct`` (the token sampled at
    prefill included: docs/paths.md, ``sglang-engine`` facts); the batch figure is the same ratio
    over all requests. ``per_position`` is SGLang's ``spec_correct_drafts_histogram`` summed over
    requests (entry j: verify steps that accepted exactly j drafts) turned into the fraction of verify
    steps whose draft position j+1 was accepted.
    """
    comp = sum(int(o["meta_info"].get("completion_tokens", 0)) for o in outputs)
    verify = sum(int(o["meta_info"].get("spec_verify_ct", 0)) for o in outputs)
    from eagle3_conformance.acceptance_stats import merge_histograms, per_position

    hist = merge_histograms([o["meta_info"].get("spec_correct_drafts_histogram") or [] for o in outputs])
    # SGLang grows the histogram on demand: positions up to the largest count seen (the same function
    # gives the cpu-accept loop's figures)
    per_pos = per_position(hist, len(hist) - 1) if len(hist) > 1 and sum(hist) else []
    return {"spec_accept_length": comp / verify if verify else None,
            "per_request": [o["meta_info"].get("spec_accept_length") for o in outputs],
            "spec_correct_drafts_histogram": hist, "per_position_acceptance": per_pos,
            "completion_tokens": comp, "spec_verify_ct": verify}
