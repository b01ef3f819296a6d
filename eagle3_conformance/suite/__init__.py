"""The conformance suite: the pytest plugin (``plugin``, the ``pytest11`` entry point), the session
and its runner, the (target, draft) pairs, hypothesis profiles and strategies, and the assessment
of a pair's paths (``assess``)."""
