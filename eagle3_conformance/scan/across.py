"""Checks across a scanned dataset's samples, after its parts are merged: one boundary per slot across
the fingerprinted samples (R90, :func:`eagle3_conformance.checks.writers.writer_findings`) and, for a
multimodal contract, whether the data were written with vision features (R92,
:func:`eagle3_conformance.checks.multimodal.check_vision_features` on :func:`vision_data`).

They need every sample: a run of one shard of several (``--shard i/N``, N > 1) leaves them out and
``merge-reports`` runs them on the merged findings
(:func:`eagle3_conformance.report.merge.merged_across_findings`, which imports this module, and the scan
package with torch, only for the vision data check).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.scan.formats import SPECULATORS


def vision_data(c: Contract, data_dir: str | Path, fmt: str) -> Optional[dict]:
    """The ``vision_data`` fact of a dataset for a multimodal contract (None for any other contract):
    which samples hold ``multimodal.image_token_id`` and, where the layout records each sample's request
    (a speculators dataset with a ``messages`` column), which were written from a request carrying its
    image, asked of speculators 0.9.0's own ``_has_multimodal_content`` (``train/data.py``: the rows its
    ``build_client_item`` sends with their messages, i.e. with the images)."""
    if c.multimodal is None:
        return None
    from eagle3_conformance.scan.sources import open_source

    src = open_source(fmt, Path(data_dir))
    tok = c.multimodal.image_token_id
    where = getattr(src, "where", lambda i: f"sample {i}")
    img = []
    for i in range(src.n):
        ids = src.token_ids(i)
        if ids is not None and bool((ids == tok).any()):
            img.append(where(i))
    vis: Optional[list[str]] = None
    source = f"{fmt} layout: no record of each sample's request"
    if fmt == SPECULATORS and "messages" in src.ds.column_names:
        from speculators.train.data import _has_multimodal_content

        msgs = src.ds["messages"]
        vis = [where(i) for i in range(src.n) if msgs[i] and _has_multimodal_content(msgs[i])]
        source = "Arrow input_ids and messages, speculators 0.9.0 train/data.py _has_multimodal_content"
    elif fmt == SPECULATORS:
        source = "Arrow input_ids; no messages column: no sample was sent with its images"
        vis = []
    return {"samples": src.n, "with_image_token": img, "with_vision_request": vis, "source": source}


def across_findings(c: Contract, data_dir: str | Path, fmt: str, findings: list[Finding], path: str) -> list[Finding]:
    """The findings of the checks across samples, in this order: writer consistency, vision data."""
    from eagle3_conformance.checks import check_vision_features, writer_findings

    out = writer_findings(c, findings, path=path)
    fig = vision_data(c, data_dir, fmt)
    if fig is not None:
        out += check_vision_features(c, fig, path="data")
    return out
