"""Which files are vLLM's hidden-state extraction files, named without torch.

:mod:`eagle3_conformance.tools.vllm_hidden_states` reads them (torch, safetensors); the data scan tells
the layout apart (:func:`eagle3_conformance.scan.formats.detect_format`) with the names here, so that
detection imports on a core-only install (newuser finding 7).
"""

from __future__ import annotations

from pathlib import Path

from eagle3_conformance.tools.shared import file_spec

PATH = "training-vllm"  # "training*": judged as training data (dtype, positions), stored
"""Finding path of the files read by :mod:`eagle3_conformance.tools.vllm_hidden_states`."""

SUFFIX = ".safetensors"
"""What vLLM's example connector names each request's file: ``{req_id}.safetensors``."""


def find_files(spec: str | Path) -> list[Path]:
    """The ``*.safetensors`` files named by a directory (searched recursively), one file, or a glob,
    in natural order (``req-2`` before ``req-10``).

    Raises:
        DataError: nothing matches.
    """
    return file_spec.find_files(spec, lambda p: [q for q in p.rglob(f"*{SUFFIX}") if q.is_file()],
                                f"no *{SUFFIX} files in this directory")
