"""Loading a contract: YAML read with a safe loader, every problem reported with the file and YAML
line (:class:`ContractError`); the file is never modified.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import yaml
from pydantic import ValidationError

from eagle3_conformance.contract.deprecations import warn_deprecated
from eagle3_conformance.contract.models import Contract
from eagle3_conformance.contract.sections import KeyPath
from eagle3_conformance.contract.validation import fixture_problems, semantic_problems


@dataclass(frozen=True)
class Problem:
    """One contract problem: a message at a key path and YAML line."""

    loc: tuple[Any, ...]
    message: str
    line: Optional[int] = None
    column: Optional[int] = None

    def format(self, file: str) -> str:
        where = file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        key = ".".join(str(p) for p in self.loc) or "<root>"
        msg = " ".join(str(self.message).split())  # always one line
        return f"{where}: {key}: {msg}"


class ContractError(Exception):
    """A contract file could not be loaded; carries every problem found, each with its line."""

    def __init__(self, file: str, problems: list[Problem]):
        self.file = file
        self.problems = problems
        super().__init__("\n".join(p.format(file) for p in problems))


def _line_map(node: yaml.Node, path: KeyPath = ()) -> dict[KeyPath, tuple[int, int]]:
    """Map key paths to (line, column), 1-based, from a composed YAML node tree."""
    out: dict[KeyPath, tuple[int, int]] = {path: (node.start_mark.line + 1, node.start_mark.column + 1)}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = _key_name(k)
            out[path + (key,)] = (k.start_mark.line + 1, k.start_mark.column + 1)
            for sub, pos in _line_map(v, path + (key,)).items():
                if sub != path + (key,):
                    out[sub] = pos
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out.update(_line_map(v, path + (i,)))
    return out


def _locate(lines: dict[KeyPath, tuple[int, int]], loc: KeyPath) -> tuple[Optional[int], Optional[int]]:
    loc = tuple(loc)
    while True:
        if loc in lines:
            return lines[loc]
        if not loc:
            return None, None
        loc = loc[:-1]


MAX_CONTRACT_BYTES = 256 * 1024  # a contract is a few KiB; anything near this is not one
MAX_NESTING = 16  # far deeper than any contract key path


def _mark(m: Any) -> tuple[Optional[int], Optional[int]]:  # yaml.error.Mark or the C loader's Mark
    return (m.line + 1, m.column + 1) if m is not None else (None, None)


def _prescan(text: str) -> list[Problem]:
    """Event-level guards, run before anything is composed or constructed.

    - nesting deeper than :data:`MAX_NESTING` (PyYAML composes recursively: a deep document would
      otherwise end in RecursionError);
    - aliases of collections (anchors on scalars are fine): expanding them can grow a few lines into
      billions of nodes ("billion laughs"), and ``&a [*a]`` is a cycle. A contract never needs one.
    """
    depth = 0
    collection_anchors: set[str] = set()
    problems: list[Problem] = []
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if ev.anchor:
                collection_anchors.add(ev.anchor)
            if depth > MAX_NESTING:
                problems.append(Problem((), f"nested more than {MAX_NESTING} levels deep; no contract key is that deep",
                                        *_mark(ev.start_mark)))
                return problems
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(ev, yaml.AliasEvent) and ev.anchor in collection_anchors:
            problems.append(Problem((), f"alias *{ev.anchor} repeats a whole mapping or list; write it out "
                                    "(aliases of collections are refused: they can expand without bound)",
                                    *_mark(ev.start_mark)))
    return problems


def _key_name(k: yaml.Node) -> Any:
    return k.value if isinstance(k, yaml.ScalarNode) else f"<{k.tag.rsplit(':', 1)[-1]} key>"


def _duplicate_keys(node: yaml.Node, path: KeyPath = ()) -> list[Problem]:
    """Keys given twice in one mapping. PyYAML silently keeps the last; both lines are reported."""
    out: list[Problem] = []
    stack = [(node, path)]
    while stack:
        n, p = stack.pop()
        if isinstance(n, yaml.MappingNode):
            seen: dict[KeyPath, yaml.Node] = {}
            for k, v in n.value:
                if isinstance(k, yaml.ScalarNode):
                    ident = (k.tag, k.value)
                    if ident in seen:
                        first = seen[ident].start_mark.line + 1
                        out.append(Problem(p + (k.value,),
                                           f"duplicate key {k.value!r}: given at line {first} and again at line "
                                           f"{k.start_mark.line + 1} (YAML would silently keep only the last)",
                                           *_mark(k.start_mark)))
                    else:
                        seen[ident] = k
                stack.append((v, p + (_key_name(k),)))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend((v, p + (i,)) for i, v in enumerate(n.value))
    return sorted(out, key=lambda q: (q.line or 0, q.column or 0))


def _yaml_problem(e: yaml.YAMLError, text: str) -> Problem:
    if isinstance(e, yaml.reader.ReaderError):  # a character YAML does not allow (NUL, other controls)
        pos = e.position
        line = text.count("\n", 0, pos) + 1
        col = pos - (text.rfind("\n", 0, pos) + 1) + 1
        ch = e.character if isinstance(e.character, str) else chr(e.character)
        return Problem((), f"malformed YAML: character {ord(ch):#06x} is not allowed in YAML text", line, col)
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    msg = f"{getattr(e, 'problem', None) or e}"
    ctx = getattr(e, "context", None)
    if ctx:
        msg = f"{ctx}: {msg}"
    return Problem((), f"malformed YAML: {msg}", *_mark(mark))


_MTP_INPUT_KEYS = (("verifier_last",), ("capture", "boundaries"))
_MTP_INPUT_HINT = ("an MTP head reads the target's last hidden state, B_L (pre-norm) or F (post-norm), and engines "
                   "differ (SGLang 0.5.23 feeds F, speculators 0.9.0 trains on B_L); state the one the head was "
                   "trained on in capture.boundaries and verifier_last (fault-kinds.md R49): it is never defaulted")
_KINDS = {list: "a list", str: "a single string", int: "a number", float: "a number", bool: "a boolean"}


Check = Callable[["Contract"], list[tuple[KeyPath, str]]]
"""A further contract check for :func:`parse_contract`: ``(key path, message)`` pairs, empty when fine."""


def parse_contract(text: str, file: str = "<string>", *, known_fixture: bool = False, checks: Sequence[Check] = (),
                   source: Optional[Path] = None) -> Contract:
    """Parse and validate contract YAML text.

    Args:
        text: the YAML.
        file: how to name it in problems.
        known_fixture: also refuse a ``fixture`` that names no fixture (:func:`fixture_problems`;
            ``eagle3-conformance validate`` sets it; commands that run a contract do not, so that an
            explicit ``--reference`` / ``--no-reference`` still runs one whose fixture is absent).
        checks: further checks, run once the contract is consistent in itself, each returning
            ``(key path, message)`` pairs reported at their lines (``validate`` passes
            :func:`eagle3_conformance.authoring.local_configs.config_problems`).
        source: the file the text came from; relative ``target.path`` / ``draft.path`` are taken
            relative to it (:func:`load_contract` passes it).

    Raises:
        ContractError: malformed YAML (with line:column), a document that is not a mapping, keys
            given twice (both lines), over-deep nesting or aliased collections, schema violations
            and unknown keys (all listed at once, each with its line), or semantic inconsistencies.

    Warns:
        ContractDeprecationWarning: once per deprecated key the text holds, with its line
            (:mod:`eagle3_conformance.contract.deprecations`).
    """
    if len(text) > MAX_CONTRACT_BYTES:
        raise ContractError(file, [Problem((), f"{len(text)} characters; a contract is at most "
                                               f"{MAX_CONTRACT_BYTES} (is this a contract file?)")])
    try:
        pre = _prescan(text)
        if pre:
            raise ContractError(file, pre)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ContractError(file, [_yaml_problem(e, text)]) from None
    except RecursionError:  # not reachable after _prescan; kept so no traceback can escape
        raise ContractError(file, [Problem((), "nested too deeply to read")]) from None
    if node is None:
        raise ContractError(file, [Problem((), "the file holds no YAML document (empty or only comments); "
                                               "a contract is a mapping", 1, 1)])
    if not isinstance(data, dict):
        kind = _KINDS.get(type(data), f"a {type(data).__name__}")
        raise ContractError(file, [Problem((), f"the document is {kind}; a contract must be a YAML mapping "
                                               "(key: value lines)", *_mark(node.start_mark))])
    dups = _duplicate_keys(node)
    if dups:
        raise ContractError(file, dups)
    lines = _line_map(node)
    warn_deprecated(data, file, lambda path: _locate(lines, path)[0])
    try:
        contract = Contract.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = tuple(err["loc"])
            line, col = _locate(lines, loc)
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            elif err["type"] == "missing" and data.get("method") == "mtp" and loc in _MTP_INPUT_KEYS:
                msg += f": {_MTP_INPUT_HINT}"
            elif err["type"].endswith("_type") and isinstance(err.get("input"), (str, bool, int, float)):
                v = err["input"]  # strict types: say what was given (a quoted "8" is a string in YAML)
                kind = ("the boolean" if isinstance(v, bool) else "the string" if isinstance(v, str)
                        else "the number")
                msg += f", got {kind} {str(v).lower() if isinstance(v, bool) else repr(v)}"
            problems.append(Problem(loc, msg, line, col))
        raise ContractError(file, problems) from None
    if source is not None:
        object.__setattr__(contract, "_source", source)  # frozen model: remember where it came from
    found = semantic_problems(contract) + (fixture_problems(contract) if known_fixture else [])
    if checks and not found:  # a contract that contradicts itself is fixed first
        found = [p for check in checks for p in check(contract)]
    problems = [Problem(loc, msg, *_locate(lines, loc)) for loc, msg in found]
    if problems:
        raise ContractError(file, problems)
    return contract


def load_contract(path: str | Path, *, known_fixture: bool = False, checks: Sequence[Check] = ()) -> Contract:
    """Load a contract file (read-only). ``known_fixture``, ``checks``: see :func:`parse_contract`.

    Raises:
        ContractError: the file is missing, unreadable or not a regular file (a FIFO would block
            the read), or any problem listed in :func:`parse_contract`.
    """
    p = Path(path)
    try:
        if p.exists() and not p.is_file() and not p.is_dir():  # a directory keeps its own message
            raise ContractError(str(p), [Problem((), "not a regular file (a FIFO, socket or device): refusing to "
                                                     "read it, as reading could wait forever")])
        if p.is_file() and p.stat().st_size > MAX_CONTRACT_BYTES * 4:
            raise ContractError(str(p), [Problem((), f"{p.stat().st_size} bytes; a contract is at most "
                                                     f"{MAX_CONTRACT_BYTES} (is this a contract file?)")])
        raw = p.read_bytes()
    except OSError as e:
        raise ContractError(str(p), [Problem((), f"cannot read contract: {e.strerror or e}")]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ContractError(str(p), [Problem((), f"not UTF-8 text: byte 0x{raw[e.start]:02x} cannot be decoded "
                                                 f"({e.reason})", line, col)]) from None
    return parse_contract(text, str(p), known_fixture=known_fixture, checks=checks, source=p)


def contract_source(c: Contract) -> Optional[Path]:
    """The file a contract was loaded from, if any."""
    return getattr(c, "_source", None)
