"""The one registry of checks: each check is declared once, where it is defined, with
:func:`check`, saying what it judges, the fault kinds it exists for (fault-kinds.md), the finding
names it emits and the contract keys (gates) that can decide its failures.

Everything that runs checks reads this registry instead of keeping its own list:
:func:`eagle3_conformance.checks.suite.run_checks` (capture and reference checks, in registry order),
:mod:`eagle3_conformance.suite.assess` (fact checks, pair checks), the all-rows pass of
``check-data`` (:mod:`eagle3_conformance.scan`: ``stored`` says which view of a stored sample a
check reads), the kill matrix (an operator's catching checks must be registered finding names) and
the diagnosis. Registry order is definition order: the modules of :mod:`eagle3_conformance.checks`
are imported in a fixed order by its ``__init__``, so findings come out in a stable order.

Adding a check is one function with its decorator in the module of its fault family.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

#: what a check judges (its positional inputs after the contract)
CAPTURE = "capture"        # (c, cap): one capture on its own
REFERENCE = "reference"    # (c, cap, ref): one capture against the reference forward of its tokens
PAIR = "pair"              # (c, a, b): two captures of the same tokens on two paths
FACT = "fact"              # (c, value[, path=]): one named fact of a run (Observation.facts)
MAPPING = "mapping"        # (c, d2t, t2d, path, where): the vocab mapping a path loads
TOKENIZER = "tokenizer"    # (c, template | ids, ..., path, where): what a path's tokenizer renders
VARIANT = "variant"        # (c, plain, variant): one prompt's capture under an engine variation vs its plain run
JUDGES = (CAPTURE, REFERENCE, PAIR, FACT, MAPPING, TOKENIZER, VARIANT)

#: how check-data's all-rows pass over stored samples feeds a capture check (``stored``)
TENSORS = "tensors"        # the capture of views of the on-disk tensors (reads their shapes, ids, provenance)
ROW_RMS = "row-rms"        # the reduced capture of per-row per-slot RMS (reads rows only through their RMS)
SLOT_RMS = "slot-rms"      # ROW_RMS, and only when each stored plane is one slot wide (target_hidden_size)
DTYPES = "dtypes"          # reads only dtypes: given what the trainer receives (FP8 data: dequantised dtype)
STORED = (TENSORS, ROW_RMS, SLOT_RMS, DTYPES)


@dataclass(frozen=True)
class CheckSpec:
    """One registered check.

    Attributes:
        name: the check's name (its function name without ``check_``).
        fn: the pure function (contract first; see :data:`JUDGES` for the rest), returning
            ``list[Finding]``.
        judges: one of :data:`JUDGES`.
        faults: fault-kinds.md kinds it exists for, e.g. ``("K1", "K2")``; empty for a release gate.
        emits: the ``Finding.check`` names of its findings (default: ``(name,)``).
        gates: contract keys whose value can decide one of its failures (``Finding.gate``).
        stored: for capture checks, how check-data's all-rows pass feeds it (:data:`STORED`);
            None: it does not run on that pass.
        fact: for fact checks, the :attr:`eagle3_conformance.paths.base.Observation.facts` key it judges.
        always: runs on a capture the path could not produce (``cap.unavailable``) too; every
            other capture check runs only on a capture that is there.
        rowless: judges a capture without per-token bookkeeping (an engine's decode rows:
            :attr:`eagle3_conformance.paths.base.Observation.shapes_only`): widths, slot count, bands.
    """

    name: str
    fn: Callable
    judges: str
    faults: tuple[str, ...]
    emits: tuple[str, ...]
    gates: tuple[str, ...] = ()
    stored: Optional[str] = None
    fact: Optional[str] = None
    always: bool = False
    rowless: bool = False


REGISTRY: dict[str, CheckSpec] = {}
"""name -> spec, in registration (definition) order."""


_Check = TypeVar("_Check", bound=Callable[..., Any])  # a check function, registered unchanged


def check(judges: str, faults: tuple[str, ...] = (), *, emits: tuple[str, ...] = (), gates: tuple[str, ...] = (),
          stored: Optional[str] = None, fact: Optional[str] = None, always: bool = False,
          rowless: bool = False) -> Callable[[_Check], _Check]:
    """Register the decorated ``check_<name>`` function (returned unchanged).

    Raises:
        ValueError: an unknown ``judges`` / ``stored``, a name registered twice, a fact check
            without its fact, or ``stored`` on a check that does not judge one capture.
    """
    if judges not in JUDGES:
        raise ValueError(f"judges must be one of {JUDGES}, got {judges!r}")
    if stored is not None and (stored not in STORED or judges != CAPTURE):
        raise ValueError(f"stored={stored!r}: only a capture check, one of {STORED}")
    if (judges == FACT) != (fact is not None):
        raise ValueError("a fact check names its fact, and only a fact check does")

    def register(fn: _Check) -> _Check:
        name = fn.__name__.removeprefix("check_")
        if name in REGISTRY:
            raise ValueError(f"check {name!r} is registered twice")
        REGISTRY[name] = CheckSpec(name, fn, judges, tuple(faults), tuple(emits) or (name,), tuple(gates),
                                   stored, fact, always, rowless)
        return fn

    return register


def of(judges: str) -> list[CheckSpec]:
    """The registered checks that judge ``judges``, in registry order."""
    return [s for s in REGISTRY.values() if s.judges == judges]


def fact_checks() -> dict[str, CheckSpec]:
    """Observation fact name -> the check that judges it."""
    return {s.fact: s for s in REGISTRY.values() if s.fact is not None}


def emitting(finding_check: str) -> Optional[CheckSpec]:
    """The check whose findings are named ``finding_check`` (None: no registered check)."""
    return next((s for s in REGISTRY.values() if finding_check in s.emits), None)
