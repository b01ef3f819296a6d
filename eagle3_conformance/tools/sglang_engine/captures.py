"""Hook records of one engine run (:mod:`.hooks`) -> :class:`~eagle3_conformance.core.capture.Capture` objects.

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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from eagle3_conformance.core.capture import Capture

PATH = "sglang-engine"


def load_records(records_dir: Path) -> list[dict[str, Any]]:
    """The records in the order they were written (one scheduler process)."""
    return [{**torch.load(f, weights_only=True), "_file": f.name} for f in record_files(records_dir)]


def record_files(records_dir: Path) -> list[Path]:
    """The ``<pid>-<n>.pt`` records in the order they were written (by process, then counter)."""
    def key(p: Path):
        pid, _, n = p.stem.partition("-")
        return (int(pid), int(n)) if pid.isdigit() and n.isdigit() else (-1, 0)

    return sorted(Path(records_dir).glob("*.pt"), key=key)


def segments(rec: dict, n_per_req: Optional[int] = None) -> list[tuple[int, slice]]:
    """``(req_pool_index, row slice)`` per request of one forward record: ``n_per_req`` rows each
    (target verify: the draft tokens per request), else the record's ``extend_seq_lens``."""
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


@dataclass
class _Seq:
    """One request as the records show it: ``tokens`` at positions 0.. (prompt, then committed tokens)."""

    request: int
    tokens: list[int]
    rid: Optional[str] = None
    conditions: dict = field(default_factory=dict)  # what the engine did around this request (:func:`_note`)


@dataclass
class Attribution:
    """Captures made from records alone (:func:`attribute`).

    Attributes:
        extend: one capture per request segment of each draft EXTEND record (``token_ids`` = the
            request's tokens up to the segment's end, ``rows`` = the positions).
        decode: one capture per request of each DRAFT_EXTEND_V2 record (the rows of the target
            verify before it; ``provenance["accepted"]`` = SGLang's ``num_accept_tokens``).
        unattributed: ``(record, why)`` for rows no capture could be made of (named, never guessed).
        modes: ``"role MODE"`` -> records seen.
        requests: request number -> its first extend's tokens (the prompt, or its first chunk).
        row_tokens: ``(target record, {row: the token prefix that row was computed on})`` for each
            target record carrying the engine's own boundaries (``ref_states``, :mod:`.hooks`), to
            key them (:func:`eagle3_conformance.reference.engine.EngineReference.add`).
    """

    extend: list = field(default_factory=list)
    decode: list = field(default_factory=list)
    unattributed: list = field(default_factory=list)
    modes: dict = field(default_factory=dict)
    requests: dict = field(default_factory=dict)
    row_tokens: list = field(default_factory=list)


