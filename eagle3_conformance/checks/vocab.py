"""The vocabulary a path loads and the text it renders: the draft-to-target vocab mapping
(d2t/t2d), the chat template, the golden conversation's token ids."""

from __future__ import annotations

from typing import Optional

import torch

from eagle3_conformance.checks.registry import MAPPING, TOKENIZER, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import Finding


def mapping_sha256(target_ids: torch.Tensor) -> str:
    """sha256 of int64 little-endian bytes of the absolute target ids ([draft_size] int64)."""
    import hashlib

    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(target_ids.to(torch.int64).numpy()).astype("<i8").tobytes()).hexdigest()


@check(MAPPING, ("K10",))
def check_vocab_mapping(c: Contract, d2t: Optional[torch.Tensor], t2d: Optional[torch.Tensor],
                        path: str = "training", where: str = "vocab mapping") -> list[Finding]:
    """K10: the draft-to-target vocab mapping as loaded on one path obeys the contract.

    Args:
        d2t: [draft_size] int64 offsets (target id = i + d2t[i]) as the path holds them, or None
            when the path has no mapping (missing file / no ``d2t`` in the checkpoint).
        t2d: [vocab] bool mask of target ids in the draft vocab, or None (SGLang ignores it).

    Invariants (speculators src/speculators/train/vocab_mapping.py): d2t int64 of length
    ``vocab.draft_size``; ``arange + d2t`` strictly increasing and inside [0, vocab); equal to
    ``t2d.nonzero()``; ``t2d.sum() == draft_size``; ``mapping_sha256`` when declared.
    Skips when the contract declares no ``vocab`` section.
    """
    def f(check, ok, expected, observed, msg):
        return Finding(check, "pass" if ok else "fail", path, "vocab", expected, observed, where, msg, "K10")

    v = c.vocab
    if v is None:
        return [Finding("vocab_mapping", "skip", path, "vocab", None, None, where,
                        "the contract declares no vocab mapping", "K10")]
    if d2t is None:
        ok = not v.d2t_present
        return [f("vocab_mapping", ok, "d2t present" if v.d2t_present else "no d2t", "absent",
                  "no d2t mapping on this path" + ("" if ok else "; contract says it is present (an identity "
                                                    "mapping would be used silently)"))]
    problems = []
    if d2t.dtype != torch.int64:
        problems.append(f"d2t dtype {str(d2t.dtype).replace('torch.', '')}, expected int64")
    if d2t.dim() != 1 or d2t.shape[0] != v.draft_size:
        problems.append(f"d2t shape {list(d2t.shape)}, expected [{v.draft_size}]")
    ids = None
    if not problems:
        ids = d2t.long() if v.d2t_convention == "absolute" else torch.arange(v.draft_size) + d2t.long()
        if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
            problems.append("target ids (i + d2t[i]) are not strictly increasing")
        if int(ids.min()) < 0 or int(ids.max()) >= v.size:
            problems.append(f"target ids outside [0, {v.size})")
    if t2d is None:
        if v.t2d_present and path == "training":
            problems.append("t2d is missing")
    else:
        if t2d.dim() != 1 or t2d.shape[0] != v.size:
            problems.append(f"t2d shape {list(t2d.shape)}, expected [{v.size}]")
        elif int(t2d.bool().sum()) != v.draft_size:
            problems.append(f"t2d.sum() = {int(t2d.bool().sum())}, expected {v.draft_size}")
        elif ids is not None and not torch.equal(ids, t2d.bool().nonzero().flatten()):
            bad = int((ids != t2d.bool().nonzero().flatten()).nonzero()[0])
            problems.append(f"i + d2t[i] differs from t2d.nonzero() (first at draft id {bad})")
    if v.mapping_sha256 and ids is not None and not problems:
        got = mapping_sha256(ids)
        if got != v.mapping_sha256:
            problems.append(f"mapping sha256 {got[:12]}.. != contract {v.mapping_sha256[:12]}..")
    ok = not problems
    return [f("vocab_mapping", ok, "mapping obeys the contract", "; ".join(problems) or "ok",
              "vocab mapping obeys the contract" if ok else "vocab mapping: " + "; ".join(problems))]


@check(TOKENIZER, ("K11",))
def check_chat_template(c: Contract, template: Optional[str], path: str = "training",
                        where: str = "chat template") -> list[Finding]:
    """K11: the chat template this path renders with hashes to ``tokenizer.chat_template_sha256``."""
    import hashlib

    t = c.tokenizer
    if t is None or t.chat_template_sha256 is None:
        return [Finding("chat_template", "skip", path, None, None, None, where, "no template hash declared", "K11")]
    got = hashlib.sha256((template or "").encode("utf-8")).hexdigest()
    ok = got == t.chat_template_sha256
    return [Finding("chat_template", "pass" if ok else "fail", path, None, t.chat_template_sha256[:12], got[:12], where,
                    "chat template matches the contract" if ok else
                    "chat template differs from the contract's (sha256 mismatch)", "K11")]


@check(TOKENIZER, ("K11",))
def check_golden_tokens(c: Contract, training_ids: Optional[list[int]], serving_ids: Optional[list[int]],
                        path: str = "training", where: str = "golden conversation") -> list[Finding]:
    """K11: the golden conversation tokenizes to ``tokenizer.golden.ids`` on the training side and
    on the serving side (each given as a list of int token ids, or None when that side is not run
    on this path); both sides must also agree with each other."""
    t = c.tokenizer
    if t is None or t.golden is None:
        return [Finding("golden_tokens", "skip", path, None, None, None, where, "no golden conversation declared", "K11")]
    want = list(t.golden.ids)
    out = []
    for side, got in (("training", training_ids), ("serving", serving_ids)):
        if got is None:
            continue
        got = [int(x) for x in got]
        ok = got == want
        if ok:
            msg = f"{side} ids equal the golden ids ({len(want)} tokens)"
        else:
            k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            msg = (f"{side} tokenization differs from the golden ids at token {k} "
                   f"({len(got)} vs {len(want)} tokens; got {got[k:k + 4]}, golden {want[k:k + 4]})")
        out.append(Finding("golden_tokens", "pass" if ok else "fail", path, side, len(want), len(got), where, msg, "K11"))
    return out
