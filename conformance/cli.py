"""``conformance`` command line.

Exit codes: 0 = conforms, 1 = violations found, 2 = bad input or usage (argparse's own usage
errors also exit 2). No traceback escapes unless ``--debug`` is given.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Optional

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT = 0, 1, 2


class UsageError(Exception):
    """Bad input: reported in one line, exit 2."""


def _console():
    import sys as _sys

    from rich.console import Console

    # piped output (CI logs, files) gets long lines rather than a table wrapped at 80 columns
    width = None if _sys.stdout.isatty() else 220
    return Console(stderr=False, highlight=False, soft_wrap=True, width=width)


def _load(path: str):
    from conformance.contract import ContractError, load_contract

    try:
        return load_contract(path)
    except ContractError as e:
        raise UsageError(str(e)) from None


def _inside(p: Path, d: Path) -> bool:
    return p == d or d in p.parents


def check_output(out: str | Path, flag: str, *, inputs: tuple = (), input_dirs: tuple = (),
                 need_parent: bool = True) -> Path:
    """Refuse an output path that would overwrite an input or cannot be written, before any work.

    Args:
        out: the path given for ``flag``.
        flag: the option or argument name, for the message (``--json``, ``OUT``).
        inputs: input files (contract, reports) ``out`` must not be.
        input_dirs: input directories (dataset, reference model) ``out`` must not lie in.
        need_parent: refuse when ``out``'s parent directory does not exist (False: the caller
            creates it).

    Raises:
        UsageError: ``out`` is an input, lies inside an input directory, is a directory, or its
            parent directory does not exist.
    """
    o = Path(out)
    r = o.resolve()
    for f in inputs:
        if f is not None and Path(f).resolve() == r:
            raise UsageError(f"{flag} {o}: is the input {f}; refusing to overwrite it")
    for d in input_dirs:
        if d is not None and _inside(r, Path(d).resolve()):
            raise UsageError(f"{flag} {o}: lies inside the input directory {d}; refusing to write there")
    if o.is_dir():
        raise UsageError(f"{flag} {o}: is a directory; give a file name")
    if need_parent and not r.parent.is_dir():
        raise UsageError(f"{flag} {o}: parent directory {o.parent} does not exist")
    return o


def check_data_dir(data: str | Path, flag: str = "--data") -> Path:
    """``data`` as an existing directory.

    Raises:
        UsageError: it does not exist, or is not a directory.
    """
    d = Path(data)
    if not d.exists():
        raise UsageError(f"{d}: no such data directory")
    if not d.is_dir():
        raise UsageError(f"{flag} {d}: is not a directory (give the dataset directory)")
    return d


def resolve_reference(c, args) -> "Optional[Path]":
    """The reference directory of a command with ``--reference`` / ``--no-reference``.

    ``--reference`` wins; ``--no-reference`` means none; otherwise the contract's fixture or
    target.path, or None when the contract names neither.

    Raises:
        UsageError: both flags given, or the contract names a fixture / target.path that cannot
            be resolved (bad input, never a silent run without slot identity).
    """
    from conformance import runner

    ref = getattr(args, "reference", None)
    no_ref = bool(getattr(args, "no_reference", False))
    if ref and no_ref:
        raise UsageError("--reference and --no-reference contradict each other; give one")
    if ref:
        return Path(ref)
    if no_ref:
        return None
    try:
        return runner.contract_reference(c)
    except runner.PairUnavailable as e:
        raise UsageError(f"{getattr(args, 'contract', 'contract')}: {e}; pass --reference MODEL_DIR, or "
                         "--no-reference to skip slot identity") from None


# --- validate --------------------------------------------------------------------------------


def cmd_validate(args) -> int:
    from conformance.contract import ContractError, load_contract

    con = _console()
    bad = 0
    for p in args.contracts:
        try:
            c = load_contract(p)
        except ContractError as e:
            bad += 1
            for prob in e.problems:
                con.print(f"[red]{prob.format(e.file)}[/red]")
            continue
        bands = c.norm_bands.status
        con.print(f"[green]ok[/green] {p}: {c.name}: aux {c.capture.boundaries} + verifier "
                  f"{c.verifier_last.tensor}, width {c.capture.feature_width}, bands {bands}")
    return EXIT_BAD_INPUT if bad else EXIT_OK


# --- check-data ------------------------------------------------------------------------------


def _cmd_check_data_scan(args) -> int:
    """check-data through the streaming scanner (conformance.scan)."""
    from conformance.scan import cmd_check_data as scan_check_data

    return scan_check_data(args)


# --- schema ----------------------------------------------------------------------------------


def cmd_schema(args) -> int:
    from conformance.contract import SCHEMA_PATH, schema_text

    text = schema_text()
    if args.write:
        SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
        SCHEMA_PATH.write_text(text)
        print(f"wrote {SCHEMA_PATH}")
    else:
        sys.stdout.write(text)
    return EXIT_OK


# --- parser ----------------------------------------------------------------------------------

_EXTRA_COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = []


def register(fn: Callable[[argparse._SubParsersAction], None]) -> Callable:
    """Register a function that adds a subcommand (used by authoring and fault-matrix modules)."""
    _EXTRA_COMMANDS.append(fn)
    return fn


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="conformance", description="EAGLE-3 draft-boundary conformance.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True)

    v = sub.add_parser("validate", help="validate contract files (schema + semantics)")
    v.add_argument("contracts", nargs="+", metavar="CONTRACT")
    v.set_defaults(func=cmd_validate)

    d = sub.add_parser("check-data", help="check a speculators 0.9.0 dataset against a contract")
    d.add_argument("contract", metavar="CONTRACT")
    d.add_argument("--data", required=True, metavar="DIR", help="speculators 0.9.0 dataset directory")
    d.add_argument("--reference", metavar="MODEL_DIR",
                   help="HF-format target directory for slot identity (default: the contract's fixture or target.path)")
    d.add_argument("--no-reference", action="store_true", help="skip fingerprint checks")
    d.add_argument("--json", metavar="OUT", help="write findings as JSON")
    d.add_argument("--json-passes", choices=("all", "counts"), default="all",
                   help="all: every finding (default); counts: passing findings folded into one entry per "
                        "path, check and slot with a count (failures and skips stay in full)")
    d.add_argument("--batch-size", type=int, default=4, help="samples per loader batch (default 4)")
    d.add_argument("--quiet", action="store_true", help="no report, no progress bar: the verdict and diagnoses only")
    d.add_argument("-v", "--verbose", action="store_true",
                   help="list passing and skipped checks too (folded into counts by default)")
    d.add_argument("--markdown", metavar="FILE", help="write the report as Markdown (for CI job summaries)")
    d.add_argument("--sample", type=int, default=32, metavar="N",
                   help="samples (seeded, over the whole dataset) run through the speculators loader and "
                        "fingerprinted; the cheap checks run on every row of every sample (default 32; -1: all)")
    d.add_argument("--seed", type=int, default=0, help="seed of the fingerprint sample (default 0)")
    d.add_argument("--shard", default="0/1", metavar="i/N",
                   help="scan only the samples s with s %% N == i (default 0/1: all)")
    d.add_argument("--workers", type=int, default=1, metavar="N",
                   help="processes to split the shard over on this machine (default 1)")
    d.set_defaults(func=_cmd_check_data_scan)

    s = sub.add_parser("schema", help="print the contract JSON Schema generated from the models")
    s.add_argument("--write", action="store_true", help="write contracts/schema/contract.schema.json")
    s.set_defaults(func=cmd_schema)

    _load_extra_commands()
    for fn in _EXTRA_COMMANDS:
        fn(sub)
    return p


def _load_extra_commands() -> None:
    import importlib

    for mod in ("conformance.authoring", "conformance.faults", "conformance.merge", "conformance.cli_offline"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as e:
        print(f"conformance: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug or an unforeseen input problem: one line, exit 2
        if args.debug:
            raise
        msg = " ".join(str(e).split())[:500]
        print(f"conformance: internal error (a bug in conformance, or an input it does not recognise): "
              f"{type(e).__name__}: {msg} (run with --debug for a traceback)", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    # `python -m conformance.cli` runs this file as __main__; extra commands register with the
    # importable conformance.cli module, so run that module's main.
    from conformance.cli import main as _main

    sys.exit(_main())
