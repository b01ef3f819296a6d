"""Which layers are captured (K1-K3): the id source and the engine's defaults, the index
convention (off by one, the embedding at index 0, the order of the blocks), and a final layer the
engine never reaches."""

from __future__ import annotations

from eagle3_conformance.engine_ids import engine_default_aux_ids
from eagle3_conformance.faults.example import Knobs
from eagle3_conformance.faults.operators.base import Apply, NotApplicable, Operator, aux_indices, both, serving_config
from eagle3_conformance.faults.scenario import sglang_ids

KINDS = {
    "K1": "layer-id source / engine default",
    "K2": "index convention, embedding at 0",
    "K3": "final layer capture unreachable",
}
"""The fault kinds (fault-kinds.md) of this family, as the matrix names them."""


def _t_swap(scn, c, ex):
    a = [str(b) for b in c.aux]
    if len(a) < 2:
        return None
    a[0], a[1] = a[1], a[0]
    return Knobs(slots=a + [c.verifier_last.tensor])


def _t_embed(scn, c, ex):
    return Knobs(slots=["B_0"] + [str(b) for b in c.aux])


def _t_shift(scn, c, ex):
    if max(aux_indices(c)) + 1 > c.L:
        return None
    return Knobs(slots=[f"B_{b + 1}" for b in aux_indices(c)] + [c.verifier_last.tensor])


def _defaults(L: int) -> list[int]:
    return sorted(set(engine_default_aux_ids(L)) & set(range(1, L + 1)))


def _t_default(scn, c, ex):
    dflt = _defaults(c.L)
    if dflt == aux_indices(c) or not dflt:
        return None
    return Knobs(slots=[f"B_{b}" for b in dflt] + [c.verifier_last.tensor])


def _t_unreachable(scn, c, ex):
    if aux_indices(c)[-1] != c.L:
        return None
    return Knobs(slots=[str(b) for b in c.aux[:-1]] + [c.verifier_last.tensor])


def _s_embed(scn, c, ex):
    ids = sglang_ids(aux_indices(c))
    return Knobs(draft_config=serving_config(scn, [-1] + ids[:-1]))


def _s_shift(scn, c, ex):
    if max(aux_indices(c)) + 1 > c.L - 1:  # B_L is unreachable in llama.py: the shift would drop a slot
        return None
    return Knobs(draft_config=serving_config(scn, aux_indices(c)))  # boundary-convention ids; SGLang adds +1


def _s_default(scn, c, ex):
    L = c.L
    if engine_default_aux_ids(L) == aux_indices(c):
        return None
    cfg = serving_config(scn, sglang_ids(aux_indices(c)))
    cfg["eagle_aux_hidden_state_layer_ids"] = cfg["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")
    return Knobs(draft_config=cfg)  # ids at top level: SGLang's resolver ignores them


def _s_unreachable(scn, c, ex):
    ids = sglang_ids(aux_indices(c))
    if ids[-1] == c.L - 1:
        return None
    return Knobs(draft_config=serving_config(scn, ids[:-1] + [c.L - 1]))  # asks for B_L: layer L never runs


_NA_SGLANG_ORDER = NotApplicable(
    "SGLang concatenates aux states in layer order whatever the id order (llama.py:485-494): no "
    "wiring yields swapped blocks")


OPERATORS: list[Operator] = [
    Operator("slots-swapped", "K2", "aux blocks in the wrong order", ("slot_order", "slot_identity"), {
        "training": Apply("data generator writes the first two aux slots swapped (list-order concat)",
                          "data files", _t_swap),
        "specforge": Apply("aux_hidden_state written with the first two slots swapped (the old HF backend's "
                           "list-order concat of an unsorted id list)", "data files", _t_swap),
        "sglang-extend": _NA_SGLANG_ORDER, "sglang-decode": _NA_SGLANG_ORDER}),
    Operator("embedding-prepended", "K2", "B_0 (embedding) captured as slot 0",
             ("no_embedding", "slot_identity"), {
        "training": Apply("on-disk slots [B_0, aux...] (no verifier slot): the loader routes B_0 to fc "
                          "and the last aux to the verifier", "data files", _t_embed),
        "specforge": Apply("aux_hidden_state [B_0, aux...] and the last aux stored as hidden_state", "data files",
                           _t_embed),
        **both("draft config ids [-1, ...]: llama's +1 maps -1 to B_0", "engine knob (draft config)", _s_embed)}),
    Operator("ids-shifted", "K2", "every id shifted by one (convention crossed)", ("slot_identity", "engine_mapping"), {
        "training": Apply("data generator captures B_{b+1} (output-of ids read as boundaries)", "data files", _t_shift),
        "specforge": Apply("capture backend adds +1 to ids already +1 (B_{b+1} stored)", "data files", _t_shift),
        **both("draft config holds boundary ids b; SGLang adds +1 -> B_{b+1}", "engine knob (draft config)",
                _s_shift)}),
    Operator("engine-default-layers", "K1", "engine default layers instead of the configured ones",
             ("engine_mapping", "slot_identity", "slot_count"), {
        "training": Apply("data generator falls back to its defaults {2, L//2, L-3}", "data files", _t_default),
        "specforge": Apply("capture falls back to default layers {2, L//2, L-3}", "data files", _t_default),
        **both("ids moved to the top-level key: SGLang's resolver ignores it, setter defaults apply",
                "engine knob (draft config)", _s_default)}),
    Operator("last-slot-unreachable", "K3", "B_L requested but never captured (K-1 slots)",
             ("slot_count", "feature_width"), {
        "training": Apply("contract aux ends with B_L; the generator cannot reach it and writes K-1 aux slots",
                          "data files", _t_unreachable),
        "specforge": Apply("contract aux ends with B_L; SGLang's llama.py capture never reaches it: K-1 aux slots "
                           "stored", "data files", _t_unreachable),
        **both("draft config's last id L-1 -> layer L, never reached by llama.py's loop", "engine knob (draft config)",
                _s_unreachable)}, scenario="final+base"),
]
