"""The project's real-text corpus (``fixtures/corpus/corpus.jsonl``) and its rendering into
token ids for a real model.

Each line of the corpus is one JSON object:

- ``id`` (unique), ``kind`` (``prose``, ``code``, ``chat``, ``list``, ``table``, ``short``);
- either ``text`` (a string), or, for ``kind == "chat"``, ``messages``: a list of
  ``{"role": "system" | "user" | "assistant", "content": str}`` turns;
- optionally ``lang`` (the language of a code item).

This module gives the items (:func:`load_items`), their texts (:func:`texts`), conversations
rendered with a tokenizer's own chat template (:func:`render`), and token id lists with a loss
mask (:func:`tokenize`): 1 on assistant tokens of a conversation (the reply's content and the
end-of-turn token that closes it), 1 everywhere for plain text. Everything is deterministic:
:func:`select` picks items by a seeded hash of their ids, never by a random generator whose
algorithm may change.

A tokenizer without a chat template (a base model) renders a conversation as a plain
transcript (``"User: ...\\n\\nAssistant: ...\\n\\n"``), documented in ``fixtures/corpus/README.md``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIR = REPO_ROOT / "fixtures" / "corpus"
DEFAULT_CORPUS = CORPUS_DIR / "corpus.jsonl"
KINDS = ("prose", "code", "chat", "list", "table", "short")
ROLES = ("system", "user", "assistant")
TRANSCRIPT_NAMES = {"system": "System", "user": "User", "assistant": "Assistant"}


class CorpusError(Exception):
    """The corpus file is missing or malformed, or an item cannot be rendered."""


@dataclass(frozen=True)
class Item:
    """One corpus item: plain ``text`` or a conversation (``messages``), never both."""

    id: str
    kind: str
    text: Optional[str] = None
    messages: Optional[tuple[dict[str, str], ...]] = None
    lang: Optional[str] = None

    @property
    def is_chat(self) -> bool:
        return self.messages is not None


@dataclass(frozen=True)
class Rendered:
    """An item as the model reads it: the text and the character spans of assistant output."""

    item_id: str
    text: str
    assistant_spans: tuple[tuple[int, int], ...]  # [start, end) character offsets into text
    template: str  # "chat_template", "transcript" or "text"


@dataclass(frozen=True)
class Tokenized:
    """Token ids and the loss mask (same length) of one rendered item."""

    item_id: str
    kind: str
    input_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    truncated: bool


def corpus_digest(path: str | Path = DEFAULT_CORPUS) -> str:
    """sha256 of the corpus file's bytes (fixture builds are keyed on it)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as e:
        raise CorpusError(f"{path}: cannot read the corpus: {e}") from None


