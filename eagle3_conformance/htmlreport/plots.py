"""The report's pictures as inline SVG, drawn by matplotlib (object API, no pyplot: no global
backend or figure state is touched, so the pytest plugin can draw inside a user's session).

Text stays text (``svg.fonttype: none``: smaller, selectable, and the page can find a column's
label), and the elements a reader or a test looks for carry ids (matplotlib's ``gid``):
``col-<id>-B_k`` for a heatmap's column labels, ``expected-<id>-<row>`` and ``matched-<id>-<row>``
for a row's expected and matched cells.
"""

from __future__ import annotations

import io
import itertools
import re
from typing import Any, Optional

_RC = {"svg.fonttype": "none", "font.size": 9,
       "font.family": "DejaVu Sans", "axes.titlesize": 10}


def css_id(text: str) -> str:
    """``text`` as an id fragment: letters, digits, ``_`` and ``-`` only."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", str(text))


_COUNT = itertools.count()


def _rc(name: str) -> dict:
    """The drawing settings, with an id salt of its own per figure: matplotlib derives the SVG's
    internal ids (clip paths) from it, and one page holds several figures."""
    return {**_RC, "svg.hashsalt": f"e3c-{css_id(name)}-{next(_COUNT)}"}


def _svg(fig) -> str:
    """The figure as an ``<svg>`` element that scales to its container (no XML prologue, no RDF
    metadata, no fixed size)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    s = buf.getvalue()
    s = s[s.index("<svg"):]
    s = re.sub(r"<metadata>.*?</metadata>\s*", "", s, count=1, flags=re.S)
    head, rest = s.split(">", 1)
    m = re.search(r'\swidth="([0-9.]+)pt"', head)
    cap = f"max-width:{float(m.group(1)) * 4 / 3:.0f}px;" if m else ""  # never wider than drawn (pt -> px)
    head = re.sub(r'\s(width|height)="[^"]*"', "", head)
    return head + f' style="width:100%;{cap}height:auto" role="img">' + rest


def heatmap(hm: dict[str, Any]) -> str:
    """The fingerprint heatmap of one path: rows = ``hm["rows"]`` (slots, verifier), columns =
    ``hm["boundaries"]`` (B_0..B_L, F); colour = the mean identity cosine; the expected cell
    outlined (white-black frame), the matched cell marked with a dot."""
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    names, rows = hm["boundaries"], hm["rows"]
    pid = css_id(hm["path"])
    ncol, nrow = len(names), len(rows)
    with matplotlib.rc_context(_rc(hm["path"])):
        # at most 12 in (about the page width): drawn at the size it is shown, so L = 61 stays legible
        fig = Figure(figsize=(min(12.0, max(6.0, 0.2 * ncol + 2.6)), 0.42 * nrow + 1.35), layout="constrained")
        ax = fig.add_subplot()
        data = [r["cosine"] for r in rows]
        lo = min(0.0, min(min(r) for r in data))
        mesh = ax.pcolormesh(data, cmap="viridis", vmin=lo, vmax=1.0, edgecolors="#ffffff", linewidth=0.3)
        ax.set_xlim(0, ncol)
        ax.set_ylim(nrow, 0)
        ax.set_xticks([k + 0.5 for k in range(ncol)])
        ax.set_xticklabels([n.removeprefix("B_") for n in names], fontsize=7 if ncol > 24 else 8,
                           rotation=90 if ncol > 24 else 0)
        for k, lab in enumerate(ax.get_xticklabels()):
            lab.set_gid(f"col-{pid}-{names[k]}")
        ax.set_yticks([i + 0.5 for i in range(nrow)])
        ax.set_yticklabels([r["slot"] for r in rows])
        ax.set_xlabel("target boundary B_k (k = decoder layers before it; F = final_norm(B_L))")
        ax.tick_params(length=0)
        for i, r in enumerate(rows):
            if r["expected_col"] is not None:
                for color, lw in (("#000000", 3.0), ("#ffffff", 1.4)):
                    ax.add_patch(Rectangle((r["expected_col"], i), 1, 1, fill=False, edgecolor=color,
                                           linewidth=lw, gid=f"expected-{pid}-{i}" if color == "#ffffff" else None))
            good = r["matched"] == r["expected"]
            ax.plot([r["matched_col"] + 0.5], [i + 0.5], marker="o", markersize=6 if ncol > 24 else 8,
                    markerfacecolor="#ffffff" if good else "#e4002b", markeredgecolor="#000000",
                    linestyle="none", gid=f"matched-{pid}-{i}")
        cb = fig.colorbar(mesh, ax=ax, pad=0.01, fraction=0.04 if ncol > 24 else 0.05)
        cb.set_label("cosine", fontsize=8)
        cb.ax.tick_params(labelsize=7)
        return _svg(fig)


