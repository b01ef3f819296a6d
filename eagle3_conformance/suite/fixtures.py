"""The pytest plugin's fixtures for hand-written tests (registered by :mod:`eagle3_conformance.suite.plugin`,
which imports them): ``conformance_contracts``, ``conformance_reference``, ``conformance_training_captures``."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def conformance_contracts(pytestconfig):
    """The contracts named by ``--contract`` (default: every contract under ./contracts), each through the
    contract gate every verb applies; a refused one fails the test with ``validate``'s lines."""
    from eagle3_conformance.authoring.gate import gated_contract, refusal_lines
    from eagle3_conformance.contract import ContractError

    paths = pytestconfig.getoption("--contract") or sorted(
        str(p) for p in (Path(pytestconfig.rootpath) / "contracts").glob("*.yaml"))
    try:
        return [gated_contract(p) for p in paths]
    except ContractError as e:
        pytest.fail("\n".join(refusal_lines(e, e.file)), pytrace=False)


@pytest.fixture(scope="session")
def conformance_reference():
    """``f(contract) -> ReferenceModel`` for the contract's local target (skips when unavailable)."""
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.suite.pairs import PairUnavailable, resolve_pair

    def get(contract):
        try:
            pair = resolve_pair(contract)
        except PairUnavailable as e:
            pytest.skip(str(e))
        return load_reference_model(pair.target_dir, contract.target)

    return get


@pytest.fixture(scope="session")
def conformance_training_captures():
    """``f(contract, indices) -> list[Capture]`` through the real speculators loader."""
    from eagle3_conformance.suite.pairs import PairUnavailable, resolve_pair, torch_dtype
    from eagle3_conformance.tools.speculators_loader import TrainingLoader

    def get(contract, indices):
        try:
            pair = resolve_pair(contract)
        except PairUnavailable as e:
            pytest.skip(str(e))
        loader = TrainingLoader(pair.data_dir, contract.draft.target_hidden_size, contract.num_slots,
                                torch_dtype(contract.data_dtype), transfer=contract.training.transfer)
        return loader.batch(indices)

    return get
