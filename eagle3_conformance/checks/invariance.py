"""``engine_invariance``: the engine checked against itself (issue 45 item 1).

A causal target's state at position p depends only on ``tokens[:p+1]``, and what the draft is handed
for row p (the aux concat, the token paired with it, the position) depends only on that prefix and
the next token. So the same prompt must give the draft the same inputs whether its prefill was
chunked or not, whether logprobs were asked for, whether the prefix cache hit, alone or in a batch,
at TP 1 or TP 2. This check compares a capture of a prompt under one *variation* with the capture of
the same prompt in the *plain* run, row by row: no reference model is involved.

Field reports it exists for (docs/field-reports-2026.md): R84 (chunked prefill: at a chunk end the
draft's input token was the target's guess, not the prompt's next token), R85 (only the last chunk's
rows survived), R95 (a prefix-cache hit recycled the normed state), R102 (the input-logprob path
collected no aux states), R79 / R105 (a batch's rows indexed at a neighbour's offset, or rows beyond
the batch), R86 / R87 (TP / DP: one shard's rows, or a replicated state summed as partial).

The noise allowed between the two is the contract's own: two computations of one boundary in the
serving precision agree to ``gates.cross_path_min_cosine`` (docs/gates.md: 0.999 float32, 0.98
bfloat16 / float16). A perturbation of relative size e turns a row by at most asin(e) and changes its
norm by at most e, so the row gate is the relative difference ``||v - p|| / ||p|| <= sqrt(2 (1 -
floor))`` (0.0447 float32, 0.2 half precision): the same angle budget, and a magnitude budget of the
same size (a replicated state summed over 2 ranks, x2, keeps its direction and fails it). Token ids
and positions are integers: they must be equal.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

from eagle3_conformance.checks.common import GATE_CROSS_PATH, dtype_name, slot_label
from eagle3_conformance.checks.registry import FACT, VARIANT, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core import gates
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding, Status

if TYPE_CHECKING:
    import torch
else:  # imported at first use: the package loads without torch (core installs)
    from eagle3_conformance.environment.torch_env import lazy_torch as torch

CHECK = "engine_invariance"
#: the variation a capture was made under (provenance key) and the first row the engine recomputed
#: (a prefix-cache hit's cached tokens; 0 otherwise)
VARIATION_KEY = "variation"
FIRST_ROW_KEY = "first_row"


def cross_path_floor(c: Contract, served: Optional[str] = None) -> float:
    """The cosine floor two captures of one boundary are held to: ``gates.cross_path_min_cosine`` where the
    contract sets it, else the default of the lower of ``precision.serving`` and ``served`` (the dtype the
    captures were actually served in, e.g. a server launched with ``--dtype bfloat16`` against a float32
    contract: its noise is bfloat16's, and ``dtype`` fails on it separately)."""
    floor = gates.cross_path_min_cosine(c, False, False)
    if c.gates.cross_path_min_cosine is not None or served not in gates.CROSS_PATH_MIN_COSINE:
        return floor
    return min(floor, gates.CROSS_PATH_MIN_COSINE[str(served)])


def max_relative_difference(c: Contract, served: Optional[str] = None) -> float:
    """The row gate: ``sqrt(2 (1 - floor))`` of :func:`cross_path_floor` (module docstring)."""
    return math.sqrt(2.0 * (1.0 - cross_path_floor(c, served)))


def _f(status: Status, variant: Capture, slot: Optional[str], expected, observed, message: str,
       gate: str = "") -> Finding:
    where = f"{variant.provenance.get(VARIATION_KEY, 'variation')}: {variant.where}"
    return Finding(CHECK, status, variant.path, slot, expected, observed, where, message, "K13", gate)


def _shared(plain: Capture, variant: Capture) -> tuple[list[int], list[int], list[int], list[int]]:
    """(plain row indices, variant row indices, rows the variant lacks, rows only the variant has):
    rows matched by token index; the variant is owed every plain row from its first recomputed row on."""
    first = int(variant.provenance.get(FIRST_ROW_KEY, 0) or 0)
    pi = {int(r): i for i, r in enumerate(plain.rows.tolist())}
    vi = {int(r): i for i, r in enumerate(variant.rows.tolist())}
    rows = sorted(set(pi) & set(vi))
    missing = sorted(r for r in pi if r >= first and r not in vi)
    extra = sorted(r for r in vi if r not in pi)
    return [pi[r] for r in rows], [vi[r] for r in rows], missing, extra


def _prefix_ok(plain: Capture, variant: Capture, last_row: int) -> bool:
    n = last_row + 1
    return len(plain.token_ids) >= n and len(variant.token_ids) >= n and \
        torch.equal(plain.token_ids[:n].long(), variant.token_ids[:n].long())


def _ids(what: str, plain: Capture, variant: Capture, a: list[int], b: list[int], attr: str) -> list[Finding]:
    x, y = getattr(plain, attr), getattr(variant, attr)
    if x is None or y is None:
        return [_f("skip", variant, what, None, None, f"no {what} ids recorded on "
                   f"{'the plain run' if x is None else 'this variation'}")]
    xa, yb = x.reshape(-1)[a].long(), y.reshape(-1)[b].long()
    bad = (xa != yb).nonzero().flatten().tolist()
    if not bad:
        return [_f("pass", variant, what, "equal to the plain run", f"{len(a)} rows equal",
                   f"the draft's input {what} equals the plain run's on all {len(a)} shared rows")]
    j = bad[0]
    row = int(plain.rows[a[j]])
    nxt = (f"; the prompt's token at {row + 1} is {int(plain.token_ids[row + 1])}"
           if what == "token" and row + 1 < len(plain.token_ids) else "")
    return [_f("fail", variant, what, int(xa[j]), int(yb[j]),
               f"row {row}: the draft's input {what} is {int(yb[j])} under this variation, {int(xa[j])} in the "
               f"plain run{nxt} ({len(bad)} of {len(a)} shared rows differ, rows "
               f"{[int(plain.rows[a[k]]) for k in bad[:6]]})")]


def _slots(c: Contract, plain: Capture, variant: Capture, a: list[int], b: list[int]) -> list[Finding]:
    d = c.draft.target_hidden_size
    served = dtype_name(variant.feature)  # the noise of what was served, not of what the contract declares
    tol, floor = max_relative_difference(c, served), cross_path_floor(c, served)
    out = []
    xs, ys = plain.feature[a].float().split(d, -1), variant.feature[b].float().split(d, -1)
    for i, (x, y) in enumerate(zip(xs, ys)):
        norm = x.norm(dim=-1)
        rel = (y - x).norm(dim=-1) / norm.clamp_min(1e-12)
        rel = torch.where((norm == 0) & (y.norm(dim=-1) == 0), torch.zeros_like(rel), rel)
        worst = int(rel.argmax())
        obs = {"max_relative_difference": round(float(rel.max()), 6), "rows": len(a)}
        bad = (rel > tol).nonzero().flatten().tolist()
        if not bad:
            out.append(_f("pass", variant, slot_label(i), f"relative difference <= {tol:.4g}", obs,
                          f"{len(a)} shared rows: largest relative difference to the plain run "
                          f"{float(rel.max()):.3g} (row {int(plain.rows[a[worst]])})"))
            continue
        j = bad[0]
        cos = float(torch.nn.functional.cosine_similarity(x[j], y[j], dim=0))
        ratio = float(y[j].norm() / norm[j].clamp_min(1e-12))
        obs.update(first_row=int(plain.rows[a[j]]), cosine=round(cos, 6), norm_ratio=round(ratio, 6),
                   rows_differing=len(bad))
        out.append(_f("fail", variant, slot_label(i), f"relative difference <= {tol:.4g}", obs,
                      f"row {int(plain.rows[a[j]])}, {slot_label(i)}: relative difference {float(rel[j]):.3g} to the "
                      f"plain run > {tol:.4g} (cosine {cos:.5f}, norm ratio {ratio:.4g}; {len(bad)} of {len(a)} "
                      f"shared rows differ; the noise of {GATE_CROSS_PATH} = {floor}, served {served})", GATE_CROSS_PATH))
    return out


def _exercised(variant: Capture) -> list[Finding]:
    """Whether the engine's own records show the variation happened (a chunked prefill in several
    chunks, a cache hit, a batch): a variation that did not happen tested nothing and says so."""
    ex = variant.provenance.get("exercised")
    if ex is None:
        return []
    what, cond = variant.provenance.get("condition", ""), variant.provenance.get("conditions") or {}
    if ex:
        return [_f("pass", variant, "variation", what, cond, f"the engine's records show it: {cond}")]
    return [_f("skip", variant, "variation", what, cond,
               f"the engine's records do not show this variation ({cond}): the rows below compare two plain runs")]


@check(VARIANT, ("K13", "K8", "K4"), gates=(GATE_CROSS_PATH,))
def check_engine_invariance(c: Contract, plain: Capture, variant: Capture) -> list[Finding]:
    """The variant capture hands the draft what the plain capture of the same prompt does, row by row.

    Inputs: two captures of one prompt (``feature`` [N, K*d], ``rows`` [N] token indices into
    ``token_ids``, ``draft_input_ids`` [N], ``position_ids`` [N]); ``variant.provenance["variation"]``
    names the variation, ``["first_row"]`` the first row the engine recomputed (a prefix-cache hit).
    Findings: ``rows`` (the variant has every plain row from its first row on, and none the plain run
    lacks), ``token``, ``position`` (equal), one per slot (relative difference within
    :func:`max_relative_difference`); each failure names the variation, the row and the slot.
    """
    if plain.width != variant.width or plain.fc_ran != variant.fc_ran:
        return [_f("fail", variant, "feature", f"width {plain.width}, fc ran {plain.fc_ran}",
                   f"width {variant.width}, fc ran {variant.fc_ran}",
                   f"the draft got {variant.width}-wide input (fc ran: {variant.fc_ran}) under this variation, "
                   f"{plain.width}-wide (fc ran: {plain.fc_ran}) in the plain run")]
    a, b, missing, extra = _shared(plain, variant)
    if a and not _prefix_ok(plain, variant, max(int(plain.rows[i]) for i in a)):
        return [_f("skip", variant, None, None, None, "the two captures are not of the same tokens")]
    out = _exercised(variant)
    if missing or extra:
        out.append(_f("fail", variant, "rows", "every plain row from the first recomputed one",
                      {"missing": missing[:16], "extra": extra[:16]},
                      f"rows {'missing: ' + str(missing[:8]) if missing else ''}"
                      f"{'; ' if missing and extra else ''}{'not in the plain run: ' + str(extra[:8]) if extra else ''}"
                      f" ({len(missing)} missing, {len(extra)} extra, of {len(plain.rows)} plain rows)"))
    else:
        out.append(_f("pass", variant, "rows", "every plain row from the first recomputed one", len(a),
                      f"{len(a)} rows, as the plain run from row {variant.provenance.get(FIRST_ROW_KEY, 0) or 0}"))
    if not a:
        return out
    return out + _ids("token", plain, variant, a, b, "draft_input_ids") + \
        _ids("position", plain, variant, a, b, "position_ids") + _slots(c, plain, variant, a, b)


@check(FACT, ("K13",), fact="engine_variations")
def check_engine_variations(c: Contract, fig: dict, path: str = "engine") -> list[Finding]:
    """What the invariance run did, one finding per variation asked for: ``fail`` when generation
    broke under it where the plain run did not (``failed``: R102 crashed this way) or when none of its
    requests could be compared (``notes``); ``skip`` when it could not run here (``unavailable``);
    ``pass`` with its counts and cost (engine starts, seconds) otherwise; ``skip`` for each variation the
    engine offers that was not asked for (``not_asked``: name -> why).

    ``fig``: ``{"engine", "asked": [names], "cost": {name: {"engine_starts", "seconds"}}, "failed":
    {name: why}, "unavailable": {name: why}, "notes": [str], "counts": {name: {"extend", "verify",
    "verify_unpaired"}}, "note": str, "not_asked": {name: why}}``."""
    out = [Finding("engine_variations", "skip", path, None, None, why, f"{fig.get('engine', 'engine')}: {name}",
                   f"{name}: not asked for ({why})", "K13") for name, why in (fig.get("not_asked") or {}).items()]
    for name in fig.get("asked", []):
        cost, n = (fig.get("cost") or {}).get(name, {}), (fig.get("counts") or {}).get(name, {})
        where = f"{fig.get('engine', 'engine')}: {name}"
        if name in (fig.get("failed") or {}):
            out.append(Finding("engine_variations", "fail", path, None, "the engine serves the variation",
                               fig["failed"][name], where, f"{name}: the engine failed where the plain run did not: "
                               f"{fig['failed'][name]}", "K13"))
        elif name in (fig.get("unavailable") or {}):
            out.append(Finding("engine_variations", "skip", path, None, None, fig["unavailable"][name], where,
                               f"{name}: not run here: {fig['unavailable'][name]}", "K13"))
        elif not n.get("extend"):
            out.append(Finding("engine_variations", "fail", path, None, "captures of the variation", n, where,
                               f"{name}: no request of this variation could be compared with the plain run "
                               f"({'; '.join(x for x in fig.get('notes', []) if x.startswith(name)) or 'none captured'})",
                               "K13"))
        else:
            out.append(Finding("engine_variations", "pass", path, None, None, {**n, **cost}, where,
                               f"{name}: {n.get('extend')} prompts and {n.get('verify', 0)} verify steps compared "
                               f"({n.get('verify_unpaired', 0)} verify steps reached other tokens); "
                               f"{cost.get('engine_starts', 0)} engine start(s), {cost.get('seconds', 0):.0f} s"))
    return out


def with_invariance_failures(findings: list[Finding]) -> list[Finding]:
    """``findings`` with each ``engine_variations`` pass turned to fail where an ``engine_invariance`` finding
    of that variation failed (its ``where`` starts ``<variation>: ``): the per-variation summary then says fail
    for every variation that failed, and names how many findings did."""
    import dataclasses

    bad: dict[str, int] = {}
    for f in findings:
        if f.check == CHECK and f.status == "fail":
            name = str(f.where).split(": ")[0]
            bad[name] = bad.get(name, 0) + 1
    out = []
    for f in findings:
        name = str(f.where).split(": ")[-1]
        if f.check == "engine_variations" and f.status == "pass" and name in bad:
            f = dataclasses.replace(f, status="fail", message=f"{name}: {bad[name]} {CHECK} finding(s) failed; "
                                                             + f.message.split(": ", 1)[-1])
        out.append(f)
    return out
