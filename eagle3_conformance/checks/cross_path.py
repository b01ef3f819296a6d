"""Two paths, the same tokens: the same feature rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eagle3_conformance.checks.common import GATE_CROSS_PATH
from eagle3_conformance.checks.registry import PAIR, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core import gates
from eagle3_conformance.core.capture import Capture
from eagle3_conformance.core.findings import Finding

if TYPE_CHECKING:
    import torch
else:  # imported at first use: the package loads without torch (core installs)
    from eagle3_conformance.environment.torch_env import lazy_torch as torch


@check(PAIR, ("K13", "K9", "K5"), gates=(GATE_CROSS_PATH,))
def check_cross_path(c: Contract, a: Capture, b: Capture) -> list[Finding]:
    """K13/K9: two paths give the same feature rows for the same tokens (cosine >= the contract's
    cross_path_min_cosine on every shared token; reports the max abs difference)."""
    where = f"{a.path} vs {b.path} ({a.where} / {b.where})"
    if a.width != b.width:
        return [Finding("cross_path", "fail", f"{a.path}|{b.path}", "feature", a.width, b.width, where,
                        f"widths differ: {a.width} vs {b.width}", "K5")]
    if not torch.equal(a.token_ids[: min(len(a.token_ids), len(b.token_ids))],
                       b.token_ids[: min(len(a.token_ids), len(b.token_ids))]):
        return [Finding("cross_path", "skip", f"{a.path}|{b.path}", "feature", None, None, where,
                        "the two captures are not over the same tokens", "K13")]
    ia = {int(r): i for i, r in enumerate(a.rows)}
    pairs = [(ia[int(r)], j) for j, r in enumerate(b.rows) if int(r) in ia]
    if not pairs:
        return [Finding("cross_path", "skip", f"{a.path}|{b.path}", "feature", None, None, where, "no shared rows", "K13")]
    ai = torch.tensor([p[0] for p in pairs])
    bi = torch.tensor([p[1] for p in pairs])
    d = c.draft.target_hidden_size
    xa, xb = a.feature[ai].float(), b.feature[bi].float()
    cos = torch.stack([torch.nn.functional.cosine_similarity(sa, sb, dim=-1)
                       for sa, sb in zip(xa.split(d, -1), xb.split(d, -1))]).min(0).values
    worst = float(cos.min())
    maxabs = float((xa - xb).abs().max())
    floor = gates.cross_path_min_cosine(c, a.stored, b.stored)
    ok = worst >= floor
    return [Finding("cross_path", "pass" if ok else "fail", f"{a.path}|{b.path}", "feature",
                    f"cos >= {floor}", f"min cos {worst:.5f}, max |diff| {maxabs:.4g}", where,
                    f"{len(pairs)} shared rows: min per-slot cosine {worst:.5f}, max abs difference {maxabs:.4g}"
                    + ("" if ok else f" (row {int(ai[cos.argmin()])} of {a.path}; floor {GATE_CROSS_PATH})"), "K13",
                    "" if ok else GATE_CROSS_PATH)]
