"""A speculators dataset directory as ``datasets`` ``save_to_disk`` writes it (speculators 0.9.0
``data_generation`` saves its Arrow table that way; ``datasets`` arrow_dataset.py
``Dataset.save_to_disk``): which files mark one, and why ``load_from_disk`` refused one, naming the file."""

from __future__ import annotations

import json
from pathlib import Path

ARROW_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
"""Files ``datasets.load_from_disk`` looks for (datasets 5.1.0 ``load.py:1742-1746``: DATASET_INFO_FILENAME
+ DATASET_STATE_JSON_FILENAME, or DATASETDICT_JSON_FILENAME). Any one of them, or a top-level
``*.arrow`` file, makes a directory a speculators dataset for detection
(:mod:`eagle3_conformance.scan.formats`), so that a dataset whose table is damaged (say ``state.json``
lost) is reported as such rather than read as bare files."""


def arrow_load_error(d: Path, e: Exception) -> str:
    """Why ``datasets.load_from_disk`` refused ``d``, in one line naming the file where it can:
    datasets reports a malformed marker file as a bare JSON error without its name, so each of
    :data:`ARROW_MARKERS` is parsed here and the first that is no JSON is named with its line and
    column (``"<file>:<line>: not JSON (<why>, column <c>); ..."``); otherwise
    ``"<d>: not a speculators Arrow dataset: <e>"``."""
    for name in ARROW_MARKERS:
        f = Path(d) / name
        try:
            json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError as je:
            return f"{f}:{je.lineno}: not JSON ({je.msg}, column {je.colno}); datasets cannot load the dataset"
        except (OSError, UnicodeDecodeError):
            continue
    return f"{d}: not a speculators Arrow dataset: {e}"
