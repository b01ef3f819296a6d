"""The norm profile ``calibrate`` shows: a rich table of per-token RMS at every boundary, and the
same as a PNG (matplotlib, Agg backend), the contract's slots and bands marked."""

from __future__ import annotations

from pathlib import Path

from eagle3_conformance.authoring.calibrate import quantiles


def render_profile(c, profile: dict, bands: dict, console) -> None:
    """Rich table of the norm profile across all boundaries with the contract's slots marked."""
    from rich.table import Table

    roles = {b: f"aux slot {i}" for i, b in enumerate(c.aux)}
    v = c.verifier_last.parsed
    roles[v] = (roles.get(v, "") + ", " if v in roles else "") + "verifier"
    t = Table(title=f"{c.name}: per-token RMS per boundary (positions {c.norm_bands.exclude_positions} excluded)")
    for col in ("boundary", "role", "p0.1", "median", "p99.9", "n", "band"):
        t.add_column(col, justify="right" if col in ("p0.1", "median", "p99.9", "n") else "left")
    for b, r in profile.items():
        lo, med, hi = quantiles(r) if r.numel() else (float("nan"),) * 3
        role = roles.get(b, "")
        style = "bold cyan" if role else ""
        band = bands.get(b)
        bt = f"[{band[0]:.4g}, {band[1]:.4g}]" if band else ""
        t.add_row(b.describe(c.L), role, f"{lo:.4g}", f"{med:.4g}", f"{hi:.4g}", str(r.numel()), bt, style=style)
    console.print(t)


def plot_profile(c, profile: dict, bands: dict, out_png: Path, source: str) -> None:
    """Save the norm profile as a PNG: log-scale RMS per boundary (median line, p0.1-p99.9 shaded),
    the contract's slots highlighted with their bands as error bars. matplotlib, Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(profile)
    xs = list(range(len(names)))
    q = [quantiles(profile[b]) for b in names]
    fig, ax = plt.subplots(figsize=(max(7.0, 0.45 * len(names) + 3), 4.8), dpi=120)
    ax.fill_between(xs, [a[0] for a in q], [a[2] for a in q], color="tab:blue", alpha=0.18,
                    label="p0.1 - p99.9 per token")
    ax.plot(xs, [a[1] for a in q], "-o", color="tab:blue", ms=3.5, lw=1.4, label="median per-token RMS")
    slot_of = {b: f"slot {i}" for i, b in enumerate(c.aux)}
    v = c.verifier_last.parsed
    marked = band_labelled = False
    for i, b in enumerate(names):
        if b in slot_of or b == v:
            label = slot_of.get(b, "")
            if b == v:
                label = (label + " + " if label else "") + "verifier"
            ax.axvspan(i - 0.4, i + 0.4, color="tab:orange", alpha=0.22, lw=0,
                       label=None if marked else "contract slots")
            marked = True
            band = bands.get(b)
            top = max(q[i][2], band[1] if band else 0.0)
            ax.annotate(label, (i, top), xytext=(0, 5), textcoords="offset points", ha="center", va="bottom",
                        fontsize=8, color="darkred",
                        bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8))
            if band:
                ax.plot([i, i], band, color="tab:red", lw=3, alpha=0.8, solid_capstyle="butt",
                        label=None if band_labelled else "calibrated band")
                band_labelled = True
    ax.set_yscale("log")
    ax.set_xticks(xs)
    ax.set_xticklabels([str(b) for b in names], rotation=60 if len(names) > 14 else 0, fontsize=8)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_xlabel("boundary (B_k enters layer k; F = final-norm output)")
    ax.set_ylabel("per-token RMS  sqrt(mean(x^2))  [log]")
    import textwrap

    sub = "\n".join(textwrap.wrap(source, 100))
    ax.set_title(f"{c.name}: norm profile, positions {c.norm_bands.exclude_positions} excluded\n{sub}",
                 fontsize=8.5)
    ymin, ymax = ax.get_ylim()
    ax.set_ylim(ymin, ymax * 2.5)  # room for the slot labels
    ax.grid(True, which="both", axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png)
    plt.close(fig)
