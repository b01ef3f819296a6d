"""Merge JSON reports of sharded runs (``eagle3-conformance merge-reports OUT.json IN1.json IN2.json ...``,
:mod:`eagle3_conformance.cli.merge_reports`).

A report is the document :func:`eagle3_conformance.report.write_json` writes
(:class:`eagle3_conformance.core.findings.Report`): ``{"contract": ..., "findings": [{"check", "status",
"path", "slot", "expected", "observed", "where", "message", "fault"[, "gate"][, "count"]}, ...],
"meta": {...}}``, read with :meth:`~eagle3_conformance.core.findings.Report.from_json` and written with
the same renderer; no key of a finding is dropped. Parts must be of the same contract: the
``meta.contract_sha256`` of every part when all parts carry one (so the same file under
different paths on different machines merges), else the ``contract`` strings. Findings are
concatenated in input order; ``meta`` is combined (shards listed, sample counts and bytes summed,
per-slot statistics combined, fingerprint indices united, missing shards named).

Missing shards (of i/N, some i absent) add a failed finding ``shards_complete`` on path
``"data"``: a crashed or forgotten shard task must not look like a pass. ``--allow-missing``
records it as a skip instead.

Parts that cannot be merged raise :class:`MergeError`, a :class:`eagle3_conformance.core.errors.DataError`:
unreadable or malformed; different contracts; datasets of different sizes or of different
``meta.dataset_identity`` (:func:`eagle3_conformance.scan.dataset_identity`; parts without it, older
reports, are compared by size only); data read in different formats; different shard counts
(``0/3`` with ``1/2``: no set of such parts covers every sample once); different fingerprint
settings (``--sample``, ``--seed``, ``--batch-size``); the same shard given twice.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.core.errors import DataError
from eagle3_conformance.core.findings import Finding, Report
from eagle3_conformance.report.slot_stats import merge_slot_stats

_FINDING_KEYS = ("check", "status", "path", "slot", "expected", "observed", "where")


class MergeError(DataError):
    """The parts cannot be merged (unreadable, malformed, different contracts or datasets)."""


def load_report(path: str | Path) -> Report:
    """Read one JSON report (its findings as :class:`eagle3_conformance.core.findings.Finding` objects,
    every key kept).

    Raises:
        MergeError: unreadable, not JSON, or not of the report shape.
    """
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise MergeError(f"{p}: cannot read: {e}") from None
    except json.JSONDecodeError as e:
        raise MergeError(f"{p}:{e.lineno}:{e.colno}: not JSON: {e.msg}") from None
    if not isinstance(doc, dict) or "contract" not in doc or not isinstance(doc.get("findings"), list):
        raise MergeError(f"{p}: not a conformance report (needs 'contract' and a 'findings' list)")
    for k, f in enumerate(doc["findings"]):
        if not isinstance(f, dict) or any(key not in f for key in _FINDING_KEYS):
            raise MergeError(f"{p}: findings[{k}] lacks one of {list(_FINDING_KEYS)}")
        if f["status"] not in ("pass", "fail", "skip"):
            raise MergeError(f"{p}: findings[{k}] has status {f['status']!r}")
    if not isinstance(doc.get("meta", {}), dict):
        raise MergeError(f"{p}: 'meta' must be an object")
    return Report.from_json(doc)


def _identity(doc: Report) -> Any:
    return doc.meta.get("contract_sha256")


def _check_mergeable(docs: list[Report], names: list[str], metas: list[dict[str, Any]]) -> set[str]:
    """The parts' dataset sizes (as strings).

    Raises:
        MergeError: different contracts, different dataset sizes or identities, data read in
            different formats (``meta.format``: a speculators dataset and vLLM extraction files),
            different shard counts, different fingerprint settings, or a shard given twice.
    """
    ids = [_identity(d) for d in docs]
    if all(ids):
        if len(set(ids)) > 1:
            odd = next(k for k, x in enumerate(ids) if x != ids[0])
            raise MergeError(f"{names[odd]} is a report of contract {docs[odd].contract!r} "
                             f"(sha256 {ids[odd][:12]}), {names[0]} of {docs[0].contract!r} "
                             f"(sha256 {ids[0][:12]}): not the same contract")
    else:
        cs = [d.contract for d in docs]
        if len(set(cs)) > 1:
            odd = next(k for k, x in enumerate(cs) if x != cs[0])
            raise MergeError(f"{names[odd]} is a report of contract {cs[odd]!r}, {names[0]} of {cs[0]!r}")
    fmts = [(n, m["format"]) for n, m in zip(names, metas) if "format" in m]
    if len({f for _, f in fmts}) > 1:
        odd = next(k for k, (_, f) in enumerate(fmts) if f != fmts[0][1])
        raise MergeError(f"{fmts[odd][0]} read its data as format {fmts[odd][1]!r}, {fmts[0][0]} as "
                         f"{fmts[0][1]!r}: not one dataset read one way")
    sizes = {str(m["samples"]) for m in metas if "samples" in m}
    if len(sizes) > 1:
        raise MergeError(f"the parts describe datasets of different sizes {sorted(sizes)}: not one dataset")
    ident = [(n, m["dataset_identity"], m.get("data", "?")) for n, m in zip(names, metas) if "dataset_identity" in m]
    if len({i for _, i, _ in ident}) > 1:
        other = next(x for x in ident if x[1] != ident[0][1])
        raise MergeError(f"{other[0]} checked dataset {other[1]} (data {other[2]}), {ident[0][0]} dataset "
                         f"{ident[0][1]} (data {ident[0][2]}): not the same dataset")
    _check_fingerprint_settings(names, metas)
    seen: dict[str, str] = {}
    counts: list[tuple[str, str, int]] = []
    for name, s in zip(names, [m.get("shard") for m in metas]):
        if s is None:
            continue
        try:
            i, n = (int(x) for x in str(s).split("/"))
            if not 0 <= i < n:
                raise ValueError
        except ValueError:
            raise MergeError(f"{name}: meta.shard {s!r} is not i/N with 0 <= i < N") from None
        if counts and n != counts[0][2]:
            raise MergeError(f"shard {s} in {name}, shard {counts[0][1]} in {counts[0][0]}: parts of different "
                             "shard counts cannot cover the dataset once")
        counts.append((name, s, n))
        if s in seen:
            raise MergeError(f"shard {s} is in both {seen[s]} and {name}: its findings would count twice")
        seen[s] = name
    return sizes


#: ``meta.fingerprint_sample`` keys that decide which samples are fingerprinted and by which shard
#: (:func:`eagle3_conformance.scan.fingerprint_sample`, :func:`eagle3_conformance.scan.loader_batches`), and their flags
_FP_SETTINGS = (("size", "--sample"), ("seed", "--seed"), ("batch_size", "--batch-size"))


def _check_fingerprint_settings(names: list[str], metas: list[dict[str, Any]]) -> None:
    """Parts must draw the same fingerprint sample: same ``--sample``, ``--seed`` and ``--batch-size``
    (the batch decides which shard fingerprints a sampled sample). Parts without
    ``meta.fingerprint_sample`` are not compared.

    Raises:
        MergeError: a setting differs; the message names it, its values and the two parts.
    """
    fs = [(n, m["fingerprint_sample"]) for n, m in zip(names, metas) if isinstance(m.get("fingerprint_sample"), dict)]
    for key, flag in _FP_SETTINGS:
        have = [(n, f[key]) for n, f in fs if key in f]
        odd = next((x for x in have if x[1] != have[0][1]), None)
        if odd is not None:
            raise MergeError(f"{odd[0]} ran with {flag} {odd[1]}, {have[0][0]} with {flag} {have[0][1]}: "
                             "the parts fingerprinted different samples, so their fingerprint samples do not "
                             "add up to one run's")


def _shard_coverage(meta: dict[str, Any], shards: list, allow_missing: bool) -> list[Finding]:
    """Record the shards given and missing in ``meta``; a ``shards_complete`` finding when some
    of i/N are missing (fail, or skip with ``allow_missing``)."""
    if not any(s is not None for s in shards):
        return []
    meta["shards"] = [s for s in shards if s is not None]
    counts = {int(s.split("/")[1]) for s in meta["shards"]}
    if len(counts) != 1:
        return []
    N = counts.pop()
    have = {int(s.split("/")[0]) for s in meta["shards"]}
    missing = [f"{i}/{N}" for i in range(N) if i not in have]
    meta["shards_missing"] = missing
    meta["complete"] = not missing
    if not missing:
        return []
    return [Finding(
        "shards_complete", "skip" if allow_missing else "fail", "data", None, [f"{i}/{N}" for i in range(N)],
        list(meta["shards"]), f"shards {', '.join(missing)}",
        f"{len(missing)} of {N} shards missing from the merge ({', '.join(missing)}): their samples were not checked"
        + ("; accepted with --allow-missing" if allow_missing
           else "; a crashed or forgotten shard task (pass --allow-missing to accept)"), "")]


def _sum_parts(meta: dict[str, Any], metas: list[dict[str, Any]]) -> None:
    """Counts summed, times, fingerprint indices united, slot statistics and scopes combined."""
    for key in ("shard_samples", "bytes"):
        if any(key in m for m in metas):
            meta[key] = sum(int(m.get(key, 0)) for m in metas)
    secs = [float(m["seconds"]) for m in metas if "seconds" in m]
    if secs:
        meta["seconds_max"] = max(secs)
        meta["seconds_sum"] = round(sum(secs), 3)
    fs = [m["fingerprint_sample"] for m in metas if isinstance(m.get("fingerprint_sample"), dict)]
    if fs:
        meta["fingerprint_sample"] = {k: fs[0][k] for k in ("size", "seed", "batch_size") if k in fs[0]}
        meta["fingerprint_sample"]["indices"] = sorted({i for f in fs for i in f.get("indices", [])})
    stats = [m["slot_stats"] for m in metas if isinstance(m.get("slot_stats"), dict)]
    if stats:
        meta["slot_stats"] = merge_slot_stats(stats)
    scopes = [m["scope"] for m in metas if isinstance(m.get("scope"), dict)]
    if scopes:
        meta["scope"] = {k: sorted({s[k] for s in scopes if k in s}) for k in scopes[0]}


def _shard_index(shard: Any) -> tuple[int, int]:
    """Sort key of a part's ``meta.shard`` ("i/N"); parts without one sort last, in given order."""
    try:
        i, n = str(shard).split("/")
        return (0, int(i))
    except ValueError:
        return (1, 0)


