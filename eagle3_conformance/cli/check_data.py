"""``eagle3-conformance check-data CONTRACT --data DIR``: training data against a contract: a speculators
0.9.0 dataset (Arrow table + ``hidden_states/hs_{i}.safetensors``) or a directory of vLLM's
extraction files (``{req_id}.safetensors`` from ``extract_hidden_states`` + its example
hidden-states connector, no Arrow table). ``--format auto`` (the default) tells them apart
(:func:`eagle3_conformance.scan.detect_format`); ``--format speculators|vllm-extraction`` forces one.

The scan itself (cheap checks on every row, fingerprints on a seeded sample, shards, workers) is
:func:`eagle3_conformance.scan.scan`; this module checks the arguments, names the faults behind the
findings (:func:`eagle3_conformance.diagnose.diagnose`), prints the report or the verdict line and writes
the JSON and Markdown. Exit 0 conforms, 1 violations, 2 bad input.
"""

from __future__ import annotations

from pathlib import Path

from eagle3_conformance.cli.common import (
    add_contract_arguments,
    add_html_option,
    add_reference_options,
    check_data_dir,
    check_report_outputs,
    error,
    exit_code,
    load_contract,
    report_width,
    resolve_reference,
    write_html,
)
from eagle3_conformance.core.errors import UsageError


def add_parser(sub) -> None:
    d = sub.add_parser("check-data", help="check a speculators 0.9.0 dataset or vLLM extraction files against a "
                                          "contract")
    add_contract_arguments(d)
    d.add_argument("--data", required=True, metavar="DIR",
                   help="speculators 0.9.0 dataset directory, or a directory of vLLM extraction files "
                        "({req_id}.safetensors with hidden_states and token_ids)")
    d.add_argument("--format", dest="data_format", default="auto", choices=("auto", "speculators", "vllm-extraction"),
                   help="layout of --data (default auto: an Arrow dataset is speculators, else *.safetensors "
                        "files holding hidden_states and token_ids are vllm-extraction)")
    add_reference_options(d)
    d.add_argument("--json", metavar="OUT", help="write findings as JSON")
    d.add_argument("--json-passes", choices=("all", "counts"), default="all",
                   help="all: every finding (default); counts: passing findings folded into one entry per "
                        "path, check and slot with a count (failures and skips stay in full)")
    d.add_argument("--batch-size", type=int, default=4, help="samples per loader batch (default 4)")
    d.add_argument("--quiet", action="store_true", help="no report, no progress bar: the verdict and diagnoses only")
    d.add_argument("-v", "--verbose", action="store_true",
                   help="list passing and skipped checks too (folded into counts by default)")
    d.add_argument("--markdown", metavar="FILE", help="write the report as Markdown (for CI job summaries)")
    add_html_option(d)
    d.add_argument("--sample", type=int, default=32, metavar="N",
                   help="samples (seeded, over the whole dataset) run through the speculators loader (vLLM "
                        "files: the vLLM extraction reader) and fingerprinted; the cheap checks run on every row "
                        "of every sample (default 32; -1: all)")
    d.add_argument("--seed", type=int, default=0, help="seed of the fingerprint sample (default 0)")
    d.add_argument("--shard", default="0/1", metavar="i/N",
                   help="scan only the samples s with s %% N == i (default 0/1: all)")
    d.add_argument("--workers", type=int, default=1, metavar="N",
                   help="Ray tasks to split the shard over (default 1: in this process, no Ray); a local Ray "
                        "is started on demand unless --ray-address is given")
    d.add_argument("--cpus-per-worker", type=int, default=None, metavar="N",
                   help="CPUs per worker: torch threads of its scan and fingerprint forward, and each Ray task's "
                        "num_cpus (default: CONFORMANCE_TORCH_THREADS when set; else this machine's CPUs / --workers, "
                        "or 1 per task with --ray-address)")
    d.add_argument("--ray-address", metavar="ADDR",
                   help="run the tasks on this Ray cluster (host:port of the head, or 'auto')")
    d.add_argument("--device", default="cpu",
                   help="torch device of the reference forward (default cpu; e.g. cuda, cuda:1)")
    d.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                   help="compute dtype of the reference forward (default float32)")
    d.add_argument("--stream-layers", action="store_true",
                   help="reference forward one decoder layer at a time from the safetensors shards "
                        "(targets larger than memory)")
    d.add_argument("--reference-cache", metavar="DIR",
                   help="disk cache of reference boundaries (default with --workers > 1 or --ray-address: "
                        "<model cache>/reference; 'none': no disk cache)")
    d.set_defaults(func=run)


