"""What actually reaches the draft on one path, for one sequence, plus where it came from.

A tool (``eagle3_conformance.tools.*``) returns :class:`Capture` objects, which a path
(``eagle3_conformance.paths.*``) hands on in an Observation; checks compare them with the contract and a
:class:`eagle3_conformance.reference.Reference` for the same tokens.

Row convention: ``feature[i]`` is the aux concatenation the path pairs with draft step i, and
``rows[i]`` is the index, into ``token_ids``, of the token whose forward produced that row *as the
path's own bookkeeping says* (for speculators: the row within the document; for SGLang: the
token's index in the request). Alignment checks verify that claim by fingerprint, so an adapter
reports bookkeeping, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    import torch
else:  # imported at first use: the package loads without torch (core installs)
    from eagle3_conformance.environment.torch_env import lazy_torch as torch



@dataclass
class Capture:
    """Tensors at the draft boundary for one sequence on one path.

    Attributes:
        path: "training", "sglang-extend" or "sglang-decode".
        where: human locator for reports, e.g. "sample 3" or "batch 0, request 1".
        token_ids: [T] int64, the full token sequence the reference is run on.
        feature: [N, W] the tensor that enters the draft (fc input); W should be K*d.
        rows: [N] int64, token index (into token_ids) of each feature row per the path.
        verifier_last: [N, d] or None; the verifier state paired with each feature row
            (training path only).
        draft_input_ids: [N] int64 or None; the token id the draft pairs with each row.
        loss_mask: [N] or None; the loss-mask value paired with each row (training path).
        source_loss_mask: [T] or None; the dataset's unshifted loss mask.
        position_ids: [N] int64 or None; the position id given to each row.
        fc_ran: whether the draft's fc ran on this input (None: no draft on this path).
        draft_input_width: width of the tensor the draft received (None: no draft).
        engine_ids: the layer ids the engine actually applied (engine-native integers).
        engine_boundaries: the same ids translated to canonical boundaries (strings).
        source_token_ids: [T] int64 or None; the token ids the dataset row declares (training
            path), to be compared with ``token_ids`` (the ids stored beside the hidden states).
        verifier_offset: token offset of verifier row i relative to ``rows[i]`` as the path's own
            bookkeeping says: None for a shifted training batch (the contract's
            ``alignment.target`` applies), 0 for unshifted on-disk rows (y_t beside g_t).
        unavailable: why the path produced nothing for this sample (e.g. the loader skipped it);
            None when the sample loaded. Checks report an unavailable sample as a failure.
        fc_input: [N, W] or None; the tensor the draft's ``fc`` received for these rows (after
            any pre-fc norm the draft applies), recorded on engine paths; None where fc did not
            run or the path has no draft.
        fc_source: [N, W] or None; the draft input ``fc_input`` was computed from, recorded in the
            same forward (equal to ``feature`` unless the capture was changed after the engine).
        provenance: free-form facts (engine, version, files, sample index).
        stored: the capture is stored training data (what a trainer reads from a dataset), set
            by the tool that read it (speculators' and SpecForge's loaders, vLLM extraction files,
            offline files, check-data's all-rows pass); False: what an engine served. Checks
            read the kind from here, never from the path's name (stored data carries
            ``data_dtype``, and positions at ``alignment.position``).
    """

    path: str
    where: str
    token_ids: torch.Tensor
    feature: torch.Tensor
    rows: torch.Tensor
    verifier_last: Optional[torch.Tensor] = None
    draft_input_ids: Optional[torch.Tensor] = None
    loss_mask: Optional[torch.Tensor] = None
    source_loss_mask: Optional[torch.Tensor] = None
    position_ids: Optional[torch.Tensor] = None
    fc_ran: Optional[bool] = None
    draft_input_width: Optional[int] = None
    engine_ids: Optional[list[int]] = None
    engine_boundaries: Optional[list[str]] = None
    source_token_ids: Optional[torch.Tensor] = None
    verifier_offset: Optional[int] = None
    unavailable: Optional[str] = None
    fc_input: Optional[torch.Tensor] = None
    fc_source: Optional[torch.Tensor] = None
    provenance: dict[str, Any] = field(default_factory=dict)
    stored: bool = False

    @property
    def width(self) -> int:
        return int(self.feature.shape[-1])

    def slots(self, slot_width: int) -> list[torch.Tensor]:
        """Split ``feature`` into consecutive ``slot_width``-wide blocks ([N, slot_width] each).

        The last block is narrower when W is not a multiple of ``slot_width``.
        """
        return list(torch.split(self.feature, slot_width, dim=-1))


def join_rows(caps: list[Capture]) -> Capture:
    """One capture of the rows of several captures of one sequence, in order (a chunked prefill's
    chunks: each chunk's draft extend is one capture). ``token_ids`` is the longest of theirs (each
    chunk's are a prefix of the next's); per-row tensors are concatenated; ``provenance`` is the last
    capture's, with ``parts`` = how many were joined.

    Raises:
        ValueError: no captures, or a per-row tensor present on some and not on others."""
    if not caps:
        raise ValueError("no captures to join")
    if len(caps) == 1:
        return caps[0]

    def cat(name: str) -> Optional[torch.Tensor]:
        xs = [getattr(c, name) for c in caps]
        if all(x is None for x in xs):
            return None
        if any(x is None for x in xs):
            raise ValueError(f"{name}: recorded on some of the {len(caps)} captures only")
        return torch.cat([x.reshape(x.shape[0], -1) if x.dim() > 1 else x.reshape(-1) for x in xs])

    last = caps[-1]
    tokens = max((c.token_ids for c in caps), key=len)
    ran = [c.fc_ran for c in caps]
    return Capture(path=last.path, where=last.where, token_ids=tokens, feature=cat("feature"), rows=cat("rows"),
                   draft_input_ids=cat("draft_input_ids"), position_ids=cat("position_ids"),
                   fc_ran=None if None in ran else all(ran),
                   draft_input_width=last.draft_input_width, engine_ids=last.engine_ids,
                   engine_boundaries=last.engine_boundaries, fc_input=cat("fc_input"), fc_source=cat("fc_source"),
                   provenance={**last.provenance, "parts": len(caps)}, stored=last.stored)