def merged_across_findings(c: Any, findings: list[Finding], meta: dict) -> list[Finding]:
    """The checks across samples on the merged findings of sharded parts: writer consistency always
    (JSON only: no torch); vision data when the contract is multimodal and the parts' data directory
    (``meta["data"]``) is on this machine (:func:`eagle3_conformance.scan.across.vision_data` reads it)."""
    from eagle3_conformance.checks import check_vision_features, writer_findings

    out = writer_findings(c, findings)
    data, fmt = meta.get("data"), meta.get("format")
    if c.multimodal is not None and isinstance(data, str) and fmt and Path(data).is_dir():
        from eagle3_conformance.scan.across import vision_data

        fig = vision_data(c, data, fmt)
        if fig is not None:
            out += check_vision_features(c, fig, path="data")
    return out


def merge_docs(docs: list[Report], names: list[str], allow_missing: bool = False, contract: Any = None) -> Report:
    """Merge reports (as loaded by :func:`load_report`) into one, without diagnoses. Missing
    shards add a ``shards_complete`` finding: status fail, or skip with ``allow_missing``. With
    ``contract``, the checks across samples run on the merged findings
    (:func:`merged_across_findings`).

    Raises:
        MergeError: see :func:`_check_mergeable`.
    """
    if not docs:
        raise MergeError("no reports to merge")
    metas = [d.meta for d in docs]
    sizes = _check_mergeable(docs, names, metas)
    # in shard order, whatever order the files were given in (a glob puts part-10 before part-2):
    # the merged findings then run in sample order as one unsharded run's do
    order = sorted(range(len(docs)), key=lambda k: _shard_index(metas[k].get("shard")))
    docs, names, metas = [docs[k] for k in order], [names[k] for k in order], [metas[k] for k in order]
    findings = [f for d in docs for f in d.findings]
    meta: dict[str, Any] = {"merged_from": list(names), "parts": len(docs)}
    for key in ("contract_name", "contract_sha256", "sharding", "reference", "format", "reader", "dataset_identity"):
        vals = {json.dumps(m.get(key)) for m in metas if key in m}
        if len(vals) == 1:
            meta[key] = json.loads(vals.pop())
    datas = sorted({str(m["data"]) for m in metas if "data" in m})
    if datas:
        meta["data"] = datas[0] if len(datas) == 1 else datas
    if sizes:
        n = sizes.pop()
        meta["samples"] = int(n) if n.isdigit() else n
    findings += _shard_coverage(meta, [m.get("shard") for m in metas], allow_missing)
    if contract is not None and any(str((m.get("shard") or "0/1")).split("/")[-1] != "1" for m in metas):
        findings += merged_across_findings(contract, findings, meta)
    _sum_parts(meta, metas)
    if any(m.get("threads_per_worker") for m in metas):  # what each part ran with (older parts: none)
        meta["threads_per_part"] = {n: m.get("threads_per_worker") for n, m in zip(names, metas)}
    from eagle3_conformance.report import slot_identity_checked, verdict

    reasons = sorted({str((m.get("slot_identity") or {}).get("reason")) for m in metas
                      if (m.get("slot_identity") or {}).get("reason")})
    meta["slot_identity_checked"] = slot_identity_checked(findings)
    meta["verdict"] = verdict(findings, "; ".join(reasons) or None)[1]
    return Report(docs[0].contract, findings, meta)


