"""``conformance`` command line: one module per verb, the shared console and exit codes in
:mod:`eagle3_conformance.cli.common`.

Exit codes: the public :class:`eagle3_conformance.core.exit_codes.ExitCode`: 0 = conforms, 1 = violations
found, 2 = bad input or usage (argparse's own usage errors also exit 2), 3 = inconclusive. The verdict word
follows the same rule: input that could not be checked at all prints "INPUT ERROR" and exits 2, failed
checks on data that was read print "VIOLATIONS" and exit 1 (:func:`eagle3_conformance.cli.common.exit_code`).
No traceback escapes unless ``--debug`` is given.

One convention for every verb: the contract is positional ``CONTRACT`` or ``--contract CONTRACT``
(:func:`eagle3_conformance.cli.common.add_contract_arguments`) and passes the one contract gate
(:func:`eagle3_conformance.cli.common.load_contract`: ``validate``'s checks) before anything runs; reports
are written with ``--json OUT``, ``--markdown OUT`` and ``--html OUT`` (older spellings still work and
warn on stderr).

Each verb module defines ``add_parser(subparsers)`` (its options, no heavy imports) and
``run(args) -> exit code``; nothing outside this package imports it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional

from eagle3_conformance.cli import (
    accept,
    accept_estimate,
    calibrate,
    captures,
    check_data,
    check_offline,
    faults,
    init,
    invariance,
    merge_reports,
    monitor,
    render,
    schema,
    serve,
    serve_hooks,
    translate,
    upgrade_check,
    upgrade_contract,
    validate,
)
from eagle3_conformance.cli.common import error, resolve_contract_args
from eagle3_conformance.core.errors import InputError
from eagle3_conformance.core.exit_codes import ExitCode

VERBS = (validate, check_data, schema, init, calibrate, translate, faults, merge_reports, check_offline, upgrade_check,
         accept_estimate, accept, monitor, serve, serve_hooks, captures, invariance, render,
         upgrade_contract)
"""The verb modules, in the order ``conformance --help`` lists them."""


class _Parser(argparse.ArgumentParser):
    """argparse without prefix matching of long options: ``--dat`` is an error, not ``--data`` (a
    misspelt option must not silently become another one; the verbs' subparsers are made of this
    class too, argparse's default ``parser_class`` being the parent's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="eagle3-conformance", description="EAGLE-3 draft-boundary conformance.",
        epilog="exit codes (eagle3_conformance.core.exit_codes.ExitCode): 0 conforms; 1 VIOLATIONS (failed checks "
               "on data that was read, including some unreadable samples among readable ones); 2 bad input or "
               "usage (INPUT ERROR: nothing could be read, the reference is unusable, a contract `validate` "
               "refuses, a bad argument); 3 INCONCLUSIVE (accept: the data cannot decide)")
    from eagle3_conformance import __version__

    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks (before or after the verb)")
    sub = p.add_subparsers(dest="command", required=True)
    for verb in VERBS:
        verb.add_parser(sub)
    for verb_parser in sub.choices.values():  # `VERB ... --debug` too (errors say "run with --debug")
        verb_parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return p


EXIT_SIGPIPE = 128 + 13  # what a shell reports for a process ended by SIGPIPE (`... | head`)
EXIT_SIGINT = 128 + 2  # ended by Ctrl-C, as a shell reports it (signal exits are not ExitCode verdicts)


def _stdout_closed() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as a tool ended by SIGPIPE does.
    Further output goes to /dev/null so the interpreter's exit flush raises nothing (the recipe in
    the Python docs, library/signal.rst "Note on SIGPIPE")."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (captured in tests)
        pass
    return EXIT_SIGPIPE


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from eagle3_conformance.environment.torch_env import threads_from_env

    try:
        threads_from_env()  # a bad value is ignored at import (1 thread); here it is bad input
    except ValueError as e:
        error(str(e))
        return ExitCode.INPUT_ERROR
    try:
        resolve_contract_args(args)
        rc = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit flush
        return rc
    except BrokenPipeError:
        return _stdout_closed()
    except InputError as e:
        error(str(e))
        return ExitCode.INPUT_ERROR
    except KeyboardInterrupt:
        return EXIT_SIGINT
    except Exception as e:  # a bug or an unforeseen input problem: one line, exit 2
        if args.debug:
            raise
        from eagle3_conformance.environment.engines import missing_dependency

        why = missing_dependency(e) if isinstance(e, ModuleNotFoundError) else None
        if why:  # an optional dependency this command needs (the core needs none): say which extra
            error(f"{args.command}: {why}")
            return ExitCode.INPUT_ERROR
        msg = " ".join(str(e).split())  # whole: the report never cuts a failure's text
        print(f"eagle3-conformance: internal error (a bug in eagle3-conformance, or an input it does not recognise): "
              f"{type(e).__name__}: {msg} (run with --debug for a traceback)", file=sys.stderr)
        return ExitCode.INPUT_ERROR
