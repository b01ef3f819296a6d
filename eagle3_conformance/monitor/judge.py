"""Windows -> verdict: calibration on the baseline and the first windows, then the drift test per figure.

Phases:

- ``calibrating``: the first ``warmup`` judged windows give the reference level ``mu0`` of each figure
  (pooled over them) and its per-step variance; the variance used is the larger of the windows' and
  the baseline's (its per-prompt counters, :func:`eagle3_conformance.monitor.drift.variance_from_pairs`):
  the baseline's prompts are a fixed set, the traffic's windows see its mix, and an underestimated
  variance is what raises the false-alarm rate above the stated one. The level found is compared
  with the baseline's: a warm-up whose level lies below ``baseline - tolerance`` beyond its own
  noise (upper end of the 95% interval) is a ``level`` finding: a server already broken when the
  monitor started, or traffic unlike the baseline's prompts (a deployment's traffic is not the
  canary's prompt set). It is not an alarm by itself: the session asks the canary, which raises it
  (:meth:`Judge.latch`) only when the held-out prompts drop too.
- ``watching``: each judged window updates one CUSUM per figure (:class:`~.drift.Cusum`); the first
  figure to cross ``h`` raises a ``drift`` alarm, dated from the CUSUM's onset estimate.
- ``alarm``: latched until :meth:`Judge.clear` (the canary found the server meets its baseline: a
  traffic-mix shift), which recalibrates on the next windows.

The drop to detect is the baseline's tolerance: ``delta = tolerance x baseline figure`` (``accept``'s
rule, docs/accept.md). ``h`` is :func:`~.drift.threshold` for the wanted false alarms per day.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

from eagle3_conformance.monitor import drift
from eagle3_conformance.monitor.windows import Window, hms

Z95 = 1.959963984540054


@dataclass
class Alarm:
    """An alarm: ``kind`` (``drift``, ``level``, ``canary``), the window it was raised in, the figure,
    the window from which the drop is dated, the message, and what became of it (``state``:
    ``unconfirmed``, ``fault``, ``mix shift``) with the canary's and the captures' words."""

    kind: str
    window: int
    time: float
    figure: str
    onset_window: Optional[int]
    onset_time: Optional[float]
    message: str
    state: str = "unconfirmed"
    canary: Optional[dict] = None
    diagnosis: list = field(default_factory=list)

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Settings:
    """The judge's settings (the verb's options)."""

    figures: list[str]
    baseline: list[float]
    baseline_sigma2: list[Optional[float]]
    tolerance: float = 0.05
    false_alarms_per_day: float = 0.1
    window_s: float = 30.0
    warmup: int = 10


class Judge:
    """See the module docstring. ``designs`` is None until calibration ends."""

    def __init__(self, s: Settings) -> None:
        self.s = s
        self.phase = "calibrating"
        self.calib: list[Window] = []
        self.designs: Optional[list[drift.Design]] = None
        self.cusums: list[drift.Cusum] = []
        self.alarms: list[Alarm] = []
        self.judged: list[Window] = []
        self.calibrations: list[dict] = []

    @property
    def tests(self) -> int:
        return len(self.s.figures)

    @property
    def arl0_windows(self) -> float:
        """The wanted average run length without a change, in windows (the false-alarm rate's inverse)."""
        return 86400.0 / self.s.window_s / self.s.false_alarms_per_day

    @property
    def h(self) -> float:
        return drift.threshold(self.arl0_windows, self.tests)

    @property
    def alarm(self) -> Optional[Alarm]:
        """The alarm that is raised now (latched), or None."""
        return self.alarms[-1] if self.alarms and self.phase == "alarm" else None

    def on_window(self, w: Window) -> Optional[Alarm]:
        """Judge closed window ``w`` (fills its ``values``, ``stats``, ``phase``): a new drift alarm (raised),
        a ``level`` finding at the end of calibration (not raised: see the module docstring), or None."""
        w.phase = self.phase
        if w.status != "judged":
            w.stats = [c.stat for c in self.cusums]
            return None
        w.values = [n / w.steps for n in w.nums]
        self.judged.append(w)
        if self.phase == "calibrating":
            self.calib.append(w)
            return self._calibrate() if len(self.calib) >= self.s.warmup else None
        for i, c in enumerate(self.cusums):
            c.update(w.index, w.nums[i], w.steps)
        w.stats = [c.stat for c in self.cusums]
        if self.phase == "alarm":
            return None
        hit = [i for i, c in enumerate(self.cusums) if c.alarm]
        if not hit:
            return None
        i = max(hit, key=lambda j: self.cusums[j].stat / self.designs[j].h)  # type: ignore[index]
        c, d = self.cusums[i], self.designs[i]  # type: ignore[index]
        onset = c.onset if c.onset is not None else w.index
        first = next((x for x in self.judged if x.index >= onset), w)
        msg = (f"{d.figure} dropped: {d.mu0:.3f} -> {w.values[i]:.3f} in the last window; drift statistic "
               f"{c.stat:.1f} > threshold {d.h:.1f} (a drop of {d.delta:.3f}, the baseline's tolerance, "
               f"is what it tests for); since about {hms(first.start)}")
        return self._raise(Alarm("drift", w.index, w.end, d.figure, onset, first.start, msg))

    def _raise(self, a: Alarm) -> Alarm:
        self.phase = "alarm"
        self.alarms.append(a)
        return a

    def _calibrate(self) -> Optional[Alarm]:
        ws = self.calib
        steps = sum(w.steps for w in ws)
        designs, level_drop = [], None
        for i, fig in enumerate(self.s.figures):
            pairs = [(w.nums[i], w.steps) for w in ws]
            mu0 = drift.ratio(pairs)
            s2w = drift.variance_from_pairs(pairs)
            s2b = self.s.baseline_sigma2[i]
            sigma2 = max(s2w, s2b or 0.0, 1e-9)
            b = self.s.baseline[i]
            delta = max(self.s.tolerance * b, 1e-6)
            designs.append(drift.Design(fig, mu0, delta, sigma2, self.h))
            upper = mu0 + Z95 * math.sqrt(sigma2 / steps)
            if upper < b - delta and level_drop is None:
                level_drop = (fig, mu0, upper, b, delta)
            self.calibrations.append({"window": ws[-1].index, "figure": fig, "mu0": mu0, "sigma2_windows": s2w,
                                      "sigma2_baseline": s2b, "sigma2": sigma2, "baseline": b, "delta": delta,
                                      "h": self.h, "windows": [w.index for w in ws], "steps": steps})
        self.designs = designs
        self.cusums = [drift.Cusum(d) for d in designs]
        self.phase = "watching"
        self.calib = []
        if level_drop is None:
            return None
        fig, mu0, upper, b, delta = level_drop
        w = ws[-1]
        msg = (f"{fig} at start {mu0:.3f} (95% upper {upper:.3f}) lies below the baseline {b:.3f} - {delta:.3f} "
               "(tolerance): the server accepted less than its baseline from the first windows on, or its traffic "
               "is unlike the baseline's prompts")
        return Alarm("level", w.index, w.end, fig, ws[0].index, ws[0].start, msg)

    def latch(self, a: Alarm) -> Alarm:
        """Raise ``a`` (a ``level`` finding the canary confirmed)."""
        return self._raise(a)

    def raise_canary(self, w_index: int, t: float, message: str) -> Alarm:
        """An alarm raised by a periodic canary that found a drop while the drift test had not."""
        return self._raise(Alarm("canary", w_index, t, "canary", None, None, message))

    def clear(self) -> None:
        """The alarm was a traffic-mix shift: reset the statistics and recalibrate on the next windows."""
        self.phase = "calibrating"
        self.designs, self.cusums, self.calib = None, [], []

    def expected_detection(self, steps_per_s: float) -> list[dict]:
        """Per figure: the expected seconds from a drop of the tolerance to the alarm at ``steps_per_s``
        verify steps per second, and the false-alarm run length (windows): Lorden's bound and Siegmund's
        approximation at that traffic. Empty while calibrating."""
        out = []
        for d in self.designs or []:
            n = steps_per_s * self.s.window_s
            out.append({"figure": d.figure, "delta": d.delta, "detect_s": drift.expected_detection_s(
                d, steps_per_s, self.s.window_s), "arl0_bound_windows": math.exp(d.h) / self.tests,
                "arl0_predicted_windows": drift.arl(d.h, d, n) / 1.0, "steps_per_window": n})
        return out


def steps_per_second(windows: Sequence[Window], last: int = 20) -> float:
    """Verify steps per second over the last ``last`` windows that were not excluded (idle ones count:
    they are part of the traffic rate)."""
    ws = [w for w in windows if w.status != "excluded"][-last:]
    seconds = sum(w.end - w.start for w in ws if w.status != "sparse")
    steps = sum(w.steps for w in ws if w.status in ("judged", "idle"))
    return steps / seconds if seconds > 0 else 0.0