def _bars(ax, xs, rates, intervals, width, offset, color, label, hatch=None):
    err = None
    if any(iv is not None for iv in intervals):
        err = [[max(0.0, r - iv[0]) if iv else 0.0 for r, iv in zip(rates, intervals)],
               [max(0.0, iv[1] - r) if iv else 0.0 for r, iv in zip(rates, intervals)]]
    ax.bar([x + offset for x in xs], rates, width, yerr=err, color=color, label=label, hatch=hatch,
           edgecolor="#333333", linewidth=0.5, capsize=2, error_kw={"elinewidth": 0.8})


def acceptance(a: dict[str, Any]) -> Optional[str]:
    """Per-position acceptance bars with their intervals, the baseline's beside them, the gate
    floor as a step line; None when no per-position acceptance was measured."""
    import matplotlib
    from matplotlib.figure import Figure

    pos = a["positions"]
    if not pos:
        return None
    base = (a.get("baseline") or {}).get("positions") or []
    with matplotlib.rc_context(_rc("acceptance")):
        fig = Figure(figsize=(max(4.5, 0.5 * len(pos) + 2.5), 2.8), layout="constrained")
        ax = fig.add_subplot()
        xs = [p["position"] for p in pos]
        w = 0.38 if base else 0.7
        _bars(ax, xs, [p["rate"] for p in pos], [p["interval"] for p in pos], w, -w / 2 if base else 0,
              "#3b75af", a.get("label") or "measured")
        if base:
            _bars(ax, [p["position"] for p in base], [p["rate"] for p in base], [p["interval"] for p in base], w,
                  w / 2, "#bbbbbb", a["baseline"]["label"], hatch="//")
        if a.get("floor_positions"):
            fl = a["floor_positions"]
            ax.step([x - 0.5 for x in range(1, len(fl) + 1)] + [len(fl) + 0.5], fl + fl[-1:], where="post",
                    color="#e4002b", linewidth=1.2, label="gate floor", gid="acceptance-floor")
        ax.set_xticks(xs)
        ax.set_xlabel("draft position")
        ax.set_ylabel("acceptance rate")
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=7, loc="upper right", frameon=False)
        return _svg(fig)


def accept_lengths(rows: list[dict[str, Any]], floor: Optional[float] = None) -> Optional[str]:
    """Mean accept length per row (a fault, or measured vs baseline), horizontal bars with their
    intervals; the gate floor as a vertical line; None when no row has a mean."""
    import matplotlib
    from matplotlib.figure import Figure

    rows = [r for r in rows if isinstance(r.get("mean"), (int, float))]
    if not rows:
        return None
    with matplotlib.rc_context(_rc("lengths")):
        fig = Figure(figsize=(7.0, 0.28 * len(rows) + 1.1), layout="constrained")
        ax = fig.add_subplot()
        ys = list(range(len(rows)))
        means = [r["mean"] for r in rows]
        err = [[max(0.0, m - r["interval"][0]) if r.get("interval") else 0.0 for m, r in zip(means, rows)],
               [max(0.0, r["interval"][1] - m) if r.get("interval") else 0.0 for m, r in zip(means, rows)]]
        colors = ["#3b75af" if i == 0 else ("#e4002b" if r.get("lossless") is False else "#9ab7d3")
                  for i, r in enumerate(rows)]
        ax.barh(ys, means, xerr=err, color=colors, edgecolor="#333333", linewidth=0.5, capsize=2)
        if floor is not None:
            ax.axvline(floor, color="#e4002b", linewidth=1.2, linestyle="--", label="gate floor")
            ax.legend(fontsize=7, frameon=False)
        ax.set_yticks(ys)
        ax.set_yticklabels([r["name"] for r in rows], fontsize=7)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlabel("mean accept length (tokens per verify step)")
        return _svg(fig)
