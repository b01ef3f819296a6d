"""The files a ``--files`` / ``--data`` argument names: a directory (searched recursively), one file, or a
glob, in natural order. One walk for every reader that takes such an argument (vLLM's extraction files,
the offline ``.pt`` / ``.ckpt`` files), without torch.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path
from typing import Callable

from eagle3_conformance.core.errors import DataError


def natural(p: Path) -> tuple[object, ...]:
    """Sort key: ``req-2`` before ``req-10``."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(p)))


def find_files(spec: str | Path, in_dir: Callable[[Path], list[Path]], none_in_dir: str,
               error: type[DataError] = DataError) -> list[Path]:
    """The files ``spec`` names, in natural order: ``in_dir(spec)`` for a directory, ``[spec]`` for a file,
    else the files matching it as a (recursive) glob.

    Raises:
        ``error``: a directory where ``in_dir`` finds nothing (``"<dir>: <none_in_dir>"``), or a spec that is
            no file, no directory and matches no file.
    """
    p = Path(spec)
    if p.is_dir():
        files = in_dir(p)
        if not files:
            raise error(f"{p}: {none_in_dir}")
    elif p.is_file():
        files = [p]
    else:
        files = [Path(q) for q in glob.glob(str(spec), recursive=True) if Path(q).is_file()]
        if not files:
            raise error(f"{spec}: no such file or directory, and no file matches it as a glob")
    return sorted(files, key=natural)
