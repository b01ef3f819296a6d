"""Which files are vLLM's hidden-state extraction files, named without torch.

:mod:`eagle3_conformance.tools.vllm_hidden_states` reads them (torch, safetensors); the data scan tells
the layout apart (:func:`eagle3_conformance.scan.formats.detect_format`) with the names here, so that
detection imports on a core-only install (newuser finding 7).
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

from eagle3_conformance.core.errors import DataError

PATH = "training-vllm"  # "training*": judged as training data (dtype, positions), stored
"""Finding path of the files read by :mod:`eagle3_conformance.tools.vllm_hidden_states`."""

SUFFIX = ".safetensors"
"""What vLLM's example connector names each request's file: ``{req_id}.safetensors``."""


def _natural(p: Path) -> tuple[object, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(p)))


def find_files(spec: str | Path) -> list[Path]:
    """The ``*.safetensors`` files named by a directory (searched recursively), one file, or a glob,
    in natural order (``req-2`` before ``req-10``).

    Raises:
        DataError: nothing matches.
    """
    p = Path(spec)
    if p.is_dir():
        files = [q for q in p.rglob(f"*{SUFFIX}") if q.is_file()]
        if not files:
            raise DataError(f"{p}: no *{SUFFIX} files in this directory")
    elif p.is_file():
        files = [p]
    else:
        files = [Path(q) for q in glob.glob(str(spec), recursive=True) if Path(q).is_file()]
        if not files:
            raise DataError(f"{spec}: no such file or directory, and no file matches it as a glob")
    return sorted(files, key=_natural)
