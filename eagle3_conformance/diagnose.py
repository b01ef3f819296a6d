"""Diagnosis: read every finding of a run and name the fault behind them, with the evidence and the fix.

The checks judge one property of one slot of one sample each; a single fault usually fails many
of them at once (ids read under the other convention fail ``slot_identity`` on every slot,
``slot_order``, ``row_fingerprint`` and ``feature_alignment``). :func:`diagnose` reads the
structured fields of all findings of a run (``check``, ``status``, ``path``, ``slot``,
``expected``, ``observed``; never the message prose), recognises the pattern each fault-kinds.md kind
leaves, and says what happened and what to change, with the ids to write taken from
:func:`eagle3_conformance.engine_ids.boundaries_to_tool` (the library behind ``eagle3-conformance translate``).

Patterns, per path, in this order (a finding explained by one pattern is not reused by a later one):

====================  =====  ============================================================================
kind                  fault  what the findings show
====================  =====  ============================================================================
one-slot-input        K5/K7/ the draft got 1 x d instead of K x d (``draft_input_width``, ``slot_count``,
                      K9     ``fc_ran``); slot 0's identity tells F (no-aux fallback, K5), the first aux
                             slot (a d-wide side buffer, K7) or no boundary (the draft's own states, K9)
other-model-width     K6     every stored slot is w wide where the target's d is not w (the verifier
                             slot's width; the feature a whole number of w-wide slots): another model's
                             hidden states, not a slot count
fc-slot-count         K6     the draft's fc reads k x d where the contract's K slots need K x d (k != K): the
                             engine counted the slots from another key than the ids (R41: speculators' top-level
                             ids, SGLang's nested-key count, default 3)
slot-count            K3     fewer slots than declared; the declared B_L is the one missing
decode-rows-padded    K13    after a partial accept, accepted tokens get zero padding rows (``verified_rows``; R43)
decode-rows-misaligned K9    after a partial accept, accepted tokens get other tokens' or requests' verified
                             rows (``verified_rows``; R52)
mtp-input-side        K4     an MTP head's one slot is F where the contract states B_L, or the reverse (R49)
embedding-for-last    K2     slot 0 is B_0 and every later slot (and the verifier) holds the boundary
                             declared one slot earlier: the embedding was captured in place of B_L
engine-default        K1     the aux slots are the engine's default layers (2, L//2, L-3), not the declared
convention-shift      K2     every aux slot is B_{k+1} (or B_{k-1}) for a declared B_k
slots-permuted        K2     the declared boundaries, in another order
slot-off              K2/K1  some slots hold another boundary (one off: K2; further: K1)
reference-mismatch    --     no slot matches any boundary: the reference is another checkpoint (an input
                             problem, not a fault-kinds.md kind)
not-a-boundary        K4     a slot matches no boundary while others do (a layer update without its
                             residual, a partial sum)
verifier-norm-state   K4     the verifier slot is F where B_L is declared, or the reverse
magnitude             K4/K12 a slot points the right way at the wrong magnitude (normalized without its
                             weights: K4; rescaled by a constant: K12)
fp8-transport         K12    hs-connectors FP8 data read without its scales (the `file` backend, or no
                             hidden_states_scales), or FP8's shared per-token scale coarsening a slot
pre-fc-norm           K4     the fc input lacks (or has) the pre-fc norm the contract declares
rows-misassigned      K13    slot identity holds on average but individual rows belong to other tokens
hidden-without-residual K4   a slot matches no boundary but slot + B_{k-1} is its declared B_k: the
                             layer's update captured before the residual add
verifier-slot-off     K3     the verifier slot holds another boundary than the declared B_L / F (the
                             embedding B_0, a mid layer) or none
verifier-missing      K3     the data stores only the aux planes (vLLM extraction files with N = K); the
                             declared verifier is missing
generation-dtype      --     the data is stored in another dtype than data_dtype while every slot holds its
                             declared boundary: the generation server ran another --dtype than the contract
                             assumes (an input problem: the key or the flag to change; docs/speculators-generator.md)
production-precision  --     the data's noise against the reference is that of a lower precision than the
                             contract's precision block declares (an input problem: the contract key to
                             change, not a fault-kinds.md kind); it claims the failures of the precision gates
====================  =====  ============================================================================

Diagnoses found on several paths with the same evidence and fix are merged into one that lists
the paths.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

from eagle3_conformance.contract import Contract
from eagle3_conformance.engine_ids import engine_default_aux_ids
from eagle3_conformance.findings import Finding, as_finding, stored_path
from eagle3_conformance.notation import Boundary

#: kind -> (fault-kinds.md kind, one line); the catalogue of diagnoses (docs and tests use it)
KINDS: dict[str, tuple[str, str]] = {
    "one-slot-input": ("K5", "the draft got 1 x d instead of the K x d concat; fc was skipped"),
    "other-model-width": ("K6", "every stored slot is another width than the target's: another model's states"),
    "fc-slot-count": ("K6", "the draft's fc built for fewer (or more) slots than the draft's ids: the count read from "
                            "another key (R41)"),
    "slot-count": ("K3", "fewer aux slots than declared (B_L unreachable)"),
    "decode-rows-padded": ("K13", "after a partial accept the draft gets padding rows for accepted tokens (R43)"),
    "decode-rows-misaligned": ("K9", "after a partial accept the draft gets the wrong verified rows (R52)"),
    "mtp-input-side": ("K4", "an MTP head fed B_L where F is stated, or the reverse (R49)"),
    "embedding-for-last": ("K2", "the embedding B_0 was captured in place of B_L"),
    "engine-default": ("K1", "the engine's (or generator's) default layers, not the declared ids"),
    "convention-shift": ("K2", "every aux slot one boundary off: ids read under the other convention"),
    "slots-permuted": ("K2", "the declared boundaries in another order"),
    "slot-off": ("K2", "some slots hold another boundary"),
    "reference-mismatch": ("", "no slot matches the reference: another checkpoint"),
    "not-a-boundary": ("K4", "a slot that is no residual-stream boundary"),
    "verifier-norm-state": ("K4", "verifier slot F where B_L is declared, or the reverse"),
    "magnitude": ("K4", "right direction, wrong magnitude against the reference"),
    "fp8-transport": ("K12", "FP8 training data read without its scales, or coarsened by the shared per-token scale"),
    "pre-fc-norm": ("K4", "the pre-fc norm the draft declares is missing on the path (or the reverse)"),
    "rows-misassigned": ("K13", "rows of other tokens or requests"),
    "hidden-without-residual": ("K4", "a layer's update captured without the residual (x + B_{k-1} = B_k)"),
    "verifier-slot-off": ("K3", "the verifier slot holds another boundary (the embedding, a mid layer) or none"),
    "verifier-missing": ("K3", "no verifier plane in the data although the contract declares verifier_last"),
    "production-precision": ("", "produced in lower precision than the contract declares (precision block)"),
    "generation-dtype": ("", "stored in another dtype than data_dtype, every slot's meaning intact: the generation "
                             "server's --dtype differs from the contract's"),
}

#: checks whose failures a slot-identity pattern accounts for
_IDENTITY_CHECKS = ("slot_identity", "slot_order", "no_embedding", "row_fingerprint", "feature_alignment",
                    "engine_mapping", "magnitude", "norm_band", "cross_path")
_VERIFIER_CHECKS = ("verifier_identity", "verifier_norm_state", "target_alignment", "magnitude", "norm_band")


@dataclass(frozen=True)
class Diagnosis:
    """One fault named from the findings of a run.

    Attributes:
        kind: the diagnosis id, a key of :data:`KINDS` (e.g. ``"convention-shift"``).
        fault: the fault-kinds.md kind it cites (``"K2"``); ``""`` for an input problem that is not a
            fault-kinds.md kind (``reference-mismatch``).
        title: one sentence: what happened.
        evidence: lines, each a fact read from the findings.
        fix: lines, each a concrete change (ids to write and where, or the contract change).
        paths: the paths it was found on.
        slots: the slots it concerns ("slot 0", "verifier", "feature", "fc input").
        checks: the failing checks it accounts for.
        support: path -> "n/m": samples (or requests) showing the pattern / judged.
        ids: the fix in structured form, e.g. ``{"sglang": {...ToolIds...}, "contract": {...}}``.
    """

    kind: str
    fault: str
    title: str
    evidence: tuple[str, ...] = ()
    fix: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    slots: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    support: dict[str, str] = field(default_factory=dict, compare=False)
    ids: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "fault": self.fault, "title": self.title, "evidence": list(self.evidence),
                "fix": list(self.fix), "paths": list(self.paths), "slots": list(self.slots),
                "checks": list(self.checks), "support": dict(self.support), "ids": self.ids}

    @property
    def label(self) -> str:
        """``"K2 convention-shift"`` (``"input reference-mismatch"`` without a fault-kinds.md kind)."""
        return f"{self.fault or 'input'} {self.kind}"


# --- findings -> a per-path view ------------------------------------------------------------------


def _weight(f: Finding) -> int:
    """How many findings ``f`` stands for: a folded pass entry of ``--json-passes counts``
    (:func:`eagle3_conformance.report._pass_counts`) its ``count`` (an int >= 0), anything else 1."""
    n = f.count
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 1


def _expand(findings: Iterable[Any]) -> list[Finding]:
    """Findings as :class:`Finding` objects, a folded entry with ``count`` n repeated n times (the
    same object, not copies), so that support counts ("n/m samples") and majorities are those
    of the full report."""
    out: list[Finding] = []
    for f in findings:
        x = as_finding(f)
        out.extend([x] * _weight(x))
    return out


def _parse(text: Any) -> Optional[Boundary]:
    try:
        return Boundary.parse(text) if isinstance(text, (str, Boundary)) else None
    except ValueError:
        return None


@dataclass
class _Judged:
    """One slot's identity over the samples of a path: declared boundary, the observed boundary
    most samples show, how many samples failed / were judged, and the first failing locator."""

    label: str
    declared: str
    observed: str
    fails: int
    judged: int
    where: str

    @property
    def wrong(self) -> bool:
        return self.observed != self.declared and self.fails * 2 > self.judged


def _slot_index(label: Optional[str]) -> int:
    try:
        return int(str(label).split()[-1])
    except (ValueError, IndexError):
        return 10**6


class _PathView:
    """The findings of one path, indexed by check and slot."""

    def __init__(self, path: str, findings: list[Finding], others_matched: tuple[str, ...] = ()):
        self.path = path
        self.findings = findings
        #: other paths of the same run on which the slots matched their declared boundaries (the
        #: reference is then the right checkpoint: never blamed)
        self.others_matched = others_matched
        #: every slot_identity / verifier_identity judgement of the run (all paths) passed
        self.slots_intact = False
        self.by_check: dict[str, list[Finding]] = {}
        for f in findings:
            self.by_check.setdefault(f.check, []).append(f)

    def failing(self, check: str) -> list[Finding]:
        return [f for f in self.by_check.get(check, []) if f.status == "fail"]

    def judged(self, check: str) -> dict[str, _Judged]:
        """slot label -> :class:`_Judged` from ``check``'s pass/fail findings (expected: the declared
        boundary, observed: the identified one)."""
        groups: dict[str, list[Finding]] = {}
        for f in self.by_check.get(check, []):
            if f.status in ("pass", "fail") and f.slot is not None:
                groups.setdefault(f.slot, []).append(f)
        out = {}
        for label, fs in groups.items():
            obs = Counter(str(f.observed) for f in fs)
            fails = [f for f in fs if f.status == "fail"]
            if fails:  # the most common observation among the failing samples
                top = Counter(str(f.observed) for f in fails).most_common(1)[0][0]
                if len(fails) * 2 <= len(fs):
                    top = obs.most_common(1)[0][0]
            else:
                top = obs.most_common(1)[0][0]
            out[label] = _Judged(label, str(fs[0].expected), top, len(fails), len(fs), fails[0].where if fails else "")
        return dict(sorted(out.items(), key=lambda kv: _slot_index(kv[0])))

    def aux(self) -> list[_Judged]:
        return [j for j in self.judged("slot_identity").values() if j.declared != "no slot"]

    def verifier(self) -> Optional[_Judged]:
        return self.judged("verifier_identity").get("verifier")

    @property
    def unit(self) -> str:
        return "samples" if stored_path(self.path) else "captures"

    def support(self, slots: Sequence[_Judged]) -> str:
        """``"n/m samples"``: how many of the judged samples show the pattern."""
        if not slots:
            return ""
        return f"{max(j.fails for j in slots)}/{max(j.judged for j in slots)} {self.unit}"


# --- the ids to write -------------------------------------------------------------------------------

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

    def draft_config(self, boundaries: Sequence[str], ids: dict) -> list[str]:
        """Where and what to write in the draft config so the serving engine captures ``boundaries``."""
        tool = _draft_tool(self.c)
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
        if have is not None and list(have) != list(t.ids):
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


# --- the patterns ---------------------------------------------------------------------------------


def _defaults(L: int) -> list[str]:
    """The default layers of SGLang (no ids) and speculators/vLLM: B_2, B_{L//2}, B_{L-3}."""
    return [f"B_{i}" for i in sorted(set(engine_default_aux_ids(L))) if 0 < i <= L]


def _idx(b: str) -> Optional[int]:
    p = _parse(b)
    return None if p is None or p.final else p.index


def _explained(view: _PathView, checks: Iterable[str], slots: Optional[Iterable[str]] = None) -> tuple[str, ...]:
    """The failing checks among ``checks`` on this path (restricted to ``slots`` where a finding
    has a slot label of that form)."""
    want = set(slots) if slots is not None else None
    out = []
    for chk in checks:
        for f in view.failing(chk):
            if want is not None and f.slot is not None and f.slot.startswith(("slot ", "verifier")) \
                    and f.slot not in want:
                continue
            out.append(chk)
            break
    return tuple(out)


def _one_slot_input(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    d, K = c.draft.target_hidden_size, c.num_slots
    width = [f for f in v.failing("draft_input_width") if f.observed == d]
    count = [f for f in v.failing("slot_count") if f.observed == 1]
    fc = v.failing("fc_ran")
    if K < 2 or not (width or count):
        return []
    s0 = v.judged("slot_identity").get("slot 0")
    obs = s0.observed if s0 is not None else None
    n = max(len(width), len(count), len(fc))
    ev = [f"the draft received a {d}-wide input (1 x d) on {n} {v.unit}; the contract says {K} x {d} = {K * d}"]
    if fc:
        ev.append("the draft's fc did not run: SGLang skips fc when the input is as wide as its embedding "
                  "(llama_eagle3.py:237-247), silently")
    ids: dict = {}
    if obs == "F":
        fault, title = "K5", "the draft was handed F (the final-norm output, 1 x d) instead of the aux concat"
        ev.append("that one slot is F (post final norm): the no-aux fallback stored the last state")
        fix = ["turn aux capture on: eagle_config.use_aux_hidden_state: true (an EAGLE, not EAGLE3, algorithm "
               "also hands the draft one state)"] + fx.draft_config([str(b) for b in c.aux], ids)
        if stored_path(v.path):
            fix = ["regenerate the data with the K aux slots then B_L; it stores [F, B_L]"] + \
                fx.data_generation([str(b) for b in c.aux], ids)
    elif obs == str(c.aux[0]):
        fault, title = "K7", "a side-path buffer sized d kept only the first aux slot of the K x d rows"
        ev.append(f"that one slot is {c.aux[0]}, the first declared aux slot: the rows were cut to d")
        fix = [f"size every buffer between the target and the draft ({v.path}: verify -> draft extend) "
               f"from the one K x target_hidden_size width ({K * d}), not from d (fault-kinds.md K7)"]
    else:
        fault = "K9" if v.path == "sglang-decode" else "K5"
        title = ("the draft was fed states that are no target boundary (its own output states) instead of the "
                 "target's K x d verify rows" if fault == "K9" else
                 "the draft got a d-wide tensor that is not the aux concat")
        if obs is not None:
            ev.append(f"that one slot matches {obs if obs != 'none' else 'no boundary of the target'}")
        fix = ["hand the draft extend after verify the target's TARGET_VERIFY FULL aux rows (the K x d "
               "concat at the accepted positions), not the draft's own states (fault-kinds.md K9)"
               if fault == "K9" else "feed the draft the K x d aux concat"]
    used.update({"draft_input_width", "slot_count", "feature_width", "fc_ran", "cross_path"} | set(_IDENTITY_CHECKS))
    return [Diagnosis("one-slot-input", fault, title, tuple(ev), tuple(fix), (v.path,), ("feature",),
                      _explained(v, ("draft_input_width", "slot_count", "feature_width", "fc_ran") + _IDENTITY_CHECKS),
                      {v.path: f"{n} {v.unit}"}, ids)]


def _other_width(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """Every slot is w wide where the target's d is not w: hidden states of another model (or a
    contract naming the wrong target), not a wrong slot count. Read from the verifier slot's width
    (one slot, stored on its own) and a feature width that is a whole number of w-wide slots."""
    d, K = c.draft.target_hidden_size, c.num_slots
    vw = [f for f in v.failing("verifier_width") if isinstance(f.observed, int) and f.observed not in (0, d)]
    if not vw:
        return []
    w = Counter(f.observed for f in vw).most_common(1)[0][0]
    widths = [f.observed for f in v.failing("feature_width") if isinstance(f.observed, int)]
    if not widths or any(x % w for x in widths):
        return []
    n = Counter(x // w for x in widths).most_common(1)[0][0]
    ev = [f"the verifier slot is {w} wide and the aux feature {n} x {w} = {n * w}; the target "
          f"{c.target.name} has d = {c.target.hidden_size}, the contract's {K} aux slots x {d} = {K * d}",
          f"every stored slot is {w} wide: the hidden states come from a model of width {w}, not from "
          f"this target (a slot-count reading of {n * w}/{d} would be wrong)"]
    fix = [f"regenerate the data with the target {c.target.name} (hidden size {c.target.hidden_size})",
           f"or, if the data is right, check the contract against the model that produced it "
           f"(hidden size {w}): `eagle3-conformance init --target <that model>`"]
    used.update({"slot_count", "feature_width", "verifier_width", "draft_input_width", "fc_shape", "norm_band"}
                | set(_IDENTITY_CHECKS))
    return [Diagnosis("other-model-width", "K6", f"the hidden states are {w} wide: another model's, not "
                      f"{c.target.name}'s (d = {c.target.hidden_size})", tuple(ev), tuple(fix), (v.path,),
                      ("feature", "verifier"),
                      _explained(v, ("slot_count", "feature_width", "verifier_width", "draft_input_width",
                                     "norm_band") + _IDENTITY_CHECKS),
                      {v.path: f"{len(vw)} {v.unit}"}, {})]


_FC_IN = re.compile(r"^in (\d+), out (\d+)$")


def _fc_slot_count(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """R41 (fault-kinds.md field reports; vllm#54526, speculators#1065): the draft's fc takes k slots of
    the target width where the contract declares K: the engine read the slot count from another key
    than the one holding the ids (SGLang 0.5.23 ``llama_eagle3.py:156-161``: ``num_aux_hidden_states``,
    else ``len(eagle_config.eagle_aux_hidden_state_layer_ids)``, else 3)."""
    d, K = c.draft.target_hidden_size, c.num_slots
    sizes = []
    for f in v.failing("fc_shape"):
        m = _FC_IN.match(str(f.observed))
        if m and int(m.group(1)) % d == 0 and int(m.group(1)) // d not in (0, K):
            sizes.append(int(m.group(1)) // d)
    if not sizes:
        return []
    k = Counter(sizes).most_common(1)[0][0]
    aux = [str(b) for b in c.aux]
    ids: dict = {}
    got = [f.observed for f in v.failing("slot_count") if isinstance(f.observed, int)]
    ev = [f"the draft's fc reads {k} x {d} = {k * d} where the contract's {K} aux slots need {K * d}"]
    if got:
        ev.append(f"the engine captured {Counter(got).most_common(1)[0][0]} slots, its default count, not the draft's "
                  f"{K} ids")
    fix = [f"the draft config holds {K} ids but the engine counted {k}: SGLang 0.5.23 takes the count from "
           "num_aux_hidden_states, else eagle_config.eagle_aux_hidden_state_layer_ids, else 3 (llama_eagle3.py:"
           "156-161) and ignores a top-level eagle_aux_hidden_state_layer_ids (where speculators writes them); "
           "write the ids under eagle_config (or set num_aux_hidden_states: " + str(K) + "):"] + \
        fx.draft_config(aux, ids)
    used.update({"fc_shape", "slot_count", "feature_width", "draft_input_width", "engine_mapping"}
                | set(_IDENTITY_CHECKS))
    return [Diagnosis("fc-slot-count", "K6", f"the draft's fc is built for {k} slots of a {K}-slot draft: the slot "
                      "count was read from another key than the ids (R41)", tuple(ev), tuple(fix), (v.path,),
                      ("fc",), _explained(v, ("fc_shape", "slot_count", "feature_width", "draft_input_width",
                                              "engine_mapping") + _IDENTITY_CHECKS),
                      {v.path: f"{len(sizes)} {v.unit}"}, ids)]


def _slot_count(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    if "slot_count" in used:
        return []
    bad = [f for f in v.failing("slot_count") if isinstance(f.observed, int)]
    if not bad:
        return []
    got = Counter(f.observed for f in bad).most_common(1)[0][0]
    K = c.num_slots
    aux = [str(b) for b in c.aux]
    ev = [f"the draft input holds {got} slots of {c.draft.target_hidden_size}; the contract declares {K}: "
          f"{_fmt_b(aux)}"]
    ids: dict = {}
    if got < K and c.aux[-1].index == c.L:
        title = f"B_{c.L} is declared as an aux slot but never captured: {K - got} slot(s) short"
        ev.append(f"the last declared slot is B_{c.L} (the last layer's output); "
                  "SGLang's capture loop in llama.py / deepseek_v2.py never reaches it")
        fix = [f"drop B_{c.L} from capture.boundaries (speculators stores B_L as the verifier slot anyway), "
               "or serve with a model file that captures at the final norm (gpt_oss.py)"]
        fault = "K3"
    else:
        title = f"{got} aux slots reach the draft where the contract declares {K}"
        fix = ["write exactly one id per declared boundary"] + fx.for_path(v.path, aux, ids)
        fault = "K3"
    used.update({"slot_count", "feature_width", "draft_input_width", "fc_shape"})
    return [Diagnosis("slot-count", fault, title, tuple(ev), tuple(fix), (v.path,), ("feature",),
                      _explained(v, ("slot_count", "feature_width", "draft_input_width", "slot_identity")),
                      {v.path: f"{len(bad)} {v.unit}"}, ids)]


def _verifier_missing(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """``verifier_present`` failed: the data stores the aux planes only, no verifier."""
    bad = v.failing("verifier_present")
    if not bad or "verifier_present" in used:
        return []
    used.update({"verifier_present", "verifier_identity", "target_alignment"})
    vt = c.verifier_last.tensor
    return [Diagnosis(
        "verifier-missing", "K3", f"the data stores no verifier state: {vt} is declared but no plane holds it",
        (f"{len(bad)} {v.unit} hold only the {c.num_slots} aux planes (N = K); the trainer's verifier target "
         f"({vt}, {c.verifier_last.norm}-norm) is missing", ),
        (f"generate the data with the verifier plane: speculators' launcher stores {vt} after the aux ids by default "
         "(its --no-include-last-layer drops it); list the aux ids then L", ) + tuple(
            fx.for_path(v.path, [str(b) for b in c.aux], {})),
        (v.path,), ("verifier",), _explained(v, ("verifier_present",)), {v.path: f"{len(bad)} {v.unit}"})]


def _decode_rows(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """R43 / R52 (fault-kinds.md field reports): ``verified_rows`` failed: after a partial accept the draft
    extend got zero padding rows (R43) or other tokens' / requests' verified rows (R52) for the
    accepted tokens."""
    bad = [f for f in v.failing("verified_rows") if isinstance(f.observed, dict)]
    if not bad:
        return []
    judged = len([f for f in v.by_check.get("verified_rows", []) if f.status in ("pass", "fail")])
    pad = sum(int(f.observed.get("padding") or 0) for f in bad)
    other = sum(int(f.observed.get("shifted") or 0) + int(f.observed.get("foreign") or 0) for f in bad)
    rows = sum(int(f.observed.get("accepted") or 0) for f in bad)
    shifts = Counter(f.observed.get("shift") for f in bad if f.observed.get("shift") is not None)
    ev = [f"{len(bad)} of {judged} requests after verify: {pad} accepted rows are zero padding and {other} are "
          f"rows of other tokens or requests, of {rows} accepted rows"]
    if shifts:
        ev.append(f"the misplaced rows sit {shifts.most_common(1)[0][0]:+d} rows from their own token's row")
    checks = ("verified_rows", "row_fingerprint", "feature_alignment", "slot_identity", "norm_band", "magnitude")
    used.update(checks)
    where = "after a partial accept (accept length < num_draft_tokens)"
    if pad >= other:
        return [Diagnosis(
            "decode-rows-padded", "K13", f"the draft extend gets padding rows for accepted tokens {where} (R43)",
            tuple(ev), ("index the verified rows before the draft: request i's accepted rows are verify rows "
                        "i * num_draft_tokens + arange(accept_len_i); drop any padding added for the batch layout "
                        "(context-parallel or graph padding, vllm-ascend#8433) before the rows reach the draft",),
            (v.path,), ("feature",), _explained(v, checks), {v.path: f"{len(bad)}/{judged} {v.unit}"})]
    return [Diagnosis(
        "decode-rows-misaligned", "K9", f"the draft extend gets the wrong verified rows {where} (R52)", tuple(ev),
        ("read each request's accepted rows at its own offset in the buffer the verify wrote: uncompacted "
         "(num_draft_tokens rows per request, SGLang 0.5.23 eagle_worker_v2: select_index = arange(0, bs * n, n) + "
         "accept_lens - 1) or compacted (cumulative accept lengths), never one layout's offsets into the other "
         "(ik_llama.cpp#1894)",),
        (v.path,), ("feature",), _explained(v, checks), {v.path: f"{len(bad)}/{judged} {v.unit}"})]


def _mtp_input_side(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """R49 (fault-kinds.md field reports): an MTP head handed the other side of the final norm than the
    contract states (B_L where F is declared, or the reverse)."""
    if c.method != "mtp" or "slot_identity" in used:
        return []
    j = v.judged("slot_identity").get("slot 0")
    L = c.L
    if j is None or not j.wrong or {j.declared, j.observed} != {f"B_{L}", "F"}:
        return []
    used.update(_IDENTITY_CHECKS + _VERIFIER_CHECKS)
    got, want = j.observed, j.declared
    served = {"F": "F, the final norm's output (SGLang 0.5.23 hands an MTP head the LM head's input, "
                   "logits_processor.py:853-872)",
              f"B_{L}": f"B_{L}, the last layer's output before the final norm"}
    fix = (f"serve the head with {want}, the tensor it was trained on (speculators 0.9.0 trains MTP on B_{L}, "
           "models/mtp/data.py; SGLang 0.5.23 feeds F): an engine that feeds the other side needs the head "
           "retrained, or the norm applied / removed before the head",
           f"or, if the head was trained on {got}, state it: capture.boundaries: [{got}] and verifier_last: "
           f"{{tensor: {got}, norm: {'post' if got == 'F' else 'pre'}}} (never defaulted: both sides are in use)")
    return [Diagnosis("mtp-input-side", "K4", f"the MTP head is fed {got} where the contract states {want} (R49)",
                      (f"slot 0 is {served[got]}, on {j.fails} of {j.judged} {v.unit}; contract says {want}",),
                      fix, (v.path,), ("slot 0",), _explained(v, _IDENTITY_CHECKS + _VERIFIER_CHECKS),
                      {v.path: f"{j.fails}/{j.judged} {v.unit}"})]


def _embedding_for_last(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    aux = v.aux()
    if not aux or "slot_identity" in used:
        return []
    if aux[0].observed != "B_0" or aux[0].declared == "B_0":
        return []
    if any(aux[i].observed != aux[i - 1].declared for i in range(1, len(aux))):
        return []
    ver = v.verifier()
    if ver is not None and ver.observed != aux[-1].declared:
        return []
    declared = [j.declared for j in aux]
    stored = ["B_0"] + declared[:-1]
    ev = [f"slot 0 is B_0 (embedding output); contract says {declared[0]}"]
    if len(aux) > 1:
        ev.append(f"slots 1..{len(aux) - 1} hold {', '.join(declared[:-1])}: each the boundary declared one slot "
                  "earlier")
    ids: dict = {}
    if ver is not None:
        ev.append(f"the verifier slot holds {declared[-1]}, the last aux boundary; contract says {ver.declared}")
        ev.append(f"stored slots: {_fmt_b(stored + [declared[-1]])}; contract: {_fmt_b(declared + [ver.declared])}")
        title = "the embedding B_0 was captured in place of B_L: every slot holds the boundary declared one slot earlier"
        fix = [f"regenerate the data without the embedding and with B_{c.L} last: the generator's list must be "
               f"the aux ids then L, never 0 or -1"] + fx.data_generation(declared, ids)
    else:
        title = "slot 0 is the embedding B_0: an id reaches the embedding and pushes every boundary one slot later"
        fix = ["an id in the draft config reaches B_0 (-1 under SGLang's +1 rule, 0 as a boundary id); write:"] + \
            fx.draft_config(declared, ids)
    used.update(_IDENTITY_CHECKS + _VERIFIER_CHECKS)
    slots = tuple(j.label for j in aux) + (("verifier",) if ver is not None else ())
    return [Diagnosis("embedding-for-last", "K2", title, tuple(ev), tuple(fix), (v.path,), slots,
                      _explained(v, _IDENTITY_CHECKS + _VERIFIER_CHECKS), {v.path: v.support(aux)}, ids)]


def _wrong_aux(v: _PathView) -> Optional[list[_Judged]]:
    aux = v.aux()
    if not aux or not all(j.wrong for j in aux):
        return None
    return aux


def _engine_default(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    if "slot_identity" in used:
        return []
    aux = _wrong_aux(v)
    dflt = _defaults(c.L)
    if aux is None or [j.observed for j in aux] != dflt or dflt == [str(b) for b in c.aux]:
        return []
    declared = [j.declared for j in aux]
    ids: dict = {}
    ev = [f"slots hold {_fmt_b(dflt)}: the default layers (2, L//2, L-3) for L = {c.L}; contract says "
          f"{_fmt_b(declared)}"]
    shift = {(_idx(j.observed) or 0) - (_idx(j.declared) or 0) for j in aux}
    if len(shift) == 1:
        ev.append("these are also every declared boundary shifted by one: check the id convention too")
    if stored_path(v.path):
        title = "the data generator captured its default layers, not the declared ones"
        fix = ["pass the ids to the generator explicitly:"] + fx.data_generation(declared, ids)
    else:
        title = "the engine never saw the draft's ids and captured its default layers"
        fix = ["SGLang reads only the nested key; a top-level or misspelled key falls back to the defaults "
               "silently (fault-kinds.md K1):"] + fx.draft_config(declared, ids)
    used.update(_IDENTITY_CHECKS)
    return [Diagnosis("engine-default", "K1", title, tuple(ev), tuple(fix), (v.path,), tuple(j.label for j in aux),
                      _explained(v, _IDENTITY_CHECKS), {v.path: v.support(aux)}, ids)]


def _convention_shift(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    if "slot_identity" in used:
        return []
    aux = _wrong_aux(v)
    if aux is None:
        return []
    shifts = set()
    for j in aux:
        a, b = _idx(j.declared), _idx(j.observed)
        if a is None or b is None:
            return []
        shifts.add(b - a)
    if len(shifts) != 1 or shifts & {1, -1} != shifts:
        return []
    s = shifts.pop()
    declared = [j.declared for j in aux]
    observed = [j.observed for j in aux]
    word = "deeper" if s > 0 else "shallower"
    title = (f"every aux slot is one boundary {word} than declared (B_{{k{s:+d}}} for B_k): the ids were read "
             "under the other convention")
    ev = [", ".join(f"{j.label} is {j.observed}" for j in aux) + f"; contract says {', '.join(declared)}",
          "output-of id i captures B_{i+1}; entering (boundary) id i captures B_i: one list read both ways is "
          "one boundary off"]
    ids: dict = {}
    fix = ["write the ids for the tool that reads them:"] + fx.for_path(v.path, declared, ids)
    fix += fx.contract_change(observed, ids, "this data" if stored_path(v.path) else "this capture")
    used.update(_IDENTITY_CHECKS)
    return [Diagnosis("convention-shift", "K2", title, tuple(ev), tuple(fix), (v.path,), tuple(j.label for j in aux),
                      _explained(v, _IDENTITY_CHECKS), {v.path: v.support(aux)}, ids)]


def _permuted(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    if "slot_identity" in used:
        return []
    aux = v.aux()
    if not aux or not any(j.wrong for j in aux):
        return []
    declared = [j.declared for j in aux]
    observed = [j.observed for j in aux]
    if sorted(declared) != sorted(observed) or declared == observed:
        return []
    ids: dict = {}
    ev = [f"the slots hold {_fmt_b(observed)}: the declared {_fmt_b(declared)} in another order"]
    fix = ["store the aux slots in ascending layer order, as declared; the concat follows list order in the data "
           "generator and the HF backend (SGLang always concatenates ascending): sort the ids"] + \
        fx.for_path(v.path, declared, ids)
    used.update(_IDENTITY_CHECKS)
    wrong = tuple(j.label for j in aux if j.wrong)
    return [Diagnosis("slots-permuted", "K2", "the aux slots hold the declared boundaries in another order",
                      tuple(ev), tuple(fix), (v.path,), wrong, _explained(v, _IDENTITY_CHECKS),
                      {v.path: v.support([j for j in aux if j.wrong])}, ids)]


def _without_residual(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """``residual_missing`` failed: slots hold the layer's update, not the residual stream."""
    bad = v.failing("residual_missing")
    if not bad or "slot_identity" in used:
        return []
    labels = sorted({f.slot for f in bad if f.slot}, key=lambda s: _slot_index(s) if s != "verifier" else 10**6)
    declared = {f.slot: str(f.expected) for f in bad}
    used.update(_IDENTITY_CHECKS + ("residual_missing",) + (_VERIFIER_CHECKS if "verifier" in labels else ()))
    n = max(Counter(f.slot for f in bad).values())
    n_all = max((j.judged for j in v.aux()), default=n)
    ev = [f"{lab} + B_{(_idx(declared[lab]) or 1) - 1} is {declared[lab]} on the reference (the slot itself matches "
          "no boundary)" for lab in labels]
    if v.others_matched:
        ev.append(f"on {', '.join(v.others_matched)} the same reference matches the declared boundaries: the reference "
                  "is the right checkpoint")
    return [Diagnosis(
        "hidden-without-residual", "K4", f"{', '.join(labels)} hold{'s' if len(labels) == 1 else ''} the layer's update "
        "without the residual it is added to", tuple(ev),
        ("capture the residual stream entering the layer (hidden_states + residual after the fused add), not the "
         "layer's output before the add (vllm-project/vllm#14464; SGLang 0.5.23's Gemma 3 aux capture)",),
        (v.path,), tuple(labels), _explained(v, _IDENTITY_CHECKS + ("residual_missing",), labels),
        {v.path: f"{n}/{n_all} {v.unit}"})]


def _no_boundary(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    if "slot_identity" in used:
        return []
    aux = v.aux()
    ver = v.verifier()
    none = [j for j in aux if j.wrong and j.observed == "none"]
    if not none:
        return []
    if len(none) == len(aux) and (ver is None or ver.fails * 2 > ver.judged) and not v.others_matched:
        used.update(_IDENTITY_CHECKS + _VERIFIER_CHECKS)
        ev = [f"{', '.join(j.label for j in none)}: the best cosine to any boundary B_0..B_{c.L}, F of the "
              "reference is below 0.5, on most samples"]
        if ver is not None:
            ev.append(f"the verifier slot is not {ver.declared} either (slot identity fails on {ver.fails} of "
                      f"{ver.judged} {v.unit})")
        return [Diagnosis(
            "reference-mismatch", "", "no slot matches its boundary in the reference: the reference is another "
            "checkpoint than the one the data was captured from", tuple(ev),
            ("pass --reference the exact target checkpoint the data was generated with (same weights, not only "
             "the same config)", "if it is that checkpoint, the hidden states come from another model"),
            (v.path,), tuple(j.label for j in none) + (("verifier",) if ver is not None else ()),
            _explained(v, _IDENTITY_CHECKS + _VERIFIER_CHECKS), {v.path: v.support(none)})]
    used.update({"slot_identity", "row_fingerprint", "feature_alignment", "magnitude", "norm_band", "no_embedding"})
    good = [j.label for j in aux + ([ver] if ver is not None else []) if not j.fails * 2 > j.judged]
    ev = [f"{j.label} (declared {j.declared}) matches no boundary of the reference (best cosine below 0.5)"
          for j in none]
    if good:
        ev.append(f"{', '.join(good)} match{'es' if len(good) == 1 else ''} the declared boundar"
                  f"{'y' if len(good) == 1 else 'ies'}: the reference is the right model")
    if v.others_matched:
        ev.append(f"on {', '.join(v.others_matched)} the same reference matches the declared boundaries: the "
                  "reference is the right checkpoint")
    labels = ", ".join(j.label for j in none)
    return [Diagnosis(
        "not-a-boundary", "K4", f"{labels} hold{'s' if len(none) == 1 else ''} a tensor that is no residual-stream "
        "boundary", tuple(ev),
        ("capture the residual stream entering the layer (hidden + residual after the fused add), not a layer's "
         "update without its residual (vllm-project/vllm#14464); rows of zeros are padding of rows never stored "
         "(token-sharded rows without the gather, K8)",),
        (v.path,), tuple(j.label for j in none), _explained(v, ("slot_identity", "row_fingerprint",
                                                                "feature_alignment", "no_embedding", "norm_band"),
                                                            [j.label for j in none]),
        {v.path: v.support(none)})]


def _loose_match(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """Slots whose best match IS the declared boundary but below the gate (cosine or margin): a
    transformed copy of it (post-norm with its weights, the update without the residual)."""
    if "slot_identity" in used:
        return []
    aux = v.aux()
    loose = [j for j in aux if j.observed == j.declared and j.fails * 2 > j.judged]
    ver = v.verifier()
    if not loose or (len(loose) == len(aux) > 1 and (ver is None or ver.fails * 2 > ver.judged)
                     and v.failing("row_fingerprint")):
        return []  # every slot at once, rows failing: rows of other tokens (rows-misassigned), not a transform
    used.update({"slot_identity", "row_fingerprint", "feature_alignment", "magnitude", "norm_band"})
    labels = ", ".join(j.label for j in loose)
    ev = [f"{j.label} resembles {j.declared} more than any other boundary, but not closely enough to be it "
          f"(slot_identity fails on {j.fails} of {j.judged} {v.unit})" for j in loose]
    return [Diagnosis(
        "not-a-boundary", "K4", f"{labels} hold{'s' if len(loose) == 1 else ''} a transformed copy of the declared "
        "boundary, not the boundary itself", tuple(ev),
        ("capture the residual stream entering the layer as declared: not after the layer's input RMSNorm (its "
         "weights change the direction), not the layer's update without its residual (vllm-project/vllm#14464)",),
        (v.path,), tuple(j.label for j in loose),
        _explained(v, ("slot_identity", "row_fingerprint", "feature_alignment", "norm_band")),
        {v.path: v.support(loose)})]


def _slot_off(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    if "slot_identity" in used:
        return []
    aux = v.aux()
    wrong = [j for j in aux if j.wrong and _idx(j.observed) is not None and _idx(j.declared) is not None]
    if not wrong:
        return []
    declared = [j.declared for j in aux]
    one = all(abs(_idx(j.observed) - _idx(j.declared)) == 1 for j in wrong)  # type: ignore[operator]
    ids: dict = {}
    ev = [f"{j.label} is {Boundary.parse(j.observed).describe(c.L)}; contract says {j.declared}" for j in wrong]
    ok = [j.label for j in aux if not j.wrong]
    if ok:
        ev.append(f"{', '.join(ok)} hold{'s' if len(ok) == 1 else ''} the declared boundar{'y' if len(ok) == 1 else 'ies'}")
    what = "one boundary off" if one else "another boundary"
    title = f"{', '.join(j.label for j in wrong)} hold{'s' if len(wrong) == 1 else ''} {what}"
    fix = [f"the id{'s' if len(wrong) > 1 else ''} of {', '.join(j.label for j in wrong)} "
           f"{'were' if len(wrong) > 1 else 'was'} written wrong; the whole list reads:"] + \
        fx.for_path(v.path, declared, ids)
    observed = [j.observed for j in aux]
    if len(set(observed)) == len(observed) and observed == sorted(observed, key=lambda b: _idx(b) or 0):
        fix += fx.contract_change(observed, ids)
    used.update(_IDENTITY_CHECKS)
    return [Diagnosis("slot-off", "K2" if one else "K1", title, tuple(ev), tuple(fix), (v.path,),
                      tuple(j.label for j in wrong), _explained(v, _IDENTITY_CHECKS), {v.path: v.support(wrong)}, ids)]


def _verifier_state(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    if "verifier_identity" in used:
        return []
    ver = v.verifier()
    norm = v.failing("verifier_norm_state")
    L = c.L
    ev: list[str] = []
    got = None
    if ver is not None and ver.wrong and {ver.declared, ver.observed} == {f"B_{L}", "F"}:
        got = ver.observed
        ev.append(f"the verifier slot is {ver.observed}; contract says {ver.declared}")
    if norm:
        f = norm[0]
        ev.append(f"verifier slot state: {f.observed}; contract says {f.expected}")
        if got is None:
            got = "F" if str(f.observed).startswith("post") else f"B_{L}"
    if got is None:
        return []
    used.update(_VERIFIER_CHECKS)
    if got == "F":
        title = f"the verifier slot is F (after the final norm) where the contract declares B_{L} (before it)"
        fix = (f"store B_{L}, the last layer's output before the final norm: speculators applies verifier_norm "
               "itself in training (REFERENCE.md 5.3), so a stored F is normalized twice",
               "or, if F is intended (SpecForge's offline target is F), set verifier_last: {tensor: F, norm: post}")
    else:
        title = f"the verifier slot is B_{L} (before the final norm) where the contract declares F (after it)"
        fix = ("apply the final norm before storing the verifier slot (capture at the final norm's output)",
               f"or, if B_{L} is intended (speculators), set verifier_last: {{tensor: B_{L}, norm: pre}}")
    n = max(len(norm), ver.fails if ver is not None else 0)
    judged = max(len(v.by_check.get("verifier_norm_state", [])), ver.judged if ver is not None else 0)
    return [Diagnosis("verifier-norm-state", "K4", title, tuple(ev), fix, (v.path,), ("verifier",),
                      _explained(v, _VERIFIER_CHECKS, ["verifier"]), {v.path: f"{n}/{judged} {v.unit}"})]


def _verifier_other(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """The verifier slot holds another boundary than B_L / F (the embedding B_0, a mid layer) or none:
    every failing slot kind gets a diagnosis (issue 23 item 6)."""
    ver = v.verifier()
    if "verifier_identity" in used or ver is None or not ver.wrong:
        return []
    used.update(_VERIFIER_CHECKS)
    what = {"none": "no boundary of the reference", "B_0": "B_0, the embedding output"}.get(
        ver.observed, f"{ver.observed}, a mid-depth boundary")
    return [Diagnosis(
        "verifier-slot-off", "K3", f"the verifier slot holds {what} where the contract declares {ver.declared}",
        (f"verifier_identity: {ver.observed} on {ver.fails} of {ver.judged} {v.unit}; contract says {ver.declared}",),
        (f"store {ver.declared} as the last plane: the data-generation list is the aux ids then L = {c.L} (speculators' "
         "launcher appends L itself with --include-last-layer, its default); an id of 0 there stores the embedding",),
        (v.path,), ("verifier",), _explained(v, _VERIFIER_CHECKS, ["verifier"]),
        {v.path: f"{ver.fails}/{ver.judged} {v.unit}"})]


def _fp8_transport(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """hs-connectors transport (checks ``transfer_backend``, ``fp8_scale_error``)."""
    out = []
    tb = v.failing("transfer_backend")
    n_tb = len([f for f in v.by_check.get("transfer_backend", []) if f.status != "skip"])
    if tb:
        kinds = {k for f in tb if isinstance(f.observed, dict) for k in f.observed.get("problems") or ()}
        unscaled = [f for f in tb if "never rescaled" in f.message]
        first = tb[0].observed if isinstance(tb[0].observed, dict) else {}
        dtype = first.get("dtype", "plain")
        title = ("FP8 data read without its scales: values never rescaled" if unscaled else
                 "the hidden-states files do not match the hs-connectors backend the contract declares")
        ev = (tb[0].message, "every row keeps its direction (cosine fingerprints pass) but is off by its own "
              "per-token factor 448/amax: the per-token FP8 scale was never applied")
        fix: tuple[str, ...] = ()
        if "plain-as-fp8" in kinds:
            fix += (f"the files are plain {dtype}: declare training.transfer: file, or regenerate with the FP8 "
                    "connector (hs-connectors FP8HiddenStatesConnector)",)
        if "scales-beside-plain" in kinds:
            title = "plain hidden states with a hidden_states_scales tensor beside them (not FP8 data)"
            fix += (f"the files hold plain {dtype} hidden states with a stray hidden_states_scales tensor: write them "
                    "without it (vLLM's ExampleHiddenStatesConnector, hs-connectors file backend), or regenerate the "
                    "data with the FP8 connector (float8_e4m3fn hidden_states plus their scales)",)
        if kinds & {"scales-shape", "scales-dtype", "bad-scale"}:
            title = "the FP8 files' hidden_states_scales are not what FP8Transfer can apply"
            fix += ("the scales must be float32 [T, 1, 1], one positive scale per token (amax/448 clamped at 1e-12: "
                    "hs_connectors.fp8_utils.quantize_tensor_to_fp8, fp8_utils.py:29-51): regenerate with the FP8 "
                    "connector",)
        if "fp8-without-scales" in kinds:
            fix += ("the float8 files lost their hidden_states_scales: regenerate with the FP8 connector, which "
                    "writes both", )
        if "fp8-read-as-file" in kinds or not fix:
            fix += ("read FP8 data with hs-connectors' fp8 backend (FP8Transfer; speculators ArrowDataset(transfer=...), "
                    "speculators train config data.hidden_states_backend: fp8, train/config/resolution.py:444) and "
                    "declare training.transfer: fp8 in the contract",
                    "or regenerate the data with the file backend (plain bf16 hidden states)")
        out.append(Diagnosis("fp8-transport", "K12", title, ev[:1] + ((ev[1],) if unscaled else ()), fix,
                             (v.path,), ("feature",), ("transfer_backend",) + tuple(
                                 ch for ch in ("dtype", "magnitude", "fp8_scale_error") if v.failing(ch)),
                             {v.path: f"{len(tb)}/{n_tb} {v.unit}"}))
        used.update({"transfer_backend", "magnitude", "fp8_scale_error", "dtype"})
        return out
    fe = [f for f in v.failing("fp8_scale_error") if f not in used_precision(used)]
    if fe:
        worst = max(fe, key=lambda f: float(f.observed.get("max", 0)) if isinstance(f.observed, dict) else 0)
        n_fe = len([f for f in v.by_check.get("fp8_scale_error", []) if f.status != "skip"])
        out.append(Diagnosis(
            "fp8-transport", "K12", "training values far from the reference at some tokens (FP8's shared per-token "
            "scale coarsens small slots)", (worst.message,),
            ("find what makes that token's amax large (a massive activation, a stray value in B_L); FP8 with one "
             "scale per token cannot carry a small slot beside it: store those samples with the file backend (bf16), "
             "or raise gates.fp8_max_relative_error only with a measured reason",),
            (v.path,), tuple(sorted({f.slot for f in fe if f.slot})), ("fp8_scale_error",),
            {v.path: f"{len(fe)}/{n_fe} slot findings"}))
        used.add("fp8_scale_error")
    return out


def _magnitude(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    # the check itself skips slots that point elsewhere, so its failures are its own
    if "transfer_backend" in used:
        return []  # FP8 read as plain files: the fp8-transport diagnosis names the cause
    bad: dict[str, list[Finding]] = {}
    for f in v.failing("magnitude"):
        if f in used_precision(used):
            continue  # half-precision noise (production-precision names it)
        if isinstance(f.observed, dict) and "rms_ratio" in f.observed:
            bad.setdefault(f.slot or "", []).append(f)
    out = []
    for label, fs in sorted(bad.items(), key=lambda kv: _slot_index(kv[0]) if kv[0] != "verifier" else 10**7):
        ob = fs[0].observed
        r = sorted(float(f.observed["rms_ratio"]) for f in fs)[len(fs) // 2]
        srms = sorted(float(f.observed["slot_rms"]) for f in fs)[len(fs) // 2]
        sspread = max(float(f.observed.get("slot_rms_spread", 99)) for f in fs)
        rspread = max(float(f.observed.get("ratio_spread", 99)) for f in fs)
        declared = next((str(b) for i, b in enumerate(c.aux) if f"slot {i}" == label), c.verifier_last.tensor)
        ev = [f"{label} points the way of {declared} (cos {float(ob.get('cos', 1)):.4f}) but its per-token RMS is "
              f"{r:.3g}x the reference's (median over samples)"]
        if abs(srms - 1) < 0.1 and sspread < 1.1:
            fault, title = "K4", f"{label} is normalized without its norm weights (per-token RMS 1)"
            ev.append(f"its own per-token RMS is {srms:.3g} on every token: an RMSNorm output without the weight")
            fix = (f"store {declared} itself (the residual stream, pre-norm) as the contract declares; a post-norm "
                   "capture must keep the norm's weight (x / rms(x) * w)",)
        elif rspread < 1.1:
            fault, title = "K12", f"{label} is {declared} rescaled by a constant factor {r:.3g}"
            ev.append("the ratio is the same on every token: a scale, not a norm (quantized values read without "
                      "their scales, a stray multiplier)")
            fix = ("dequantize before storing or comparing (FP8 per-token / per-tensor scales; contract dtypes), or "
                   "remove the stray factor",)
        else:
            fault, title = "K4", f"{label} has the wrong magnitude for {declared}"
            fix = (f"store {declared} as the reference computes it (residual stream, no norm, no scale)",)
        ev.append("fingerprints are scale-free; the norm bands could not see it"
                  + (" (uncalibrated)" if c.norm_bands.status != "calibrated" else ""))
        n_all = len([f for f in v.by_check.get("magnitude", []) if f.slot == label and f.status != "skip"])
        out.append(Diagnosis("magnitude", fault, title, tuple(ev), fix, (v.path,), (label,),
                             ("magnitude",) + (("norm_band",) if v.failing("norm_band") else ()),
                             {v.path: f"{len(fs)}/{n_all} {v.unit}"}))
    used.add("magnitude")
    return out


def _pre_fc_norm(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    bad = v.failing("pre_fc_norm")
    if not bad:
        return []
    got = Counter(str(f.observed) for f in bad).most_common(1)[0][0]
    want = c.draft.pre_fc_norm
    words = {"none": "the raw aux concat (no pre-fc norm)", "norm_before_fc": "norm_before_fc (one RMSNorm over "
             "the K x d concat)", "fc_norm": "fc_norm (an RMSNorm per slot)",
             "other": "neither the raw aux concat nor its RMSNorm"}
    ev = [f"the fc input is {words.get(got, got)}; the contract says draft.pre_fc_norm: {want}"]
    if want != "none" and got == "none":
        title = f"the draft declares {want} but the engine path feeds fc without it"
        fix = (f"the engine must apply the draft's {want} before fc: put the flag where the serving engine reads it "
               "(SGLang 0.5.23 llama_eagle3.py: eagle_config.norm_before_fc or top-level norm_before_fc; fc_norm / "
               "use_aux_norm) and ship its weight in the checkpoint (vllm-project/vllm#38111, "
               "sgl-project/sglang#32334)",)
    elif want == "none":
        title = f"the engine path applies a pre-fc norm ({got}) the contract does not declare"
        fix = (f"if the draft was trained with it, set draft.pre_fc_norm: {got} in the contract; otherwise remove "
               "the flag from the draft config",)
    else:
        title = f"the engine path feeds fc {words.get(got, got)}; the draft declares {want}"
        fix = (f"make the engine apply exactly {want} (check the flag names it reads and the checkpoint's norm "
               "weights)",)
    used.add("pre_fc_norm")
    n_all = len([f for f in v.by_check.get("pre_fc_norm", []) if f.status != "skip"])
    return [Diagnosis("pre-fc-norm", "K4", title, tuple(ev), fix, (v.path,), ("fc input",), ("pre_fc_norm",),
                      {v.path: f"{len(bad)}/{n_all} {v.unit}"})]


#: failures a lower production precision explains (its noise, judged by gates set for float32): these
#: checks' own failures, and any check's failure decided by the per-row floor (the declared boundary is
#: the best match, only too far)
_PRECISION_CHECKS = ("row_fingerprint", "fp8_scale_error", "cross_path", "magnitude")
_PRECISION_GATES = ("gates.slot_identity_min_cosine", "gates.cross_path_min_cosine", "gates.fp8_max_relative_error")


class _PrecisionClaims(tuple):
    """The failing findings production-precision explains, kept in a rule's ``used`` set."""

    def __new__(cls, fs):
        return super().__new__(cls, (id(f) for f in fs))

    def __contains__(self, f) -> bool:
        return tuple.__contains__(self, id(f))


def used_precision(used: set) -> _PrecisionClaims:
    return next((u for u in used if isinstance(u, _PrecisionClaims)), _PrecisionClaims(()))


def _within_half(f: Finding) -> bool:
    """A magnitude failure within the half-precision band (3x, gates.MAGNITUDE_MAX_RATIO); others always."""
    if f.check != "magnitude":
        return True
    r = f.observed.get("rms_ratio") if isinstance(f.observed, dict) else None
    return r is not None and 1 / 3 <= float(r) <= 3


def _production_precision(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """``production_precision`` failed: the data was produced in lower precision than declared
    (:func:`eagle3_conformance.checks.check_production_precision`). Runs first, so that the noise it explains is never
    named as a fault (K13 rows of other tokens, K12 FP8 scaling)."""
    bad = v.failing("production_precision")
    if not bad:
        return []
    ob = bad[0].observed if isinstance(bad[0].observed, dict) else {}
    key, declared = ob.get("key", "precision"), ob.get("declared", "float32")
    med = sorted(float(f.observed.get("median_row_angle_deg", 0)) for f in bad if isinstance(f.observed, dict))
    n_all = len([f for f in v.by_check.get("production_precision", []) if f.status != "skip"])
    noise = [f for f in v.findings if f.status == "fail" and (f.check in _PRECISION_CHECKS or f.gate in
                                                                _PRECISION_GATES) and _within_half(f)]
    claimed = tuple(dict.fromkeys(["production_precision"] + [f.check for f in noise]))
    used.add(_PrecisionClaims(noise))
    # a check every failure of which is this noise is accounted for (the other rules leave it alone)
    used.update(ch for ch in claimed[1:] if all(any(f is g for g in noise) for f in v.failing(ch)))
    return [Diagnosis(
        "production-precision", "", f"these hidden states were produced in lower precision than the contract "
        f"declares ({key}: {declared})",
        (f"{len(bad)} of {n_all} {v.unit}: median per-row angle to " + (
            f"{ob['against']} {med[len(med) // 2]:.3f} deg (float32 values through FP8 land on the same codes: 0 deg; "
            "a bf16 forward through FP8 measured 0.9..1.5 deg on SmolLM2-135M)" if ob.get("against") else
            f"the float32 reference {med[len(med) // 2]:.3f} deg (float32 production measured <= 0.15 deg; a bf16 "
            "forward 0.13..2.2 deg)"),
         "the failures below are that precision's noise judged by float32 gates, not a fault: "
         + ", ".join(claimed[1:]) if len(claimed) > 1 else "no other check failed on it"),
        (f"set {key}: bfloat16 (or float16: the dtype the target actually ran in; vLLM's and SGLang's "
         "dtype=auto serve a float32 checkpoint in half precision) and run again; `eagle3-conformance init "
         "--engine ...` derives it",
         f"or, if the contract is right, produce the data in {declared} (the engine's --dtype {declared})"),
        (v.path,), ("feature",), claimed, {v.path: f"{len(bad)}/{n_all} {v.unit}"})]


def _generation_dtype(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """``dtype`` failed on stored data while no slot failed identity: the data was generated in another dtype
    than ``data_dtype`` and means what the contract says. It still fails (docs/speculators-generator.md, "A
    stored dtype other than data_dtype"); this names the one change that settles it."""
    if not stored_path(v.path):
        return []
    bad = [f for f in v.failing("dtype") if f.slot in ("on disk", "feature", "verifier")]
    if not bad or not v.slots_intact:
        return []
    stored = Counter(str(f.observed) for f in bad if f.slot in ("on disk", "feature")).most_common(1)
    got = stored[0][0] if stored else str(bad[0].observed)
    n = len({f.where for f in bad})
    used.add("dtype")
    return [Diagnosis(
        "generation-dtype", "", f"the data is stored in {got}, the contract declares data_dtype: {c.data_dtype}; "
        "every slot holds its declared boundary",
        (f"stored as {got}; slot_identity and verifier_identity pass: the slots mean what the "
         "contract says, only the generation dtype differs",
         "the stored dtype is what the generation server computes in (speculators' generate-offline-data: its vLLM "
         "server's --dtype; SpecForge: its SGLang capture's dtype)"),
        (f"if the data is right: `eagle3-conformance init ... --generation-dtype {got}` (or set data_dtype: {got} "
         f"and precision.training: {got}) and run again",
         f"if the contract is right: run the generation server with --dtype {c.data_dtype} and generate again"),
        (v.path,), ("on disk",), ("dtype",), {v.path: f"{n} {v.unit}"})]


def _rows_misassigned(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    if "row_fingerprint" in used or "slot_identity" in used:
        return []
    bad = v.failing("row_fingerprint")
    if not bad or any(j.wrong for j in v.aux()):
        return []
    n_all = len([f for f in v.by_check.get("row_fingerprint", []) if f.status != "skip"])
    used.update({"row_fingerprint", "feature_alignment", "target_alignment", "slot_identity", "verifier_identity",
                 "norm_band", "magnitude"})
    return [Diagnosis(
        "rows-misassigned", "K13", "some rows hold the hidden states of other tokens or requests",
        (f"{len(bad)} of {n_all} {v.unit} have rows that are not the declared boundary of their own token, while "
         "every slot still resembles its declared boundary most",),
        ("keep rows with their request: split a batch's flat rows by each request's own offsets (no sort of "
         "request ids as strings), gather token-sharded rows before storing",),
        (v.path,), ("feature",), _explained(v, ("row_fingerprint", "feature_alignment", "target_alignment",
                                                "slot_identity", "verifier_identity", "norm_band")),
        {v.path: f"{len(bad)}/{n_all} {v.unit}"})]


_RULES = (_production_precision, _one_slot_input, _other_width, _fc_slot_count, _slot_count, _verifier_missing,
          _decode_rows, _mtp_input_side, _embedding_for_last,
          _engine_default, _convention_shift, _permuted, _without_residual, _no_boundary, _slot_off, _loose_match,
          _verifier_state, _verifier_other, _fp8_transport, _magnitude, _pre_fc_norm, _rows_misassigned,
          _generation_dtype)


# --- entry ----------------------------------------------------------------------------------------


def diagnose(contract: Contract, findings: Iterable[Any], *, translate: Optional[Translate] = None) -> list[Diagnosis]:
    """Name the faults behind the findings of one run (:func:`merge_diagnoses` of
    :func:`path_diagnoses`).

    Args:
        contract: the contract the findings were judged against.
        findings: :class:`eagle3_conformance.findings.Finding` objects or their JSON dicts (a report file);
            a dict with ``count`` (a pass entry folded by ``--json-passes counts``,
            :func:`eagle3_conformance.report._pass_counts`) weighs as ``count`` findings.
        translate: ``(tool, boundaries, contract) -> ToolIds`` for the ids to write (default
            :func:`translate_ids`, i.e. :func:`eagle3_conformance.engine_ids.boundaries_to_tool`).

    Returns:
        Diagnoses, most fundamental first (width and count, then slot identity, verifier,
        magnitude, pre-fc norm, rows); the same diagnosis on several paths is merged into one.
        Empty when nothing failed or no pattern is recognised (the failing checks still say what
        failed).
    """
    return merge_diagnoses(path_diagnoses(contract, findings, translate=translate))


def path_diagnoses(contract: Contract, findings: Iterable[Any], *,
                   translate: Optional[Translate] = None) -> list[Diagnosis]:
    """Each finding path's diagnoses, in the order the paths first appear, not yet merged across
    paths. The findings of one path are judged together, so the diagnoses of several runs whose
    failing paths appear in no other run are the concatenation of each run's (the pytest plugin
    diagnoses each failing item once this way)."""
    fs = _expand(findings)
    if not any(f.status == "fail" for f in fs):
        return []
    fx = _Fixer(contract, translate or translate_ids)
    by_path: dict[str, list[Finding]] = {}
    for f in fs:
        by_path.setdefault(f.path, []).append(f)
    found: list[Diagnosis] = []
    matched = [p for p, pf in by_path.items() if _matches_reference(pf)]
    # every slot judged on any path holds its declared boundary (the cheap all-rows scan judges none)
    judged = [f for f in fs if f.check in ("slot_identity", "verifier_identity") and f.status in ("pass", "fail")]
    intact = bool(judged) and all(f.status == "pass" for f in judged)
    for path, pf in by_path.items():
        if not any(f.status == "fail" for f in pf):
            continue
        view = _PathView(path, pf, tuple(p for p in matched if p != path))
        view.slots_intact = intact
        used: set = set()
        for rule in _RULES:
            found += rule(contract, view, fx, used)
    return found


def merge_diagnoses(ds: list[Diagnosis]) -> list[Diagnosis]:
    """One diagnosis per (kind, fault, title, evidence, slots), in order: see :func:`_merge`."""
    return _merge(ds)


def _matches_reference(fs: list[Finding]) -> bool:
    """Most slot-identity judgements on this path pass: the reference is the data's checkpoint."""
    judged = [f for f in fs if f.check == "slot_identity" and f.status in ("pass", "fail")]
    return bool(judged) and sum(f.status == "pass" for f in judged) * 2 > len(judged)


def _merge(ds: list[Diagnosis]) -> list[Diagnosis]:
    """One diagnosis per (kind, fault, title, evidence, slots): paths, checks, support and ids
    united, fix lines united in order (a training path adds its data-generation line)."""
    out: dict[tuple, Diagnosis] = {}
    for d in ds:
        key = (d.kind, d.fault, d.title, d.evidence, d.slots)
        if key in out:
            o = out[key]
            out[key] = Diagnosis(o.kind, o.fault, o.title, o.evidence, _union_fix(o.fix, d.fix), o.paths + d.paths,
                                 o.slots, tuple(dict.fromkeys(o.checks + d.checks)), {**o.support, **d.support},
                                 {**o.ids, **d.ids})
        else:
            out[key] = d
    return list(out.values())


def _union_fix(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    """``a`` then the lines of ``b`` it lacks, each inserted after the line it follows in ``b``."""
    out = list(a)
    prev = None
    for line in b:
        if line not in out:
            out.insert(out.index(prev) + 1 if prev in out else len(out), line)
        prev = line
    return tuple(out)


def explained_by(diagnoses: Sequence[Diagnosis], path: str, check: str) -> Optional[int]:
    """1-based number of the first diagnosis that accounts for ``check`` failing on ``path``."""
    for i, d in enumerate(diagnoses, 1):
        if path in d.paths and check in d.checks:
            return i
    return None


# --- issue 37 item 6: the two holes found on a held-out real model -----------------------------------


def _verifier_plane_read_as_aux(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """N = K planes read by speculators' reader (``verifier_present`` failed with the verifier slot
    present): the last aux plane became the verifier and the draft got K - 1 slots. Named
    ``verifier-missing`` unless the verifier slot really is the declared verifier (then an aux plane is
    the one missing and ``slot-count`` names it)."""
    bad = [f for f in v.failing("verifier_present") if str(f.observed).endswith("read as the verifier")]
    K = c.num_slots
    if not bad or K < 2:
        return []
    ver = v.verifier()
    if ver is not None and ver.observed == ver.declared and not ver.wrong:
        used.add("verifier_present")  # the last plane is the verifier: an aux plane is missing (slot-count)
        return []
    aux = [str(b) for b in c.aux]
    vt = c.verifier_last.tensor
    read = ver.observed if ver is not None else None
    ev = [f"the data holds {K} planes per sample, as many as the {K} declared aux slots {_fmt_b(aux)}; the contract "
          f"declares them and then the verifier {vt} ({c.verifier_last.norm}-norm): {K + 1} planes",
          f"speculators' reader (ArrowDataset + CollateFn) takes the last plane as the verifier: the draft input holds "
          f"{K - 1} slots {_fmt_b(aux[:-1])} and the verifier target is the aux plane {aux[-1]}"]
    # the same evidence on every path (so the paths merge into one diagnosis): a path with a fingerprint
    # (verifier_identity) reached here only if its verifier slot is not the declared verifier
    hedge = () if read is not None else (
        "(no fingerprint on this path says which plane is missing: a writer that drops the verifier plane stores "
        "exactly this; if the fingerprint sample, --reference, finds the verifier slot is the declared verifier, an "
        "aux plane is the one missing: slot-count)",)
    checks = ("verifier_present", "slot_count", "feature_width", "draft_input_width", "slot_order", "verifier_identity",
              "verifier_norm_state", "target_alignment", "fc_shape")
    used.update(checks)
    fix = (f"generate the data with the verifier plane: list the aux ids then L; speculators' launcher stores {vt} "
           "after the aux ids by default (--include-last-layer), --no-include-last-layer drops it",) + tuple(
        fx.for_path(v.path, aux, {})) + hedge
    return [Diagnosis(
        "verifier-missing", "K3", f"the data stores no verifier plane: its {K} planes are the aux slots, and the reader "
        f"took the last ({aux[-1]}) as the verifier {vt}", tuple(ev), fix, (v.path,), ("verifier", "feature"),
        _explained(v, checks), {v.path: f"{len(bad)} {v.unit}"})]


def _final_norm_in_aux(c: Contract, v: _PathView, fx: _Fixer, used: set) -> list[Diagnosis]:
    """An aux slot holds F (the final norm's output) where the contract declares a boundary B_k: named
    by ``slot_identity`` (observed ``F``) but matched by no boundary pattern (F has no index). The usual
    cause: a generator that stores ``output_hidden_states[L]``, which transformers overwrites with
    ``last_hidden_state`` = F (transformers 5.19.0 utils/output_capturing.py:242-246, 296-297
    ``tie_last_hidden_states``), or an engine capturing after its final norm."""
    if "slot_identity" in used:
        return []
    aux = v.aux()
    fs = [j for j in aux if j.wrong and j.observed == "F" and j.declared != "F"]
    if not fs:
        return []
    others = [j for j in aux if j.wrong and j not in fs]
    labels = tuple(j.label for j in fs)
    declared = [j.declared for j in aux]
    ev = [f"{j.label} is F, the final norm's output (post-norm), on {j.fails} of {j.judged} {v.unit}; contract says "
          f"{j.declared} (pre-norm residual stream)" for j in fs]
    ok = [j.label for j in aux if not j.wrong]
    if ok:
        ev.append(f"{', '.join(ok)} hold{'s' if len(ok) == 1 else ''} the declared boundar"
                  f"{'y' if len(ok) == 1 else 'ies'}")
    deep = [j for j in fs if _idx(j.declared) == c.L]
    ids: dict = {}
    fix = [f"store {', '.join(j.declared for j in fs)} before the final norm: transformers' output_hidden_states[{c.L}] "
           "is F, not B_L (it overwrites the last entry with last_hidden_state: utils/output_capturing.py "
           "tie_last_hidden_states); take B_k from a hook on layer k's input (B_L: the final norm's input) or use the "
           "engine's own aux capture"] + fx.for_path(v.path, declared, ids)
    if deep:
        fix.append(f"or, if the draft was trained on F there, state it: capture.boundaries with F in place of B_{c.L}")
    if not others:
        used.update(_IDENTITY_CHECKS)
    return [Diagnosis(
        "final-norm-in-aux", "K4", f"{', '.join(labels)} hold{'s' if len(fs) == 1 else ''} F (the final norm's output) "
        f"where the contract declares {', '.join(j.declared for j in fs)}", tuple(ev), tuple(fix), (v.path,), labels,
        _explained(v, _IDENTITY_CHECKS, labels), {v.path: v.support(fs)}, ids)]


KINDS["final-norm-in-aux"] = ("K4", "an aux slot holds F (post final norm) where a pre-norm boundary is declared")

# inserted without reordering the table above: the plane-count reading before slot-count, F in an aux
# slot before the boundary-index patterns (F has no index, so none of them names it)
_RULES = tuple(r for pair in ((_verifier_plane_read_as_aux, r) if r is _slot_count else
                              (_final_norm_in_aux, r) if r is _engine_default else (r,) for r in _RULES) for r in pair)
