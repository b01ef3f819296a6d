"""The conformance suite's hypothesis profiles, under the project's own names.

``conformance-ci`` (5 drawn examples per path, derandomized: the default), ``conformance-dev``
(60, random) and ``conformance-gpu`` (4, derandomized). The pytest plugin chooses one with
``--conformance-profile ci|dev|gpu``; :func:`eagle3_conformance.suite.session.drive` applies it to the suite's
own search only. Nothing here is loaded as hypothesis' global default: a user's own hypothesis
tests in the same session keep their settings. The project's own tests load ``conformance-ci``
for themselves (tests/conftest.py). Importing this module imports nothing; hypothesis is imported
when a profile is asked for.

Derandomized means the same draws on every machine and every install: hypothesis (6.131 and
later, ``hypothesis/internal/conjecture/providers.py``) also draws, at a 5% chance per choice,
integer and string literals it finds in the source of every *local* module loaded (anything
outside site-packages and the standard library: this package when installed editable, a user's
own project). Under that rule adding one literal anywhere changed which prompts the suite drew,
and an editable install drew other inputs than a wheel. :func:`source_independent_draws` leaves
that pool empty while the suite's own derandomized search runs (and only then).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from hypothesis import settings

PREFIX = "conformance-"

PROFILES: dict[str, dict[str, Any]] = {
    "ci": dict(max_examples=5, derandomize=True, deadline=None, database=None, print_blob=True),
    "dev": dict(max_examples=60, deadline=None, derandomize=False),
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


def get(name: str) -> settings:
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


@contextlib.contextmanager
def source_independent_draws() -> Iterator[bool]:
    """Within the block, hypothesis draws no literal collected from local modules' source
    (``providers._get_local_constants`` returns an empty pool; the filtered-constant cache is
    cleared on entry and on exit so nothing collected before or inside leaks across). Restores
    hypothesis' own function on exit, so a user's hypothesis tests in the same session are
    untouched. Yields True when the pool was emptied, False on a hypothesis without local
    constants (before 6.131: nothing to do)."""
    from hypothesis.internal.conjecture import providers

    own = getattr(providers, "_get_local_constants", None)
    cache = getattr(getattr(providers, "CONSTANTS_CACHE", None), "cache", None)
    if own is None or cache is None or not hasattr(cache, "clear") or not hasattr(providers, "Constants"):
        yield False  # no local constants in this hypothesis (or laid out otherwise: tests/test_profiles.py)
        return
    empty = providers.Constants()
    providers._get_local_constants = lambda: empty
    cache.clear()
    try:
        yield True
    finally:
        providers._get_local_constants = own
        cache.clear()
