"""Which state of a layer is captured (K4, K5): pre- or post-norm, with or without the residual,
and the final-norm output F handed over instead of the aux concat."""

from __future__ import annotations

from eagle3_conformance.environment import torch_env

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.core.notation import Boundary  # noqa: E402
from eagle3_conformance.faults.example import Knobs  # noqa: E402
from eagle3_conformance.faults.operators.base import Apply, Operator, both, slot_map, with_eagle  # noqa: E402

KINDS = {
    "K4": "norm / residual state",
    "K5": "aux-mode width",
}
"""The fault kinds (fault-kinds.md) of this family, as the matrix names them."""


def _t_F_only(scn, c, ex):
    return Knobs(slots=["F", c.verifier_last.tensor])


def _s_no_aux(scn, c, ex):
    return Knobs(draft_config=with_eagle(scn, c, use_aux_hidden_state=False))


def _t_postnorm(scn, c, ex):
    j = len(c.aux) - 1
    b = c.aux[j].index
    w = scn.ref.model.model.layers[b].input_layernorm.weight.detach().float() if b < c.L else \
        scn.ref.model.model.norm.weight.detach().float()

    def tf(scn_, r, hs):
        hs = hs.clone()
        x = hs[:, j]
        hs[:, j] = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
        return hs

    return Knobs(hs_transform=tf, slots=[str(x) for x in c.aux] + ["F"])


def _s_postnorm(scn, c, ex):
    j = len(c.aux) - 1
    b = c.aux[j].index

    def normed(scn_, cap, x):  # the deepest slot handed over after layer b's input RMSNorm
        w = scn_.ref.model.model.layers[b].input_layernorm.weight.detach().float() if b < c.L else \
            scn_.ref.model.model.norm.weight.detach().float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    return Knobs(capture=slot_map(c, j, normed))


def _t_no_residual(scn, c, ex):
    j = len(c.aux) - 1  # the deepest aux slot

    def tf(scn_, r, hs):
        b = c.aux[j].index
        hs = hs.clone()
        hs[:, j] = r.boundary(Boundary(b)) - r.boundary(Boundary(b - 1))
        return hs

    return Knobs(hs_transform=tf)


def _s_no_residual(scn, c, ex):
    j = len(c.aux) - 1
    b = c.aux[j].index

    def delta(scn_, cap, x):  # the layer's update without the residual it was added to
        return x - scn_.ref.capture(cap.token_ids).boundary(Boundary(b - 1))[cap.rows]

    return Knobs(capture=slot_map(c, j, delta))


OPERATORS: list[Operator] = [
    Operator("final-norm-output-as-aux", "K5", "F handed over instead of the aux concat",
             ("slot_count", "feature_width", "draft_input_width", "fc_ran", "slot_identity"), {
        "training": Apply("on-disk slots [F, B_L]: fc gets the d-wide F", "data files", _t_F_only),
        "specforge": Apply("aux_hidden_state holds F alone (the no-aux fallback): d wide", "data files", _t_F_only),
        **both("draft config use_aux_hidden_state: false -> LogitsProcessor stores F (no-aux fallback)",
                "engine knob (draft config)", _s_no_aux)}),
    Operator("pre-post-norm-swapped", "K4", "post-norm state where the contract says pre-norm",
             ("verifier_norm_state", "verifier_identity", "slot_identity", "norm_band", "row_fingerprint"), {
        "training": Apply("verifier slot stored as F (post final norm) and the deepest aux slot stored after "
                          "its layer's input RMSNorm", "data files", _t_postnorm),
        "specforge": Apply("deepest aux slot stored after its layer's input RMSNorm", "data files", _t_postnorm),
        **both("deepest aux slot handed over after its layer's input RMSNorm (capture site after the norm)",
                "in memory (capture site)", _s_postnorm)}),
    Operator("hidden-without-residual", "K4", "layer update captured without the residual",
             ("slot_identity", "row_fingerprint", "norm_band"), {
        "training": Apply("deepest aux slot written as B_b - B_{b-1}", "data files", _t_no_residual),
        "specforge": Apply("deepest aux slot stored as B_b - B_{b-1}", "data files", _t_no_residual),
        **both("deepest aux slot minus the residual entering its layer", "in memory (capture site)",
                _s_no_residual)}),
]
