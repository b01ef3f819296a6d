"""``--write-floor``: a copy of the contract with ``gates.min_accept_length`` set from a recorded good run
(``check-captures`` on a server's records, ``accept --record`` on a running server), the run and its
interval in the key's comment. The floor is :func:`eagle3_conformance.acceptance.decision.floor_from_runs`
(the lower end of the run's 95% interval); a floor needs no calibrated norm bands (issue 41: acceptance
is the engine's own counters, not a magnitude)."""

from __future__ import annotations

from pathlib import Path

from eagle3_conformance.authoring.yaml_doc import contract_yaml, eol, render, section, write_new
from eagle3_conformance.core.errors import UsageError


def floor_comment(fl: dict, source: str) -> str:
    """The end-of-line comment: where the floor came from, the run's accept length and interval."""
    lo, hi = fl["interval"]
    return (f"{source}: 1 + accepted drafts per verify step {fl['value']:.3f} [{lo:.3f}, {hi:.3f}] (95% over "
            f"{fl['units']} units, {fl['steps']} verify steps); the floor is the interval's lower end")


def with_floor(contract_text: str, floor: float, comment: str, out_file: Path) -> str:
    """``contract_text`` with ``gates.min_accept_length: floor`` and ``comment`` (ruamel round trip: comments
    and key order kept; the schema line recomputed for ``out_file``), validated.

    Raises:
        DataError: the result does not validate.
    """
    y = contract_yaml()
    doc = y.load(contract_text)
    g = section(doc, "gates")
    g["min_accept_length"] = float(floor)
    g.ca.items.pop("min_accept_length", None)
    eol(g, comment, "min_accept_length")
    return render(y, doc, out_file, "floored")


def write_floor(contract_path: str, out: str, fl: dict, source: str) -> str:
    """Write the floored copy of ``contract_path`` to ``out`` (never over the contract itself); returns the line
    to print.

    Raises:
        UsageError: ``out`` is the contract, or exists.
        DataError: the result does not validate.
    """
    src, dst = Path(contract_path), Path(out)
    if dst.exists() and dst.resolve() == src.resolve():
        raise UsageError(f"--write-floor {out}: is the contract itself; write a copy and review it")
    text = with_floor(src.read_text(encoding="utf-8"), fl["floor"], floor_comment(fl, source), dst)
    write_new(dst, text, force=False)
    return f"floor written to {out}: gates.min_accept_length: {fl['floor']} ({floor_comment(fl, source)})"
