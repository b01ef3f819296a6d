"""``upgrade-contract``: rewrite a committed contract's deprecated keys
(:data:`eagle3_conformance.contract.DEPRECATED_KEYS`) as the current release reads them, keeping every
comment, key order and quoting (a ruamel.yaml round trip, the writer ``init`` and ``calibrate`` use).

The input is never modified unless the caller writes over it (``--in-place``); the result is loaded by
:func:`eagle3_conformance.contract.parse_contract` before anything is written, and must raise no
deprecation warning.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

from eagle3_conformance.contract.deprecations import ContractDeprecationWarning, DeprecatedKey, deprecated_in
from eagle3_conformance.core.errors import DataError


@dataclass(frozen=True)
class Change:
    """One rewrite: the key, its line in the old file (1-based), what was done."""

    key: DeprecatedKey
    line: int
    done: str

    def format(self, file: str) -> str:
        return f"{file}:{self.line}: {self.key.dotted}: {self.done}"


def _apply(doc, key: DeprecatedKey) -> Change:
    *parents, last = key.path
    node = doc
    for part in parents:
        node = node[part]
    line = node.lc.key(last)[0] + 1
    value = node[last]
    _drop(node, last)
    if key.rename_to is None:
        return Change(key, line, f"removed (value {value!r}; {key.why})")
    *rparents, rlast = key.rename_to
    target = doc
    for part in rparents:
        target = target.setdefault(part, {})
    if rlast in target and target[rlast] is not None:
        raise DataError(f"{key.dotted} (line {line}) and {'.'.join(key.rename_to)} are both set: keep one by hand")
    target[rlast] = value
    return Change(key, line, f"renamed to {'.'.join(key.rename_to)}")


def _drop(node, key: str) -> None:
    """Delete ``key`` from a ruamel map, keeping the comment lines written above it (ruamel stores them on
    the previous key's end-of-line comment, or on the map itself for the first key)."""
    keys = list(node.keys())
    i = keys.index(key)
    own = node.ca.items.pop(key, None)
    if own and own[2] is not None and i > 0:  # comment lines after this key belong before the next one
        prev = node.ca.items.setdefault(keys[i - 1], [None, None, None, None])
        prev[2] = own[2] if prev[2] is None else prev[2]
    del node[key]


def upgrade_text(text: str, file: str = "<string>") -> tuple[str, list[Change]]:
    """The contract YAML ``text`` with every deprecated key rewritten, and the changes made (empty: the
    text is returned unchanged).

    Raises:
        ContractError: ``text`` is not a contract this release can load (after the rewrite).
        DataError: a rename would overwrite a key that is already set.
    """
    from eagle3_conformance.authoring.yaml_doc import contract_yaml
    from eagle3_conformance.contract import parse_contract

    with warnings.catch_warnings():  # the old text warns by design; the input must load otherwise
        warnings.simplefilter("ignore")
        parse_contract(text, file)
    y = contract_yaml()
    doc = y.load(text)
    plain = _plain(doc)
    changes = [_apply(doc, k) for k in deprecated_in(plain)]
    if not changes:
        return text, []
    buf = io.StringIO()
    y.dump(doc, buf)
    new = buf.getvalue()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=ContractDeprecationWarning)  # the upgraded contract must not warn
        parse_contract(new, file)
    return new, changes


def _plain(node):
    """ruamel's round-trip containers as plain dicts and lists (for :func:`deprecated_in`)."""
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node
