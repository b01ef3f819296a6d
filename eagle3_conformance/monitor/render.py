"""The monitor's report: the JSON document (``--json``, read by ``--html`` and ``render``) and its text.

The document: ``{"kind": "eagle3-conformance monitor", "verdict", "exit_code", "server", "baseline",
"settings", "started", "ended", "windows": [...], "alarms": [...], "calibrations": [...],
"canaries": [...], "events": [...], "detection": [...], "steps_per_s", "summary"}``.
"""

from __future__ import annotations

import math
from typing import Any

from eagle3_conformance.monitor.session import Outcome, diagnosis_line
from eagle3_conformance.monitor.windows import hms

KIND = "eagle3-conformance monitor"


def verdict(o: Outcome) -> str:
    """``NO ALARM``, ``ALARM`` with what the standing alarms turned out to be, or ``INCONCLUSIVE`` with
    why nothing was judged (:meth:`Outcome.cannot_judge`)."""
    if not o.raised and (why := o.cannot_judge()):
        return f"INCONCLUSIVE: {why}"
    if not o.raised:
        cleared = len(o.alarms)
        return "NO ALARM" + (f" ({cleared} drift alarm(s) cleared by the canary as traffic-mix shifts)" if cleared else "")
    states = ", ".join(dict.fromkeys(a.state for a in o.raised))
    return f"ALARM: {len(o.raised)} alarm(s), {states}"


def summary(o: Outcome) -> dict[str, Any]:
    """Counts of the session: windows by status, restarts, failed scrapes, hours."""
    by: dict[str, int] = {}
    for w in o.windows:
        by[w.status] = by.get(w.status, 0) + 1
    resets = sum(1 for w in o.windows for e in w.events if e.startswith("counter reset"))
    fails = sum(1 for w in o.windows for e in w.events if e.startswith("scrape failed"))
    return {"windows": len(o.windows), "by_status": by, "restarts": resets, "scrape_failure_streaks": fails,
            "hours": (o.ended - o.started) / 3600, "alarms": len(o.alarms), "standing_alarms": len(o.raised)}


def document(o: Outcome, baseline_path: str, baseline_doc: dict) -> dict[str, Any]:
    """The JSON document of a session (see the module docstring)."""
    doc = {"kind": KIND, "verdict": verdict(o), "exit_code": o.exit_code, "server": o.info.to_json(),
            "baseline": {"path": baseline_path, "recorded_at": baseline_doc.get("recorded_at"),
                         "server": baseline_doc.get("server"), "contract": baseline_doc.get("contract")},
            "settings": o.settings, "started": o.started, "ended": o.ended,
            "windows": [w.to_json() for w in o.windows], "alarms": [],
            "calibrations": o.calibrations, "canaries": o.canaries, "events": o.events,
            "detection": [_finite(d) for d in o.detection], "steps_per_s": o.steps_per_s, "summary": summary(o),
            "restarts": o.restarts}
    doc["alarms"] = [_alarm_json(a, o.restarts) for a in o.alarms]
    return doc


def _alarm_json(a, restarts: list) -> dict:
    """The alarm, its cause and fix in words, and the seconds from the last restart seen before it."""
    d = a.to_json()
    d["diagnosis_line"], d["fix_line"] = diagnosis_line(a)
    before = [t for t in restarts if t <= a.time]
    d["after_restart_s"] = round(a.time - before[-1], 1) if before else None
    return d


def _finite(d: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def _seconds(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "never at this traffic (idle)"
    return f"{x:.0f} s ({x / 60:.1f} min)"


def text(doc: dict) -> str:
    """The report people read, from the document: verdict, alarms with canary and diagnosis, the
    test's statement (false alarms, detection), the windows in counts."""
    s, sm = doc["settings"], doc["summary"]
    srv = doc["server"]
    lines = [f"monitor: {srv['kind']} {srv['version']} at {srv['url']} ({srv['model']}, draft {srv.get('draft')}, "
             f"k={srv['k']}) against {doc['baseline']['path']}", f"verdict: {doc['verdict']}"]
    for i, a in enumerate(doc["alarms"], 1):
        after = f", {a['after_restart_s']:.0f} s after the restart seen" if a.get("after_restart_s") is not None else ""
        lines.append(f"ALARM {i}/{len(doc['alarms'])} ({a['kind']}, {a['state']}) at {hms(a['time'])}{after}: "
                     f"{a['message']}")
        if a.get("canary"):
            c = a["canary"]
            lines.append(f"  canary: {c['verdict']}" + (f" ({c['error']})" if c.get("error") else "") +
                         "".join(f"; {r['figure']} {r['baseline']:.3f} -> {r['now']:.3f}" for r in c.get("rows") or []))
        lines.append(f"  diagnosis: {a['diagnosis_line']}")
        if a["fix_line"]:
            label = "to decide it" if a["diagnosis_line"].startswith("unconfirmed:") else "fix"
            lines.append(f"  {label}: {a['fix_line']}")
    lines.append(f"test: one-sided CUSUM per figure ({', '.join(s['figures'])}) of a drop of {s['tolerance']:.0%} of "
                 f"the baseline; windows of {s['window_s']:g} s (>= {s['min_steps']:g} verify steps), threshold "
                 f"h = {s['h']:.2f}: at most {s['false_alarms_per_day']:g} false alarm(s) per day (Lorden's bound)")
    for c in doc["calibrations"][-len(s["figures"]):]:
        lines.append(f"  {c['figure']}: reference {c['mu0']:.3f} (baseline {c['baseline']:.3f}), tests a drop of "
                     f"{c['delta']:.3f}; per-step variance {c['sigma2']:.3f} (windows {c['sigma2_windows']:.3f}, "
                     f"baseline {c['sigma2_baseline'] if c['sigma2_baseline'] is None else round(c['sigma2_baseline'], 3)})")
    for d in doc["detection"]:
        arl0 = d.get("arl0_predicted_windows")
        lines.append(f"  at {doc['steps_per_s']:.2f} verify steps/s: a drop of {d['delta']:.3f} in {d['figure']} is "
                     f"detected in {_seconds(d['detect_s'])} on average; predicted false alarms every "
                     f"{_seconds(None if arl0 is None else arl0 * s['window_s'])}")
    by = ", ".join(f"{v} {k}" for k, v in sorted(sm["by_status"].items()))
    lines.append(f"windows: {sm['windows']} in {sm['hours'] * 60:.1f} min ({by}); restarts seen: {sm['restarts']}; "
                 f"failed-scrape streaks: {sm['scrape_failure_streaks']}")
    for w in doc["windows"]:
        for e in w["events"]:
            if not e.startswith("ALARM"):
                lines.append(f"  window {w['index']}: {e}")
    lines.extend(f"  {e}" for e in doc["events"])
    return "\n".join(lines)