def _options(args) -> tuple[tuple[int, int], int, int]:
    """(shard, workers, sample) from the arguments.

    Raises:
        UsageError: a malformed shard, or a count out of range.
    """
    from eagle3_conformance.scan import parse_shard

    try:
        shard = parse_shard(getattr(args, "shard", None) or "0/1")
    except ValueError as e:
        raise UsageError(str(e)) from None
    workers = int(getattr(args, "workers", 1))
    if workers < 1:
        raise UsageError(f"--workers {workers}: must be >= 1")
    cpus = getattr(args, "cpus_per_worker", None)
    if cpus is not None:
        from eagle3_conformance.environment.torch_env import MAX_THREADS
        from eagle3_conformance.scan.ray_tasks import available_cpus, cpu_share

        if cpus < 1:
            raise UsageError(f"--cpus-per-worker {cpus}: must be >= 1")
        if getattr(args, "ray_address", None):
            if cpus > MAX_THREADS:
                raise UsageError(f"--cpus-per-worker {cpus}: at most {MAX_THREADS}")
        elif cpus > cpu_share(workers):  # the default's own share; 1 is always allowed
            per = f" over {workers} workers" if workers > 1 else ""
            raise UsageError(f"--cpus-per-worker {cpus}{per}: this machine lets this process use "
                             f"{available_cpus()} CPU(s) (affinity mask and container quota); give at most "
                             f"{cpu_share(workers)}, or --ray-address to run on a cluster's nodes")
    sample = int(getattr(args, "sample", 32))
    if sample < -1:
        raise UsageError(f"--sample {sample}: must be >= 0, or -1 for every sample")
    if int(args.batch_size) < 1:
        raise UsageError(f"--batch-size {args.batch_size}: must be >= 1")
    return shard, workers, sample


def _counted(findings) -> str:
    """What the findings count, by the reader that made them (newuser finding 17: check-data and check-offline
    gave 224 and 159 findings on the same files, and neither said why)."""
    from collections import Counter

    from eagle3_conformance.scan import DISK_PATH, LOADER_PATH, VLLM_PATH

    by = Counter(f.path for f in findings)
    disk, sampled = by.pop(DISK_PATH, 0), by.pop(LOADER_PATH, 0) + by.pop(VLLM_PATH, 0)
    return f"{disk} all-rows pass + {sampled} per file, as check-offline counts + {sum(by.values())} dataset-wide"


def _print(args, c, res, diagnoses) -> None:
    """The report (verdict and diagnoses first), or with ``--quiet`` the verdict line and one line
    per diagnosis; ``--markdown`` writes the same report as Markdown."""
    from eagle3_conformance import report
    from eagle3_conformance.cli.progress import human_bytes
    from eagle3_conformance.scan import SHARDING

    findings = res.findings
    m = res.meta
    verbose = bool(getattr(args, "verbose", False))
    extra = {"data": m["data"], "format": m["format"], "samples": f"{m['shard_samples']} of {m['samples']} (shard {m['shard']}, "
             f"{SHARDING})", "reference": m["reference"], "counted": _counted(findings)}
    if verbose:
        extra.update({f"scope {k}": v for k, v in m["scope"].items()})
    extra["read"] = (f"{human_bytes(m['bytes'])} in {m['seconds']:.2f} s "
                     f"({human_bytes(m['bytes'] / max(m['seconds'], 1e-9))}/s)")
    title = f"{c.name}: training data ({args.contract})"
    reason = m["slot_identity"]["reason"]
    if not args.quiet:
        print(report.render_text(findings, diagnoses, title=title, extra=extra, unchecked_reason=reason,
                                 verbose=verbose, width=report_width()))
    else:  # --quiet: no report, but still the one-line verdict (and what the diagnoses name)
        print(report.quiet_verdict(findings, reason))
        for d in diagnoses:
            print(f"  {d.label}: {d.title}")
    if getattr(args, "markdown", None):
        report.write_markdown(args.markdown, report.render_markdown(findings, diagnoses, title=title, extra=extra,
                                                                    unchecked_reason=reason))