class _Attributor:
    """The walk of :func:`attribute`: SGLang's own bookkeeping, record by record."""

    def __init__(self, provenance: dict) -> None:
        # the records carry the target's layers_to_capture (what is captured), not the ids the engine read
        self.prov = {**provenance, "engine_ids": "not recorded (boundaries from the target's layers_to_capture)"}
        self.out = Attribution()
        self.kv: dict[int, int] = {}  # KV slot -> the token last written there by a target forward
        self.live: dict[int, _Seq] = {}  # req_pool_idx -> the request holding it
        self.boundaries: list[str] = []
        self.last_extend: Optional[dict] = None
        self.last_verify: Optional[dict] = None
        self.steps: dict[int, int] = {}

    def reset(self) -> None:
        """A record is missing (unreadable): what it wrote is unknown, so nothing before it is trusted."""
        self.kv.clear()
        self.live.clear()
        self.last_extend = self.last_verify = None

    def _write_kv(self, rec: dict) -> None:
        locs = rec.get("out_cache_loc")
        if locs is not None and len(locs) == len(rec["input_ids"]):
            self.kv.update(zip(locs.tolist(), rec["input_ids"].tolist()))

    def target_extend(self, rec: dict) -> None:
        prefix_lens = rec.get("extend_prefix_lens")
        plocs = rec.get("prefix_locs")
        off, rows = 0, {}
        for b, (rp, sl) in enumerate(segments(rec)):
            pos = rec["positions"][sl].tolist()
            p = int(prefix_lens[b]) if prefix_lens is not None else (pos[0] if pos else 0)
            prefix: Optional[list] = []
            if p:
                locs = plocs[off:off + p].tolist() if plocs is not None else []
                prefix = [self.kv.get(x) for x in locs] if len(locs) == p else None
                if prefix is not None and None in prefix:
                    prefix = None
            off += p
            if prefix is None or (pos and pos[0] != p):
                self.live.pop(rp, None)
                self.out.unattributed.append((rec, f"req_pool_idx {rp}: the {p} tokens before position {p} "
                                              "(cached prefix) were written by no record read here"))
                continue
            seq = self.live.get(rp)
            rid = rec["rids"][b] if rec.get("rids") and b < len(rec["rids"]) else None
            if seq is None or p == 0 or seq.tokens != prefix or (rid is not None and seq.rid != rid):
                # else: the next chunk of the same request
                seq = _Seq(len(self.out.requests), list(prefix), rid, {"first_row": p})
                self.out.requests[seq.request] = list(prefix) + rec["input_ids"][sl].tolist()
            seq.tokens = prefix + rec["input_ids"][sl].tolist()
            _note(seq, rec, len(segments(rec)))
            self.live[rp] = seq
            rows.update({i: seq.tokens[:q + 1] for i, q in zip(range(sl.start, sl.stop), pos)})
        self._write_kv(rec)
        self.last_extend = rec
        if "ref_format" in rec:
            self.out.row_tokens.append((rec, rows))

    def target_verify(self, rec: dict) -> None:
        self._write_kv(rec)
        self.last_verify = rec
        if "ref_format" not in rec:
            return
        bs = len(rec["req_pool_indices"])
        ids, pos, rows = rec["input_ids"].tolist(), rec["positions"].tolist(), {}
        for rp, sl in segments(rec, len(ids) // bs if bs else 0):
            seq = self.live.get(rp)
            if seq is None or len(seq.tokens) < pos[sl.start]:
                continue
            base = seq.tokens[:pos[sl.start]]
            rows.update({i: base + ids[sl.start:i + 1] for i in range(sl.start, sl.stop)})
        self.out.row_tokens.append((rec, rows))

    def draft_extend(self, rec: dict) -> None:
        if self.last_extend is None:
            self.out.unattributed.append((rec, "a draft EXTEND with no target EXTEND before it"))
            return
        for rp, sl in segments(rec):
            seq = self.live.get(rp)
            ids, pos = rec["input_ids"][sl].tolist(), rec["positions"][sl].tolist()
            if seq is None:
                self.out.unattributed.append((rec, f"req_pool_idx {rp}: its target EXTEND rows were not attributed"))
                continue
            toks = seq.tokens
            if any(q + 1 < len(toks) and toks[q + 1] != t for t, q in zip(ids, pos)) or pos[-1] >= len(toks):
                self.out.unattributed.append((rec, f"req_pool_idx {rp}: the draft's shifted ids are not the "
                                              f"target's tokens of request {seq.request}"))
                continue
            self.out.extend.append(Capture(
                path=PATH, where=f"engine extend, request {seq.request}", token_ids=torch.tensor(toks[:pos[-1] + 1]),
                feature=rec["hidden"][sl], rows=torch.tensor(pos, dtype=torch.int64),
                **_draft_fields(rec, sl, self.boundaries),
                provenance={**self.prov, "mode": "EXTEND", "draft_mode": rec["mode"], "request": seq.request,
                            "fc_calls": int(rec.get("fc_input") is not None), "record": rec.get("_file"),
                            "rid": seq.rid, "conditions": dict(seq.conditions)}))
        self.last_extend = None

    def draft_extend_after_verify(self, rec: dict) -> None:
        verify = self.last_verify
        if verify is None:
            self.out.unattributed.append((rec, "a draft extend after verify with no target verify before it"))
            return
        bs = len(rec["req_pool_indices"])
        n = rec["hidden"].shape[0] // bs
        vsegs = dict(segments(verify, n))
        for b, (rp, sl) in enumerate(segments(rec, n)):
            seq = self.live.get(rp)
            if seq is None or rp not in vsegs:
                self.out.unattributed.append((rec, f"req_pool_idx {rp}: no attributed extend or no verify rows"))
                continue
            vsl = vsegs[rp]
            pos = verify["positions"][vsl]
            start, vids = int(pos[0]), verify["input_ids"][vsl].tolist()
            if len(seq.tokens) < start:
                self.live.pop(rp, None)
                self.out.unattributed.append((rec, f"req_pool_idx {rp}: tokens before position {start} of request "
                                              f"{seq.request} unknown (a verify step was not recorded)"))
                continue
            accepted = int(rec["num_accept_tokens"][b])
            step = self.steps.get(seq.request, 0)
            self.out.decode.append(Capture(
                path=PATH, where=f"engine verify step {step}, request {seq.request}",
                token_ids=torch.tensor(seq.tokens[:start] + vids, dtype=torch.int64), feature=rec["hidden"][sl],
                rows=pos.clone().long(), **_draft_fields(rec, sl, self.boundaries),
                provenance={**self.prov, "mode": "TARGET_VERIFY", "draft_mode": rec["mode"], "request": seq.request,
                            "accepted": accepted, "select_row": accepted - 1, "num_draft_tokens": int(n),
                            "verify_tokens": vids, "record": rec.get("_file"), "rid": seq.rid,
                            "batch_size": bs}))
            seq.tokens = seq.tokens[:start] + vids[:accepted]  # committed: the verified prefix, bonus next
            self.steps[seq.request] = step + 1
        self.last_verify = None

    def feed(self, rec: dict) -> None:
        if rec.get("broken"):
            self.reset()
            return
        key = f"{rec['role']} {rec['mode']}"
        self.out.modes[key] = self.out.modes.get(key, 0) + 1
        if rec["role"] == "target":
            if rec.get("layers_to_capture"):
                self.boundaries = [f"B_{i}" for i in sorted(set(rec["layers_to_capture"]))]
            if rec["mode"] == "EXTEND":
                self.target_extend(rec)
            elif rec["mode"] == "TARGET_VERIFY":
                self.target_verify(rec)
        elif rec["mode"] == "EXTEND":
            self.draft_extend(rec)
        elif rec["mode"] == "DRAFT_EXTEND_V2":
            self.draft_extend_after_verify(rec)


def _note(seq: _Seq, rec: dict, batch_size: int) -> None:
    """What the engine did around one request's prefill, read off its target EXTEND records:
    ``first_row`` (the cached prefix: a radix-cache hit), ``chunks`` (EXTEND forwards: > 1 is a chunked
    prefill), ``batch_size`` (the largest prefill batch it was in), ``return_logprob``."""
    cond = seq.conditions
    cond["chunks"] = cond.get("chunks", 0) + 1
    cond["batch_size"] = max(cond.get("batch_size", 0), batch_size)
    cond["return_logprob"] = cond.get("return_logprob", False) or bool(rec.get("return_logprob"))


def attribute(records: list[dict], provenance: Optional[dict] = None) -> Attribution:
    """Captures from one scheduler process's records, in the order they were written, with no
    prompt known: each request's tokens are rebuilt from SGLang's own bookkeeping (a target EXTEND's
    ids at its positions; a cached prefix's tokens through the KV slots that hold them,
    ``prefix_locs`` -> the ids last written to those slots, :func:`.hooks.kv_fields`; after each
    verify, the verify ids SGLang accepted, ``num_accept_tokens``). A record ``{"broken": ...}``
    (unreadable) makes everything before it untrusted. Rows that cannot be attributed are listed in
    ``unattributed`` with the reason, never guessed."""
    walk = _Attributor(provenance or {})
    for rec in records:
        walk.feed(rec)
    return walk.out


def build_captures(records: list[dict], prompts: list[list[int]], outputs: list[list[int]],
                   provenance: dict) -> tuple[list[Capture], list[Capture]]:
    """(extend captures, decode captures) of one engine run with known ``prompts``: :func:`attribute`,
    then each request numbered by the prompt it served (``outputs`` are not needed: the records
    carry the committed tokens; kept for the callers).

    Raises:
        ValueError: a record cannot be attributed, or a request matches no prompt (the message says which).
    """
    att = attribute(records, provenance)
    if att.unattributed:
        rec, why = att.unattributed[0]
        raise ValueError(f"record {rec.get('_file', '?')} ({rec.get('role')} {rec.get('mode')}): {why}")
    index: dict[int, int] = {}
    for req, toks in att.requests.items():
        hits = [i for i, p in enumerate(prompts) if list(p) == toks and i not in index.values()]
        if not hits:
            raise ValueError(f"request {req} (first extend of {len(toks)} tokens) matches no prompt")
        index[req] = hits[0]
    for cap in att.extend + att.decode:
        r = index[cap.provenance["request"]]
        cap.provenance["request"] = r
        cap.where = cap.where.rsplit("request ", 1)[0] + f"request {r}"
    return att.extend, att.decode


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
    from eagle3_conformance.acceptance.stats import merge_histograms, per_position

    hist = merge_histograms([o["meta_info"].get("spec_correct_drafts_histogram") or [] for o in outputs])
    # SGLang grows the histogram on demand: positions up to the largest count seen (the same function
    # gives the cpu-accept loop's figures)
    per_pos = per_position(hist, len(hist) - 1) if len(hist) > 1 and sum(hist) > 0 else []
    return {"spec_accept_length": comp / verify if verify else None,
            "per_request": [o["meta_info"].get("spec_accept_length") for o in outputs],
            "spec_correct_drafts_histogram": hist, "per_position_acceptance": per_pos,
            "completion_tokens": comp, "spec_verify_ct": verify}
