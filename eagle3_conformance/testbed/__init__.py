"""Internal: the project's test bed, no stable API (docs/architecture.md, "The self-test wall").

What builds the project's own pairs, corpora and the trained draft (not user-facing): the
fixture specs and their builders, the real-model fixtures, the model cache, the corpus, the data
generator, self-distillation and the shipped trained draft. What the contract and the reference read
of it, the fixture lookup and the model cache's root, is :mod:`eagle3_conformance.environment.fixture_specs`
and :mod:`eagle3_conformance.environment.cache` (re-exported by ``fixture_base`` and ``model_cache``):
nothing that judges imports this package (tests/test_structure.py)."""
