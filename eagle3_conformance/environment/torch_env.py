"""Process start-up for code that imports torch (and, through it, transformers / SGLang).

PyPI's torchvision wheels are CUDA builds; beside a CPU torch their C++ operator schemas
(``torchvision::nms``, ``torchvision::qnms``) do not exist, and importing torchvision (which
transformers does lazily, and ``sglang.srt.configs`` eagerly) fails with "operator
torchvision::nms does not exist". Defining the two schemas through ``torch.library`` before the
first import fixes this for the whole process (docs/REFERENCE.md section 4).
The project's code calls :func:`prepare` once, before importing transformers, speculators or SGLang; any
other process of the project's environments (a user's own script) gets the schemas from the start-up
hook :mod:`eagle3_conformance.environment.torchvision_hook` (:func:`define_torchvision_schemas`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import warnings
from typing import Iterator, Optional

_done = False

DTYPE_NAMES = ("float32", "bfloat16", "float16")
"""The floating dtypes a contract names (``target.dtype``, ``data_dtype``) and a reference runs in."""


def torch_dtype(name: str):
    """The torch dtype of a contract dtype name: ``"bfloat16"`` -> ``torch.bfloat16`` (one of
    :data:`DTYPE_NAMES`). Raises KeyError for another name."""
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def dtype_name(t) -> str:
    """A tensor's (or a torch dtype's) name as a contract spells it: ``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(getattr(t, "dtype", t)).replace("torch.", "")


MAX_THREADS = 1024
"""Largest thread count accepted from ``CONFORMANCE_TORCH_THREADS`` (torch crashes creating
100,000 threads; no machine this runs on has more than a few hundred cores)."""


#: SpecForge 0.2.0's draft module warns at import when flash_attn is absent
#: (specforge/modeling/draft/llama3_eagle.py:32-36): always so on CPU, and none of the SpecForge code
#: this project calls (offline loader chain, TargetHead.preprocess, DFlash feature extraction) uses it
SPECFORGE_FLASH_ATTN_WARNING = "flash_attn is not found, falling back to flex_attention"


@contextlib.contextmanager
def quiet_specforge_import() -> Iterator[None]:
    """Around an ``import specforge...`` only: hides SpecForge's flash_attn-absent UserWarning
    (:data:`SPECFORGE_FLASH_ATTN_WARNING`), which otherwise lands in every report's output; any other
    warning still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=SPECFORGE_FLASH_ATTN_WARNING, category=UserWarning)
        yield


def threads_from_env() -> Optional[int]:
    """``CONFORMANCE_TORCH_THREADS`` as an int; None when unset or empty.

    Raises:
        ValueError: set to anything but an integer in 1..:data:`MAX_THREADS` (message names it).
    """
    raw = os.environ.get("CONFORMANCE_TORCH_THREADS", "")
    if raw == "":
        return None
    v = raw.strip()
    if not (v.isascii() and v.isdigit()) or not 1 <= int(v) <= MAX_THREADS:
        raise ValueError(f"CONFORMANCE_TORCH_THREADS={raw!r}: expected an integer from 1 to {MAX_THREADS} "
                         "(torch threads of every op of this package; unset it for the default)")
    return int(v)


def prepare() -> None:
    """Define torchvision's operator schemas if torchvision is installed and they are missing.

    Idempotent. Also silences tokenizer fork warnings and sets torch's intra-op threads to
    ``CONFORMANCE_TORCH_THREADS`` (default 1; a value :func:`threads_from_env` refuses is ignored
    here, never raised at import, and refused by the command line with exit 2): the fixture
    models are tiny, and on a busy 2-core machine OpenMP's spin-waiting made a 64-wide forward
    take 2 s with 2 threads instead of 8 ms with 1 (measured). Sets ``OMP_WAIT_POLICY=PASSIVE`` unless
    set (only effective when torch is not imported yet). Raises nothing; an environment without
    torchvision, or without torch (a core-only install), is left alone.
    """
    global _done
    if _done:
        return
    _done = True
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # library progress bars and advisories would interleave with the report
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # OpenMP threads sleep between parallel regions instead of spinning (read once, when torch loads
    # its OpenMP runtime): with spinning, on a busy 2-core machine every small op of the check-data scan
    # run with 2 threads took about 13 ms instead of 27 us, and its RMS pass ran at 2-8 GB/s instead of
    # 18 (benchmarks/bench_check_data.py; docs/scaling.md). A value the user set is kept.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import logging
    import warnings

    for name in ("sglang", "datasets", "transformers", "speculators", "httpx"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"(sglang|transformers|datasets|triton|requests)(\..*)?$")
    try:
        import torch
    except ImportError:  # a core-only install: nothing to set; what needs torch says so when it runs
        return

    try:
        threads = threads_from_env()
    except ValueError:  # reported by the command line (exit 2); never raise at import
        threads = None
    torch.set_num_threads(threads or 1)
    define_torchvision_schemas()


def _cuda_torchvision_beside_cpu_torch() -> bool:
    """torch is a CPU build and the installed torchvision a CUDA build (its ``version.py`` says ``+cu``),
    read without importing torchvision: its operator library cannot load here."""
    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations or torch.version.cuda is not None:
        return False
    from pathlib import Path

    try:
        text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text()
    except OSError:
        return False
    return "+cu" in text


def define_torchvision_schemas() -> None:
    """Define ``torchvision::nms`` / ``torchvision::qnms`` through ``torch.library`` when torchvision is a
    CUDA build beside a CPU torch (its ``_C.so`` cannot load, and its import raises "operator
    torchvision::nms does not exist" without them); otherwise nothing. Idempotent; raises nothing.
    Called by :func:`prepare` and, in any process of the project's environments, by the start-up hook
    :mod:`eagle3_conformance.environment.torchvision_hook` on the first ``import torchvision``."""
    if not _cuda_torchvision_beside_cpu_torch():
        return
    import torch

    for op in ("nms", "qnms"):
        try:
            torch.library.define(
                f"torchvision::{op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
            )
        except RuntimeError:
            pass  # already defined (a second call, or the hook ran first)


class _LazyTorch:
    """``torch``, imported at its first use. The checks package (and :mod:`eagle3_conformance.core.capture`)
    binds this as ``torch`` so that importing it needs no torch: the checks a core install runs on the
    engines' own counters (``accept``'s acceptance and regression checks, ``merge-reports``' JSON) load
    there, and a check that does use tensors raises ``ModuleNotFoundError: No module named 'torch'``
    when it runs (the CLI says which extra to install). Type checkers see the real module
    (``if TYPE_CHECKING: import torch``)."""

    def __getattr__(self, name: str):
        if "_mod" not in self.__dict__:
            import torch

            self.__dict__["_mod"] = torch
        return getattr(self.__dict__["_mod"], name)

    def __repr__(self) -> str:
        return "<torch, imported at first use>"


lazy_torch = _LazyTorch()
