"""What is installed: a distribution's version from its package metadata, without importing it
(``importlib.metadata``), so asking costs no engine import."""

from __future__ import annotations

from typing import Optional


def installed_version(distribution: str) -> Optional[str]:
    """The installed version of ``distribution`` (``"sglang"``, ``"vllm"``, ``"specforge"``), or
    None when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None
