"""What builds the project's own pairs, corpora and the trained draft (not user-facing): the
fixture specs and their builders, the real-model fixtures, the model cache, the corpus, the data
generator, self-distillation and the shipped trained draft. ``fixture_base`` and ``model_cache``
sit in the lowest layer (tests/layers.py): the contract's fixture check and the engine tools read them."""
