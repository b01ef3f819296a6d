"""Diagnoses of the verified-rows check (checks/verified_rows.py): after a partial accept, padding
rows or other tokens' rows for the accepted tokens."""

from __future__ import annotations

from collections import Counter

from eagle3_conformance.contract import Contract
from eagle3_conformance.diagnose.base import Diagnosis, _explained, _PathView
from eagle3_conformance.diagnose.fixes import _Fixer


def _decode_rows(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """R43 / R52 (fault-kinds.md field reports): ``verified_rows`` failed: after a partial accept the draft
    extend got zero padding rows (R43) or other tokens' / requests' verified rows (R52) for the
    accepted tokens."""
    bad = [f for f in v.failing("verified_rows") if isinstance(f.observed, dict)]
    if not bad:
        return []
    judged = len([f for f in v.by_check.get("verified_rows", []) if f.status in ("pass", "fail")])
    pad = sum(int(f.observed.get("padding") or 0) for f in bad)
    other = sum(int(f.observed.get("shifted") or 0) + int(f.observed.get("foreign") or 0) for f in bad)
    rows = sum(int(f.observed.get("accepted") or 0) for f in bad)
    shifts = Counter(f.observed.get("shift") for f in bad if f.observed.get("shift") is not None)
    ev = [f"{len(bad)} of {judged} requests after verify: {pad} accepted rows are zero padding and {other} are "
          f"rows of other tokens or requests, of {rows} accepted rows"]
    if shifts:
        ev.append(f"the misplaced rows sit {shifts.most_common(1)[0][0]:+d} rows from their own token's row")
    checks = ("verified_rows", "row_fingerprint", "feature_alignment", "slot_identity", "norm_band", "magnitude")
    used.update(checks)
    where = "after a partial accept (accept length < num_draft_tokens)"
    if pad >= other:
        return [Diagnosis(
            "decode-rows-padded", "K13", f"the draft extend gets padding rows for accepted tokens {where} (R43)",
            tuple(ev), ("index the verified rows before the draft: request i's accepted rows are verify rows "
                        "i * num_draft_tokens + arange(accept_len_i); drop any padding added for the batch layout "
                        "(context-parallel or graph padding, vllm-ascend#8433) before the rows reach the draft",),
            (v.path,), ("feature",), _explained(v, checks), {v.path: f"{len(bad)}/{judged} {v.unit}"})]
    return [Diagnosis(
        "decode-rows-misaligned", "K9", f"the draft extend gets the wrong verified rows {where} (R52)", tuple(ev),
        ("read each request's accepted rows at its own offset in the buffer the verify wrote: uncompacted "
         "(num_draft_tokens rows per request, SGLang 0.5.23 eagle_worker_v2: select_index = arange(0, bs * n, n) + "
         "accept_lens - 1) or compacted (cumulative accept lengths), never one layout's offsets into the other "
         "(ik_llama.cpp#1894)",),
        (v.path,), ("feature",), _explained(v, checks), {v.path: f"{len(bad)}/{judged} {v.unit}"})]
