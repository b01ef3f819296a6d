"""The vocabulary a path loads and the text it renders: the draft-to-target vocab mapping
(d2t/t2d), the chat template, the golden conversation's token ids."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from eagle3_conformance.checks.registry import FACT, MAPPING, TOKENIZER, check
from eagle3_conformance.contract import Contract, contract_source
from eagle3_conformance.core.findings import Finding

if TYPE_CHECKING:
    import torch
else:  # imported at first use: the package loads without torch (core installs)
    from eagle3_conformance.environment.torch_env import lazy_torch as torch


def mapping_sha256(target_ids: torch.Tensor) -> str:
    """sha256 of int64 little-endian bytes of the absolute target ids ([draft_size] int64)."""
    import hashlib

    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(target_ids.to(torch.int64).numpy()).astype("<i8").tobytes()).hexdigest()


def mapping_problems(d2t: torch.Tensor, t2d: Optional[torch.Tensor], vocab: int, draft_size: int, *,
                     convention: str = "offset", sha256: Optional[str] = None, need_t2d: bool = False) -> list[str]:
    """What is wrong with a d2t/t2d pair, in words (empty: nothing).

    Args:
        d2t: [draft_size] int64, offsets (``convention="offset"``: target id = i + d2t[i], speculators'
            and SGLang's reading) or absolute target ids.
        t2d: [vocab] bool mask of the target ids in the draft vocabulary, or None.
        vocab: the target's vocabulary size; draft_size: the draft's.
        sha256: :func:`mapping_sha256` of the absolute ids to match, or None.
        need_t2d: a missing t2d is a problem.

    Invariants (speculators src/speculators/train/vocab_mapping.py): d2t int64 of length ``draft_size``;
    the target ids strictly increasing and inside [0, vocab); equal to ``t2d.nonzero()``;
    ``t2d.sum() == draft_size``.
    """
    problems = []
    if d2t.dtype != torch.int64:
        problems.append(f"d2t dtype {str(d2t.dtype).replace('torch.', '')}, expected int64")
    if d2t.dim() != 1 or d2t.shape[0] != draft_size:
        problems.append(f"d2t shape {list(d2t.shape)}, expected [{draft_size}]")
    ids = None
    if not problems:
        ids = d2t.long() if convention == "absolute" else torch.arange(draft_size) + d2t.long()
        if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
            bad = int((ids[1:] <= ids[:-1]).nonzero()[0]) + 1
            problems.append(f"target ids (i + d2t[i]) are not strictly increasing (first at draft id {bad}: "
                            f"{int(ids[bad - 1])} then {int(ids[bad])})" if convention != "absolute" else
                            "target ids (d2t[i]) are not strictly increasing")
        if int(ids.min()) < 0 or int(ids.max()) >= vocab:
            problems.append(f"target ids outside [0, {vocab})")
    if t2d is None:
        if need_t2d:
            problems.append("t2d is missing")
    else:
        if t2d.dim() != 1 or t2d.shape[0] != vocab:
            problems.append(f"t2d shape {list(t2d.shape)}, expected [{vocab}]")
        elif int(t2d.bool().sum()) != draft_size:
            problems.append(f"t2d.sum() = {int(t2d.bool().sum())}, expected {draft_size}")
        elif ids is not None and not torch.equal(ids, t2d.bool().nonzero().flatten()):
            bad = int((ids != t2d.bool().nonzero().flatten()).nonzero()[0])
            problems.append(f"i + d2t[i] differs from t2d.nonzero() (first at draft id {bad})")
    if sha256 and ids is not None and not problems:
        got = mapping_sha256(ids)
        if got != sha256:
            problems.append(f"mapping sha256 {got[:12]}.. != contract {sha256[:12]}..")
    return problems


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
    problems = mapping_problems(d2t, t2d, v.size, v.draft_size, convention=v.d2t_convention,
                                sha256=v.mapping_sha256, need_t2d=v.t2d_present and path == "training")
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


@check(FACT, ("K10",), fact="draft_vocab")
def check_draft_vocab(c: Contract, facts: dict, path: str = "sglang-engine") -> list[Finding]:
    """K10, statically: the served draft checkpoint's vocabulary mapping and head as SGLang 0.5.23 loads
    them (:func:`eagle3_conformance.draft_config.checkpoint.read_draft_vocab`), against the target's
    vocabulary and the contract. A draft whose mapping is wrong receives the right boundary and accepts
    nothing; this names the mapping before anything is served.

    Judged (one finding, every problem listed): where the draft's vocabulary is reduced
    (``draft_vocab_size`` < the target's ``vocab_size``), the checkpoint holds ``d2t`` (without it SGLang
    takes draft id i for target id i), and i + d2t[i] (SGLang's reading, ``llama_eagle3.py:350-352``) is
    strictly increasing inside the target's vocabulary and equal to ``t2d.nonzero()`` where t2d is stored
    (:func:`mapping_problems`); ``lm_head`` has ``draft_vocab_size`` rows (absent: SGLang leaves the draft's
    head at its initial values); the config's ``vocab_size`` is the target's; the draft's vocabulary size
    (``draft_vocab_size``, absent: the target's ``vocab_size``) is the contract's ``draft.draft_vocab_size``;
    and the contract's ``vocab`` section (sizes, convention, ``mapping_sha256``) where it declares one.

    Args:
        facts: :func:`~eagle3_conformance.draft_config.checkpoint.read_draft_vocab`'s dict, or ``{"skip": why}``.
    """
    where = f"draft checkpoint {facts.get('source', '?')}"
    if "skip" in facts:
        return [Finding("draft_vocab", "skip", path, "vocab", "d2t/t2d readable", None, where,
                        f"draft vocabulary not checked: {facts['skip']}", "K10")]
    V = c.target.vocab_size
    n = facts.get("draft_vocab_size")
    tied = facts.get("tie_word_embeddings")
    d2t, t2d, head = facts.get("d2t"), facts.get("t2d"), facts.get("lm_head")
    problems = []
    if facts.get("config_vocab_size") not in (None, V):
        problems.append(f"config vocab_size {facts['config_vocab_size']} is not the target's {V}")
    rows = n if n is not None else V
    if not tied and head is None and n is not None:
        problems.append("no lm_head.weight in the checkpoint: SGLang leaves the draft's head at its initial values")
    elif not tied and head is not None and head[0] != rows:
        problems.append(f"lm_head has {head[0]} rows; the config's draft_vocab_size says {rows}")
    v = c.vocab
    size = n if n is not None else V  # no draft_vocab_size in config.json: the draft shares the target's vocabulary
    if size != c.draft.draft_vocab_size:
        src = contract_source(c)
        problems.append(f"the served draft's config.json says draft_vocab_size {size}"
                        f"{'' if n is not None else ' (absent: the target vocab_size)'} ({where}); the contract's "
                        f"draft.draft_vocab_size {c.draft.draft_vocab_size} ({src or 'the contract'})")
    if n is not None and n < V:
        if d2t is None:
            problems.append(f"the draft vocabulary is reduced ({n} of {V} ids) but the checkpoint has no d2t: SGLang "
                            "reads draft id i as target id i")
        else:
            problems += mapping_problems(d2t, t2d, V, n, sha256=v.mapping_sha256 if v is not None else None)
    if v is not None:
        if v.d2t_convention == "absolute" and d2t is not None:
            problems.append("the contract says d2t holds absolute ids; SGLang reads offsets (hot_token_id = d2t + arange)")
        if n is not None and v.draft_size != n:
            problems.append(f"the checkpoint's draft_vocab_size {n} is not the contract's vocab.draft_size {v.draft_size}")
        if v.d2t_present and d2t is None:
            problems.append("the contract's vocab says d2t is present; the checkpoint has none")
    reduced = f"{n} of {V} target ids" if n is not None and n < V else "the target's whole vocabulary"
    stated = "the contract's draft.draft_vocab_size" + (" and vocab section" if v is not None else "")
    ok = not problems
    return [Finding("draft_vocab", "pass" if ok else "fail", path, "vocab", "d2t/t2d and lm_head as SGLang loads them",
                    "ok" if ok else "; ".join(problems), where,
                    (f"draft vocabulary ({reduced}): d2t/t2d and lm_head consistent with the target's vocab_size "
                     f"and {stated}" if ok else f"draft vocabulary ({reduced}): " + "; ".join(problems)), "K10")]
