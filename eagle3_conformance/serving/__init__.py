"""A real inference server under test: the launcher (``python -m eagle3_conformance.serving.serve``)
and the captures read back from a running server (``captures``)."""
