"""One self-contained HTML page from report JSON documents: the verdict header, a fingerprint
heatmap per path, acceptance, the kill matrix, the upgrade matrix, the monitor's acceptance timeline
(docs/html-report.md).

:func:`render_html` is the one entry point every verb calls with the JSON document it writes (or
would write): ``render_html(doc, out)``. The page holds no script and loads nothing: styles inline,
pictures inline SVG drawn by matplotlib, the page from a jinja2 template
(``page.html.j2`` beside this file). Documents of another version or with fields missing render
what they have, and the page names what is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional, Union

from eagle3_conformance.htmlreport.model import kind_of

__all__ = ["render_html", "render_page", "kind_of", "ACCEPTANCE_KEYS"]

ACCEPTANCE_KEYS = {
    "mean_accept_length": "float: mean accept length (tokens per verify step, the bonus token included)",
    "interval": "[low, high]: its confidence interval (e.g. a 95% bootstrap over prompts)",
    "confidence": "float, optional: the interval's level (0.95)",
    "per_position": "list: acceptance rate at draft position 1, 2, ... as floats, or objects "
                    "{position, rate, interval: [low, high]}",
    "gate_floor": "float (a floor on the mean accept length) or {mean_accept_length, per_position: [floats]}",
    "baseline": "{label, mean_accept_length, interval, per_position}: what it is compared against",
    "label": "str, optional: the legend's name of the measured run",
}
"""The keys the acceptance section reads from a report's ``acceptance`` object (top-level, or
``meta.acceptance``); any may be absent (the page names which)."""

Doc = Union[dict, list]


def _section(kind: str, builder, missing: list[str]) -> Optional[dict[str, Any]]:
    """``builder()`` as a page section; an unexpected shape becomes a named gap, never a traceback."""
    try:
        return builder()
    except Exception as e:  # noqa: BLE001 -- the page names it instead of failing
        missing.append(f"{kind}: could not be drawn from this document ({type(e).__name__}: {e})")
        return None


def _one(doc: Any, name: str) -> dict[str, Any]:
    """The sections of one document: ``{"name", "kind", "header", "heatmaps", "acceptance",
    "accept_table", "kill", "upgrade", "missing"}``."""
    from eagle3_conformance.htmlreport import matrices, model, plots

    missing: list[str] = []
    kind = model.kind_of(doc)
    out: dict[str, Any] = {"name": name, "kind": kind, "missing": missing}
    if kind == "unknown":
        keys = ", ".join(sorted(map(str, doc)))[:300] if isinstance(doc, dict) else type(doc).__name__
        missing.append(f"not a report this version recognises (top-level: {keys or 'empty'}): nothing to draw")
    if kind == "findings":
        out["header"] = _section("verdict header", lambda: model.header(doc, missing), missing)
        hms: Any = _section("fingerprint heatmap", lambda: model.heatmaps(
            [f for f in doc["findings"] if isinstance(f, dict)], missing), missing) or []
        for hm in hms:
            hm["svg"] = _section(f"heatmap {hm['path']}", lambda hm=hm: plots.heatmap(hm), missing)
            hm["id"] = plots.css_id(hm["path"])
        out["heatmaps"] = hms
        if not hms and not any("heatmap" in m for m in missing):
            missing.append("fingerprint heatmap: no identity check ran (no reference, or no path that judges it)")
    a = _section("acceptance", lambda: model.acceptance(doc, missing), missing)
    if a is not None:
        a["svg"] = _section("acceptance bars", lambda: plots.acceptance(a), missing)
        rows = [{"name": a["label"], "mean": a["mean"], "interval": a["interval"]}]
        if a.get("baseline"):
            rows.append({"name": a["baseline"]["label"], "mean": a["baseline"]["mean"],
                         "interval": a["baseline"]["interval"]})
        a["length_svg"] = _section("accept length", lambda: plots.accept_lengths(rows, a.get("floor_mean")), missing)
        out["acceptance"] = a
    if kind == "accept-table":
        t = _section("acceptance table", lambda: model.accept_table(doc, missing), missing)
        if t is not None:
            t["svg"] = _section("accept lengths", lambda: plots.accept_lengths(t["rows"]), missing)
        out["accept_table"] = t
    if kind == "kill-matrix":
        out["kill"] = _section("kill matrix", lambda: matrices.kill_matrices(doc, missing), missing) or []
    if kind == "upgrade":
        out["upgrade"] = _section("upgrade matrix", lambda: matrices.upgrade(doc, missing), missing)
    if kind == "monitor":
        from eagle3_conformance.htmlreport import timeline

        m = _section("monitor", lambda: timeline.model(doc, missing), missing)
        if m is not None:
            m["svg"] = _section("monitor timeline", lambda: timeline.svg(doc), missing)
        out["monitor"] = m
    return out


def render_page(docs: Iterable[tuple[str, Doc]], title: Optional[str] = None) -> str:
    """The HTML page (a string) of ``(name, document)`` pairs, one part per document, in order."""
    from importlib import resources

    import jinja2
    from markupsafe import Markup

    from eagle3_conformance import __version__

    parts = [_one(doc, name) for name, doc in docs]
    env = jinja2.Environment(autoescape=True, undefined=jinja2.ChainableUndefined, trim_blocks=True,
                             lstrip_blocks=True)
    env.filters["fmt"] = lambda x, spec=".3f": "-" if not isinstance(x, (int, float)) else format(x, spec)
    tpl = env.from_string(resources.files(__package__).joinpath("page.html.j2").read_text(encoding="utf-8"))
    first = next((p for p in parts if p.get("header")), None)
    return tpl.render(parts=parts, title=title or (f"EAGLE-3 conformance: {first['header']['pair']}" if first
                                                   else "EAGLE-3 conformance report"),
                      version=__version__, markup=Markup)


def render_html(doc: Union[Doc, list[tuple[str, Doc]]], out: Union[str, Path], name: str = "",
                title: Optional[str] = None) -> Path:
    """Write the self-contained HTML page of report ``doc`` to ``out``; returns ``out``.

    Args:
        doc: a report JSON document as its verb writes it (a findings report, a kill matrix or a
            list of them, a faults acceptance table, an upgrade report, any of them with an
            ``acceptance`` object: :data:`ACCEPTANCE_KEYS`), or a list of ``(name, document)``
            pairs for one page of several (``render`` with several files).
        out: the HTML file to write (UTF-8; its parent directory must exist).
        name: what the page calls ``doc`` (a file name); default the document's kind.

    Never raises on the document's content: what cannot be read is named on the page.
    Raises OSError when ``out`` cannot be written.
    """
    pairs = doc if isinstance(doc, list) and doc and all(isinstance(x, tuple) for x in doc) else [(name, doc)]
    html = render_page(pairs, title)
    p = Path(out)
    p.write_text(html, encoding="utf-8")
    return p


def render_suite(out: str | Path, runs: list[tuple[Any, ...]], versions: dict[str, Any]) -> Path:
    """``pytest --conformance-html OUT``: one part per contract file, each with its findings on every
    path, its diagnoses and its validated-on record, so each heatmap is drawn against its own target.

    Args:
        runs: ``(file, name, contract, findings, errors, diagnoses)`` per contract file.
        versions: the tool versions of the run (:func:`eagle3_conformance.environment.validated.tool_versions`).
    """
    from eagle3_conformance.environment.validated import record
    from eagle3_conformance.report import report_doc

    parts = []
    for file, name, contract, findings, errors, diagnoses in runs:
        meta: dict[str, Any] = {"contract_name": name, "tool_versions": versions,
                                "validated_on": [record(contract, findings, errors=errors)]}
        meta["contract_sha256"] = meta["validated_on"][0].get("contract_sha256")
        if errors:
            meta["errors"] = [{"contract": name, "path": e.split(": ", 1)[0], "error": e.split(": ", 1)[1]}
                              for e in errors]
        parts.append((name, report_doc(file, findings, meta=meta, diagnoses=diagnoses)))
    return render_html(parts, out, title=f"EAGLE-3 conformance suite: {len(parts)} contract(s)")