def load_items(path: str | Path = DEFAULT_CORPUS) -> list[Item]:
    """Every item of the corpus, in file order.

    Raises:
        CorpusError: missing file, invalid JSON (with the line number), a missing or unknown
            field, a duplicate id, or a conversation with an unknown role or no assistant turn.
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise CorpusError(f"{p}: cannot read the corpus: {e}") from None
    items: list[Item] = []
    seen: set[str] = set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{p}:{n}:{e.colno}: invalid JSON: {e.msg}") from None
        items.append(_item(obj, f"{p}:{n}"))
        if items[-1].id in seen:
            raise CorpusError(f"{p}:{n}: duplicate id {items[-1].id!r}")
        seen.add(items[-1].id)
    if not items:
        raise CorpusError(f"{p}: the corpus holds no items")
    return items


def _item(obj: Any, where: str) -> Item:
    if not isinstance(obj, dict):
        raise CorpusError(f"{where}: an item must be a JSON object")
    unknown = set(obj) - {"id", "kind", "text", "messages", "lang"}
    if unknown:
        raise CorpusError(f"{where}: unknown field(s) {sorted(unknown)}")
    iid, kind = obj.get("id"), obj.get("kind")
    if not isinstance(iid, str) or not iid:
        raise CorpusError(f"{where}: 'id' must be a non-empty string")
    if kind not in KINDS:
        raise CorpusError(f"{where}: item {iid!r}: 'kind' must be one of {list(KINDS)}, got {kind!r}")
    if kind == "chat":
        msgs = obj.get("messages")
        if "text" in obj or not isinstance(msgs, list) or not msgs:
            raise CorpusError(f"{where}: chat item {iid!r} needs a non-empty 'messages' list and no 'text'")
        for m in msgs:
            if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str) \
                    or set(m) != {"role", "content"}:
                raise CorpusError(f"{where}: chat item {iid!r}: each turn is {{role: {'|'.join(ROLES)}, "
                                  f"content: str}}, got {m!r}")
        if not any(m["role"] == "assistant" for m in msgs):
            raise CorpusError(f"{where}: chat item {iid!r} has no assistant turn")
        return Item(iid, kind, messages=tuple(dict(m) for m in msgs), lang=obj.get("lang"))
    text = obj.get("text")
    if "messages" in obj or not isinstance(text, str) or not text:
        raise CorpusError(f"{where}: item {iid!r} needs a non-empty 'text' and no 'messages'")
    return Item(iid, kind, text=text, lang=obj.get("lang"))


def texts(items: Iterable[Item]) -> list[str]:
    """The text of every plain item (conversations are left out; see :func:`render`)."""
    return [it.text for it in items if it.text is not None]


def conversations(items: Iterable[Item]) -> list[list[dict[str, str]]]:
    """The turns of every conversation, as ``[{"role", "content"}]`` lists."""
    return [[dict(m) for m in it.messages] for it in items if it.messages is not None]


def select(items: Sequence[Item], n: Optional[int], seed: int, include: Sequence[str] = ()) -> list[Item]:
    """``n`` items chosen deterministically, in corpus order: those named in ``include`` first,
    then the rest ranked by ``sha256(f"{seed}:{id}")``. ``n=None`` keeps every item.

    Raises:
        CorpusError: an ``include`` id is not in the corpus, or ``n`` is larger than the corpus.
    """
    by_id = {it.id: it for it in items}
    missing = [i for i in include if i not in by_id]
    if missing:
        raise CorpusError(f"include names unknown corpus items: {missing}")
    if n is None:
        return list(items)
    if n > len(items) or n < len(include):
        raise CorpusError(f"cannot select {n} items from a corpus of {len(items)} with {len(include)} forced")
    rank = sorted((it for it in items if it.id not in include),
                  key=lambda it: hashlib.sha256(f"{seed}:{it.id}".encode()).hexdigest())
    chosen = set(include) | {it.id for it in rank[: n - len(include)]}
    return [it for it in items if it.id in chosen]


# --- rendering ---------------------------------------------------------------------------------


def render(item: Item, tokenizer=None) -> Rendered:
    """The text the model reads for ``item``.

    Plain items are their text. A conversation goes through ``tokenizer``'s own chat template
    (``apply_chat_template(..., tokenize=False)``); without a template it becomes a plain
    transcript. Assistant spans cover each assistant reply's content plus, with a chat template,
    the end-of-turn token right after it (the tokenizer's ``eos_token``) when present.

    Raises:
        CorpusError: a conversation without a tokenizer, or a reply the rendered text does not
            contain verbatim (a template that rewrites content).
    """
    if item.messages is None:  # not a conversation: plain text
        if item.text is None:
            raise CorpusError(f"item {item.id!r}: neither text nor messages")
        return Rendered(item.id, item.text, (), "text")
    msgs = [dict(m) for m in item.messages]
    template = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    if tokenizer is None:
        raise CorpusError(f"item {item.id!r}: a conversation needs a tokenizer to be rendered")
    if not template:
        return _transcript(item.id, msgs)
    text = tokenizer.apply_chat_template(msgs, tokenize=False)
    eos = getattr(tokenizer, "eos_token", None) or ""
    spans, pos = [], 0
    for m in msgs:
        at = text.find(m["content"], pos)
        if at < 0:
            raise CorpusError(f"item {item.id!r}: the chat template's output does not contain the "
                              f"{m['role']} turn verbatim: {m['content'][:40]!r}")
        end = at + len(m["content"])
        if m["role"] == "assistant":
            if eos and text.startswith(eos, end):
                end += len(eos)
            spans.append((at, end))
        pos = end
    return Rendered(item.id, text, tuple(spans), "chat_template")


def _transcript(item_id: str, msgs: list[dict[str, str]]) -> Rendered:
    parts, spans, pos = [], [], 0
    for m in msgs:
        head = f"{TRANSCRIPT_NAMES[m['role']]}: "
        block = head + m["content"] + "\n\n"
        if m["role"] == "assistant":
            spans.append((pos + len(head), pos + len(head) + len(m["content"])))
        parts.append(block)
        pos += len(block)
    return Rendered(item_id, "".join(parts), tuple(spans), "transcript")


def tokenize(item: Item, tokenizer, *, add_bos: bool = False, max_tokens: Optional[int] = None) -> Tokenized:
    """Token ids and loss mask of ``item`` rendered with :func:`render`.

    Args:
        add_bos: prepend ``tokenizer.bos_token_id`` unless the ids already start with it (for
            models that expect it, e.g. Gemma; the tokenizer's own special tokens are never added,
            so a chat template's tokens are not doubled).
        max_tokens: truncate to this many tokens (``truncated`` says so).

    The loss mask is 1 on tokens overlapping an assistant span of a conversation, 0 on the rest
    of it, and 1 on every token of a plain item.

    Raises:
        CorpusError: the item renders to no tokens.
    """
    r = render(item, tokenizer)
    enc = tokenizer(r.text, add_special_tokens=False, return_offsets_mapping=bool(r.assistant_spans))
    ids = list(enc["input_ids"])
    if r.assistant_spans:
        offs = enc["offset_mapping"]
        # a token is the assistant's when its characters [s, e) overlap a span [a, b)
        mask = [int(any(s < b and a < e for a, b in r.assistant_spans) if e > s else
                    any(a <= s < b for a, b in r.assistant_spans)) for s, e in offs]
    else:
        mask = [0 if item.is_chat else 1] * len(ids)
    bos = getattr(tokenizer, "bos_token_id", None)
    if add_bos and bos is not None and (not ids or ids[0] != bos):
        ids, mask = [int(bos)] + ids, [0 if item.is_chat else 1] + mask
    if not ids:
        raise CorpusError(f"item {item.id!r} renders to no tokens")
    truncated = max_tokens is not None and len(ids) > max_tokens
    if truncated:
        ids, mask = ids[:max_tokens], mask[:max_tokens]
    return Tokenized(item.id, item.kind, tuple(int(i) for i in ids), tuple(mask), truncated)


def tokenize_all(items: Iterable[Item], tokenizer, **kw) -> list[Tokenized]:
    """:func:`tokenize` for each item, in order."""
    return [tokenize(it, tokenizer, **kw) for it in items]


_POOLS: dict[str, Optional[list[list[int]]]] = {}


def prompt_pool(target_dir, max_tokens: int = 320) -> Optional[list[list[int]]]:
    """The project's corpus tokenized with the target's own tokenizer (chat items rendered with
    its chat template), for hypothesis to draw prompts from; None when ``target_dir`` has no
    tokenizer (the synthetic fixtures). Cached per directory."""
    key = str(Path(target_dir).resolve()) if target_dir else ""
    if key not in _POOLS:
        d = Path(target_dir) if target_dir else None
        if d is None or not any((d / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
            _POOLS[key] = None
        else:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(str(d))
            _POOLS[key] = [list(t.input_ids) for t in tokenize_all(load_items(), tok, max_tokens=max_tokens)
                           if t.input_ids]
    return _POOLS[key]
