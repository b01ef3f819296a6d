"""Where a contract's target, draft and data live on this machine (its *local pair*).

A contract naming a ``fixture`` gets the fixture's pair (built deterministically, cached);
otherwise ``target.path`` / ``draft.path`` are taken relative to the contract file. Paths, the
plugin and the command line all resolve a pair here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from eagle3_conformance.contract import Contract, contract_source
from eagle3_conformance.environment.torch_env import torch_dtype  # noqa: F401  (where the paths import it from)


class PairUnavailable(Exception):
    """The contract's target/draft/data are not available on this machine."""


@dataclass(frozen=True)
class LocalPair:
    """A contract's pair on this machine.

    Attributes:
        target_dir: HF-format target directory (config + safetensors): the reference model.
        draft_dir: the draft's directory (its ``config.json``), or None.
        data_dir: a speculators 0.9.0 dataset made from the target (fixtures), or None.
        origin: where it came from, in words (``"fixture tiny-llama"``, ``"local paths"``).
    """

    target_dir: Optional[Path]
    draft_dir: Optional[Path]
    data_dir: Optional[Path]
    origin: str


def resolve_pair(c: Contract) -> LocalPair:
    """Where the contract's target, draft and data live on this machine.

    A contract naming a ``fixture`` is built (deterministically, cached); otherwise
    ``target.path`` / ``draft.path`` are taken relative to the contract file.

    Raises:
        PairUnavailable: no fixture and no local target path.
    """
    if c.fixture:
        from eagle3_conformance.environment.shipped import checkout_fixture_note

        note = checkout_fixture_note(c.fixture)
        if note:  # an installed package has no fixtures/ (and building one imports torch)
            raise PairUnavailable(note)
        from eagle3_conformance.testbed.fixtures import FixtureError, build_fixture

        try:
            b = build_fixture(c.fixture)
        except FixtureError as e:
            what = "not found" if "no such fixture" in str(e) else "cannot be built"
            raise PairUnavailable(f"fixture {c.fixture!r} {what} ({e})") from None
        return LocalPair(b.target_dir, b.draft_dir, b.data_dir, f"fixture {c.fixture}")
    src = contract_source(c)
    # absolute, so that messages and reports name the directory itself, never ``../../../root/.cache/...``
    # relative to wherever the contract was named from (newuser finding 17)
    base = (src.parent if src else Path.cwd()).absolute()

    def rel(p: Optional[str]) -> Optional[Path]:
        if not p:
            return None
        q = Path(p)
        return q if q.is_absolute() else Path(os.path.normpath(base / q))  # "a/../b" named as "b" in messages

    t = rel(c.target.path)
    if t is None:
        raise PairUnavailable(f"target {c.target.name} is not available locally (no fixture, no target.path)")
    if not t.is_dir():
        raise PairUnavailable(f"target.path {c.target.path!r} of {src or 'the contract'} is not a directory "
                              f"(resolved to {t})")
    return LocalPair(t, rel(c.draft.path), None, "local paths")


def contract_reference(c: Contract) -> Optional[Path]:
    """The reference target directory the contract itself names (its ``fixture``, else its
    ``target.path``), or None when it names neither.

    Raises:
        PairUnavailable: the contract names a fixture or a target.path that cannot be resolved;
            callers treat that as bad input, never as "no reference".
    """
    if not c.fixture and not c.target.path:
        return None
    return resolve_pair(c).target_dir
