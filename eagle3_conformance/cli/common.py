"""What every verb shares: exit codes, the console, loading a contract, checking arguments.

The codes are the public :class:`eagle3_conformance.core.exit_codes.ExitCode`; verbs return one of them, and
:func:`eagle3_conformance.cli.main` maps errors raised by the library to exit 2:

- **0** conforms (nothing failed);
- **1** violations: some finding on data that was read failed (printed "VIOLATIONS"), including
  samples of a data set that cannot be read while others can (``sample_available`` failures);
- **2** bad input or usage: :class:`eagle3_conformance.core.errors.InputError` (and a contract that does not
  load), reported in one line; argparse's own usage errors also exit 2; and a run whose input
  could not be checked at all (no sample readable, the reference unusable), printed "INPUT ERROR",
  never "VIOLATIONS" (:func:`eagle3_conformance.report.input_error`);
- **3** inconclusive: nothing failed, but a gated acceptance figure's paired interval straddles the
  tolerance (printed "INCONCLUSIVE", with the prompts that would decide it;
  :func:`eagle3_conformance.report.inconclusive`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional

from eagle3_conformance.core.errors import UsageError
from eagle3_conformance.core.exit_codes import ExitCode

if TYPE_CHECKING:
    from rich.console import Console

    from eagle3_conformance.contract import Contract

# The verbs' historical names for the public enum's members (core/exit_codes.py); new code names ExitCode.
EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT = ExitCode.CONFORMS, ExitCode.VIOLATIONS, ExitCode.INPUT_ERROR
EXIT_INCONCLUSIVE = ExitCode.INCONCLUSIVE


def exit_code(findings: Iterable[Any]) -> int:
    """The exit code of a run's findings (objects or JSON dicts), matching the verdict word
    (:func:`eagle3_conformance.report.verdict`): ``ExitCode.INPUT_ERROR`` on an input error (nothing could
    be read, or the reference could not be used: "INPUT ERROR"), else ``ExitCode.VIOLATIONS`` when any
    finding failed ("VIOLATIONS"), else ``ExitCode.INCONCLUSIVE`` when a gated acceptance figure could not be
    decided ("INCONCLUSIVE", :func:`eagle3_conformance.report.inconclusive`), else ``ExitCode.CONFORMS``."""
    from eagle3_conformance.report import inconclusive, input_error

    def status(f: Any) -> Any:
        return f.get("status") if isinstance(f, dict) else f.status

    findings = list(findings)
    if input_error(findings):
        return ExitCode.INPUT_ERROR
    if any(status(f) == "fail" for f in findings):
        return ExitCode.VIOLATIONS
    return ExitCode.INCONCLUSIVE if inconclusive(findings) else ExitCode.CONFORMS


def error(message: str) -> None:
    """Print ``eagle3-conformance: error: MESSAGE`` on stderr (the one-line form of every bad input)."""
    print(f"eagle3-conformance: error: {message}", file=sys.stderr)


def console() -> Console:
    """A rich console on stdout; piped output (CI logs, files) gets long lines rather than a
    table wrapped at 80 columns."""
    from rich.console import Console

    width = None if sys.stdout.isatty() else 220
    return Console(stderr=False, highlight=False, soft_wrap=True, width=width)


def load_contract(path: str | Path) -> Contract:
    """The contract at ``path``, through the one contract gate every verb applies
    (:func:`eagle3_conformance.authoring.gate.gated_contract`: ``validate``'s checks, the configs at
    ``target.path`` / ``draft.path`` included). What the gate could not check is a warning on stderr.

    Raises:
        UsageError: the gate refuses it (exit 2); the message holds ``validate``'s lines, each problem
            at the contract's file and line.
    """
    from eagle3_conformance.authoring.gate import gate_warnings, gated_contract, refusal_lines
    from eagle3_conformance.contract import ContractError

    try:
        with contract_deprecations():
            c = gated_contract(path)
    except ContractError as e:
        lines = refusal_lines(e, path)
        if Path(path).is_file():  # a contract that was read and refused (a missing file says so itself)
            lines.append(f"{path}: refused by the contract checks every verb applies (`eagle3-conformance validate "
                         f"{path}` says the same); nothing was run")
        raise UsageError("\n".join(lines)) from None
    for line in gate_warnings(c):
        print(f"warning: {path}: {line}", file=sys.stderr)
    return c


def print_or_write(dest: str, text: str) -> None:
    """``text`` on stdout when ``dest`` is ``-``, else written to the file ``dest`` (checked first with
    :func:`check_output`)."""
    if dest == "-":
        print(text)
    else:
        Path(dest).write_text(text + "\n", encoding="utf-8")


def add_contract_arguments(p: argparse.ArgumentParser, *, many: bool = False, required: bool = True,
                           what: str = "the contract") -> None:
    """The contract, the same way in every verb: positional ``CONTRACT`` or ``--contract CONTRACT`` (both only
    when they name the same file). ``many``: several contracts (positional and repeated ``--contract``).
    :func:`resolve_contract_args` (called by :func:`eagle3_conformance.cli.main`) leaves the result in
    ``args.contract`` (``args.contracts`` with ``many``)."""
    if many:
        p.add_argument("contracts", nargs="*", metavar="CONTRACT", help=f"{what} (or --contract, repeatable)")
        p.add_argument("--contract", dest="contract_option", action="append", default=[], metavar="CONTRACT",
                       help=f"{what}, as an option (repeatable)")
    else:
        p.add_argument("contract", nargs="?", metavar="CONTRACT", help=f"{what} (or --contract)")
        p.add_argument("--contract", dest="contract_option", metavar="CONTRACT", help=f"{what}, as an option")
    p.set_defaults(contract_arity="many" if many else ("one" if required else "optional"))


def contract_args(args: argparse.Namespace, many: bool = False) -> Any:
    """The contract path (``many``: the list of paths) :func:`resolve_contract_args` settled."""
    return list(getattr(args, "contracts", None) or []) if many else getattr(args, "contract", None)


def resolve_contract_args(args: argparse.Namespace) -> None:
    """Merge positional ``CONTRACT`` and ``--contract`` (:func:`add_contract_arguments`) into
    ``args.contract`` / ``args.contracts``; a verb without them is left alone.

    Raises:
        UsageError: no contract given where one is needed, or the two spellings name different files.
    """
    arity = getattr(args, "contract_arity", None)
    if arity is None:
        return
    opt = getattr(args, "contract_option", None)
    if arity == "many":
        both = list(dict.fromkeys([*(args.contracts or []), *(opt or [])]))
        if not both:
            raise UsageError("no contract given: name one or more CONTRACT files (or --contract CONTRACT)")
        args.contracts = both
        return
    pos = getattr(args, "contract", None)
    if pos and opt and Path(pos).resolve() != Path(opt).resolve():
        raise UsageError(f"CONTRACT {pos} and --contract {opt} name two contracts; give one")
    args.contract = pos or opt
    if not args.contract and arity == "one":
        raise UsageError("no contract given: name the CONTRACT file (positional, or --contract CONTRACT)")


@contextlib.contextmanager
def contract_deprecations() -> Iterator[None]:
    """A contract's deprecated keys (:class:`~eagle3_conformance.contract.ContractDeprecationWarning`, raised
    while loading it) print as one ``eagle3-conformance: warning: FILE:LINE: ...`` line each, every time, for
    the person who wrote the contract; any other warning raised inside goes on as it came."""
    from eagle3_conformance.contract import ContractDeprecationWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ContractDeprecationWarning)
        yield
    for w in caught:
        if issubclass(w.category, ContractDeprecationWarning):
            print(f"eagle3-conformance: warning: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def _inside(p: Path, d: Path) -> bool:
    return p == d or d in p.parents


def check_output(out: str | Path, flag: str, *, inputs: tuple[str | Path | None, ...] = (),
                 input_dirs: tuple[str | Path | None, ...] = (),
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


def add_html_option(p: argparse.ArgumentParser) -> None:
    """``--html OUT``: the report as one self-contained HTML page (:func:`write_html`)."""
    p.add_argument("--html", metavar="OUT",
                   help="write the report as one self-contained HTML page (verdict, fingerprint heatmaps, ...; "
                        "docs/html-report.md)")


def check_html(args: argparse.Namespace, *, inputs: tuple[Any, ...] = (), input_dirs: tuple[Any, ...] = (),
               others: tuple[str, ...] = ("json", "markdown")) -> None:
    """Refuse ``--html OUT`` before any work: an input, inside an input directory, or the same file
    as another output option of ``others`` (argument names).

    Raises:
        UsageError: as :func:`check_output`, or ``OUT`` is also another output.
    """
    out = getattr(args, "html", None)
    if not out:
        return
    check_output(out, "--html", inputs=inputs, input_dirs=input_dirs)
    for name in others:
        other = getattr(args, name, None)
        if other and Path(other).resolve() == Path(out).resolve():
            raise UsageError(f"--html {out}: is also the --{name} output; give two files")


def check_report_outputs(args: argparse.Namespace, *, inputs: tuple[Any, ...] = (),
                         input_dirs: tuple[Any, ...] = ()) -> None:
    """Refuse, before any work, a report output (``--json``, ``--markdown``, ``--html``, those the
    verb has) that is an input, lies inside an input directory, or is another output's file.

    Raises:
        UsageError: as :func:`check_output`, or two outputs name one file.
    """
    js, md = getattr(args, "json", None), getattr(args, "markdown", None)
    if js:
        check_output(js, "--json", inputs=inputs, input_dirs=input_dirs)
    if md:
        if js and Path(md).resolve() == Path(js).resolve():
            raise UsageError(f"--markdown {md}: is also the --json output; give two files")
        check_output(md, "--markdown", inputs=inputs, input_dirs=input_dirs)
    check_html(args, inputs=inputs, input_dirs=input_dirs)


def write_html(args: argparse.Namespace, doc: Any) -> None:
    """Write ``--html OUT`` (when given) from the report document ``doc`` the verb writes as JSON
    (:func:`eagle3_conformance.htmlreport.render_html`)."""
    out = getattr(args, "html", None)
    if out:
        from eagle3_conformance.htmlreport import render_html

        render_html(doc, out, name=Path(str(getattr(args, "contract", "") or "")).name)


def report_width() -> int:
    """Columns of the text report: 100 (``report.WIDTH``), or the terminal's width when it is narrower."""
    import shutil

    from eagle3_conformance import report

    cols = shutil.get_terminal_size((report.WIDTH, 24)).columns if sys.stdout.isatty() else report.WIDTH
    return max(60, min(report.WIDTH, cols))


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