def run(args) -> int:
    import sys

    from eagle3_conformance import report
    from eagle3_conformance.cli.progress import Progress
    from eagle3_conformance.diagnose import diagnose
    from eagle3_conformance.reference import ReferenceError, load_reference_model
    from eagle3_conformance.scan import ScanError, ScanOptions, detect_format, scan, shard_size

    c = load_contract(args.contract)
    data = check_data_dir(args.data)
    shard, workers, sample = _options(args)
    try:
        fmt = detect_format(data, getattr(args, "data_format", "auto") or "auto")
    except ScanError as e:
        raise UsageError(str(e)) from None
    ref_dir = resolve_reference(c, args)
    check_report_outputs(args, inputs=(args.contract,), input_dirs=(data, ref_dir))
    cache = getattr(args, "reference_cache", None)
    if cache is not None and cache != "none":
        if Path(cache).exists() and not Path(cache).is_dir():
            raise UsageError(f"--reference-cache {cache}: is a file; give a directory (or 'none')")
        for d in (data, ref_dir):  # the cache writes files: never into an input
            if d is not None and (Path(cache).resolve() == Path(d).resolve()
                                  or Path(d).resolve() in Path(cache).resolve().parents):
                raise UsageError(f"--reference-cache {cache}: lies inside the input directory {d}; "
                                 "refusing to write there")
    ray_address = getattr(args, "ray_address", None)
    ref_device: str = getattr(args, "device", "cpu")
    ref_dtype: str = getattr(args, "dtype", "float32")
    stream_layers = bool(getattr(args, "stream_layers", False))
    if ref_dir is not None:
        try:  # fail fast, in this process, with a one-line error (config, shards, device; no weights read)
            load_reference_model(ref_dir, c.target, device=ref_device, dtype=ref_dtype, stream_layers=stream_layers)
        except ReferenceError as e:
            raise UsageError(str(e)) from None
    opts = ScanOptions(shard=shard, workers=workers, sample=sample, seed=int(getattr(args, "seed", 0)),
                       reference_dir=ref_dir, batch_size=args.batch_size, ray_address=ray_address,
                       ref_device=ref_device, ref_dtype=ref_dtype,
                       stream_layers=stream_layers, ref_cache=False if cache == "none" else cache,
                       data_format=fmt, cpus_per_worker=getattr(args, "cpus_per_worker", None))
    show = not args.quiet and sys.stderr.isatty()
    try:
        with Progress(show, shard_size(data, shard, fmt) if show else None) as bar:
            res = scan(c, data, opts, on_progress=bar.advance)
    except (ScanError, ReferenceError) as e:
        raise UsageError(str(e)) from None
    findings = res.findings
    diagnoses = diagnose(c, findings)
    _print(args, c, res, diagnoses)
    if args.json or getattr(args, "html", None):
        from eagle3_conformance.environment.validated import tool_versions

        doc = report.report_doc(args.contract, findings, {**res.meta, "tool_versions": tool_versions()},
                                passes=getattr(args, "json_passes", "all"), diagnoses=diagnoses)
        if args.json:
            report.write_document(args.json, doc)
        write_html(args, doc)
    why = report.input_error(findings)  # the verdict printed above says INPUT ERROR too
    if why:
        error(f"{data}: {why}")
    return exit_code(findings)
