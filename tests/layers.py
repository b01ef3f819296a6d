"""The package's layers, lowest first (docs/architecture.md draws the same picture): a module may
import modules of its own layer or of a lower one, never of a higher one (tests/test_structure.py).

Data, not code: each layer lists module prefixes, and a module takes the layer of its longest
matching prefix, so a package (``contract/``, ``reference/``, ``testbed/``, ...) needs only its
prefix here, and a module that must stay lower than its package is listed on its own
(``acceptance.stats`` and ``reference.greedy``, read by the engine tools; ``testbed.fixture_base``
and ``testbed.model_cache``, read by the contract's fixture check and the released-code fetcher;
``suite.plugin`` and ``serving.serve``, front doors above their packages). A
lower module imports such a module by its full name (``from eagle3_conformance.testbed.model_cache
import ...``), never through its package. Every existing module must match a prefix."""

from __future__ import annotations

P = "eagle3_conformance"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # what everything may use: names, errors, findings, what is installed, small pure helpers
    ("foundation", (P, f"{P}.core", f"{P}.environment", f"{P}.acceptance.stats", f"{P}.acceptance.decision",
                    f"{P}.testbed.fixture_base",
                    f"{P}.testbed.model_cache", f"{P}.reference.greedy")),
    # the engines as the project observes them, their id rules, what they read from a draft config
    ("engines", (f"{P}.tools", f"{P}.engine_ids", f"{P}.released", f"{P}.draft_config")),
    # what a contract is: models, YAML loading, semantic validation, the family rules
    ("contract", (f"{P}.contract",)),
    # the oracle: the target's residual stream from transformers
    ("reference", (f"{P}.reference",)),
    # what builds the project's own pairs, corpora and the trained draft (not user-facing)
    ("testbed", (f"{P}.testbed",
                 f"{P}.tools.sglang_engine.mla_pair")),  # builds the project's MLA pair from the testbed's fixtures
    # pure judgement: checks, the data checks, diagnoses, the report renderers
    ("judging", (f"{P}.checks", f"{P}.suite.assess", f"{P}.acceptance.estimate", f"{P}.diagnose", f"{P}.report",
                 f"{P}.htmlreport")),
    # running contracts: pairs, paths, sessions, data scans, merging, acceptance measurements, servers
    ("running", (f"{P}.suite", f"{P}.paths", f"{P}.scan", f"{P}.report.merge", f"{P}.acceptance",
                 f"{P}.server_accept", f"{P}.serving", f"{P}.monitor")),
    # what the commands do: authoring, validate's local configs, upgrade-check, the kill matrix
    ("commands", (f"{P}.authoring", f"{P}.upgrade", f"{P}.faults")),
    # the front doors: the command line, the pytest plugin, the server launcher
    ("front", (f"{P}.cli", f"{P}.suite.plugin", f"{P}.serving.serve")),
]


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s longest matching prefix; -1 when none matches."""
    best, found = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, found = len(p), i
    return found
