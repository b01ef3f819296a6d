"""The monitor's acceptance timeline (``eagle3-conformance monitor --json`` / ``--html``), drawn by matplotlib.

Top: the accept length of every judged window (dots), the reference level the drift test compares
with and that level minus the tolerance (the drop it tests for), the baseline's figure; restarts
(counter resets) as grey lines, windows the canary's requests were excluded from as grey bands,
idle and sparse windows as ticks at the bottom, each alarm as a red line with its kind and what it
turned out to be, dated from the CUSUM's onset (a red band from onset to alarm). Bottom: each
figure's drift statistic and the alarm threshold. The same figure is the page's SVG and, through
:func:`save_png`, the README's picture (``scripts/monitor_timeline.py``).
"""

from __future__ import annotations

import io
from typing import Any, Optional


def hms(t: float) -> str:
    import time

    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "?"


def _t(doc: dict, t: float) -> float:
    return (t - doc["started"]) / 60.0


def figure(doc: dict[str, Any]):
    """The matplotlib figure of a monitor document (object API, no pyplot)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.5, 5.2))
    top, bot = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1.4]})
    ws = doc.get("windows") or []
    judged = [w for w in ws if w["status"] == "judged" and w["values"]]
    xs = [_t(doc, (w["start"] + w["end"]) / 2) for w in judged]
    ys = [w["values"][0] for w in judged]
    colors = ["#1f77b4" if w["phase"] != "calibrating" else "#7f7f7f" for w in judged]
    top.scatter(xs, ys, s=14, c=colors, zorder=3, label="window accept length (grey: calibrating)")
    top.plot(xs, ys, lw=0.6, color="#1f77b4", alpha=0.5)
    _levels(doc, top)
    _marks(doc, ws, top, bot)
    for i, fig_name in enumerate(doc["settings"].get("figures") or []):
        pts = [(_t(doc, w["end"]), w["stats"][i]) for w in ws if len(w.get("stats") or []) > i]
        if pts:
            bot.plot(*zip(*pts), lw=1.2, label=f"drift statistic, {fig_name}")
    bot.axhline(doc["settings"]["h"], color="#d62728", ls="--", lw=1, label=f"threshold h = {doc['settings']['h']:.1f}")
    h = doc["settings"]["h"]
    if max((st for w in ws for st in w.get("stats") or []), default=0.0) > 2.5 * h:
        bot.set_ylim(0, 2.5 * h)  # the statistic keeps growing after an alarm: the threshold stays readable
        bot.text(0.99, 0.95, "clipped at 2.5 h", transform=bot.transAxes, fontsize=7, ha="right", va="top")
    bot.set_xlabel("minutes since the monitor started")
    bot.set_ylabel("CUSUM (nats)")
    top.set_ylabel("accept length (tokens / verify step)")
    srv = doc.get("server") or {}
    top.set_title(f"{srv.get('kind', '?')} {srv.get('version', '')}: {doc.get('verdict', '')}", fontsize=10)
    top.legend(fontsize=7, loc="lower left", ncol=2)
    bot.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def _levels(doc: dict, ax) -> None:
    s = doc["settings"]
    base = (s.get("baseline") or [None])[0]
    if base is not None:
        ax.axhline(base, color="#2ca02c", lw=1, label=f"baseline {base:.3f}")
    ws = doc.get("windows") or []
    end = _t(doc, doc["ended"])
    cals = [c for c in doc.get("calibrations") or [] if c["figure"] == s["figures"][0]]
    for j, c in enumerate(cals):  # each calibration holds from its last window to the next one
        w = next((x for x in ws if x["index"] == c["window"]), None)
        x0 = _t(doc, w["end"]) if w else 0.0
        nxt = next((x for x in ws if j + 1 < len(cals) and x["index"] == cals[j + 1]["windows"][0]), None)
        x1 = _t(doc, nxt["start"]) if nxt else end
        ax.hlines(c["mu0"], x0, x1, color="#1f77b4", lw=1.2, label="reference level" if j == 0 else None)
        ax.hlines(c["mu0"] - c["delta"], x0, x1, color="#ff7f0e", ls="--", lw=1,
                  label=f"reference - tolerance ({c['delta']:.3f})" if j == 0 else None)


def _marks(doc: dict, ws: list, top, bot) -> None:
    for w in ws:
        x0, x1 = _t(doc, w["start"]), _t(doc, w["end"])
        if w["status"] == "excluded":
            for ax in (top, bot):
                ax.axvspan(x0, x1, color="#bbbbbb", alpha=0.4, lw=0)
        if w["status"] in ("idle", "sparse"):
            top.plot([(x0 + x1) / 2], [0.02], marker="|", color="#7f7f7f", transform=top.get_xaxis_transform())
        if any(e.startswith("counter reset") for e in w["events"]):
            for ax in (top, bot):
                ax.axvline(x0, color="#555555", lw=1, ls=":")
            top.text(x0, 0.97, " restart", transform=top.get_xaxis_transform(), fontsize=7, va="top", color="#555555")
    for a in doc.get("alarms") or []:
        xa = _t(doc, a["time"])
        color = "#2ca02c" if a["state"] == "mix shift" else "#d62728"
        if a.get("onset_time"):
            top.axvspan(_t(doc, a["onset_time"]), xa, color=color, alpha=0.12, lw=0)
        for ax in (top, bot):
            ax.axvline(xa, color=color, lw=1.5)
        top.text(xa, 0.90, f" ALARM ({a['kind']}): {a['state']}", transform=top.get_xaxis_transform(), fontsize=8,
                 color=color, va="top", fontweight="bold")


def svg(doc: dict[str, Any]) -> str:
    """The timeline as the page's inline SVG."""
    import matplotlib

    from eagle3_conformance.htmlreport.plots import _rc, _svg

    with matplotlib.rc_context(_rc("monitor-timeline")):
        return _svg(figure(doc))


def save_png(doc: dict[str, Any], out: str, dpi: int = 110) -> None:
    """The timeline as a PNG file (the README's picture)."""
    fig = figure(doc)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    with open(out, "wb") as f:
        f.write(buf.getvalue())


def model(doc: dict[str, Any], missing: list[str]) -> Optional[dict[str, Any]]:
    """The page's monitor section: verdict, alarms (kind, state, message, canary, diagnosis, fix), the
    test's settings and the window counts."""
    if not isinstance(doc.get("windows"), list) or "settings" not in doc:
        missing.append("monitor timeline: no windows or settings in this document")
        return None
    alarms = [{"kind": a.get("kind"), "state": a.get("state"), "time": hms(a.get("time") or 0),
               "message": a.get("message"), "canary": (a.get("canary") or {}).get("verdict"),
               "diagnosis": a.get("diagnosis_line"), "fix": a.get("fix_line")} for a in doc.get("alarms") or []]
    s = doc["settings"]
    return {"verdict": doc.get("verdict", "?"), "alarms": alarms, "summary": doc.get("summary") or {},
            "server": doc.get("server") or {}, "baseline": (doc.get("baseline") or {}).get("path"),
            "test": f"one-sided CUSUM of a drop of {s.get('tolerance', 0):.0%} of the baseline, windows of "
                    f"{s.get('window_s')} s, threshold h = {s.get('h', 0):.2f} (at most {s.get('false_alarms_per_day')} "
                    "false alarms per day)",
            "detection": doc.get("detection") or [], "events": doc.get("events") or []}
