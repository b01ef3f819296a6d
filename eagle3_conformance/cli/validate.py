"""``eagle3-conformance validate CONTRACT...``: the contract gate every verb applies
(:func:`eagle3_conformance.authoring.gate.gated_contract`: schema and semantic validation, the ``fixture`` a
contract names must exist, and the contract must agree with the ``config.json`` at its ``target.path`` /
``draft.path`` where those are on this machine), with what it found in words; exit 2 if any is refused."""

from __future__ import annotations

import sys

from eagle3_conformance.cli.common import add_contract_arguments, console, contract_args, contract_deprecations
from eagle3_conformance.core.exit_codes import ExitCode


def add_parser(sub) -> None:
    v = sub.add_parser("validate", help="validate contract files (schema + semantics + the configs they name)")
    add_contract_arguments(v, many=True)
    v.set_defaults(func=run)


def run(args) -> int:
    from eagle3_conformance.authoring.gate import gate_warnings, gated_contract, refusal_lines
    from eagle3_conformance.contract import ContractError
    from eagle3_conformance.engine_ids.final_boundary import final_boundary_notes
    from eagle3_conformance.environment.shipped import checkout_fixture_note
    from eagle3_conformance.environment.validated import installed_versions, never_validated_warning

    con = console()
    installed = installed_versions()
    bad = 0
    for p in contract_args(args, many=True):
        try:
            with contract_deprecations():
                c = gated_contract(p)
        except ContractError as e:
            bad += 1
            for line in refusal_lines(e, p):
                con.print(line, style="red", markup=False)
            continue
        bands = c.norm_bands.status
        con.print(f"[green]ok[/green] {p}: {c.name}: aux {c.capture.boundaries} + verifier "
                  f"{c.verifier_last.tensor}, width {c.capture.feature_width}, bands {bands}")
        for line in final_boundary_notes(c):  # issue 37: what each engine does with an id = L
            con.print(f"  note: {line}", markup=False)
        note = checkout_fixture_note(c.fixture)
        if note:
            con.print(f"  note: {note}", markup=False)
        for line in gate_warnings(c):  # a typo in a path must not silently turn the cross-check off
            print(f"warning: {p}: {line}", file=sys.stderr)
        warn = never_validated_warning(c, installed)
        if warn:
            print(f"warning: {p}: {warn} (a passing `pytest -m conformance --conformance-json` run writes the "
                  "record to paste into engines: meta.validated_on)", file=sys.stderr)
    return ExitCode.INPUT_ERROR if bad else ExitCode.CONFORMS
