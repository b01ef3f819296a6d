"""Run one registered path on one contract under hypothesis and collect every finding.

The pytest plugin calls :func:`run_path` once per (contract, path) item; it can also be called
directly. The steps are the path protocol's (:mod:`eagle3_conformance.paths.base`): the path's needs,
``prepare`` once, ``first`` (inputs not drawn), then ``observe`` on every example the active
hypothesis profile draws; each observation is judged by :func:`eagle3_conformance.suite.assess.assess`.
The first drawn example with a failing finding stops the search (its findings hold what failed).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Optional, TypeVar, Union

from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.paths.base import Path, Skipped
from eagle3_conformance.suite.assess import assess, reference_loader
from eagle3_conformance.suite.pairs import LocalPair

T = TypeVar("T")


class _Violations(AssertionError):
    pass


def drive(body: Callable, profile: Optional[str] = None) -> list[Finding]:
    """Run ``body(data) -> findings`` under hypothesis profile ``profile`` (a name of
    :mod:`eagle3_conformance.suite.profiles`; None: hypothesis' active default); collect every finding.

    The first failing example stops the search (the findings already hold what failed). No
    shrinking: the findings count the distinct examples drawn, and the failing example reported
    is the one really drawn (a shrink replays simplified inputs that were never real traffic);
    the final replay of the failing example is not counted twice. A derandomized profile draws
    the same inputs whatever local source is loaded (:func:`profiles.source_independent_draws`)."""
    from hypothesis import Phase, given, settings
    from hypothesis import strategies as st

    from eagle3_conformance.suite import profiles

    collected: list[Finding] = []
    seen: set[str] = set()

    chosen = profiles.get(profile) if profile else settings.default

    @settings(chosen, phases=[Phase.explicit, Phase.reuse, Phase.generate], database=None)
    @given(st.data())
    def prop(data):
        fs = body(data)
        key = repr(fs)
        if key not in seen:
            seen.add(key)
            collected.extend(fs)
        if any(f.status == "fail" for f in fs):
            raise _Violations()

    derandomized = chosen is not None and chosen.derandomize  # None: no profile loaded, hypothesis' defaults
    fixed = profiles.source_independent_draws() if derandomized else contextlib.nullcontext()
    try:
        with fixed:
            prop()
    except _Violations:
        pass
    return collected


def run_path(path: Path, c: Contract, pair: LocalPair, profile: Optional[str] = None) -> Union[list[Finding], Skipped]:
    """Every finding of ``path`` on contract ``c`` with its local ``pair``, or :class:`Skipped`
    (with the reason) when the path cannot run here. ``profile``: the hypothesis profile of the
    drawn examples (:func:`drive`)."""
    why = path.needs.unmet(pair, c)
    if why:
        return Skipped(why)
    state = path.prepare(c, pair)
    if isinstance(state, Skipped):
        return state
    reference = reference_loader(c, pair.target_dir)
    findings: list[Finding] = []
    if path.first is not None:
        obs = path.first(state)
        if obs is not None:
            findings += assess(c, obs, reference, path.name)
            if obs.stop_on_failure and any(f.status == "fail" for f in findings):
                return findings
    if path.observe is not None:
        observe = path.observe
        findings += drive(lambda data: assess(c, observe(state, data.draw), reference, path.name), profile)
    return findings


def warm_paths(runs: Iterable[tuple[Path, Contract, LocalPair]]) -> list[Callable[[], None]]:
    """Start, for each (path, contract, pair) about to run, what the path starts ahead (:data:`Path.warm`:
    an engine's run in the background), once per run, in order; paths whose needs are unmet here are left
    alone. Returns the discard callables (call them when the session ends: a job never outlives it).
    Never raises: whatever fails here, the path's own ``prepare`` meets and reports."""
    out: list[Callable[[], None]] = []
    for path, c, pair in runs:
        if path.warm is None:
            continue
        try:
            if path.needs.unmet(pair, c):
                continue
            discard = path.warm(c, pair)
        except Exception:  # noqa: BLE001 - prepare reports it, with the path's own words
            continue
        if discard is not None:
            out.append(discard)
    return out


def warm_items(items: Iterable[tuple[str, Contract]]) -> list[Callable[[], None]]:
    """:func:`warm_paths` for (path name, contract) pairs, as the plugin's chosen items name them: names
    that are no registered path (the server item) and contracts without a local pair are left alone."""
    from eagle3_conformance import paths as registered_paths
    from eagle3_conformance.suite.pairs import PairUnavailable, resolve_pair

    runs = []
    for name, c in items:
        if name not in registered_paths.names() or registered_paths.get(name).warm is None:
            continue
        try:
            runs.append((registered_paths.get(name), c, resolve_pair(c)))
        except PairUnavailable:
            continue  # the item says so itself
    return warm_paths(runs)


def started_ahead_last(items: list[T]) -> list[T]:
    """``items`` (pytest items) in run order: those whose path (``conformance_path``) starts a run ahead
    (:data:`Path.warm`: the real engines) after all the others, each group in its own order. The suite then works
    on the other paths while the engines run, instead of waiting for them at its first engine item (issue 42
    item 4: the suite waited about 28 s for the real pair's engine runs in the main job)."""
    from eagle3_conformance import paths as registered_paths

    def ahead(item: T) -> bool:
        name = getattr(item, "conformance_path", "")
        return name in registered_paths.names() and registered_paths.get(name).warm is not None

    return sorted(items, key=ahead)
