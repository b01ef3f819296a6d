"""Diagnoses of the shape checks (checks/shape.py, checks/draft_fc.py): the draft got one slot
instead of K, another model's width, an fc built for another slot count, fewer slots, no verifier plane."""

from __future__ import annotations

import re
from collections import Counter

from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import stored_path
from eagle3_conformance.diagnose.base import _IDENTITY_CHECKS, Diagnosis, _explained, _PathView
from eagle3_conformance.diagnose.fixes import _Fixer, _fmt_b


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


# --- issue 37 item 6: N = K planes read by speculators' reader ----------------------------------------


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
