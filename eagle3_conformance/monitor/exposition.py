"""The monitor's own verdict as Prometheus metrics (``--prometheus-port``), with ``prometheus_client``.

One registry of its own (never the process-global one), served by ``prometheus_client``'s HTTP server.
Every name starts ``eagle3_monitor_``; ``figure`` is ``accept_length`` or ``position_<i>``.
``monitoring/eagle3-monitor.rules.yml`` and ``monitoring/eagle3-monitor.dashboard.json`` read these names
(``tests/test_monitor_files.py`` checks each of their expressions against this exposition).
"""

from __future__ import annotations

import math
from typing import Any, Optional

STATES = ("calibrating", "watching", "alarm")
ALARM_STATES = ("none", "unconfirmed", "fault", "mix shift")
CANARY_VERDICTS = ("none", "met", "dropped", "inconclusive", "error")


def figure_label(figure: str) -> str:
    """``"accept length"`` -> ``accept_length``, ``"position 2"`` -> ``position_2``."""
    return figure.replace(" ", "_")


class Exposition:
    """The metrics (see :data:`NAMES` for what each one is)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Info

        r = self.registry = CollectorRegistry(auto_describe=True)
        fig = ["figure"]
        self.window = Gauge("eagle3_monitor_window_acceptance", "the last judged window's figure (accept length: "
                            "tokens per verify step; position i: share of verify steps accepting draft position i)",
                            fig, registry=r)
        self.reference = Gauge("eagle3_monitor_reference_acceptance", "the reference level mu0 the drift test "
                               "compares with (calibrated on the first windows)", fig, registry=r)
        self.baseline = Gauge("eagle3_monitor_baseline_acceptance", "the baseline file's figure", fig, registry=r)
        self.tolerance = Gauge("eagle3_monitor_tolerance_drop", "the drop tested for: tolerance x the baseline's "
                               "figure (absolute)", fig, registry=r)
        self.stat = Gauge("eagle3_monitor_drift_statistic", "CUSUM statistic (nats) of a drop of the tolerance",
                          fig, registry=r)
        self.threshold = Gauge("eagle3_monitor_drift_threshold", "the CUSUM's alarm threshold h (nats)", fig,
                               registry=r)
        self.detect = Gauge("eagle3_monitor_expected_detection_seconds", "expected seconds from a drop of the "
                            "tolerance to the alarm at the observed traffic (inf while idle)", fig, registry=r)
        self.alarm = Gauge("eagle3_monitor_alarm", "1 while an alarm is raised and not cleared by the canary",
                           registry=r)
        self.alarm_state = Enum("eagle3_monitor_alarm_state", "what the last alarm turned out to be",
                                states=list(ALARM_STATES), registry=r)
        self.phase = Enum("eagle3_monitor_phase", "the judge's phase", states=list(STATES), registry=r)
        self.canary = Enum("eagle3_monitor_canary_verdict", "the last canary's verdict", states=list(CANARY_VERDICTS),
                           registry=r)
        self.canary_time = Gauge("eagle3_monitor_canary_last_run_timestamp_seconds", "when the last canary started",
                                 registry=r)
        self.windows = Counter("eagle3_monitor_windows", "windows closed, by status (judged, sparse, idle, "
                               "excluded, unreadable)", ["status"], registry=r)
        self.scrape_failures = Counter("eagle3_monitor_scrape_failures", "failed scrapes of the server's "
                                       "/metrics", registry=r)
        self.resets = Counter("eagle3_monitor_counter_resets", "server restarts seen as counter resets", registry=r)
        self.last_judged = Gauge("eagle3_monitor_last_judged_window_timestamp_seconds", "end of the last judged "
                                 "window", registry=r)
        self.last_scrape = Gauge("eagle3_monitor_last_scrape_success_timestamp_seconds", "time of the last "
                                 "successful scrape", registry=r)
        self.rate = Gauge("eagle3_monitor_verify_steps_per_second", "observed verify steps per second",
                          registry=r)
        self.info = Info("eagle3_monitor_server", "the server and the baseline judged", registry=r)
        self.diagnosis = Info("eagle3_monitor_diagnosis", "the last alarm's diagnosis and fix (empty when none)",
                              registry=r)
        self.server: Any = None
        for s in ("judged", "sparse", "idle", "excluded", "unreadable"):
            self.windows.labels(status=s)
        self.alarm.set(0)
        self.canary.state("none")
        self.alarm_state.state("none")
        self.phase.state("calibrating")

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve the metrics at ``http://host:port/metrics``; the port bound (``port`` 0: a free one)."""
        from prometheus_client import start_http_server

        self.server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return int(self.server.server_port)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def text(self) -> str:
        """The exposition as a scrape would read it."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()

    def set_figures(self, gauge, figures: list[str], values: list[Optional[float]]) -> None:
        for f, v in zip(figures, values):
            if v is not None:
                gauge.labels(figure=figure_label(f)).set(v if math.isfinite(v) else float("inf"))