def add_reference_options(p: argparse.ArgumentParser, default_help: str = "HF-format target directory for slot identity (default: the "
                                                 "contract's fixture or target.path)",
                          no_help: str = "skip fingerprint checks") -> None:
    """``--reference MODEL_DIR`` and ``--no-reference`` (read by :func:`resolve_reference`)."""
    p.add_argument("--reference", metavar="MODEL_DIR", help=default_help)
    p.add_argument("--no-reference", action="store_true", help=no_help)


def resolve_reference(c: Contract, args: argparse.Namespace) -> Optional[Path]:
    """The reference directory of a command with ``--reference`` / ``--no-reference``.

    ``--reference`` wins; ``--no-reference`` means none; otherwise the contract's fixture or
    target.path, or None when the contract names neither.

    Raises:
        UsageError: both flags given, or the contract names a fixture / target.path that cannot
            be resolved (bad input, never a silent run without slot identity).
    """
    from eagle3_conformance.suite import pairs

    ref = getattr(args, "reference", None)
    no_ref = bool(getattr(args, "no_reference", False))
    if ref and no_ref:
        raise UsageError("--reference and --no-reference contradict each other; give one")
    if ref:
        return Path(ref)
    if no_ref:
        return None
    try:
        return pairs.contract_reference(c)
    except pairs.PairUnavailable as e:
        raise UsageError(f"{getattr(args, 'contract', 'contract')}: {e}; pass --reference MODEL_DIR, or "
                         "--no-reference to skip slot identity") from None
