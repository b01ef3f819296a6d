"""``eagle3-conformance check-offline CONTRACT --files DIR_OR_GLOB``: offline hidden-state files (legacy
speculators ``.pt``, SpecForge ``.ckpt``, vLLM's extraction connector ``.safetensors``) against a
contract.

A directory of SpecForge files checked against a contract with ``training.tool: specforge`` is
read by SpecForge 0.2.0's own loader chain (``.ckpt`` and ``.ckpt.gz``; the pairing its trainer
makes); everything else by the project's reader.

Pickled files are read only through ``torch.load(weights_only=True)`` (see
:mod:`eagle3_conformance.tools.offline_files`); a pickle that would run code is refused and reported.
vLLM's ``{req_id}.safetensors`` files are read with safetensors (see
:mod:`eagle3_conformance.tools.vllm_hidden_states`); a directory is searched for both kinds, and every
file found is read (a folder of extraction files with one stray pickle is read whole).
The report is ``check-data``'s (:func:`eagle3_conformance.report.render_text`): the verdict, each
diagnosis (:func:`eagle3_conformance.diagnose.diagnose`) with its evidence and fix, the failing checks
one line each, passes folded (``-v`` lists them); ``--quiet`` prints the verdict and one line per
diagnosis; ``--markdown`` writes the same report for CI job summaries; ``diagnoses`` are in the JSON.
Exit codes as everywhere: 0 conforms, 1 violations, 2 bad input (no file matched, no file could
be read, or the reference could not be loaded).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from eagle3_conformance.cli.common import (
    add_contract_arguments,
    add_html_option,
    add_reference_options,
    check_report_outputs,
    error,
    exit_code,
    load_contract,
    report_width,
    resolve_reference,
    write_html,
)
from eagle3_conformance.core.errors import DataError
from eagle3_conformance.core.exit_codes import ExitCode


def add_parser(sub) -> None:
    p = sub.add_parser("check-offline",
                       help="check legacy speculators .pt / SpecForge .ckpt / vLLM extraction .safetensors "
                            "hidden-state files against a contract")
    add_contract_arguments(p)
    p.add_argument("--files", required=True, metavar="DIR_OR_GLOB",
                   help="a directory (searched recursively for *.pt / *.ckpt and vLLM's *.safetensors), "
                        "one file, or a glob")
    add_reference_options(p)
    p.add_argument("--json", metavar="OUT", help="write findings as JSON")
    add_html_option(p)
    p.add_argument("--quiet", action="store_true", help="no report: the verdict and diagnoses only")
    p.add_argument("-v", "--verbose", action="store_true", help="list passing and skipped checks one line each")
    p.add_argument("--markdown", metavar="FILE", help="write the report as Markdown (for CI job summaries)")
    p.set_defaults(func=run)


def _file_roots(spec: str) -> list[Path]:
    """The directory ``--files`` names, when it names one (a file or glob: none)."""
    p = Path(spec)
    return [p] if p.is_dir() else []


def _specforge_dir(c, spec: str) -> bool:
    """A directory of SpecForge files for a SpecForge contract, with SpecForge installed: read by
    SpecForge's own loader chain. Anything else (a file, a glob, legacy ``.pt`` files) is read by the
    project's reader (:mod:`eagle3_conformance.tools.offline_files`), which the real chain cannot replace."""
    import importlib.util

    from eagle3_conformance.tools.specforge_layout import has_samples

    p = Path(spec)
    # a directory with .ckpt / .ckpt.gz samples: SpecForge's chain, whatever else it holds (vocab_mapping/,
    # .pt, .lock files are listed as skipped by specforge_layout, never read as samples; issue 23 item 2)
    return (c.training.tool == "specforge" and has_samples(p)
            and importlib.util.find_spec("specforge") is not None)


