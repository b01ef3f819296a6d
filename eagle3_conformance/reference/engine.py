"""The engine as its own reference: the target's boundaries recorded in the SAME forward that fed the
draft (:mod:`eagle3_conformance.tools.sglang_engine.hooks`, rules per family in
:mod:`eagle3_conformance.tools.sglang_engine.boundaries`), handed to the checks in place of the
transformers forward (:class:`eagle3_conformance.reference.ReferenceModel`).

Rows are keyed by the token prefix they were computed on. A causal target's state at position p
depends only on ``tokens[:p+1]``, so a row recorded in the prompt's EXTEND forward, or in a
TARGET_VERIFY forward for a draft token the verifier later rejected, is the reference row of every
capture whose token sequence has that prefix, and of no other. Rows no record holds are NaN in the
:class:`~eagle3_conformance.reference.Reference` this returns, and a capture is judged only on rows
the engine recorded (:func:`judged_rows`).

Only the recorded boundaries exist (``Reference.present``): identity scans those only and says so
(:func:`eagle3_conformance.checks.identity.scanned`); a check that needs another boundary gets
:class:`~eagle3_conformance.reference.MissingBoundary`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

import torch

from eagle3_conformance.core.notation import Boundary
from eagle3_conformance.reference import Reference, ReferenceError
from eagle3_conformance.tools.sglang_engine.captures import segments

SOURCE = "engine"


def prefix_keys(tokens: Iterable[int]) -> list[int]:
    """keys[p] names ``tokens[:p+1]`` (a hash chain; equal prefixes give equal keys)."""
    out, h = [], 0x9E3779B9
    for t in tokens:
        h = hash((h, int(t)))
        out.append(h)
    return out


def needed_boundaries(aux: list[Boundary], num_layers: int, verifier: Optional[Boundary] = None) -> list[str]:
    """What the checks need recorded: each slot's B_k and its neighbours B_{k-1}, B_{k+1}, plus B_0,
    B_L and F (ascending, each once); with ``verifier`` (a path whose captures carry verifier rows)
    that boundary and its neighbours too. Engine captures carry no verifier rows."""
    want = {0, num_layers}
    for b in list(aux) + ([verifier] if verifier is not None else []):
        if not b.final:
            want |= {k for k in (b.index - 1, b.index, b.index + 1) if 0 <= k <= num_layers}
    return [f"B_{k}" for k in sorted(want)] + ["F"]


class EngineReference:
    """Boundary rows the engine recorded, served like :class:`~eagle3_conformance.reference.ReferenceModel`.

    Args:
        num_layers: L of the target.
        final_norm_weight: [d] gamma of the final norm (float32), or None (ones: the verifier
            checks that need it are then not judged by this reference).
        final_norm_eps, final_norm_kind: as :class:`~eagle3_conformance.reference.Reference`.
        source: words for reports ("engine (sglang forward_hooks, tp rank 0 of 1)").
    """

    def __init__(self, num_layers: int, final_norm_weight: Optional[torch.Tensor] = None, final_norm_eps: float = 1e-6,
                 final_norm_kind: str = "rmsnorm", source: str = SOURCE):
        self.num_layers = int(num_layers)
        self.final_norm_weight = final_norm_weight
        self.final_norm_eps = float(final_norm_eps)
        self.final_norm_kind = final_norm_kind
        self.source = source
        self.rows: dict[int, dict[str, torch.Tensor]] = {}
        self.hidden_size: Optional[int] = None
        self.forwards = 0  # no forward of its own: the engine computed every row
        self.disk_hits = 0
        self.stats: dict[str, Any] = {"records": 0, "rows": 0, "bytes": 0, "dropped": [], "missing": set(),
                                      "errors": [], "rank": None}

    def note_record(self, rec: dict[str, Any]) -> None:
        """Count one target record in :attr:`stats`: its rank, the boundaries it could not record,
        its errors and the rows it dropped over the budget (record keys ``ref_*``, :mod:`.tools.sglang_engine.hooks`)."""
        st = self.stats
        st["records"] += 1
        st["rank"] = st["rank"] or rec.get("ref_rank")
        st["missing"] |= set(rec.get("ref_missing") or [])
        st["errors"] += list(rec.get("ref_errors") or [])
        if rec.get("ref_dropped"):
            st["dropped"].append(rec["ref_dropped"])

    def add(self, tokens: list[int], boundaries: list[str], states: torch.Tensor) -> None:
        """One recorded row: ``states`` [len(boundaries), d] of the last token of ``tokens``."""
        key = prefix_keys(tokens)[-1]
        row = self.rows.setdefault(key, {})
        for b, v in zip(boundaries, states):
            row[b] = v.float()
        self.hidden_size = int(states.shape[-1])

    @property
    def present(self) -> list[Boundary]:
        """Every boundary some row holds, in B_0..B_L, F order."""
        names = {b for row in self.rows.values() for b in row}
        return sorted((Boundary.parse(b) for b in names), key=Boundary.sort_key)

    def known(self, token_ids) -> torch.Tensor:
        """[T] bool: the engine recorded the row of token t of ``token_ids``."""
        keys = prefix_keys(torch.as_tensor(token_ids).reshape(-1).tolist())
        return torch.tensor([k in self.rows for k in keys], dtype=torch.bool)

    def capture(self, token_ids) -> Reference:
        """A partial :class:`~eagle3_conformance.reference.Reference` for ``token_ids`` ([T]): the
        recorded boundaries (``present``), NaN where the engine recorded no row.

        Raises:
            ReferenceError: the engine recorded nothing at all (no boundary hooks ran).
        """
        ids = torch.as_tensor(token_ids, dtype=torch.long).reshape(-1).cpu()
        present = self.present
        if not present or self.hidden_size is None:
            raise ReferenceError(f"the {self.source} reference recorded no boundary (did its hooks run? "
                                 f"missing: {sorted(self.stats['missing'])}; errors: {self.stats['errors'][:3]})")
        stack = torch.full((len(present), ids.numel(), self.hidden_size), float("nan"))
        names = [str(b) for b in present]
        for t, key in enumerate(prefix_keys(ids.tolist())):
            row = self.rows.get(key)
            if row is None:
                continue
            for i, b in enumerate(names):
                if b in row:
                    stack[i, t] = row[b]
        g = self.final_norm_weight if self.final_norm_weight is not None else torch.ones(self.hidden_size)
        return Reference(ids, stack, g, self.final_norm_eps, self.final_norm_kind, self.num_layers,
                         present=present, source=self.source)


def _match(ids: list[int], pos: list[int], full: list[list[int]]) -> Optional[int]:
    """The request whose sequence has ids[j] at pos[j] (the target's own, unshifted ids)."""
    for r, seq in enumerate(full):
        if all(p < len(seq) and seq[p] == t for t, p in zip(ids, pos)):
            return r
    return None


def _row_tokens(rec: dict, full: list[list[int]], owner: dict[int, int]) -> dict[int, list[int]]:
    """{row index of the record: the token prefix that row was computed on}."""
    out: dict[int, list[int]] = {}
    ids, pos = rec["input_ids"].tolist(), rec["positions"].tolist()
    if rec["mode"] == "EXTEND":
        for rp, sl in segments(rec):
            r = _match(ids[sl], pos[sl], full)
            if r is None:
                continue
            owner[rp] = r
            for i in range(sl.start, sl.stop):
                out[i] = full[r][:pos[i] + 1]
    elif rec["mode"] == "TARGET_VERIFY":
        bs = len(rec["req_pool_indices"])
        n = len(ids) // bs if bs else 0
        for rp, sl in segments(rec, n):
            if rp not in owner:
                continue
            start = pos[sl.start]
            base = full[owner[rp]][:start]
            for i in range(sl.start, sl.stop):
                out[i] = base + ids[sl.start:i + 1]
    return out


def build_engine_reference(records: list[dict], prompts: list[list[int]], outputs: list[list[int]], *,
                           num_layers: int, final_norm_weight: Optional[torch.Tensor] = None,
                           final_norm_eps: float = 1e-6, final_norm_kind: str = "rmsnorm") -> EngineReference:
    """An :class:`EngineReference` from one run's hook records (format: :mod:`.tools.sglang_engine.hooks`).

    Args:
        records: the run's records in order (target and draft; only target records with
            ``ref_states`` contribute).
        prompts, outputs: token ids of each request (outputs: what the engine generated), to give
            each recorded row its token prefix.
    """
    full = [list(p) + list(o) for p, o in zip(prompts, outputs)]
    ref = EngineReference(num_layers, final_norm_weight, final_norm_eps, final_norm_kind)
    owner: dict[int, int] = {}
    st = ref.stats
    for rec in records:
        if rec.get("role") != "target" or "ref_format" not in rec:
            continue
        ref.note_record(rec)
        tokens = _row_tokens(rec, full, owner)
        states = rec.get("ref_states")
        if states is None:
            continue
        st["bytes"] += states.numel() * states.element_size()
        for j, i in enumerate(rec["ref_rows"].tolist()):
            if i in tokens:
                ref.add(tokens[i], rec["ref_boundaries"], states[:, j])
                st["rows"] += 1
    rank = st["rank"] or {}
    ref.source = (f"engine (sglang forward_hooks, tp rank {rank.get('tp_rank', 0)} of {rank.get('tp_size', 1)}, "
                  f"attention-tp rank {rank.get('attn_tp_rank', 0)})")
    return ref


def final_norm_weight(target_dir) -> Optional[torch.Tensor]:
    """gamma of the target's final norm read from its safetensors (one tensor, no model load), or
    None when the directory has no such tensor."""
    from safetensors import safe_open

    from eagle3_conformance.reference import weight_index

    try:
        index = weight_index(Path(target_dir))
    except ReferenceError:
        return None
    names = [k for k in index if k.endswith("norm.weight") and "layers" not in k and "layernorm" not in k]
    names = [k for k in names if k.split(".")[-2] == "norm"]
    if not names:
        return None
    e = index[sorted(names, key=len)[0]]
    with safe_open(e["safetensors_file"], framework="pt") as f:
        return f.get_tensor(e["weight_name"]).float().clone()


def judged_rows(cap, ref: EngineReference):
    """``cap`` restricted to the rows the engine recorded (a capture with every row recorded is
    returned as is); None when none of its rows were recorded. A decode capture (``accepted`` in its
    provenance) is kept whole or not at all: its rows pair with the accepted count."""
    from dataclasses import replace

    known = ref.known(cap.token_ids)
    rows = cap.rows.long()
    inside = (rows >= 0) & (rows < known.numel())
    have = torch.zeros_like(inside)
    have[inside] = known[rows[inside]]
    if bool(have.all()):
        return cap
    if not bool(have.any()) or cap.provenance.get("accepted") is not None:
        return None
    pick = have.nonzero().flatten()
    kw = {"feature": cap.feature[pick], "rows": cap.rows[pick]}
    for name in ("verifier_last", "draft_input_ids", "loss_mask", "position_ids", "fc_input", "fc_source"):
        v = getattr(cap, name, None)
        if v is not None and hasattr(v, "shape") and v.shape[:1] == cap.rows.shape[:1]:
            kw[name] = v[pick]
    return replace(cap, **kw, provenance={**cap.provenance, "rows_judged": f"{pick.numel()} of {rows.numel()} "
                                          "(the rows the engine recorded)"})
