"""The run's figures in words: a text table for the terminal, a Markdown table for CI summaries, and
the report's ``extra`` lines (server, draft, flags, run size and speed)."""

from __future__ import annotations

from typing import Optional


def _iv(iv) -> str:
    return f"[{iv[0]:.3f}, {iv[1]:.3f}]"


def _rows(fig: dict, rows: Optional[list]) -> list[list[str]]:
    figs = [("accept length", fig["accept_length"])] + [(f"position {p['position']}", p) for p in fig["per_position"]]
    by = {r["figure"]: r for r in rows or []}
    out = []
    for name, f in figs:
        line = [name, f"{f['value']:.3f}", _iv(f["interval"])]
        r = by.get(name)
        if r is not None:
            lo, hi = r["difference"]
            d = r.get("decision") or {}
            verdict = d.get("verdict") or ("DROPPED" if hi < -r["tolerance"] else "MET")
            line += [f"{r['baseline']:.3f}", f"[{lo:+.3f}, {hi:+.3f}]", f"-{r['tolerance']:.3f}",
                     f"{d['detectable_drop']:.3f}" if "detectable_drop" in d else "-", verdict]
        out.append(line)
    return out


def _head(rows) -> list[str]:
    h = ["figure", "now", "95% interval"]
    return h + ["baseline", "change, paired 95% interval", "tolerance", "detectable drop", "verdict"] if rows else h


def figures_text(fig: dict, rows: Optional[list]) -> str:
    """A fixed-width table: accept length and per-position acceptance, their intervals, and with a
    baseline the paired change and its verdict."""
    table = [_head(rows)] + _rows(fig, rows)
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in table]
    return "\n".join(lines)


def figures_markdown(fig: dict, rows: Optional[list]) -> str:
    """The same table in GitHub-flavoured Markdown."""
    head = _head(rows)
    return "\n".join(["### Acceptance figures", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(r) + " |" for r in _rows(fig, rows)])


def extra_lines(info, res, fig: dict, changes: dict) -> dict[str, str]:
    """The report's ``extra`` block."""
    out = {"server": f"{info.kind} {info.version} at {info.url}", "target": info.model,
           "draft": info.draft or "not reported by the server",
           "speculation": f"{info.algorithm or 'speculative decoding'}, k = {info.k} draft positions per verify step",
           "run": f"{fig['prompts']} prompts x <= {res.max_tokens} tokens, {res.concurrency} in flight: "
                  f"{fig['completion_tokens']} tokens in {fig['verify_steps']} verify steps, {res.wall_s:.1f} s "
                  f"({fig['tokens_per_s']:.1f} tokens/s)",
           "counters": ", ".join(sorted({r.source for r in res.results}))}
    if fig.get("histogram"):
        out["correct-drafts histogram"] = str(fig["histogram"])
    if fig.get("detectable"):
        dd = fig["detectable"]
        out["smallest detectable drop"] = (
            f"accept length {dd['detectable_drop']:.3f} tokens per verify step (tolerance {dd['tolerance']:.3f} + "
            f"the prompts' spread {dd['detectable_drop'] - dd['tolerance']:.3f}): a drop smaller than this against "
            f"{dd['against']} can pass as noise")
    for k, (was, now) in changes.items():
        out[f"changed since the baseline: {k}"] = f"{was} -> {now}"
    return out


def html_acceptance(fig: dict, floor: "float | None", base: "dict | None" = None, label: str = "this server") -> dict:
    """The report's ``acceptance`` block (docs/html-report.md "Acceptance keys") from :func:`.figures.figures`
    of this run and, when compared, of the baseline document's ``figures`` (:mod:`.baseline`).

    Returns:
        ``{"label", "mean_accept_length", "interval", "confidence", "per_position": [{"position", "rate",
        "interval"}], "gate_floor": {"mean_accept_length"} | None, "baseline": {...} | absent}``.
    """
    def block(f: dict, name: str) -> dict:
        acc = f.get("accept_length") or {}
        return {"label": name, "mean_accept_length": acc.get("value"), "interval": acc.get("interval"),
                "per_position": [{"position": p["position"], "rate": p["value"], "interval": p["interval"]}
                                 for p in f.get("per_position") or []]}

    out = {**block(fig, label), "confidence": fig.get("level"),
           "gate_floor": {"mean_accept_length": floor} if floor is not None else None}
    if base and isinstance(base.get("figures"), dict):
        out["baseline"] = block(base["figures"], "baseline")
    return out
