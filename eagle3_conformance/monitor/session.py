"""One monitoring session: connect, check the baseline, scrape, window, judge, act on alarms, report.

:class:`Monitor` is the loop; everything it reads from outside (the clock, sleeping, the scrape, the
canary) is injectable, so the fast tests drive it through restarts, failed scrapes and idle periods
without a server or real time. The verb (``cli/monitor.py``) builds it with the real ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from eagle3_conformance.core.errors import DataError
from eagle3_conformance.monitor import metrics
from eagle3_conformance.monitor.canary import DROPPED, ERROR, INCONCLUSIVE, MET, CanaryResult, undecided
from eagle3_conformance.monitor.judge import Alarm, Judge, Settings, steps_per_second
from eagle3_conformance.monitor.windows import Window, Windows, hms


@dataclass
class Options:
    """The verb's options (``eagle3-conformance monitor --help`` says what each is)."""

    server: str
    baseline: str
    duration: Optional[float] = None
    window_s: float = 30.0
    interval_s: float = 5.0
    warmup: int = 10
    min_steps: float = 50.0
    tolerance: float = 0.05
    false_alarms_per_day: float = 0.1
    scrape_timeout: float = 10.0
    canary_every: Optional[float] = None
    canary_concurrency: int = 4
    captures: Optional[str] = None
    captures_reference: str = "transformers"
    max_captures: int = 16
    reference_dir: Any = None


@dataclass
class Outcome:
    """What a session found: the windows, the alarms, the calibrations, the canaries, the session's
    events, the server, the expected detection at the end, the counters ``/metrics`` lacked
    (``missing``), and the exit code (0, 1, 3)."""

    info: Any
    windows: list[Window]
    alarms: list[Alarm]
    calibrations: list[dict]
    canaries: list[dict]
    events: list[str]
    detection: list[dict]
    steps_per_s: float
    started: float
    ended: float
    settings: dict = field(default_factory=dict)
    restarts: list = field(default_factory=list)
    missing: list = field(default_factory=list)

    @property
    def raised(self) -> list[Alarm]:
        """The alarms that stand: not cleared by the canary as a traffic-mix shift."""
        return [a for a in self.alarms if a.state != "mix shift"]

    @property
    def exit_code(self) -> int:
        from eagle3_conformance.core.exit_codes import ExitCode

        if self.raised:
            return int(ExitCode.VIOLATIONS)
        return int(ExitCode.INCONCLUSIVE if self.cannot_judge() else ExitCode.CONFORMS)

    def cannot_judge(self) -> Optional[str]:
        """Why the session compared nothing with the baseline, in words; None when it did (a calibration
        finished: its level is compared with the baseline's and the drift test starts; or a canary met the
        baseline). No alarm from a session that judged nothing is INCONCLUSIVE, not NO ALARM: its windows
        had no readable verify-step counter (``unreadable``: the counters named, with the engine
        identified), or too few verify steps (idle, sparse), or its judged windows were all calibration
        that never finished (fewer than ``--warmup``)."""
        if self.calibrations or any(c.get("verdict") == MET for c in self.canaries):
            return None
        judged = [w for w in self.windows if w.status == "judged"]
        if judged:
            warmup = self.settings.get("warmup_windows", "--warmup")
            return (f"cannot judge: the session ended while calibrating: {len(judged)} judged window(s) of the "
                    f"{warmup} that calibrate the reference level (--warmup), so nothing was compared with the "
                    "baseline; watch longer under traffic, or lower --warmup")
        unread = [w for w in self.windows if w.status == "unreadable"]
        if unread:
            names = ", ".join(self.missing) or "its verify-step counters"
            return (f"cannot judge: the {self.info.kind} server's /metrics has no {names}, the counters "
                    f"the accept length is read from (docs/monitor.md); {len(unread)} window(s) in which "
                    f"{sum(w.requests for w in unread):g} requests finished could not be judged. A server build, "
                    "proxy or stand-in that does not export them cannot be monitored")
        by: dict[str, int] = {}
        for w in self.windows:
            by[w.status] = by.get(w.status, 0) + 1
        said = ", ".join(f"{v} {k}" for k, v in sorted(by.items())) or "none closed"
        return (f"no window had {self.settings.get('min_steps', 0):g} verify steps or more (windows: {said}): "
                "nothing was compared with the baseline; watch longer under traffic, or lower --min-steps")


