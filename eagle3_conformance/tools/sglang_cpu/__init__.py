"""Internal: a CPU stand-in, no stable API (docs/architecture.md, "The self-test wall").

SGLang's real target and EAGLE-3 draft classes in-process on CPU (0.5.23; 0.5.14): what reaches
the draft on extend (prefill) and on decode (target verify, then the draft extend after verify).

- :mod:`~eagle3_conformance.tools.sglang_cpu.harness`: :class:`SGLangCPUHarness` (build with SGLang's
  own loader, resolver and setter; ``extend`` / ``verify`` -> Captures), and
  :func:`shared_harness`, the one harness per process the paths share; its decode path
  (``verify``) is :mod:`~eagle3_conformance.tools.sglang_cpu.verify_path`, its forward errors
  :mod:`~eagle3_conformance.tools.sglang_cpu.errors`;
- :mod:`~eagle3_conformance.tools.sglang_cpu.runtime`: the process, the stand-in attention and pools;
- :mod:`~eagle3_conformance.tools.sglang_cpu.releases`: one branch per served SGLang release for the
  steps whose code moved between releases (ServerArgs publishing, the id reader and apply step);
- ``NOTES.md``: what runs, timings, and the SGLang facts confirmed.
"""

from eagle3_conformance.tools.sglang_cpu.harness import (
                                                         DraftForwardError,
                                                         SGLangCPUHarness,
                                                         TargetForwardError,
                                                         shared_harness,
)
from eagle3_conformance.tools.sglang_cpu.runtime import sglang_version

__all__ = ["DraftForwardError", "SGLangCPUHarness", "TargetForwardError", "shared_harness", "sglang_version"]
