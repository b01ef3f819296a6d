"""The package's layers, lowest first (docs/architecture.md draws the same picture): a module may
import modules of its own layer or of a lower one, never of a higher one (tests/test_structure.py).

Data, not code: each layer lists module prefixes, and a module takes the layer of its longest
matching prefix, so a package (``contract/``, ``reference/``, ``testbed/``, ...) needs only its
prefix here, and a module that must stay lower than its package is listed on its own
(``acceptance.stats`` and ``reference.greedy``, read by the engine tools; ``suite.plugin`` and
``serving.serve``, front doors above their packages). A lower module imports such a module by its
full name (``from eagle3_conformance.reference.greedy import ...``), never through its package.
Every existing module must match a prefix. The test bed is one layer, whole: what the contract and
the reference read of it (the fixture lookup, the model cache's root) is ``environment/``
(``fixture_specs``, ``cache``), and :data:`SELF_TEST` below is what the judging layers never import."""

from __future__ import annotations

P = "eagle3_conformance"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # what everything may use: names, errors, findings, what is installed, small pure helpers
    ("foundation", (P, f"{P}.core", f"{P}.environment", f"{P}.acceptance.stats", f"{P}.acceptance.decision",
                    f"{P}.reference.greedy")),
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
    # the front doors: the command line, the pytest plugin (and its fixtures), the server launcher
    ("front", (f"{P}.cli", f"{P}.suite.plugin", f"{P}.suite.fixtures", f"{P}.serving.serve")),
]


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s longest matching prefix; -1 when none matches."""
    best, found = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, found = len(p), i
    return found


# --- the self-test wall (docs/architecture.md, "The self-test wall") ---------------------------------

JUDGING_LAYERS: tuple[str, ...] = tuple(f"{P}.{p}" for p in (
    "contract", "core", "checks", "diagnose", "report", "reference", "scan", "engine_ids"))
"""The packages that decide a verdict: what a contract is, the findings, the checks and diagnoses, the
report, the oracle, the data scan, the id rules. None of them imports :data:`SELF_TEST`, directly or
through another module (tests/test_structure.py)."""

SELF_TEST: tuple[str, ...] = tuple(f"{P}.{p}" for p in (
    "testbed",                              # the project's own pairs, corpora, trained draft
    "faults",                               # fault injection and the kill matrix
    "tools.sglang_cpu",                     # SGLang's classes in-process with the project's loop, attention, pools
    "tools.vllm_cpu.harness",               # vLLM's classes in-process with the project's worker loop
    "tools.vllm_cpu.runtime",               # ... and its stand-in attention kernel
    "tools.shared.cpu_harness",             # what the two CPU harnesses share
    "tools.sglang_engine.sgl_kernel_standin",  # sgl_kernel's ops for SGLang's CPU engine
    "tools.sglang_engine.patches",          # the patches config B needs on torch_native
    "tools.sglang_engine.site",             # the engine processes' start-up hook
    "tools.sglang_engine.mla_pair",         # the project's tiny MLA pair
    "tools.sglang_engine.random_draft",     # a random-weight draft for the project's config-only draft
    "tools.specgen.cpu_connector",          # vLLM's hidden-states connector made to run without CUDA
))
"""The project's self-test: its test bed, fault injection and CPU stand-ins (each module's docstring
begins "Internal:"). They ship in the wheel because installed verbs run them (docs/architecture.md),
but nothing that judges may depend on them. Not here: ``tools.vllm_cpu.ids`` (vLLM's own id readers,
asked by ``engine_ids.vllm``) and the rest of ``tools/`` (the real engines observed)."""