def merge_reports(out: str | Path, inputs: list[str | Path], allow_missing: bool = False,
                  contract: Any = None) -> Report:
    """Merge the reports ``inputs`` and write the result to ``out``
    (:func:`eagle3_conformance.report.write_document`, the one renderer). Returns the merged report.

    With ``contract`` (the :class:`eagle3_conformance.contract.Contract` the parts were judged against:
    see :func:`parts_contract`), the checks across samples run on the merged findings
    (:func:`merged_across_findings`: a shard of several leaves them out)
    and the merged findings are diagnosed as one run
    (:func:`eagle3_conformance.diagnose.diagnose`) and the document gains ``diagnoses``.

    Raises:
        MergeError: see :func:`load_report` and :func:`merge_docs`; ``out`` is not written.
    """
    docs = [load_report(p) for p in inputs]
    merged = merge_docs(docs, [str(p) for p in inputs], allow_missing, contract)
    if contract is not None:
        from eagle3_conformance.diagnose import diagnose

        merged.diagnoses = diagnose(contract, merged.findings)
    from eagle3_conformance.report import write_document

    write_document(out, merged.to_json())
    return merged


def parts_contract(inputs: list[str | Path], given: Optional[str | Path] = None) -> tuple[Optional[Path], str]:
    """The contract file to diagnose merged parts with, and why (or why none).

    ``given`` (``merge-reports --contract``) must have the parts' ``meta.contract_sha256``; without
    it, the parts' own ``contract`` path is used when that file exists here with the same sha256.

    Returns:
        (path or None, a sentence for the summary).

    Raises:
        MergeError: ``given`` is not the parts' contract (another sha256), or cannot be read.
    """
    docs = [load_report(p) for p in inputs]
    shas = {_identity(d) for d in docs} - {None}
    sha = shas.pop() if len(shas) == 1 else None
    if given is not None:
        gp = Path(given)
        try:
            got = hashlib.sha256(gp.read_bytes()).hexdigest()
        except OSError as e:
            raise MergeError(f"--contract {gp}: cannot read: {e}") from None
        if sha is not None and got != sha:
            raise MergeError(f"--contract {gp} has sha256 {got[:12]}; the parts were judged against "
                             f"{docs[0].contract!r} (sha256 {sha[:12]}): not the same contract")
        return gp, f"diagnosed with {gp}"
    cp = Path(str(docs[0].contract))
    if sha is None:
        return None, "no diagnoses: the parts carry no contract sha256 (pass --contract)"
    if not cp.is_file():
        return None, f"no diagnoses: the parts' contract {cp} is not here (pass --contract)"
    if hashlib.sha256(cp.read_bytes()).hexdigest() != sha:
        return None, f"no diagnoses: {cp} changed since the parts were written (pass --contract)"
    return cp, f"diagnosed with {cp}"
