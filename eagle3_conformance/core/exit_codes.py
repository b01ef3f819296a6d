"""The exit codes every verb and the pytest plugin's report share: one public enum.

Every ``eagle3-conformance`` verb returns one of these; :func:`eagle3_conformance.cli.main`
maps the library's typed errors (:class:`eagle3_conformance.core.errors.InputError`) to
:attr:`ExitCode.INPUT_ERROR`. The values are part of the public surface: scripts and CI gates
compare against them, so a value never changes meaning.

- ``CONFORMS`` (0): nothing failed (also "CONFORMS ON SHAPES ONLY", "ACCEPTANCE MET", "NOT GATED").
- ``VIOLATIONS`` (1): a check failed on data that was read ("VIOLATIONS", "DROPPED"); for
  ``faults`` a fault the matrix missed, for ``upgrade-check`` a slot that moves, for ``monitor`` an
  alarm.
- ``INPUT_ERROR`` (2): nothing could be checked: a contract that does not load or that
  ``validate`` refuses, no readable sample, an unusable reference, a bad argument.
- ``INCONCLUSIVE`` (3): the data read could not decide (an acceptance interval that straddles the
  tolerance): neither a pass nor a failure; rerun with more prompts.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit status of every verb (and of ``python -m eagle3_conformance``)."""

    CONFORMS = 0
    VIOLATIONS = 1
    INPUT_ERROR = 2
    INCONCLUSIVE = 3
