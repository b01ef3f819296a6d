"""The shipped held-out prompt set (``prompts_v1.json``, package data) and its subsets.

Each prompt is one user turn (``messages``), sent through the server's own chat template. The set is
versioned: a baseline records ``PROMPT_SET_VERSION`` and the sha256 of the file, and a run against a
baseline of another version is refused. Written for this verb; not drawn from the project's corpus
(``fixtures/corpus``), on which the shipped SmolLM2 draft was trained.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from eagle3_conformance.core.errors import UsageError

PROMPT_FILE = Path(__file__).resolve().parent / "prompts_v1.json"
PROMPT_SET_VERSION = "1"
DOMAINS = ("chat", "code", "math", "long-context")


@dataclass(frozen=True)
class Prompt:
    """One prompt: ``id`` (e.g. ``code-03``), ``domain`` (:data:`DOMAINS`), ``messages`` (chat turns)."""

    id: str
    domain: str
    messages: tuple


def prompt_set_sha256() -> str:
    """sha256 of the shipped prompt file's bytes."""
    return hashlib.sha256(PROMPT_FILE.read_bytes()).hexdigest()


def load_prompts() -> list[Prompt]:
    """Every prompt of the set, in the file's order (chat, code, math, long-context; 8 each)."""
    doc = json.loads(PROMPT_FILE.read_text(encoding="utf-8"))
    return [Prompt(p["id"], p["domain"], tuple(p["messages"])) for p in doc["prompts"]]


def select(n: Optional[int] = None, ids: Optional[Sequence[str]] = None) -> list[Prompt]:
    """The prompts of a run: the ``ids`` given (a baseline's), else the first ``n`` taken round-robin
    over the domains (``n = 8``: two of each), else all.

    Raises:
        UsageError: ``n`` outside 1..len(set), or an id the set does not have.
    """
    allp = load_prompts()
    if ids is not None:
        by_id = {p.id: p for p in allp}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise UsageError(f"prompt ids {missing} are not in prompt set version {PROMPT_SET_VERSION}")
        return [by_id[i] for i in ids]
    if n is None:
        return allp
    if not 1 <= n <= len(allp):
        raise UsageError(f"--prompts {n}: the set has {len(allp)} prompts; give 1..{len(allp)}")
    queues = [[p for p in allp if p.domain == d] for d in DOMAINS]
    order = [q[i] for i in range(max(map(len, queues))) for q in queues if i < len(q)]
    return order[:n]
