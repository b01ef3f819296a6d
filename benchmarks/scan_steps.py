"""Each step of check-data's all-rows pass timed on its own (bench_check_data.py's ``checks`` reader): every
registered check the pass runs, found through the registry (a check added later is timed without touching
this file), the header read, the RMS pass, the per-sample findings and the slot statistics; and the table
that prints them."""

from __future__ import annotations

import dataclasses
import sys
import time

RMS_PASS = "rms pass (finite, RMS per row, bands' input)"


def per_check_steps() -> dict[str, float]:
    """Time each step of check-data's all-rows pass (a dict filled as the pass runs: step -> seconds).

    Wraps, in this process, the registry entry of every check the pass runs (``stored`` set), the
    pass's header read (``all_rows._read``), its RMS pass (``all_rows._reduce``), the per-sample
    length and token-range findings and the slot statistics: whatever is registered is timed."""
    from eagle3_conformance.checks import dataset as datacheck
    from eagle3_conformance.checks import registry
    from eagle3_conformance.scan import all_rows

    secs: dict[str, float] = {}

    def timed(step, fn):
        def run(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                secs[step] = secs.get(step, 0.0) + time.perf_counter() - t
        return run

    for name, spec in list(registry.REGISTRY.items()):
        if spec.stored:
            registry.REGISTRY[name] = dataclasses.replace(spec, fn=timed(name, spec.fn))
    all_rows._read = timed("read (header, mapping)", all_rows._read)
    all_rows._reduce = timed(RMS_PASS, all_rows._reduce)
    all_rows.SlotStats.add = timed("slot statistics", all_rows.SlotStats.add)
    datacheck.sample_length_findings = timed("sample_length", datacheck.sample_length_findings)
    datacheck.token_range_findings = timed("token_range", datacheck.token_range_findings)
    return secs


def all_rows_pass(data: str, contract: str) -> int:
    """check-data's all-rows pass over every sample of ``data`` in this process (no report), with the
    threads a one-worker check-data gets by default; returns the sample count."""
    from eagle3_conformance.cli.common import load_contract
    from eagle3_conformance.scan import all_rows
    from eagle3_conformance.scan.options import BLOCK_ELEMS
    from eagle3_conformance.scan.ray_tasks import default_cpus_per_worker, torch_threads
    from eagle3_conformance.scan.sources import open_source

    c = load_contract(contract)
    src = open_source("speculators", data)
    st = all_rows.PassState(c, BLOCK_ELEMS)
    with torch_threads(default_cpus_per_worker(1)):
        for i in range(src.n):
            src.disk_findings(st, i)
    return src.n




def print_steps(results: dict) -> None:
    """Per step of the all-rows pass (reader ``checks``; with --baseline, ``checks@base`` beside it):
    seconds over the dataset, throughput (bytes / those seconds) and share of the pass's steps."""
    from rich.console import Console
    from rich.table import Table

    runs = [r for r in results["runs"] if r["kind"].startswith("checks")]
    if not runs:
        return
    t = Table(title="check-data's all-rows pass, each step on its own (reader `checks`, warm, one process; "
                    "GB/s = dataset bytes / the step's seconds)")
    base = any(r["kind"] == "checks@base" for r in runs)
    for col in ("H", "step", "ms", "GB/s", "share") + (("base ms", "base GB/s", "base share") if base else ()):
        t.add_column(col, justify="left" if col == "step" else "right")
    for H in sorted({r["H"] for r in runs}):
        mine = {r["kind"]: r for r in runs if r["H"] == H}
        cols = [mine.get("checks")] + ([mine.get("checks@base")] if base else [])
        steps = sorted({k for r in cols if r for k in r["steps"]},
                       key=lambda k: -max((r["steps"].get(k, 0.0) for r in cols if r), default=0.0))
        for step in steps:
            row = [str(H), step]
            for r in cols:
                sec = r["steps"].get(step) if r else None
                row += ["", "", ""] if sec is None else [
                    f"{sec * 1e3:.1f}", f"{r['bytes'] / 1e9 / sec:.1f}" if sec else "inf",
                    f"{sec / sum(r['steps'].values()):.1%}"]
            t.add_row(*row)
    Console(width=None if sys.stdout.isatty() else 240).print(t)
