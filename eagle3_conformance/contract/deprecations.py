"""Deprecated contract keys: what a committed contract may still hold, and what happens to it.

The policy (docs/compatibility.md): a key is deprecated in one minor release and still loads, with a
:class:`ContractDeprecationWarning` naming the file, the line and what to do, for at least one more minor
release; only then can it be removed (a removed key is an unknown key: ``validate`` refuses it with its
line). ``eagle3-conformance upgrade-contract OLD -o NEW`` rewrites every deprecated key
(:func:`eagle3_conformance.authoring.upgrade_contract.upgrade_text`). ``schema_version`` changes only when
a contract of the old version can no longer be read as the new one.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Optional

KeyPath = tuple[str, ...]


class ContractDeprecationWarning(FutureWarning):
    """A contract holds a deprecated key. A :class:`FutureWarning` (shown by default: it is meant for the
    people who write contracts, not only for developers); the command line prints it as one
    ``eagle3-conformance: warning:`` line."""


@dataclass(frozen=True)
class DeprecatedKey:
    """One deprecated key: ``path`` in the contract, the release that ``since`` deprecated it, the first
    release that may remove it (``removal``, at least one minor release later), ``why``, and what
    ``upgrade-contract`` does: drop it (``rename_to`` None) or move its value to ``rename_to``."""

    path: KeyPath
    since: str
    removal: str
    why: str
    rename_to: Optional[KeyPath] = None

    @property
    def dotted(self) -> str:
        return ".".join(self.path)

    def advice(self) -> str:
        what = f"rename it to {'.'.join(self.rename_to)}" if self.rename_to else "remove it"
        return (f"{self.dotted} is deprecated since {self.since} and ignored ({self.why}); {what} (eagle3-conformance "
                f"upgrade-contract does); it may be refused from {self.removal} on")


DEPRECATED_KEYS: tuple[DeprecatedKey, ...] = (
    DeprecatedKey(("gates", "slot_identity_margin"), "0.2.0", "0.3.0",
                  "a fixed cosine margin failed correct data on trained models; slot identity is decided by rank "
                  "with the noise allowance gates.identity_noise_deg, docs/gates.md"),
)
"""Every deprecated key; tests/test_compatibility.py loads a contract holding each and checks the warning
and the upgrade."""


def present(data: Any, key: DeprecatedKey) -> bool:
    """Whether the parsed YAML mapping ``data`` holds ``key`` (null values too: the key was written)."""
    node = data
    for part in key.path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def deprecated_in(data: Any) -> list[DeprecatedKey]:
    """The deprecated keys a parsed contract mapping holds, in :data:`DEPRECATED_KEYS` order."""
    return [k for k in DEPRECATED_KEYS if present(data, k)]


def warn_deprecated(data: Any, file: str, line_of: Any = lambda path: None, stacklevel: int = 3) -> list[str]:
    """Warn (:class:`ContractDeprecationWarning`) once per deprecated key ``data`` holds; each message
    starts ``FILE:LINE: key``. Returns the messages."""
    out = []
    for k in deprecated_in(data):
        line = line_of(k.path)
        msg = f"{file}{f':{line}' if line else ''}: {k.advice()}"
        warnings.warn(msg, ContractDeprecationWarning, stacklevel=stacklevel)
        out.append(msg)
    return out
