"""The sequential drift test: a one-sided CUSUM of the Gaussian log-likelihood ratio, per figure.

A *figure* is a ratio pooled over a window's verify steps: the accept length (committed tokens per
verify step) or draft position ``i``'s acceptance (steps that accepted position ``i`` per step).
A window with ``N`` verify steps and numerator ``T`` gives ``x = T / N``; the model is
``x ~ Normal(mu, sigma2 / N)`` with ``sigma2`` the *per-step* variance of the ratio estimator,
requests taken as clusters (a request's steps are correlated; :func:`variance_from_pairs`).

The test (Page's CUSUM, Page 1954, in its likelihood-ratio form; Basseville & Nikiforov 1993,
section 2.2) is for a drop of ``delta`` from the reference level ``mu0``:

    llr_w = N_w * delta / sigma2 * (mu0 - x_w - delta / 2)
    S_w   = max(0, S_{w-1} + llr_w)            alarm when S_w > h

``llr_w`` is the exact log-likelihood ratio of "mean mu0 - delta" against "mean mu0" for the window,
so windows with more steps weigh more and an idle window (``N = 0``) moves nothing.

False alarms. Lorden (1971): for a CUSUM of exact log-likelihood ratios the average run length
under no change is at least ``e^h`` windows, whatever the traffic. :func:`threshold` picks ``h`` from
that bound for a wanted rate (with a Bonferroni share per figure when several are tested), so the
stated rate is an upper bound; :func:`arl` gives Siegmund's (1985) approximation of the run length
at the observed traffic, the *predicted* rate, which the benchmark compares with the measured one
(:func:`replay`).

Detection. :func:`arl` under a drop of exactly ``delta`` gives the expected number of windows to the
alarm at the observed verify steps per window; :func:`expected_detection_s` turns it into seconds.
Pure functions, standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

SIEGMUND_OVERSHOOT = 1.166
"""Siegmund's correction of the threshold for the overshoot of a Gaussian random walk
(``2 * 0.583``, Siegmund 1985, eq. 3.3; Basseville & Nikiforov 1993, eq. 5.2.44)."""


@dataclass(frozen=True)
class Design:
    """One figure's test.

    Attributes:
        figure: ``"accept length"`` or ``"position i"``.
        mu0: the reference level (the calibration windows' pooled figure).
        delta: the drop to detect, absolute (the tolerance x the baseline's figure).
        sigma2: per-verify-step variance of the figure (> 0).
        h: the alarm threshold on the CUSUM statistic (nats).
    """

    figure: str
    mu0: float
    delta: float
    sigma2: float
    h: float

    def llr(self, num: float, steps: float) -> float:
        """The window's log-likelihood ratio (drop against no drop); 0 for a window without steps."""
        if steps <= 0:
            return 0.0
        x = num / steps
        return steps * self.delta / self.sigma2 * (self.mu0 - x - self.delta / 2)

    def information(self, steps: float) -> float:
        """Kullback-Leibler information of a window with ``steps`` verify steps, ``steps delta^2 / sigma2``:
        the log-likelihood ratio's variance (its mean is -+ half of it without / with the drop)."""
        return steps * self.delta ** 2 / self.sigma2


@dataclass
class Cusum:
    """The running statistic of one :class:`Design`.

    Attributes:
        stat: S after the last window (nats).
        onset: the index of the window after which S last left 0: CUSUM's estimate of when the drop
            began (Page's change-point estimate); None while S is 0.
        alarmed_at: the window index of the first crossing of ``h``; None while not alarmed.
    """

    design: Design
    stat: float = 0.0
    onset: Optional[int] = None
    alarmed_at: Optional[int] = None
    history: list = field(default_factory=list)

    def update(self, index: int, num: float, steps: float) -> float:
        """Add window ``index`` (numerator ``num`` over ``steps`` verify steps); returns S."""
        s = max(0.0, self.stat + self.design.llr(num, steps))
        if s > 0 and self.stat == 0:
            self.onset = index
        if s == 0:
            self.onset = None
        self.stat = s
        if s > self.design.h and self.alarmed_at is None:
            self.alarmed_at = index
        self.history.append(s)
        return s

    @property
    def alarm(self) -> bool:
        return self.alarmed_at is not None

    def reset(self) -> None:
        self.stat, self.onset, self.alarmed_at = 0.0, None, None


def ratio(pairs: Iterable[tuple[float, float]]) -> float:
    """Pooled ratio ``sum(num) / sum(steps)`` of ``(num, steps)`` pairs; nan without steps."""
    ps = list(pairs)
    steps = sum(s for _, s in ps)
    return sum(t for t, _ in ps) / steps if steps > 0 else float("nan")


def variance_from_pairs(pairs: Sequence[tuple[float, float]]) -> float:
    """Per-step variance of the pooled ratio from clusters (requests, or windows) of ``(num, steps)``:
    ``n / (n - 1) * sum((num_i - r steps_i)^2) / sum(steps_i)`` with ``r`` the pooled ratio, the
    linearisation (delta-method) variance of a ratio estimator times the total steps, so that the
    variance of a window's figure is this over its steps.

    Raises:
        ValueError: fewer than 2 clusters with steps.
    """
    ps = [(float(t), float(s)) for t, s in pairs if s > 0]
    if len(ps) < 2:
        raise ValueError(f"{len(ps)} cluster(s) with verify steps: a variance needs 2 or more")
    r = ratio(ps)
    n = len(ps)
    return n / (n - 1) * sum((t - r * s) ** 2 for t, s in ps) / sum(s for _, s in ps)


def threshold(arl0_windows: float, tests: int = 1) -> float:
    """``h`` such that Lorden's bound gives each of ``tests`` figures an average run length of at least
    ``tests x arl0_windows`` windows without a change, hence at most one false alarm per
    ``arl0_windows`` windows for all of them together (union bound): ``h = ln(tests x arl0_windows)``."""
    if arl0_windows <= 1 or tests < 1:
        raise ValueError(f"arl0_windows {arl0_windows} must be > 1 and tests {tests} >= 1")
    return math.log(arl0_windows * tests)


def arl(h: float, design: Design, steps_per_window: float, drop: float = 0.0) -> float:
    """Siegmund's approximation of the CUSUM's average run length, in windows, when each window has
    ``steps_per_window`` verify steps and the true figure is ``mu0 - drop`` (``drop = 0``: no change,
    the false-alarm run length; ``drop = delta``: the detection delay for the designed drop).

    The increments are Gaussian with mean ``m = I (drop / delta - 1/2)`` and variance ``v = I``,
    ``I`` the window's information; with ``b = h + 1.166 sqrt(v)``:
    ``ARL = (exp(-2 m b / v) + 2 m b / v - 1) / (2 m^2 / v)``, and ``(b / sqrt v)^2`` when ``m = 0``.
    """
    v = design.information(steps_per_window)
    if v <= 0:
        return math.inf
    m = v * (drop / design.delta - 0.5)
    b = h + SIEGMUND_OVERSHOOT * math.sqrt(v)
    if abs(m) < 1e-12:
        return b * b / v
    a = 2 * m * b / v
    if -a > 700:  # exp overflows: the run length is astronomically long
        return math.inf
    return (math.exp(-a) + a - 1) / (2 * m * m / v)


def expected_detection_s(design: Design, steps_per_s: float, window_s: float, drop: Optional[float] = None) -> float:
    """Seconds from a drop of ``drop`` (default the designed ``delta``) to the alarm, at ``steps_per_s``
    verify steps per second: the run length in windows, plus one window (the drop starts anywhere
    in a window, and a window is judged when it closes). ``inf`` without traffic."""
    if steps_per_s <= 0:
        return math.inf
    n = arl(design.h, design, steps_per_s * window_s, design.delta if drop is None else drop)
    return (n + 1) * window_s


def replay(design: Design, windows: Sequence[tuple[float, float]], h: Optional[float] = None) -> list[int]:
    """The windows (indices) at which a CUSUM with threshold ``h`` (default the design's) alarms over
    ``windows`` ``(num, steps)``, restarting from 0 after each alarm: the measured false alarms on a
    run without a change."""
    hh = design.h if h is None else h
    s, out = 0.0, []
    for i, (num, steps) in enumerate(windows):
        s = max(0.0, s + design.llr(num, steps))
        if s > hh:
            out.append(i)
            s = 0.0
    return out