def baseline_figures(doc: dict, figures: list[str]) -> tuple[list[float], list[Optional[float]]]:
    """The baseline's value and per-step variance (from its per-prompt counters) of each figure.

    Raises:
        DataError: the baseline lacks a figure the server exports (another chain length).
    """
    from eagle3_conformance.monitor.drift import variance_from_pairs

    fig = doc.get("figures") or {}
    values: list[float] = []
    sig: list[Optional[float]] = []
    for i, name in enumerate(figures):
        if i == 0:
            v = (fig.get("accept_length") or {}).get("value")
            pairs = [(r.committed, r.steps) for r in doc["results"]]
        else:
            pp = fig.get("per_position") or []
            v = pp[i - 1].get("value") if i - 1 < len(pp) else None
            pairs = [(r.accepted_per_pos[i - 1], r.steps) for r in doc["results"] if len(r.accepted_per_pos) >= i]
        if v is None:
            raise DataError(f"the baseline has no {name} figure: record it again with accept --record")
        values.append(float(v))
        try:
            sig.append(variance_from_pairs(pairs))
        except ValueError:
            sig.append(None)
    return values, sig


def connect(opts: Options, contract=None) -> tuple[Any, dict]:
    """The server's adapter (identity, ``k``) and the baseline document, both checked: the baseline is
    this pair's (kind, model, k; with ``contract``, its contract, tool version and prompt set), and the
    server exports its speculative-decoding metrics.

    Raises:
        ServerError: nothing answers, no speculative decoding, no ``/metrics`` (:class:`~.metrics.NoMetricsEndpoint`).
        DataError: the baseline is unreadable or another pair's (the field is named).
    """
    from eagle3_conformance import server_accept
    from eagle3_conformance.server_accept import baseline

    doc = baseline.load(opts.baseline)
    if contract is not None:
        from eagle3_conformance.server_accept import prompts

        baseline.check_offline(doc, opts.baseline, prompt_version=prompts.PROMPT_SET_VERSION,
                               prompt_sha256=prompts.prompt_set_sha256())
    adapter = server_accept.connect(opts.server, timeout=opts.scrape_timeout)  # each identity request, as a scrape
    baseline.check_server(doc, opts.baseline, adapter.info)
    m = metrics.parse(metrics.scrape_text(opts.server, opts.scrape_timeout), f"{opts.server}/metrics")
    metrics.check_exports(adapter.info.kind, m, opts.server)
    return adapter, doc


