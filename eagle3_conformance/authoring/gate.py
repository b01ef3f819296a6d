"""The one contract gate: ``eagle3-conformance validate``'s checks, applied by every door that takes a
contract (issue 41 item 1).

A contract passes the gate when it is consistent in itself (schema and semantics,
:func:`eagle3_conformance.contract.validation.semantic_problems`), its ``fixture`` names a fixture
(:func:`eagle3_conformance.contract.validation.fixture_problems`), it agrees with the ``config.json``
files at its ``target.path`` / ``draft.path`` where those are on this machine, the draft config's aux
ids read by the engine's own rule included
(:func:`eagle3_conformance.authoring.local_configs.config_problems`), and it does not declare an aux
slot SGLang drops (:func:`eagle3_conformance.engine_ids.final_boundary.final_boundary_problems`).

The doors: ``validate``, ``init`` (on the text it would write, before writing it), and every verb that
runs a contract (``serve-hooks``, ``check-captures``, ``check-data``, ``check-offline``, ``accept``,
``calibrate``, ``translate``, ``upgrade-check``, ``merge-reports --contract``) through
:func:`eagle3_conformance.cli.common.load_contract`, and the pytest plugin (``pytest -m conformance``,
its ``conformance_contracts`` fixture). They all call :func:`gated_contract` (or :func:`gated_text`),
so a contract is refused everywhere with the same lines (:func:`refusal_lines`), or nowhere.

No weights are read and nothing imports torch (the draft config's ids are read with the installed
SGLang's rule only where the contract names SGLang, as ``validate`` does).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle3_conformance.authoring.local_configs import config_problems, unchecked_paths
from eagle3_conformance.engine_ids.final_boundary import final_boundary_problems

if TYPE_CHECKING:
    from eagle3_conformance.contract import Contract, ContractError

GATE_CHECKS = (config_problems, final_boundary_problems)
"""The checks past the contract's own consistency, in the order ``validate`` reports them."""


def gated_contract(path: str | Path) -> Contract:
    """The contract at ``path``, once it passes every check of ``validate``.

    Raises:
        eagle3_conformance.contract.ContractError: the file does not load, or a check refuses it;
            every problem carries its key path and the contract's line (:func:`refusal_lines`).
    """
    from eagle3_conformance.contract import load_contract

    return load_contract(path, known_fixture=True, checks=GATE_CHECKS)


def gated_text(text: str, file: str | Path) -> Contract:
    """The contract ``text`` that would be written to ``file`` (not read; relative ``target.path`` /
    ``draft.path`` are taken relative to it), once it passes every check of ``validate``: what
    ``init`` runs before it writes anything.

    Raises:
        eagle3_conformance.contract.ContractError: as :func:`gated_contract`, lines counted in ``text``.
    """
    from eagle3_conformance.contract import parse_contract

    return parse_contract(text, str(file), known_fixture=True, checks=GATE_CHECKS, source=Path(file))


def refusal_lines(e: ContractError, path: str | Path) -> list[str]:
    """What every door prints for a refused contract: one ``file:line:column: key: message`` line per
    problem (``validate``'s own lines), then, for a DFlash contract whose draft config has no tap ids,
    what each engine's fallback resolves to (R58)."""
    from eagle3_conformance.draft_config.dflash_fallback import absent_ids_note

    out = [p.format(e.file) for p in e.problems]
    note = absent_ids_note(str(path), e.problems)
    if note:
        out.append(f"{e.file}: {note}")
    return out


def gate_warnings(c: Any) -> list[str]:
    """What the gate could not check, one line each: a ``target.path`` / ``draft.path`` holding no
    ``config.json`` on this machine (a typo turns the config cross-check off silently otherwise)."""
    return unchecked_paths(c)
