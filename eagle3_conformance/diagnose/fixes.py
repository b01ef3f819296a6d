"""The fix lines of a diagnosis: the ids to write into each tool's draft config
(:func:`translate_ids`, the library of ``eagle3-conformance translate``) and the contract change."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import stored_path

Translate = Callable[[str, Sequence[str], Contract], Any]


def translate_ids(tool: str, boundaries: Sequence[str], c: Contract):
    """``eagle3-conformance translate``'s library call for ``boundaries`` of contract ``c``: a
    :class:`eagle3_conformance.engine_ids.ToolIds`. SGLang's rule is asked of the releases the contract
    was validated with (``engines.sglang_validated``, newest first), then of the installed one.

    Raises:
        eagle3_conformance.engine_ids.TranslationError: the tool cannot capture these boundaries.
    """
    from eagle3_conformance.engine_ids import TranslationError

    versions: list[Optional[str]] = [None]
    if tool == "sglang" and c.engines.sglang_validated:  # newest validated first; the installed one last
        versions = list(reversed(c.engines.sglang_validated)) + [None]
    first: Optional[Exception] = None
    for version in versions:
        try:
            return _cached(tool, tuple(boundaries), c.L, c.target.architecture, version, c.verifier_last.tensor,
                           c.capture.allow_embedding)
        except TranslationError as e:
            first = first or e
    raise first  # type: ignore[misc]


_CACHE: dict[tuple, Any] = {}


def _cached(tool, boundaries, L, arch, version, verifier, allow_embedding):
    from eagle3_conformance.engine_ids import TranslationError, boundaries_to_tool

    key = (tool, boundaries, L, arch, version, verifier, allow_embedding)
    if key not in _CACHE:
        try:
            _CACHE[key] = boundaries_to_tool(tool, list(boundaries), L, architecture=arch, version=version,
                                             verifier=verifier if tool == "speculators" else None,
                                             allow_embedding=allow_embedding)
        except TranslationError as e:
            _CACHE[key] = e
    v = _CACHE[key]
    if isinstance(v, Exception):
        raise v
    return v


def _draft_tool(c: Contract) -> str:
    """The tool whose key the contract's draft config ids sit in: SGLang for the nested key (or
    no key: SGLang's defaults), vLLM for a top-level key of a contract without an SGLang rule."""
    if c.draft.layer_ids.location == "top_level" and not c.engines.sglang_model_file:
        return "vllm"
    return "sglang"


def _fmt_ids(ids: Sequence[int]) -> str:
    return "[" + ", ".join(str(i) for i in ids) + "]"


def _fmt_b(bs: Sequence[Any]) -> str:
    return "[" + ", ".join(str(b) for b in bs) + "]"


class _Fixer:
    """Builds fix lines (and their structured form) from translations."""

    def __init__(self, c: Contract, translate: Translate):
        self.c = c
        self.translate = translate

    def _tool(self, tool: str, boundaries: Sequence[str]):
        from eagle3_conformance.engine_ids import TranslationError

        try:
            return self.translate(tool, list(boundaries), self.c), None
        except TranslationError as e:
            return None, str(e)
        except Exception as e:  # an engine that cannot be asked (not installed, import error)
            return None, f"{type(e).__name__}: {e}"

    def draft_config(self, boundaries: Sequence[str], ids: dict, tool: Optional[str] = None) -> list[str]:
        """Where and what to write in the draft config so the serving engine captures ``boundaries``:
        ``tool``'s key (None: the tool whose key the contract's ids sit in, :func:`_draft_tool`)."""
        own = _draft_tool(self.c)
        tool = tool or own
        t, err = self._tool(tool, boundaries)
        if t is None:
            ids[tool] = {"error": err}
            return [f"{tool} cannot capture {_fmt_b(boundaries)} ({err}); run `eagle3-conformance translate CONTRACT "
                    f"--to {tool}` on the release you serve"]
        ids[tool] = t.to_json()
        key = t.key_path.split(" (")[0].replace("draft config.json: ", "")
        rule = (f"{t.holds_for.split(' (')[0]} {t.convention.replace('sglang ', '')}" if tool == "sglang"
                else f"{t.holds_for.split(' (')[0]}")
        lines = [f"draft config.json, {key}: {_fmt_ids(t.ids)}  ({rule})"]
        have = self.c.draft.layer_ids.values
        if tool == own and have is not None and list(have) != list(t.ids):  # another tool's key: not the contract's
            lines.append(f"the contract's draft.layer_ids.values {_fmt_ids(have)} say otherwise: write "
                         f"{_fmt_ids(t.ids)} there too")
        return lines

    def data_generation(self, boundaries: Sequence[str], ids: dict) -> list[str]:
        """The data-generation ids (speculators 0.9.0 format: aux ascending, B_L last)."""
        t, err = self._tool("speculators", boundaries)
        if t is None:
            ids["speculators"] = {"error": err}
            return [f"data generation (speculators) cannot store {_fmt_b(boundaries)}: {err}"]
        ids["speculators"] = t.to_json()
        from eagle3_conformance.tools.speculators_flags import installed_version, target_layer_ids_flag

        gen = t.extra.get("data_generation_ids", t.ids)
        flag = target_layer_ids_flag()
        if flag is None:  # speculators not importable here: its flag cannot be read, so none is named
            return [f"data generation (speculators format, boundary ids = B_k entering layer k): layer ids "
                    f"{' '.join(map(str, gen))}  (aux ascending, B_{self.c.L} last as the verifier slot)"]
        aux = [i for i in gen if i != self.c.L] if gen and gen[-1] == self.c.L else gen
        return [f"data generation (speculators {installed_version()} launch_vllm.py, boundary ids = B_k entering "
                f"layer k): {flag} {' '.join(map(str, aux))}  (aux ascending; the launcher appends "
                f"{self.c.L} as the verifier slot, --include-last-layer, its default); train with the same {flag}"]

    def for_path(self, path: str, boundaries: Sequence[str], ids: dict) -> list[str]:
        if stored_path(path):
            return self.data_generation(boundaries, ids) + self.draft_config(boundaries, ids)
        return self.draft_config(boundaries, ids)

    def contract_change(self, observed: Sequence[str], ids: dict, what: str = "this data") -> list[str]:
        """The contract edit that declares ``observed`` (when the data is the intended one)."""
        tool = _draft_tool(self.c)
        t, err = self._tool(tool, observed)
        ids["contract"] = {"capture.boundaries": list(observed),
                           "draft.layer_ids.values": None if t is None else list(t.ids)}
        tail = (f" and draft.layer_ids.values: {_fmt_ids(t.ids)}" if t is not None else
                f" ({tool} cannot capture them: {err})")
        return [f"or, if {what} is the intended one, change the contract: capture.boundaries: "
                f"{_fmt_b(observed)}{tail}"]

