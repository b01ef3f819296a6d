"""Scrapes -> windows: counter differences summed over fixed windows, through restarts, failed scrapes
and idle time.

- **Counter resets.** A counter smaller than at the last scrape means the server process restarted
  (counters start at 0 in a new process). The window then takes the new process's counts since its
  start; what the old process counted between the last scrape and its end is lost (one scrape
  interval at most). The window records the event; the drift test's reference level is kept across
  the restart, which is what a restart onto a broken draft must be judged against.
- **Failed scrapes.** Nothing is counted until the next successful scrape; then the counters'
  difference covers the gap (counters accumulate), so a failed scrape loses no request unless the
  server also restarted during it. Each streak of failures is recorded once, with the server's words.
- **Idle and sparse windows.** A window with fewer than ``min_steps`` verify steps is not judged: its
  counts are carried into the next window (``sparse``), and a window in which no request finished is
  ``idle``. The drift statistic does not move on either.
- **Unreadable windows.** Requests finished but the server's ``/metrics`` does not export the counters
  the accept length is read from (:data:`~.metrics.COUNTED`: a build or a stand-in without them): the
  window cannot be judged and says which counters it lacked (``unreadable``; not carried, since no
  later window can recover the steps). A session with no judged window ends INCONCLUSIVE
  (:meth:`eagle3_conformance.monitor.session.Outcome.cannot_judge`), never NO ALARM.
- **Excluded windows.** While the monitor's own canary runs, the server's counters also count the
  canary's requests: :meth:`Windows.exclude` drops the window's counts and re-bases on the next scrape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from eagle3_conformance.monitor.metrics import Snapshot


@dataclass
class Window:
    """One closed window.

    Attributes:
        index: 0, 1, ... in time order.
        start, end: wall-clock seconds (``time.time()``).
        steps, nums, requests: the counters' increase over the window (carried counts included).
        status: ``judged`` (enough steps: the drift test reads it), ``sparse`` (too few steps: carried
            into the next window), ``idle`` (no request finished), ``excluded`` (a canary ran),
            ``unreadable`` (requests finished, the verify-step counters are absent from ``/metrics``).
        events: what happened in it (restart, failed scrapes, canary, alarm), in words.
        restarts: the times (epoch s) of the counter resets seen in it: the first scrape that read the
            new process's counters (the restart itself lies between the scrape before and this one).
        values: each figure's value (numerator / steps) for a judged window.
        stats: each figure's drift statistic after the window (filled by the judge).
        phase: the judge's phase when it closed (``calibrating``, ``watching``, ``alarm``).
    """

    index: int
    start: float
    end: float
    steps: float
    nums: list[float]
    requests: float
    status: str
    events: list[str] = field(default_factory=list)
    restarts: list[float] = field(default_factory=list)
    values: list[Optional[float]] = field(default_factory=list)
    stats: list[float] = field(default_factory=list)
    phase: str = ""

    def to_json(self) -> dict:
        return {"index": self.index, "start": round(self.start, 3), "end": round(self.end, 3), "steps": self.steps,
                "nums": self.nums, "requests": self.requests, "status": self.status, "events": self.events,
                "restarts": [round(t, 3) for t in self.restarts], "values": self.values, "stats": [round(s, 4) for s in self.stats], "phase": self.phase}


class Windows:
    """Turns successive scrapes into :class:`Window` s of ``window_s`` seconds (see the module docstring)."""

    def __init__(self, n_figures: int, window_s: float, min_steps: float, start: float) -> None:
        self.n = n_figures
        self.window_s = window_s
        self.min_steps = min_steps
        self.prev: Optional[Snapshot] = None
        self.last_seen: Optional[Snapshot] = None  # the last snapshot read, excluded or not (resets are seen across exclusions)
        self.start = start
        self.carry_start: Optional[float] = None
        self.steps, self.nums, self.requests = 0.0, [0.0] * n_figures, 0.0
        self.events: list[str] = []
        self.open_restarts: list[float] = []
        self.failing: Optional[str] = None
        self.excluded: Optional[str] = None
        self.excluded_in_window = False
        self.closed: list[Window] = []
        self.resets = 0
        self.reset_times: list[float] = []
        self.scrape_failures = 0
        self.missing: tuple[str, ...] = ()
        self.missing_seen: dict[str, None] = {}

    def add(self, snap: Optional[Snapshot], error: str = "", now: float = 0.0) -> None:
        """One scrape: its snapshot, or None and the ``error`` in words (a failed scrape at ``now``)."""
        if snap is None:
            self.scrape_failures += 1
            if self.failing is None:
                self.failing = error
                self.events.append(f"scrape failed at {hms(now)}: {error}")
            return
        if self.failing is not None:
            self.events.append(f"scrapes answer again at {hms(snap.t)}")
            self.failing = None
        self.missing = snap.missing
        self.missing_seen.update(dict.fromkeys(snap.missing))
        last, self.last_seen = self.last_seen, snap
        reset = last is not None and (snap.steps < last.steps or snap.requests < last.requests
                                      or any(a < b for a, b in zip(snap.nums, last.nums)))
        if reset and last is not None:  # seen on any scrape, even one the canary's requests exclude
            self.resets += 1
            self.reset_times.append(snap.t)
            self.open_restarts.append(snap.t)
            self.events.append(f"counter reset at {hms(snap.t)}: the server restarted (verify steps "
                               f"{last.steps:g} -> {snap.steps:g}); counted from its start, what it did after the "
                               "scrape before was lost")
        prev, self.prev = self.prev, snap
        if prev is None or self.excluded:
            return
        d_steps, d_req = snap.steps - prev.steps, snap.requests - prev.requests
        d_nums = [a - b for a, b in zip(snap.nums, prev.nums)]
        if reset:
            d_steps, d_req, d_nums = snap.steps, snap.requests, list(snap.nums)
        self.steps += d_steps
        self.requests += d_req
        self.nums = [a + b for a, b in zip(self.nums, d_nums)]

    def exclude(self, why: str) -> None:
        """Drop the open window's counts (the server counts the monitor's own canary requests now) and
        re-base on the next scrape after :meth:`include`."""
        self.excluded = why
        self.excluded_in_window = True
        self.events.append(why)

    def include(self) -> None:
        """End the exclusion: the next scrape is the new base."""
        self.excluded = None
        self.prev = None

    def due(self, now: float) -> bool:
        return now - self.start >= self.window_s

    def close(self, now: float) -> Window:
        """Close the window ending at ``now`` (see :class:`Window` for its status)."""
        idx = len(self.closed)
        start = self.carry_start if self.carry_start is not None else self.start
        if self.excluded_in_window:
            status = "excluded"
        elif self.missing and self.requests > 0:
            status = "unreadable"
        elif self.steps >= self.min_steps:
            status = "judged"
        elif self.requests == 0 and self.steps == 0:
            status = "idle"
        else:
            status = "sparse"
        w = Window(idx, start, now, self.steps, list(self.nums), self.requests, status, list(self.events),
                   list(self.open_restarts))
        if status == "sparse":
            w.events.append(f"{self.steps:g} verify steps < {self.min_steps:g}: carried into the next window")
            self.carry_start = start
        else:
            if status == "unreadable":
                w.events.append(f"cannot judge: {self.requests:g} requests finished but /metrics has no "
                                f"{', '.join(self.missing)} (the counters the accept length is read from)")
            self.carry_start = None
            self.steps, self.nums, self.requests = 0.0, [0.0] * self.n, 0.0
        self.excluded_in_window = bool(self.excluded)
        self.events, self.open_restarts = [], []
        self.start = now
        self.closed.append(w)
        return w


def hms(t: float) -> str:
    """``t`` (epoch seconds) as local ``HH:MM:SS``; ``?`` for 0."""
    import time

    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "?"
