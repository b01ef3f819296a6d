"""How the SGLang CPU harness fails: its one job is the errors a real SGLang forward raises through the
harness (:class:`DraftForwardError`, :class:`TargetForwardError`) and the SGLang line that raised
(:func:`_sglang_site`). Importable from :mod:`eagle3_conformance.tools.sglang_cpu.harness` as well."""

from __future__ import annotations

from eagle3_conformance.core.capture import Capture


class DraftForwardError(RuntimeError):
    """The real draft forward raised (e.g. fc got a K'*d-wide input it was not sized for).

    The failure stays loud, as in SGLang; ``captures`` still holds what ENTERED the draft (recorded
    by the pre-hook before the failure), with ``provenance["draft_error"]`` set.
    """

    def __init__(self, message: str, captures: list[Capture]) -> None:
        super().__init__(message)
        self.captures = captures



class TargetForwardError(RuntimeError):
    """The real target forward raised: SGLang's own code refused the configured capture before
    anything reached the draft (SGLang 0.5.14's ``LlamaModel.forward`` adds ``residual`` at every
    listed layer, ``llama.py:407-409``, and there is none before layer 0, so an id that reaches the
    embedding raises there). The message names the release and the SGLang line that raised."""


def _sglang_site(exc: BaseException) -> str:
    """``"sglang/...py:line"`` of the innermost traceback frame inside the SGLang package."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/sglang/" in f.filename.replace("\\", "/")]
    if not frames:
        return "outside sglang"
    f = frames[-1]
    return "sglang/" + f.filename.replace("\\", "/").rsplit("/sglang/", 1)[1] + f":{f.lineno}"