class Monitor:
    """The loop (see the module docstring).

    Args:
        scrape: ``() -> Snapshot`` (raises :class:`~.metrics.ScrapeError`); default the server's ``/metrics``.
        canary: ``() -> CanaryResult``, or None (no contract: alarms stay unconfirmed).
        diagnose: ``() -> dict`` (:func:`eagle3_conformance.monitor.captures.judge_recent`), or None.
        identity: ``() -> (ServerInfo, changes)`` re-read after a restart; raises DataError for another pair.
        expo: the :class:`~.exposition.Exposition` to keep current, or None.
        stop: ``() -> bool``: end now (a signal).
    """

    def __init__(self, opts: Options, info: Any, base_doc: dict, *, scrape: Callable[[], metrics.Snapshot],
                 canary: Optional[Callable[[], CanaryResult]] = None, diagnose: Optional[Callable[[], dict]] = None,
                 identity: Optional[Callable[[], tuple]] = None, expo: Any = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 stop: Callable[[], bool] = lambda: False, log: Callable[[str], None] = lambda s: None) -> None:
        self.o, self.info, self.scrape, self.canary, self.diagnose = opts, info, scrape, canary, diagnose
        self.identity, self.expo, self.clock, self.sleep, self.stop, self.log = identity, expo, clock, sleep, stop, log
        self.figures = metrics.figures(info.kind, info.k)
        values, sig = baseline_figures(base_doc, self.figures)
        self.settings = Settings(self.figures, values, sig, opts.tolerance, opts.false_alarms_per_day, opts.window_s,
                                 opts.warmup)
        self.judge = Judge(self.settings)
        self.events: list[str] = []
        self.canaries: list[dict] = []
        self.last_canary = 0.0

    def run(self) -> Outcome:
        t0 = self.clock()
        self.win = Windows(len(self.figures), self.o.window_s, self.o.min_steps, t0)
        self.last_canary = t0
        if self.expo is not None:
            self.expo.set_figures(self.expo.baseline, self.figures, self.settings.baseline)
        deadline = None if self.o.duration is None else t0 + self.o.duration
        nxt = t0
        while not self.stop() and (deadline is None or self.clock() < deadline):
            self._scrape_once()
            now = self.clock()
            if self.win.due(now):
                self._close(now)
            if self.o.canary_every and now - self.last_canary >= self.o.canary_every and self.canary is not None:
                self._periodic_canary()
            nxt += self.o.interval_s
            wait = nxt - self.clock()
            if deadline is not None:
                wait = min(wait, deadline - self.clock())
            if wait > 0:
                self.sleep(wait)
            else:
                nxt = self.clock()
        end = self.clock()
        if end - self.win.start >= self.o.window_s / 2:  # a last window of at least half the length is judged
            self._close(end)
        rate = steps_per_second(self.win.closed)
        return Outcome(self.info, self.win.closed, self.judge.alarms, self.judge.calibrations, self.canaries,
                       self.events, self.judge.expected_detection(rate), rate, t0, end, self._settings_json(),
                       list(self.win.reset_times), list(self.win.missing_seen))

    def _settings_json(self) -> dict:
        o = self.o
        return {"window_s": o.window_s, "interval_s": o.interval_s, "warmup_windows": o.warmup,
                "min_steps": o.min_steps, "tolerance": o.tolerance, "false_alarms_per_day": o.false_alarms_per_day,
                "h": self.judge.h, "arl0_windows": self.judge.arl0_windows, "figures": self.figures,
                "baseline": self.settings.baseline, "baseline_sigma2": self.settings.baseline_sigma2,
                "canary_every": o.canary_every, "captures": o.captures, "duration": o.duration}

    def _scrape_once(self) -> None:
        resets = self.win.resets
        try:
            snap = self.scrape()
        except metrics.ScrapeError as e:
            self.win.add(None, str(e), self.clock())
            if self.expo is not None:
                self.expo.scrape_failures.inc()
            return
        self.win.add(snap)
        if self.expo is not None:
            self.expo.last_scrape.set(snap.t)
        if self.win.resets > resets:
            if self.expo is not None:
                self.expo.resets.inc()
            self._after_restart()

    def _after_restart(self) -> None:
        """Re-read the server's identity after a restart: another pair ends the session (input error);
        another draft, release or flag is said in the window's events."""
        if self.identity is None:
            return
        from eagle3_conformance.server_accept.http import ServerError
        from eagle3_conformance.server_accept.result import NoSpeculation

        try:
            info, changes = self.identity()
        except ServerError as e:  # the server answers /metrics but not yet its identity: said, not fatal
            if isinstance(e, NoSpeculation):
                raise  # restarted without speculative decoding: nothing to judge any more (exit 2)
            self.win.events.append(f"the server's identity could not be read after the restart: {e}")
            return
        self.info = info
        if changes:
            said = "; ".join(f"{k}: {a} -> {b}" for k, a, b in ((k, *v) for k, v in changes.items()))
            self.win.events.append(f"after the restart the server differs from the baseline's: {said}")

    def _close(self, now: float) -> None:
        w = self.win.close(now)
        was = self.judge.phase
        alarm = self.judge.on_window(w)
        self._export(w)
        self.log(_window_line(w, self.figures))
        if was == "calibrating" and self.judge.designs:
            rate = steps_per_second(self.win.closed)
            for d, det in zip(self.judge.designs, self.judge.expected_detection(rate)):
                self.log(f"calibrated {d.figure}: reference {d.mu0:.3f}, per-step variance {d.sigma2:.3f}, "
                         f"threshold {d.h:.2f}; a drop of {d.delta:.3f} is detected in {det['detect_s']:.0f} s on "
                         f"average at {rate:.1f} verify steps/s")
        if alarm is not None and alarm.kind == "level":
            self._level(alarm, w)
        elif alarm is not None:
            w.events.append(f"ALARM ({alarm.kind}): {alarm.message}")
            self.log(f"ALARM ({alarm.kind}): {alarm.message}")
            self._confirm(alarm)

    def _level(self, finding: Alarm, w: Window) -> None:
        """The traffic accepts less than the baseline from the start: the canary decides whether the
        server does too (then it is an alarm); without a canary it is said, not raised."""
        note = f"level: {finding.message}"
        if self.canary is None:
            self.events.append(f"{note}; not an alarm without a canary to tell (give --contract)")
            w.events.append(note)
            return
        res = self._run_canary("on the level at calibration")
        finding.canary = res.to_json()
        if res.verdict == MET:
            self.events.append(f"{note}; the canary says {res.verdict}: the traffic, not the server")
        if res.verdict in (INCONCLUSIVE, ERROR):
            what, how = undecided(res.to_json()) if res.verdict == INCONCLUSIVE else (res.line(), "run it again")
            self.events.append(f"{note}; not raised, undecided: {what}; {how}")
        if res.verdict != DROPPED:
            w.events.append(note)
            return
        finding.state = "fault"
        self.judge.latch(finding)
        w.events.append(f"ALARM (level): {finding.message}")
        self.log(f"ALARM (level): {finding.message}")
        if self.diagnose is not None:
            finding.diagnosis = [self.diagnose()]
        self._export_alarm(finding)

    def _confirm(self, alarm: Alarm) -> None:
        """Run the canary (when there is one) to tell a fault from a traffic-mix shift, then the captures."""
        if self.canary is not None:
            res = self._run_canary("on the alarm")
            alarm.canary = res.to_json()
            if res.verdict == MET:
                alarm.state = "mix shift"
                self.judge.clear()
                self.events.append(f"{hms(self.clock())}: the canary meets the baseline on the held-out prompts: the "
                                   "drop is in the traffic's mix, not the server; recalibrating on the next windows")
            elif res.verdict == DROPPED:
                alarm.state = "fault"
            else:  # INCONCLUSIVE or ERROR: the alarm stands, unconfirmed, and says what would decide it
                what, how = undecided(res.to_json()) if res.verdict == INCONCLUSIVE else (res.line(), "")
                self.events.append(f"{hms(self.clock())}: the alarm stays unconfirmed: {what}" +
                                   (f"; {how}" if how else ""))
        if alarm.state != "mix shift" and self.diagnose is not None:
            alarm.diagnosis = [self.diagnose()]
        self._export_alarm(alarm)

    def _run_canary(self, why: str) -> CanaryResult:
        assert self.canary is not None
        self.win.exclude(f"canary ran {why} at {hms(self.clock())} (its requests are not traffic)")
        res = self.canary()
        self.win.include()
        self.last_canary = self.clock()
        self.canaries.append({"why": why, **res.to_json()})
        self.log(res.line())
        if self.expo is not None:
            self.expo.canary.state({MET: "met", DROPPED: "dropped", INCONCLUSIVE: "inconclusive"}.get(res.verdict,
                                                                                                     "error"))
            self.expo.canary_time.set(res.started)
        return res

    def _periodic_canary(self) -> None:
        res = self._run_canary(f"every {self.o.canary_every:g} s")
        if res.verdict == DROPPED and self.judge.alarm is None:
            w = len(self.win.closed)
            a = self.judge.raise_canary(w, self.clock(), f"the periodic canary dropped: {res.line()}")
            a.canary, a.state = res.to_json(), "fault"
            if self.diagnose is not None:
                a.diagnosis = [self.diagnose()]
            self._export_alarm(a)

    def _export(self, w: Window) -> None:
        e = self.expo
        if e is None:
            return
        e.windows.labels(status=w.status).inc()
        e.phase.state(self.judge.phase)
        if w.status == "judged":
            e.set_figures(e.window, self.figures, w.values)
            e.last_judged.set(w.end)
        for d, c in zip(self.judge.designs or [], self.judge.cusums):
            e.set_figures(e.reference, [d.figure], [d.mu0])
            e.set_figures(e.tolerance, [d.figure], [d.delta])
            e.set_figures(e.stat, [d.figure], [c.stat])
            e.set_figures(e.threshold, [d.figure], [d.h])
        rate = steps_per_second(self.win.closed)
        e.rate.set(rate)
        for det in self.judge.expected_detection(rate):
            e.set_figures(e.detect, [det["figure"]], [det["detect_s"]])

    def _export_alarm(self, a: Alarm) -> None:
        e = self.expo
        if e is None:
            return
        e.alarm.set(0 if a.state == "mix shift" else 1)
        e.alarm_state.state(a.state)
        e.phase.state(self.judge.phase)
        line = diagnosis_line(a)
        e.diagnosis.info({"figure": a.figure, "state": a.state, "since": hms(a.onset_time or a.time),
                          "diagnosis": line[0], "fix": line[1]})


