"""Process start-up for code that imports torch (and, through it, transformers / SGLang).

PyPI's torchvision wheels are CUDA builds; beside a CPU torch their C++ operator schemas
(``torchvision::nms``, ``torchvision::qnms``) do not exist, and importing torchvision (which
transformers does lazily, and ``sglang.srt.configs`` eagerly) fails with "operator
torchvision::nms does not exist". Defining the two schemas through ``torch.library`` before the
first import fixes this for the whole process (docs/REFERENCE.md section 4).
Call :func:`prepare` once, before importing transformers, speculators or SGLang.
"""

from __future__ import annotations

import importlib.util
import os

_done = False


def prepare() -> None:
    """Define torchvision's operator schemas if torchvision is installed and they are missing.

    Idempotent. Also silences tokenizer fork warnings and sets torch's intra-op threads to
    ``CONFORMANCE_TORCH_THREADS`` (default 1): the fixture models are tiny, and on a busy 2-core
    machine OpenMP's spin-waiting made a 64-wide forward take 2 s with 2 threads instead of 8 ms
    with 1 (measured). Raises nothing; an environment without torchvision is left alone.
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
    import logging
    import warnings

    for name in ("sglang", "datasets", "transformers", "speculators", "httpx"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"(sglang|transformers|datasets|triton|requests)(\..*)?$")
    import torch

    threads = os.environ.get("CONFORMANCE_TORCH_THREADS", "1")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    if importlib.util.find_spec("torchvision") is None:
        return
    for op in ("nms", "qnms"):
        try:
            torch.library.define(
                f"torchvision::{op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
            )
        except RuntimeError:
            pass  # already defined (a real CPU torchvision, or a second call)
