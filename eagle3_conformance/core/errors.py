"""Typed errors of the library: bad input the user must fix, as opposed to findings.

Library modules raise these and never decide how a program ends: the command line
(:mod:`eagle3_conformance.cli`, the only place that knows exit codes) reports any :class:`InputError` in
one line and exits 2, and exits 1 when findings failed. A contract that does not load raises
:class:`eagle3_conformance.contract.ContractError` (with every problem and its line), which the
command line treats the same way.

Readers of particular inputs keep their own subclasses of :class:`DataError`
(``eagle3_conformance.scan.ScanError``, ``eagle3_conformance.report.merge.MergeError``,
``eagle3_conformance.tools.offline_files.OfflineFilesError``), so callers can catch one kind.
"""

from __future__ import annotations


class InputError(Exception):
    """Bad input: the message is one line, says what is wrong and where; no traceback."""


class UsageError(InputError):
    """Arguments that are missing, out of range or contradict each other (``--reference`` with
    ``--no-reference``, an output that would overwrite an input, ...)."""


class DataError(InputError):
    """A dataset, model directory, config file or report that cannot be read or used as given
    (missing, malformed, or inconsistent with itself or the contract)."""
