"""Bad layer ids in a draft's ``config.json``, found before any engine reads them (issue 37, ``validate``).

What is refused, each naming the config file, the key and its line:

* an id that is not an integer, or a negative id: no tool reads one as a layer. ``-1`` is SGLang's one
  documented negative (``layers_to_capture = [val + 1 for val in layer_ids]``, SGLang 0.5.23
  ``models/llama.py``: -1 captures B_0, the embedding); it is allowed in the nested key only when the
  contract declares B_0 (``capture.boundaries``);
* an id past the target's depth under every tool's rule: ``id > L`` reads ``B_id`` (vLLM, speculators)
  or ``B_{id+1}`` (SGLang), both beyond ``B_L``; the message gives the layer count the draft needs
  and the one the target has (R64, vllm-project/vllm#48113, #48524: a drafter needing >= 35 layers on a
  32-layer target failed with a matmul shape error);
* a repeated id: the concat holds one boundary twice and SGLang's / vLLM's setters collapse it
  (``sorted(set(ids))``), so fc gets fewer slots than the list is long;
* ids in both the nested ``eagle_config`` key and the top-level key with different values: SGLang and
  SpecForge read the nested one only, vLLM and speculators the top-level one first, so two engines serve
  one draft with different taps (R40; :func:`ambiguous_ids`, which ``init`` refuses too);
* a list of another length than the contract's aux slots (fc is built for ``len(ids)`` slots);
* DFlash ``dflash_config.target_layer_ids``: the same, with SGLang's own range 0..L-1
  (``dflash_utils.py:556-586`` raises outside it).

Pure: reads the JSON text, imports neither torch nor an engine.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional

NESTED = ("eagle_config", "eagle_aux_hidden_state_layer_ids")
TOP = ("eagle_aux_hidden_state_layer_ids",)
DFLASH = ("dflash_config", "target_layer_ids")
_KEYS = {NESTED: "eagle_config.eagle_aux_hidden_state_layer_ids", TOP: "eagle_aux_hidden_state_layer_ids",
         DFLASH: "dflash_config.target_layer_ids"}


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """(key path) -> 1-based line of that key in the JSON ``text``, for every object key (the path of
    enclosing object keys; arrays are not descended into). The first occurrence wins."""
    out: dict[tuple[str, ...], int] = {}
    stack: list[Optional[tuple[str, ...]]] = []  # per open container: its key path (None: in an array)
    pending: Optional[str] = None
    line, i, n = 1, 0, len(text)
    str_re = re.compile(r'"((?:[^"\\]|\\.)*)"', re.S)
    while i < n:
        ch = text[i]
        if ch == '"':
            m = str_re.match(text, i)
            if m is None:
                break
            k = m.end()
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] == ":" and stack and stack[-1] is not None:
                try:
                    pending = json.loads(m.group(0))
                except ValueError:
                    pending = m.group(1)
                out.setdefault(stack[-1] + (pending,), line)
            line += m.group(0).count("\n")
            i = m.end()
            continue
        if ch == "\n":
            line += 1
        elif ch == "{":
            parent = stack[-1] if stack else ()
            stack.append(() if not stack else (parent + (pending,) if parent is not None and pending is not None
                                               else None))
            pending = None
        elif ch == "[":
            stack.append(None)
            pending = None
        elif ch in "}]":
            if stack:
                stack.pop()
            pending = None
        elif ch == ",":
            pending = None
        i += 1
    return out


def _get(cfg: dict, path: tuple[str, ...]) -> Any:
    cur: Any = cfg
    for p in path:
        if not isinstance(cur, dict) or p not in cur:
            return None
        cur = cur[p]
    return cur


def raw_ids(cfg: dict) -> dict[tuple[str, ...], Any]:
    """The layer-id lists present in a draft config: key path -> value as written."""
    return {p: _get(cfg, p) for p in _KEYS if _get(cfg, p) is not None}


def _read(f: Path, text: Optional[str] = None) -> Optional[tuple[str, dict]]:
    """(text, JSON object) of the config ``f`` (``text``: already read); None when it cannot be read or is not
    an object (the config readers report that)."""
    try:
        text = f.read_text() if text is None else text
        cfg = json.loads(text)
    except (OSError, ValueError):
        return None
    return (text, cfg) if isinstance(cfg, dict) else None


def id_problems(config_file: str | Path, L: int, num_slots: int, *, allow_b0: bool = False,
                text: Optional[str] = None) -> list[tuple[str, str]]:
    """Bad layer ids in the draft config ``config_file`` for a target of ``L`` layers and a contract of
    ``num_slots`` aux slots. Returns ``(key, message)`` pairs, each message naming the file, the key and
    its line; empty when none. An unreadable file returns nothing (the config readers report it).

    Args:
        config_file: the draft's ``config.json``.
        L: the target's ``num_hidden_layers``.
        num_slots: the contract's K (``len(capture.boundaries)``); 0 skips the length comparison.
        allow_b0: the contract declares B_0, so SGLang's ``-1`` (B_0) is meant in the nested key.
        text: the file's text, when already read.
    """
    f = Path(config_file)
    read = _read(f, text)
    if read is None:
        return []
    text, cfg = read
    lines = key_lines(text)
    found = raw_ids(cfg)
    out: list[tuple[str, str]] = []
    for path, ids in found.items():
        key = _KEYS[path]
        where = f"{f}:{lines.get(path, '?')}: {key}"
        out += [(key, f"{where} = {ids}: {m}") for m in _list_problems(path, ids, L, num_slots, allow_b0)]
    both = _differing(f, found, lines)
    if both:
        out.append((_KEYS[NESTED], both))
    return out


READERS = ("SGLang reads only the nested key (0.5.23 spec_aux_hidden_state.py:185-196), as SpecForge 0.2.0 does; "
           "vLLM 0.33.0 and speculators 0.9.0 read the top-level one (vLLM falls back to the nested key only when "
           "there is no top-level one)")
"""Which engine reads which id key of an EAGLE-3 draft config (REFERENCE.md 3.2, 5.3, 6; fault-kinds.md R40)."""


def _differing(f: Path, found: dict, lines: dict) -> Optional[str]:
    if not (NESTED in found and TOP in found and _norm(found[NESTED]) != _norm(found[TOP])):
        return None
    return (f"{f}:{lines.get(NESTED, '?')}: {_KEYS[NESTED]} = {found[NESTED]} and {f}:{lines.get(TOP, '?')}: "
            f"{_KEYS[TOP]} = {found[TOP]} differ: {READERS}, so two engines serve this draft with different taps; "
            "keep one list (or the same list in both keys)")


def ambiguous_ids(config_file: str | Path) -> Optional[str]:
    """The draft config holds two aux id lists that differ (nested ``eagle_config`` key and top-level
    key), each read by a different engine: the message naming both keys with their lines, which
    engine reads which and what to do; None when it does not (or the file cannot be read: the config
    readers report that)."""
    f = Path(config_file)
    read = _read(f)
    return None if read is None else _differing(f, raw_ids(read[1]), key_lines(read[0]))


def _norm(v: Any) -> Any:
    return [int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and float(x).is_integer() else x
            for x in v] if isinstance(v, list) else v


def _type_problem(ids: Any) -> Optional[str]:
    """Why ``ids`` is not a list of integer layer ids (a string, a float, null, a bool), or None."""
    if not isinstance(ids, list):
        return f"not a list of layer ids ({type(ids).__name__})"
    bad = [x for x in ids if isinstance(x, bool) or not isinstance(x, int)]
    return f"{bad[0]!r} is not an integer layer id" if bad else None


def non_integer_ids(config_file: str | Path) -> list[str]:
    """The EAGLE-3 aux id lists in the draft config that are not lists of integers, each naming the file, the
    key and its line (the words :func:`id_problems` uses, so ``init`` and ``validate`` say the same thing);
    empty when none or the file cannot be read (the config readers report that)."""
    f = Path(config_file)
    read = _read(f)
    if read is None:
        return []
    text, cfg = read
    lines = key_lines(text)
    return [f"{f}:{lines.get(p, '?')}: {_KEYS[p]} = {ids}: {why}" for p, ids in raw_ids(cfg).items()
            if p != DFLASH and (why := _type_problem(ids))]


def _list_problems(path: tuple[str, ...], ids: Any, L: int, num_slots: int, allow_b0: bool) -> list[str]:
    why = _type_problem(ids)
    if why:
        return [why]
    out = []
    dflash = path == DFLASH
    neg = [x for x in ids if x < 0 and not (x == -1 and path == NESTED and allow_b0)]
    if neg:
        why = ("SGLang's resolver accepts 0..L-1 only (dflash_utils.py:556-586)" if dflash else
               "no tool reads a negative id as a layer; only SGLang's -1 (+1 rule: B_0, the embedding) has a "
               "meaning, and the contract does not declare B_0" if -1 in neg else "no tool reads it as a layer")
        out.append(f"negative id{'s' if len(neg) > 1 else ''} {neg}: {why}")
    top = L - 1 if dflash else L
    past = [x for x in ids if x > top]
    if past:
        m = max(past)
        if dflash:
            out.append(f"id {m} needs the output of layer {m}, i.e. a target of at least {m + 1} layers; the target "
                       f"has L = {L} (DFlash ids run 0..{L - 1}; SGLang's resolver raises, vLLM's +1 reads B_{m + 1}) "
                       "(R64)" + (f"; {m} = L is the layer count, not a layer: a writer appended num_hidden_layers as an id (R63, "
                                      "speculators#705)" if m == L else ""))
        else:
            out.append(f"id {m} reads B_{m} (vLLM, speculators: id k = B_k) or B_{m + 1} (SGLang: +1), both past the "
                       f"target's last boundary B_{L}: the draft needs a target of at least {m} layers, the target has "
                       f"L = {L} (R64, vllm#48113)")
    dup = sorted({x for x in ids if ids.count(x) > 1})
    if dup:
        out.append(f"repeated id{'s' if len(dup) > 1 else ''} {dup}: the concat would hold one boundary twice, and "
                   f"SGLang's / vLLM's setters keep sorted(set(ids)): {len(set(ids))} slots captured for a list of "
                   f"{len(ids)}")
    if num_slots and not dflash and len(ids) != num_slots:
        out.append(f"{len(ids)} ids where the contract declares {num_slots} aux slots (capture.boundaries): the "
                   f"draft's fc is built for {len(ids)} x target_hidden_size")
    return out