def _report(args, c, findings, extra: dict) -> None:
    """The report as check-data prints it (verdict, diagnoses with evidence and fix, failing checks;
    with ``--quiet`` the verdict line and one line per diagnosis), ``--markdown`` and the JSON report
    with its ``diagnoses``."""
    from eagle3_conformance import report
    from eagle3_conformance.diagnose import diagnose

    diagnoses = diagnose(c, findings)
    title = f"{c.name}: offline files ({args.contract})"
    if not args.quiet:
        print(report.render_text(findings, diagnoses, title=title, extra=extra, verbose=args.verbose,
                                 width=report_width()))
    else:
        print(report.quiet_verdict(findings))
        for d in diagnoses:
            print(f"  {d.label}: {d.title}")
    if args.markdown:
        report.write_markdown(args.markdown, report.render_markdown(findings, diagnoses, title=title, extra=extra))
    if args.json or getattr(args, "html", None):
        from eagle3_conformance.environment.validated import tool_versions

        doc = report.report_doc(args.contract, findings, {**extra, "tool_versions": tool_versions()},
                                diagnoses=diagnoses)
        if args.json:
            report.write_document(args.json, doc)
        write_html(args, doc)


def run(args) -> int:
    from eagle3_conformance.core.findings import Finding
    from eagle3_conformance.reference import ReferenceError, load_reference_model
    from eagle3_conformance.suite.runner import offline_findings
    from eagle3_conformance.tools.offline_files import OfflineFilesError, find_files
    from eagle3_conformance.tools.vllm_hidden_states import find_files as find_vllm_files

    c = load_contract(args.contract)
    files: list[Path] = []  # none for a SpecForge directory: SpecForge's loader chain reads it
    if not _specforge_dir(c, args.files):
        # a directory: every .pt / .ckpt file and every vLLM .safetensors file in it (a folder of
        # extraction files with one stray pickle is read whole, not as the pickle alone)
        errs: list[DataError] = []
        try:
            files += find_files(args.files)
        except OfflineFilesError as e:
            errs.append(e)
        if Path(args.files).is_dir():
            try:
                files += find_vllm_files(args.files)
            except DataError as e:
                errs.append(e)
        if not files and Path(args.files).is_dir():
            raise DataError(f"{args.files}: no offline sample files in this directory (check-offline reads "
                            "speculators *.pt, SpecForge *.ckpt / *.ckpt.gz and vLLM extraction *.safetensors)")
        if not files:
            raise errs[0]
    ref_dir: Optional[Path] = resolve_reference(c, args)
    check_report_outputs(args, inputs=(args.contract, *files), input_dirs=(ref_dir, *_file_roots(args.files)))
    findings: list[Finding] = []
    bad_reference = None
    if ref_dir is not None:
        try:
            load_reference_model(ref_dir, c.target)
        except ReferenceError as e:
            bad_reference = str(e)
            findings.append(Finding("reference", "fail", "data", None, "a loadable HF target directory",
                                    bad_reference, str(ref_dir),
                                    f"reference not usable: {bad_reference}; slot identity not checked", "K2"))
            ref_dir = None
    loader = "torch.load(weights_only=True)"
    if _specforge_dir(c, args.files):
        from eagle3_conformance.suite.runner import specforge_findings
        from eagle3_conformance.tools.specforge_layout import layout_finding
        from eagle3_conformance.tools.specforge_loader import LOADER

        got, names = specforge_findings(c, Path(args.files), ref_dir)
        findings += got + [layout_finding(Path(args.files), len(names))]
        files = [Path(n) for n in names]
        loader = LOADER + " (weights_only)"
    else:
        findings += offline_findings(c, files, ref_dir)
        if Path(args.files).is_dir():
            from eagle3_conformance.tools.specforge_layout import unread_finding

            findings += unread_finding(Path(args.files), files)
        if any(f.suffix == ".safetensors" for f in files):
            loader = "vLLM .safetensors: safetensors.safe_open" + (
                "; .pt/.ckpt: torch.load(weights_only=True)" if any(f.suffix != ".safetensors" for f in files) else "")
    extra = {"files": str(args.files), "samples": str(len(files)),
             "reference": str(ref_dir) if ref_dir else "none (slot identity not checked)",
             "loader": loader,
             "counted": (f"{len(findings)} findings, each file read as its trainer reads it (check-data on the same "
                         "files adds an all-rows pass over every stored sample: more findings, the same per-file "
                         "ones on its fingerprint sample)")}
    _report(args, c, findings, extra)
    if bad_reference:
        error(bad_reference)
        return ExitCode.INPUT_ERROR
    avail = [f for f in findings if f.check == "sample_available"]
    if avail and all(f.status == "fail" for f in avail):
        error(f"{args.files}: none of the {len(files)} files could be read")
        return ExitCode.INPUT_ERROR
    return exit_code(findings)
