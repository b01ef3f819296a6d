"""Internal: a CPU stand-in, no stable API (docs/architecture.md, "The self-test wall").

What the CPU harnesses of the engines share (:class:`eagle3_conformance.tools.sglang_cpu.harness.SGLangCPUHarness`,
:class:`eagle3_conformance.tools.vllm_cpu.harness.VLLMCPUHarness`): construction timed, the draft
directory copied with the layer ids written where the engine reads them (``draft_ids_key``), a
failed build closed at once, the copy removed on close, and use as a context manager. Each
harness adds its engine's own process set-up and teardown around this."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Optional


class CPUHarnessLifecycle:
    """Mixin of a CPU harness: call :meth:`_start` first in ``__init__``, :meth:`_finish_build`
    last (it runs the harness's ``_build``); override :meth:`close` calling ``super().close()``.

    Class attributes:
        DRAFT_IDS_PREFER: where :func:`eagle3_conformance.draft_config.draft_dir.with_ids_at` writes the ids when
            the config has neither place (``"nested"``: SGLang's ``eagle_config``; ``"top_level"``: vLLM).
        DRAFT_COPY_PREFIX: prefix of the temporary draft copy's folder.

    Attributes:
        timings: wall seconds of ``build`` and of the last forward of each kind.
        target_dir, draft_dir (the copy when ids were written), dtype, draft_ids_key, closed.
    """

    DRAFT_IDS_PREFER = "nested"
    DRAFT_COPY_PREFIX = "cpu_harness_draft_"

    def _start(self, target_dir: str | Path, draft_dir: str | Path, dtype, draft_ids_key: Optional[str]) -> None:
        self.closed = False
        self._t0 = time.perf_counter()
        self.timings: dict[str, float] = {}
        self.target_dir = Path(target_dir)
        self.dtype = dtype
        self._tmpdir: Optional[str] = None
        self.draft_dir = self._maybe_rewrite_draft(Path(draft_dir), draft_ids_key)
        self.draft_ids_key = draft_ids_key

    def _maybe_rewrite_draft(self, draft_dir: Path, key: Optional[str]) -> Path:
        if key is None:
            return draft_dir
        from eagle3_conformance.draft_config.draft_dir import with_ids_at

        out = with_ids_at(draft_dir, key, prefer=self.DRAFT_IDS_PREFER, prefix=self.DRAFT_COPY_PREFIX)
        self._tmpdir = str(out)
        return out

    def _build(self) -> None:
        """Build the harness's runtime (each harness defines it; :meth:`_finish_build` runs it)."""
        raise NotImplementedError

    def _finish_build(self) -> None:
        """Run ``self._build()``; on any failure close the harness and re-raise; record ``build``."""
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        self.timings["build"] = time.perf_counter() - self._t0

    def close(self) -> None:
        """Remove the rewritten draft copy (idempotent)."""
        self.closed = True
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"{type(self).__name__} is closed (a newer harness replaced it?)")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
