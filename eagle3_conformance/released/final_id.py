"""``upgrade-check``: what each SGLang release does with the id naming the final boundary B_L (issue 37,
R53: gpt-oss-120b-Eagle3-v3's [24, 30, 36] served as [25, 31, 37], the last never captured).

For a contract whose aux slots include ``B_L``, the release's own setter (run in isolation by
:func:`eagle3_conformance.released.sglang.run_setter`) is given the id that names B_L under each
convention, ``L - 1`` (output-of, the +1 rule) and ``L`` (boundary), and its capture loop's reach
(:func:`eagle3_conformance.released.result.effective`) says what it captures: B_L, nothing, or another
layer. Notes start with ``"id = L: "``.
"""

from __future__ import annotations

from eagle3_conformance.released import sglang as sg
from eagle3_conformance.released.result import effective


def sglang_final_id_notes(c, spec, tree) -> list[str]:
    """One note per id (L - 1, L) for a contract with ``B_L`` among its aux slots; empty otherwise."""
    L = c.L
    if not any((not b.final) and b.index == L for b in c.aux):
        return []
    out = []
    for i in (L - 1, L):
        try:
            run = sg.run_setter(tree, c.target.architecture, L, [i])
        except Exception as e:  # the release's own setter refuses the id (or cannot run in isolation)
            out.append(f"id = L: {spec.label}: id {i} -> nothing (its setter raises {type(e).__name__}: "
                       f"{' '.join(str(e).split())})")
            continue
        if run.layers_to_capture is None:
            continue
        got, _, dropped = effective(run.layers_to_capture, [i], run.deepest)
        what = (", ".join(got) + ("" if got == [f"B_{L}"] else f" (not B_{L})") if got else
                f"nothing ({'; '.join(dropped)} is beyond its capture loop, which reaches B_{run.deepest})")
        out.append(f"id = L: {spec.label}: id {i} -> {what}" + (f" (stores at {run.assigned_at})"
                                                                if run.assigned_at else ""))
    return out
