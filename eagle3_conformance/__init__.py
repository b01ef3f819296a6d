"""EAGLE-3 draft-boundary conformance: contracts, reference capture, path adapters, checks.

Importing this package is cheap: torch, transformers, speculators and SGLang are imported only by
the modules that need them (reference capture and path adapters).
"""

__version__ = "0.2.0"

# The module paths that moved in 0.2.0 stay importable, with a DeprecationWarning, until 0.3.0
# (docs/compatibility.md, eagle3_conformance/core/moved.py). The package root holds nothing else.
from eagle3_conformance.core import moved as _moved  # noqa: E402

_moved.install()