def diagnosis_line(a: Alarm) -> tuple[str, str]:
    """The alarm's cause and fix in words: the captures' first diagnosis, else the canary's verdict."""
    for d in a.diagnosis:
        if d.get("diagnoses"):
            first = d["diagnoses"][0]
            return first["title"], " ".join(first["fix"])
        if d.get("error"):
            return f"captures not judged: {d['error']}", ""
    if a.state == "mix shift":
        return "traffic-mix shift: the canary meets the baseline on the held-out prompts", "none needed"
    if a.canary and a.canary.get("verdict") != DROPPED:
        return _unconfirmed(a)
    if a.canary:
        return f"canary {a.canary.get('verdict')}", ""
    return "unconfirmed: no canary (give --contract) and no captures (--captures DIR)", ""


def _unconfirmed(a: Alarm) -> tuple[str, str]:
    """An alarm the canary could not decide (INCONCLUSIVE, or it could not run): what it could not tell,
    and what would decide it: more prompts, and the server's records (or what they showed)."""
    c = a.canary or {}
    if c.get("verdict") == INCONCLUSIVE:
        what, how = undecided(c)
    else:
        what, how = f"the canary could not run ({c.get('error') or c.get('verdict')})", "run it again"
    clean = next((d for d in a.diagnosis if d.get("verdict") and not d.get("diagnoses")), None)
    caps = (f"the server's records ({clean.get('judged')} of the newest process judged) show no capture fault, so "
            "a wrong tensor at the draft boundary is not the cause" if clean else
            "the server's records judged (--captures DIR, serve-hooks' value) decide a capture fault without it")
    return f"unconfirmed: {what}", f"{how}; {caps}"


def _window_line(w: Window, figures: list[str]) -> str:
    vals = ", ".join(f"{f} {v:.3f}" for f, v in zip(figures, w.values) if v is not None) or "-"
    st = ", ".join(f"{s:.2f}" for s in w.stats)
    return (f"window {w.index} {hms(w.start)}-{hms(w.end)} {w.status} ({w.phase}): {w.steps:g} steps, "
            f"{w.requests:g} requests; {vals}; drift {st or '-'}" + (f"; {'; '.join(w.events)}" if w.events else ""))
