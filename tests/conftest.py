"""Shared fixtures for the project's own tests: the embedded tiny-llama pair, its contract, the
reference model and good captures read through the real speculators loader."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from eagle3_conformance.environment import torch_env
from eagle3_conformance.suite import profiles

torch_env.prepare()
# pytester's in-process runs (runpytest) restore sys.modules afterwards: a package module first
# imported inside such a run is dropped, and the next import makes a second copy of its classes
# (isinstance(Boundary) then fails in a later in-process CLI call). Import the package's pure
# modules once here so every in-process run shares them.
for _name in ("core.notation", "contract", "engine_ids", "core.findings", "report", "diagnose", "checks"):
    importlib.import_module(f"eagle3_conformance.{_name}")
# The project's own hypothesis tests run under the suite's ci profile (5 examples, derandomized)
# unless --hypothesis-profile names another (conformance-dev, ...). The plugin loads no profile
# into a session: this is the project's choice for its own tests.
profiles.register()


def _project_markers() -> list[str]:
    """The markers pyproject.toml registers ([tool.pytest.ini_options] markers): the one list."""
    import tomllib

    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["pytest"]["ini_options"]["markers"]


def pytest_configure(config):
    # pytest takes a `--contract PATH` value for a path when it looks for its rootdir and ini file
    # (it parses the command line before the plugin adds the option): `pytest -m conformance
    # --contract /elsewhere/c.yaml` run from the checkout reads no pyproject.toml, and every
    # `@pytest.mark.slow` would warn "Unknown pytest.mark.slow". This conftest is loaded before the
    # test modules in either case, so it registers the project's markers itself when they are missing.
    known = {line.split(":", 1)[0].strip() for line in config.getini("markers")}
    for line in _project_markers():
        if line.split(":", 1)[0].strip() not in known:
            config.addinivalue_line("markers", line)
    if not config.getoption("hypothesis_profile", None):
        from hypothesis import settings

        settings.load_profile(profiles.PREFIX + "ci")
    # CI fails on a skip that is not on tests/expected_skips.txt (tox.ini names the section)
    from expected_skips import register

    register(config)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def tiny():
    from eagle3_conformance.testbed.fixtures import build_fixture

    return build_fixture("tiny-llama")


@pytest.fixture(scope="session")
def tiny_contract():
    from eagle3_conformance.contract import load_contract

    return load_contract(REPO / "contracts" / "tiny-llama.yaml")


@pytest.fixture(scope="session")
def tiny_ref(tiny):
    from eagle3_conformance.reference import load_reference_model

    return load_reference_model(tiny.target_dir)


@pytest.fixture(scope="session")
def tiny_loader(tiny, tiny_contract):
    import torch

    from eagle3_conformance.tools.speculators_loader import TrainingLoader

    return TrainingLoader(tiny.data_dir, tiny_contract.draft.target_hidden_size, tiny_contract.num_slots, torch.bfloat16)


@pytest.fixture(scope="session")
def good_caps(tiny_loader):
    """Captures of every sample with at least 4 tokens, through the real loader, one batch."""
    idx = [i for i in range(len(tiny_loader)) if len(tiny_loader.dataset_row(i)["input_ids"]) >= 4]
    return tiny_loader.batch(idx)


@pytest.fixture(scope="module")
def loop():
    """The SmolLM2-135M target and its shipped trained draft in one SGLang CPU harness (closed after the
    module), the reference model, 2 held-out prompts of 48 tokens and the checkpoint's d2t
    (tests/test_accept.py, tests/test_spec_loop_batch.py)."""
    pytest.importorskip("sglang")
    pytest.importorskip("speculators")
    import torch

    from eagle3_conformance.faults.acceptance import checkpoint_d2t
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.testbed.trained_draft import ensure_trained_draft, eval_prompts
    from eagle3_conformance.tools.sglang_cpu import SGLangCPUHarness

    td = ensure_trained_draft()
    h = SGLangCPUHarness(td.target_dir, td.draft_dir, dtype=torch.float32)
    yield dict(td=td, h=h, ref=load_reference_model(td.target_dir), prompts=eval_prompts(td.target_dir, 2, 48),
               d2t=checkpoint_d2t(td.draft_dir))
    h.close()


def tree_digest(root) -> str:
    """sha256 over every file under ``root`` (relative names and bytes): inputs must be unchanged."""
    import hashlib

    h = hashlib.sha256()
    for p in sorted(Path(root).rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def contract_with(contract, **changes):
    """A copy of ``contract`` with dotted-path fields replaced, validated through the model.

    Example: ``contract_with(c, **{"capture.boundaries": ["B_3","B_4","B_5"]})``.
    """
    from eagle3_conformance.contract import Contract

    data = contract.model_dump(mode="json")
    for dotted, value in changes.items():
        node = data
        parts = dotted.split(".")
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = value
    return Contract.model_validate(data)
