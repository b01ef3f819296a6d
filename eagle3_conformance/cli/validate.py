"""``eagle3-conformance validate CONTRACT...``: schema and semantic validation, and the ``fixture`` a
contract names must exist (:func:`eagle3_conformance.contract.fixture_problems`), and the contract must agree with the
``config.json`` at its ``target.path`` / ``draft.path`` where those are on this machine
(:func:`eagle3_conformance.authoring.local_configs.config_problems`); exit 2 if any is invalid."""

from __future__ import annotations

import sys

from eagle3_conformance.cli.common import EXIT_BAD_INPUT, EXIT_OK, console, contract_deprecations


def add_parser(sub) -> None:
    v = sub.add_parser("validate", help="validate contract files (schema + semantics)")
    v.add_argument("contracts", nargs="+", metavar="CONTRACT")
    v.set_defaults(func=run)


def run(args) -> int:
    from eagle3_conformance.authoring.local_configs import config_problems, unchecked_paths
    from eagle3_conformance.contract import ContractError, load_contract
    from eagle3_conformance.engine_ids.final_boundary import final_boundary_notes, final_boundary_problems
    from eagle3_conformance.environment.shipped import checkout_fixture_note
    from eagle3_conformance.environment.validated import installed_versions, never_validated_warning

    con = console()
    installed = installed_versions()
    bad = 0
    for p in args.contracts:
        try:
            with contract_deprecations():
                c = load_contract(p, known_fixture=True, checks=(config_problems, final_boundary_problems))
        except ContractError as e:
            bad += 1
            for prob in e.problems:
                con.print(f"[red]{prob.format(e.file)}[/red]")
            from eagle3_conformance.draft_config.dflash_fallback import absent_ids_note

            note = absent_ids_note(p, e.problems)  # R58: what each engine's DFlash fallback resolves to
            if note:
                print(f"{e.file}: {note}")
            continue
        bands = c.norm_bands.status
        con.print(f"[green]ok[/green] {p}: {c.name}: aux {c.capture.boundaries} + verifier "
                  f"{c.verifier_last.tensor}, width {c.capture.feature_width}, bands {bands}")
        for line in final_boundary_notes(c):  # issue 37: what each engine does with an id = L
            con.print(f"  note: {line}", markup=False)
        note = checkout_fixture_note(c.fixture)
        if note:
            con.print(f"  note: {note}", markup=False)
        for line in unchecked_paths(c):  # a typo in a path must not silently turn the cross-check off
            print(f"warning: {p}: {line}", file=sys.stderr)
        warn = never_validated_warning(c, installed)
        if warn:
            print(f"warning: {p}: {warn} (a passing `pytest -m conformance --conformance-json` run writes the "
                  "record to paste into engines: meta.validated_on)", file=sys.stderr)
    return EXIT_BAD_INPUT if bad else EXIT_OK
