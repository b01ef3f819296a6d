"""Skips CI can see: a run fails when a test skips that is not on the checked-in list of expected skips.

``tests/expected_skips.txt`` holds one section per tox environment (``[all]``, ``[vllm]``, ...); tox.ini
names the section with ``CONFORMANCE_EXPECTED_SKIPS``. Each line is ``NODEID :: REASON``: ``NODEID`` a
pytest node id in which ``*`` matches any text, ``REASON`` text the skip's reason must contain. A skip that matches no
line of the section fails the session (exit 1), naming the test and its reason; so does a skip whose reason
differs from the listed one (a path that starts skipping for a new reason is a new skip). An expected skip
that did not happen is reported, never failed (``-k`` runs a subset; a test that runs is good news).

Without ``CONFORMANCE_EXPECTED_SKIPS`` (a developer's own pytest run) nothing is enforced.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

LIST = Path(__file__).with_name("expected_skips.txt")
ENV = "CONFORMANCE_EXPECTED_SKIPS"


@dataclass(frozen=True)
class Expected:
    pattern: str
    reason: str
    line: int

    def matches(self, nodeid: str, reason: str) -> bool:
        return node_matches(self.pattern, nodeid) and self.reason in reason


def node_matches(pattern: str, nodeid: str) -> bool:
    """``*`` in ``pattern`` matches any text; everything else is literal (a parametrized id's ``[...]`` too,
    which fnmatch would read as a character class)."""
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), nodeid, re.S) is not None


def load(section: str, path: Path = LIST) -> list[Expected]:
    """The entries of ``[section]``, with those of every section it names on an ``@include NAME`` line
    (skips several environments share, such as the public pairs' contracts, are written once).

    Raises:
        ValueError: the section (or an included one) is missing, an include loops, or a line is not
            ``NODEID :: REASON`` (file and line named).
    """
    sections = _sections(path)
    out: list[Expected] = []
    _collect(section, sections, path, out, ())
    return out


def _sections(path: Path) -> dict[str, list[tuple[int, str]]]:
    """Section name -> its (line number, line) entries, comments and blank lines left out."""
    sections: dict[str, list[tuple[int, str]]] = {}
    current = None
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
            sections.setdefault(current, [])
            continue
        node, sep, reason = line.partition(" :: ")
        include = line.startswith("@include ") and current is not None
        if not include and (current is None or not sep or not node.strip() or not reason.strip()):
            raise ValueError(f"{path}:{n}: expected 'NODEID :: REASON' or '@include SECTION' inside a [section], "
                             f"got {raw!r}")
        sections[current].append((n, line))
    return sections


def _collect(section: str, sections: dict, path: Path, out: list, via: tuple[str, ...]) -> None:
    if section not in sections:
        raise ValueError(f"{path}: no section [{section}]{f' (included by [{via[-1]}])' if via else ''} "
                         f"(sections: {', '.join(sorted(sections))})")
    if section in via:
        raise ValueError(f"{path}: [{section}] includes itself ({' -> '.join((*via, section))})")
    for n, line in sections[section]:
        if line.startswith("@include "):
            _collect(line.removeprefix("@include ").strip(), sections, path, out, (*via, section))
        else:
            node, _, reason = line.partition(" :: ")
            out.append(Expected(node.strip(), reason.strip(), n))


def skip_reason(report) -> str:
    """The reason pytest recorded for a skipped report (``Skipped: `` prefix removed)."""
    lr = report.longrepr
    text = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
    return text.removeprefix("Skipped: ")


class ExpectedSkips:
    """The plugin: collects every skip of the session, fails it on an unexpected one."""

    def __init__(self, section: str, entries: list[Expected]):
        self.section, self.entries = section, entries
        self.skips: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skips.append((report.nodeid, skip_reason(report)))

    def pytest_collectreport(self, report) -> None:
        """A module that skips while collected (``pytest.importorskip`` or ``skip(allow_module_level=True)``
        at its top) skips every test in it: counted once, under the module's node id."""
        if report.skipped:
            self.skips.append((report.nodeid, skip_reason(report)))

    def unexpected(self) -> list[tuple[str, str]]:
        return [(n, r) for n, r in self.skips if not any(e.matches(n, r) for e in self.entries)]

    def unused(self) -> list[Expected]:
        return [e for e in self.entries if not any(e.matches(n, r) for n, r in self.skips)]

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus) -> None:
        if self.unexpected() and exitstatus in (0, 5):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        bad, unused = self.unexpected(), self.unused()
        tr = terminalreporter
        if bad:
            tr.section(f"unexpected skips ({ENV}={self.section}): the run fails", red=True)
            for n, r in bad:
                tr.line(f"{n} :: {r}")
            tr.line(f"Each line above is 'NODEID :: REASON'. If the skip is right in this environment, paste the line "
                    f"under [{self.section}] in {LIST.relative_to(LIST.parents[1])} with a comment saying why (a "
                    "`*` in NODEID matches any text; REASON may be cut to the part that does not vary); otherwise "
                    "the test should run here: find out why it skipped.")
        else:
            tr.line(f"skips: {len(self.skips)}, all expected ({LIST.name} [{self.section}])")
        if unused and self.skips is not None:
            tr.line(f"expected but not skipped in this run ({len(unused)}; a subset run, or the test runs now): "
                    + ", ".join(f"line {e.line}" for e in unused[:20]))


def register(config) -> None:
    """Register :class:`ExpectedSkips` when ``CONFORMANCE_EXPECTED_SKIPS`` names a section."""
    section = os.environ.get(ENV, "").strip()
    if not section:
        return
    # the list is this session's: the pytest runs its tests start (pytester, subprocesses, the identity
    # snapshots' plugin run, xdist's workers, whose reports the controller judges) do not inherit it
    os.environ.pop(ENV, None)
    try:
        entries = load(section)
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    config.pluginmanager.register(ExpectedSkips(section, entries), "expected-skips")
