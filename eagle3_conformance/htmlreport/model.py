"""From report JSON documents to what the HTML page shows: pure dictionaries, no plotting, no
markup. Every reader is tolerant: a field that is absent or of another shape (a report written by
an older version, a hand-edited file) yields what the rest of the document holds, and a sentence
naming what is missing (``missing``), never an exception.

The documents read (their writers):

- a findings report ``{"contract", "diagnoses", "findings", "meta"}``
  (:func:`eagle3_conformance.report.report_doc`: check-data, check-offline, the pytest plugin's
  ``--conformance-json``, merge-reports);
- a kill matrix ``{"pair", "paths", "cells", ...}`` or a list of them, or one with ``families``
  (:func:`eagle3_conformance.faults.render.matrix_json`, ``faults --json``);
- a faults-vs-acceptance table ``{"setup", "rows", "not_measured"}`` (``faults --acceptance --json``);
- an upgrade report ``{"baseline", "candidates", "sources", "contracts"}``
  (:meth:`eagle3_conformance.upgrade.Report.to_json`, ``upgrade-check --format json``);
- an acceptance block (docs/html-report.md "Acceptance keys"), top-level ``acceptance`` or
  ``meta.acceptance`` of any of the above.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Any, Optional

#: the identity checks whose findings carry a cosine profile (one heatmap row per slot label)
IDENTITY_CHECKS = ("slot_identity", "verifier_identity")


def kind_of(doc: Any) -> str:
    """Which report ``doc`` is: ``findings``, ``kill-matrix``, ``accept-table``, ``upgrade``,
    ``acceptance`` (an acceptance block alone), ``monitor`` (``eagle3-conformance monitor --json``) or
    ``unknown``."""
    if isinstance(doc, list):
        return "kill-matrix" if doc and all(isinstance(d, dict) and ("cells" in d or "families" in d)
                                            for d in doc) else "unknown"
    if not isinstance(doc, dict):
        return "unknown"
    if isinstance(doc.get("findings"), list):
        return "findings"
    if doc.get("kind") == "eagle3-conformance monitor":
        return "monitor"
    if "cells" in doc or "families" in doc:
        return "kill-matrix"
    if isinstance(doc.get("rows"), list) and "setup" in doc:
        return "accept-table"
    if "contracts" in doc and "baseline" in doc:
        return "upgrade"
    if isinstance(doc.get("acceptance"), dict) or "mean_accept_length" in doc:
        return "acceptance"
    return "unknown"


def _dicts(xs: Any) -> list[dict[str, Any]]:
    return [x for x in xs if isinstance(x, dict)] if isinstance(xs, list) else []


# --- the verdict header ---------------------------------------------------------------------------


def header(doc: dict[str, Any], missing: list[str]) -> dict[str, Any]:
    """The verdict header of a findings report: pair, contract (file, hash), paths run, tool
    versions, reference, verdict (kind and the text report's words), diagnoses, failing groups."""
    from eagle3_conformance import report

    raw = doc.get("meta")
    meta: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if not isinstance(raw, dict):
        missing.append("meta (what was read, the reference, the tool versions): not in this report")
    findings = _dicts(doc.get("findings"))
    if len(findings) != len(doc.get("findings") or []):
        missing.append(f"{len(doc.get('findings') or []) - len(findings)} findings that are not JSON objects (left out)")
    errors = [f"{e.get('path')}: {e.get('error')}" if isinstance(e, dict) else str(e) for e in meta.get("errors") or ()]
    kind, text = report.verdict(findings, (meta.get("slot_identity") or {}).get("reason")
                                if isinstance(meta.get("slot_identity"), dict) else None, errors)
    text = meta.get("verdict") or text  # the words the run printed, when it wrote them
    versions = meta.get("tool_versions")
    if not isinstance(versions, dict):
        recs = [r.get("tool_versions") for r in _dicts(meta.get("validated_on")) if isinstance(r.get("tool_versions"), dict)]
        versions = recs[0] if recs else None
    if versions is None:
        missing.append("meta.tool_versions (the versions of the tools that ran): not in this report")
    sha = meta.get("contract_sha256") or next((r.get("contract_sha256") for r in _dicts(meta.get("validated_on"))), None)
    if not sha:
        missing.append("meta.contract_sha256 (the contract's hash): not in this report")
    diags = _dicts(doc.get("diagnoses")) if "diagnoses" in doc else []
    if "diagnoses" not in doc:
        missing.append("diagnoses: not in this report (merge-reports without a contract writes none)")
    groups = []
    try:
        from eagle3_conformance.core.findings import as_finding

        for g in report.summarize(as_finding(f) for f in findings):
            if g["status"] == "fail":
                ex = g["example"]
                groups.append({"path": g["path"], "check": g["check"], "slot": g["slot"] or "",
                               "failed": f"{g['fail']}/{g['pass'] + g['fail'] + g['skip']}",
                               "where": ex.where, "message": ex.message})
    except Exception as e:  # a finding of an unknown shape: the header still renders
        missing.append(f"failing-check table: findings could not be grouped ({type(e).__name__}: {e})")
    paths = list(OrderedDict.fromkeys(str(f.get("path")) for f in findings if f.get("path")))
    counts = Counter(f.get("status") for f in findings)
    return {"pair": meta.get("contract_name") or doc.get("contract") or "(unnamed)",
            "contract": doc.get("contract") or "(not recorded)", "contract_sha256": sha or "",
            "paths": paths, "tool_versions": versions or {}, "reference": meta.get("reference") or
            _validated_reference(meta), "verdict_kind": kind, "verdict": text,
            "verdict_tone": report.VERDICT_TONE.get(kind, "caveat"),
            "counts": {s: counts.get(s, 0) for s in ("fail", "skip", "pass")}, "n": len(findings),
            "diagnoses": [_diagnosis(d) for d in diags], "failing": groups, "errors": errors,
            "data": meta.get("data") or meta.get("files") or ""}


def _validated_reference(meta: dict[str, Any]) -> str:
    return "the contract's fixture target" if meta.get("validated_on") else "(not recorded)"


def _diagnosis(d: dict[str, Any]) -> dict[str, Any]:
    """A diagnosis in the text report's words (:func:`eagle3_conformance.report.render_text`)."""
    raw = d.get("support")
    sup: dict[str, Any] = raw if isinstance(raw, dict) else {}
    on = ", ".join(f"{p} ({sup[p]})" if sup.get(p) else str(p) for p in d.get("paths") or [])
    return {"head": f"{d.get('fault') or 'input'} {d.get('kind') or ''}, on {on}", "title": d.get("title") or "",
            "evidence": [str(e) for e in d.get("evidence") or []], "fix": [str(e) for e in d.get("fix") or []]}


# --- the fingerprint heatmap ------------------------------------------------------------------------


def boundary_names(n: int) -> list[str]:
    """``B_0..B_{n-2}, F``: the columns of a profile of length ``n`` (L + 2)."""
    return [f"B_{k}" for k in range(n - 1)] + ["F"]


def _slot_key(label: str) -> tuple:
    if label == "verifier":
        return (1, 0)
    tail = label.rsplit(" ", 1)[-1]
    return (0, int(tail)) if tail.isdigit() else (0, 10**6)


def heatmaps(findings: list[dict[str, Any]], missing: list[str]) -> list[dict[str, Any]]:
    """One heatmap per path: a row per slot label (``slot k``, then ``verifier``), a column per
    boundary; each cell the mean over the samples of the identity check's own cosine profile
    (:attr:`eagle3_conformance.core.findings.Finding.profile`), the expected boundary (the finding's
    ``expected``), and the matched one (the boundary most samples' profiles peak at)."""
    rows: "OrderedDict[tuple, list]" = OrderedDict()
    judged = 0
    for f in findings:
        if f.get("check") not in IDENTITY_CHECKS:
            continue
        judged += 1
        prof = f.get("profile")
        cos = prof.get("cosine") if isinstance(prof, dict) else None
        if not isinstance(cos, list) or len(cos) < 3 or not all(isinstance(x, (int, float)) for x in cos):
            continue
        rows.setdefault((str(f.get("path")), str(f.get("slot") or "?")), []).append((f, cos, prof))
    if judged and not rows:
        missing.append("fingerprint heatmap: the identity findings carry no cosine profile (a report written "
                       "before profiles were recorded); rerun the check to draw it")
    out: "OrderedDict[str, dict]" = OrderedDict()
    for (path, label), items in rows.items():
        width = Counter(len(c) for _, c, _ in items).most_common(1)[0][0]
        keep = [(f, c, p) for f, c, p in items if len(c) == width]
        if len(keep) < len(items):
            missing.append(f"heatmap {path} {label}: {len(items) - len(keep)} profiles of another length left out")
        named = keep[0][2].get("boundaries")  # a partial reference (the engine's records) names its columns
        names = [str(n) for n in named] if isinstance(named, list) and len(named) == width else boundary_names(width)
        mean = [sum(c[k] for _, c, _ in keep) / len(keep) for k in range(width)]
        peaks = Counter(names[max(range(width), key=c.__getitem__)] for _, c, _ in keep)
        expected = Counter(str(f.get("expected")) for f, _, _ in keep).most_common(1)[0][0]
        statuses = Counter(str(f.get("status")) for f, _, _ in keep)
        hm = out.setdefault(path, {"path": path, "boundaries": names, "rows": []})
        if hm["boundaries"] != names:
            missing.append(f"heatmap {path} {label}: profiles of {width} boundaries, the path's others have "
                           f"{len(hm['boundaries'])}; left out")
            continue
        hm["rows"].append({
            "slot": label, "check": str(keep[0][0].get("check")), "expected": expected,
            "expected_col": names.index(expected) if expected in names else None,
            "matched": peaks.most_common(1)[0][0], "matched_share": peaks.most_common(1)[0][1] / len(keep),
            "samples": len(keep), "statuses": dict(statuses), "cosine": mean,
            "over": str(keep[0][2].get("over") or ""), "tokens": sum(int(p.get("tokens") or 0) for _, _, p in keep)})
    for hm in out.values():
        hm["rows"].sort(key=lambda r: _slot_key(r["slot"]))
        for r in hm["rows"]:
            r["matched_col"] = hm["boundaries"].index(r["matched"])
            r["expected_cos"] = r["cosine"][r["expected_col"]] if r["expected_col"] is not None else None
            r["matched_cos"] = r["cosine"][r["matched_col"]]
    return list(out.values())


# --- acceptance -----------------------------------------------------------------------------------


def _pair(x: Any) -> Optional[tuple[float, float]]:
    if isinstance(x, (list, tuple)) and len(x) == 2 and all(isinstance(v, (int, float)) for v in x):
        return float(x[0]), float(x[1])
    if isinstance(x, dict) and isinstance(x.get("low"), (int, float)) and isinstance(x.get("high"), (int, float)):
        return float(x["low"]), float(x["high"])
    return None


def _positions(xs: Any) -> list[dict[str, Any]]:
    """Per-position acceptance as ``[{"position", "rate", "interval"}]`` from a list of numbers or
    of objects with ``rate`` (and ``position``, ``interval``)."""
    out: list[dict[str, Any]] = []
    for i, x in enumerate(xs if isinstance(xs, list) else []):
        if isinstance(x, (int, float)):
            out.append({"position": i + 1, "rate": float(x), "interval": None})
        elif isinstance(x, dict) and isinstance(x.get("rate"), (int, float)):
            out.append({"position": int(x.get("position") or i + 1), "rate": float(x["rate"]),
                        "interval": _pair(x.get("interval"))})
    return out


def acceptance(doc: Any, missing: list[str]) -> Optional[dict[str, Any]]:
    """The acceptance block of ``doc`` (docs/html-report.md "Acceptance keys"), normalised, or
    None when the document measured no acceptance."""
    if not isinstance(doc, dict):
        return None
    a = doc.get("acceptance")
    if not isinstance(a, dict):
        raw = doc.get("meta")
        meta: dict[str, Any] = raw if isinstance(raw, dict) else {}
        a = meta.get("acceptance") if isinstance(meta.get("acceptance"), dict) else (
            doc if "mean_accept_length" in doc else None)
    if a is None:
        return None
    out = {"mean": a.get("mean_accept_length") if isinstance(a.get("mean_accept_length"), (int, float)) else None,
           "interval": _pair(a.get("interval")), "positions": _positions(a.get("per_position")),
           "confidence": a.get("confidence"), "label": str(a.get("label") or "measured")}
    for key, words in (("mean", "mean_accept_length"), ("interval", "interval"), ("positions", "per_position")):
        if not out[key]:
            missing.append(f"acceptance.{words}: not in this report")
    floor = a.get("gate_floor")
    out["floor_mean"] = floor if isinstance(floor, (int, float)) else (
        floor.get("mean_accept_length") if isinstance(floor, dict) else None)
    fp = floor.get("per_position") if isinstance(floor, dict) else None
    out["floor_positions"] = [float(x) for x in fp] if isinstance(fp, list) and all(
        isinstance(x, (int, float)) for x in fp) else []
    if floor is None:
        missing.append("acceptance.gate_floor: not in this report (no floor drawn)")
    base = a.get("baseline") if isinstance(a.get("baseline"), dict) else None
    out["baseline"] = None if base is None else {
        "label": str(base.get("label") or base.get("name") or "baseline"),
        "mean": base.get("mean_accept_length") if isinstance(base.get("mean_accept_length"), (int, float)) else None,
        "interval": _pair(base.get("interval")), "positions": _positions(base.get("per_position"))}
    return out


def accept_table(doc: dict[str, Any], missing: list[str]) -> dict[str, Any]:
    """``faults --acceptance`` rows: per fault, mean accept length with its interval, lossless."""
    rows = []
    for r in _dicts(doc.get("rows")):
        rows.append({"name": str(r.get("name")), "kind": str(r.get("kind") or ""),
                     "mean": r.get("mean_accept_length") if isinstance(r.get("mean_accept_length"), (int, float)) else None,
                     "interval": _pair(r.get("interval")), "lossless": r.get("lossless"),
                     "positions": _positions(r.get("per_position"))})
    if not rows:
        missing.append("acceptance table: no rows")
    if rows and all(r["interval"] is None for r in rows):
        missing.append("acceptance table: no intervals (too few prompts, or an older report)")
    return {"setup": doc.get("setup") if isinstance(doc.get("setup"), dict) else {}, "rows": rows,
            "not_measured": doc.get("not_measured") or []}
