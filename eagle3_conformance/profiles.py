"""The conformance suite's hypothesis profiles, under the project's own names.

``conformance-ci`` (5 drawn examples per path, derandomized: the default), ``conformance-dev``
(60, random) and ``conformance-gpu`` (4, derandomized). The pytest plugin chooses one with
``--conformance-profile ci|dev|gpu``; :func:`eagle3_conformance.session.drive` applies it to the suite's
own search only. Nothing here is loaded as hypothesis' global default: a user's own hypothesis
tests in the same session keep their settings. The project's own tests load ``conformance-ci``
for themselves (tests/conftest.py). Importing this module imports nothing; hypothesis is imported
when a profile is asked for.
"""

from __future__ import annotations

from typing import Any

PREFIX = "conformance-"

PROFILES: dict[str, dict[str, Any]] = {
    "ci": dict(max_examples=5, derandomize=True, deadline=None, database=None, print_blob=True),
    "dev": dict(max_examples=60, deadline=None),
    "gpu": dict(max_examples=4, deadline=None, derandomize=True, database=None),
}
"""Short name -> hypothesis settings (every health check suppressed: the suite's examples are
model forwards, slow by design, and its strategies filter on purpose)."""


def register() -> None:
    """Register ``conformance-ci``, ``conformance-dev`` and ``conformance-gpu`` with hypothesis
    (idempotent; loads none of them)."""
    from hypothesis import HealthCheck, settings

    for name, kw in PROFILES.items():
        settings.register_profile(PREFIX + name, suppress_health_check=list(HealthCheck), **kw)


def get(name: str):
    """The hypothesis ``settings`` of profile ``name`` (``ci``, ``dev``, ``gpu``, or the full
    ``conformance-...`` name).

    Raises:
        KeyError: no such profile (the message lists them).
    """
    short = name[len(PREFIX):] if name.startswith(PREFIX) else name
    if short not in PROFILES:
        raise KeyError(f"no conformance profile {name!r}; known: {', '.join(PROFILES)}")
    from hypothesis import settings

    register()
    return settings.get_profile(PREFIX + short)
