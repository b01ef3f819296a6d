"""The package's layers, lowest first (docs/architecture.md draws the same picture): a module may
import modules of its own layer or of a lower one, never of a higher one (tests/test_structure.py).

Data, not code: each layer lists module prefixes, and a module takes the layer of its longest
matching prefix, so a package moved whole (``contract/``, ``reference/``, ``acceptance/``,
``testbed/``, ``report/``, ``diagnose/``) needs only its prefix here, and a module that must stay
lower than its package (``acceptance.stats``, read by the engine tools) is listed on its own.
Prefixes of packages that do not exist yet are allowed; every existing module must match one."""

from __future__ import annotations

P = "eagle3_conformance"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # what everything may use: names, errors, findings, small pure helpers; nothing here imports upward
    ("foundation", (P, f"{P}.notation", f"{P}.errors", f"{P}.findings", f"{P}.report.findings",
                    f"{P}.installed", f"{P}.engines", f"{P}.shipped", f"{P}.torch_env", f"{P}.profiles",
                    f"{P}.validated", f"{P}.gates", f"{P}.capture", f"{P}.batches", f"{P}.strategies",
                    f"{P}.acceptance_stats", f"{P}.acceptance.stats", f"{P}.fixture_base",
                    f"{P}.testbed.base", f"{P}.testbed.fixture_base", f"{P}.model_cache",
                    f"{P}.testbed.model_cache", f"{P}.reference.model_cache", f"{P}.ray_tasks")),
    # the engines as the project observes them, and their id rules: no contract, no judgement
    ("engines", (f"{P}.tools", f"{P}.engine_ids", f"{P}.released", f"{P}.cpu_harness", f"{P}.fp8_payload",
                 f"{P}.draft_dir", f"{P}.dflash_fallback", f"{P}.final_boundary", f"{P}.config_ids",
                 f"{P}.draft_norms")),
    # what a contract is: models, YAML loading, semantic validation, the family rules
    ("contract", (f"{P}.contract", f"{P}.families")),
    # the oracle: the target's residual stream from transformers
    ("reference", (f"{P}.reference", f"{P}.engine_reference")),
    # what builds the project's own pairs, corpora and the trained draft (not user-facing)
    ("testbed", (f"{P}.testbed", f"{P}.fixtures", f"{P}.fixtures_real", f"{P}.corpus", f"{P}.datagen",
                 f"{P}.trained_draft", f"{P}.self_distill",
                 f"{P}.tools.sglang_engine.mla_pair")),  # builds the project's MLA pair from the testbed's fixtures
    # pure judgement: checks, the data checks, diagnoses, the report renderers
    ("judging", (f"{P}.checks", f"{P}.datacheck", f"{P}.assess", f"{P}.acceptance_estimate",
                 f"{P}.acceptance.estimate", f"{P}.diagnose", f"{P}.report", f"{P}.htmlreport")),
    # running contracts: pairs, paths, sessions, data scans, merging, acceptance measurements
    ("running", (f"{P}.pairs", f"{P}.paths", f"{P}.session", f"{P}.runner", f"{P}.scan", f"{P}.merge",
                 f"{P}.report.merge", f"{P}.acceptance", f"{P}.acceptance_attribution", f"{P}.server_accept",
                 f"{P}.server_captures")),
    # what the commands do: authoring, validate's local configs, upgrade-check, the kill matrix
    ("commands", (f"{P}.authoring", f"{P}.local_configs", f"{P}.upgrade", f"{P}.faults")),
    # the front doors: the command line, the pytest plugin, the server launcher
    ("front", (f"{P}.cli", f"{P}.plugin", f"{P}.serve")),
]


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s longest matching prefix; -1 when none matches."""
    best, found = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, found = len(p), i
    return found
