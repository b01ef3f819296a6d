"""EAGLE-3 draft-boundary conformance: contracts, reference capture, path adapters, checks.

Importing this package is cheap: torch, transformers, speculators and SGLang are imported only by
the modules that need them (reference capture and path adapters).
"""

__version__ = "0.1.0"
