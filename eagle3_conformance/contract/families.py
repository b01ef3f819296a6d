"""Per-method contract rules for drafts other than EAGLE-3: DFlash and MTP / NextN (issue 14).

Pure functions over a loaded :class:`eagle3_conformance.contract.Contract`; no engine is imported.
:func:`method_problems` is called by :func:`eagle3_conformance.contract.semantic_problems`.

Conventions (sources):

* DFlash ids are output-of ids: id i taps ``B_{i+1}``, the output of decoder layer i. SGLang 0.5.23
  ``srt/models/llama.py:943-953`` (``set_dflash_layers_to_capture``: ``val + 1``), SpecForge 0.2.0
  ``specforge/modeling/draft/dflash.py:284-293`` (``extract_context_feature`` reads
  ``hidden_states[layer_id + 1]``), speculators 0.9.0 ``convert/dflash/converter.py:117-126``
  ("z-lab reads hidden_states[layer_id + 1]"), vLLM since vllm-project/vllm#40727 (not installed
  here: unconfirmed against its code). EAGLE-3 ids are boundaries in vLLM and speculators, so a
  reader that applies the EAGLE rule to DFlash ids taps one layer early.
* SGLang 0.5.23 accepts DFlash ids 0 <= i < L (``dflash_utils.py:556-586``), i.e. taps B_1..B_L.
* MTP / NextN heads concatenate ``[embed(token t+1), hidden row t]`` (``deepseek_nextn.py:195-222``,
  ``qwen3_5_mtp.py:222-240``); the hidden is ``spec_info.hidden_states``, what the target's
  logits processor stores (``layers/logits_processor.py:853-872``: the tensor the LM head reads,
  F, unless the model body returns a pre-norm copy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eagle3_conformance.contract.sections import KeyPath
from eagle3_conformance.core.notation import Boundary

if TYPE_CHECKING:  # pragma: no cover
    from eagle3_conformance.contract.models import Contract

EAGLE_METHODS = ("eagle3", "eagle1", "eagle2")


def dflash_output_of(ids: list[int]) -> list[int]:
    """Boundary indices an output-of reader taps for DFlash ``ids``: id i -> ``B_{i+1}``."""
    return [int(i) + 1 for i in ids]


def dflash_problems(c: "Contract") -> list[tuple[KeyPath, str]]:
    """Why a DFlash contract is inconsistent: ``(key path, message)`` pairs.

    Checked: the ``dflash`` block is present and no EAGLE key is declared (``draft.layer_ids``
    must be ``absent``: a DFlash config carrying an EAGLE key is another method's config); the
    ids are written (``location: absent`` means the taps come from a formula, which a load that
    succeeds does not distinguish from the trained taps); one id per tap (the fc input width is
    K x d, K = ``len(capture.boundaries)``); every id within the target's depth (id i taps
    ``B_{i+1}``: i must be < L); and the ids read as output-of give exactly
    ``capture.boundaries`` (the message names the EAGLE boundary reading when that is what
    matches: the wrong one of the two rules).
    """
    out: list[tuple[KeyPath, str]] = []
    d = c.dflash
    if d is None:
        return [((("method",)), "method is dflash but there is no dflash block (target_layer_ids, location, "
                                "num_draft_layers)")]
    if c.draft.layer_ids.location != "absent":
        out.append((("draft", "layer_ids", "location"),
                    f"a DFlash draft reads dflash_config.target_layer_ids; an EAGLE key "
                    f"({c.draft.layer_ids.location}) is another method's key: set location: absent"))
    L = c.L
    K = len(c.capture.boundaries)
    if d.location == "absent":
        if d.target_layer_ids is not None:
            out.append((("dflash", "target_layer_ids"), "location is 'absent' but ids are given"))
        out.append((("dflash", "location"),
                    "no target_layer_ids: SGLang 0.5.23 and SpecForge then derive taps from "
                    "build_target_layer_ids (dflash_utils.py:348-385): one tap per draft layer, the trained layers only "
                    "if the drafter was trained on the formula's; write the ids the draft was trained with"))
        return out
    ids = d.target_layer_ids
    if not ids:
        out.append((("dflash", "target_layer_ids"), f"location is {d.location!r} but no ids"))
        return out
    if len(ids) != K:
        out.append((("dflash", "target_layer_ids"),
                    f"{len(ids)} ids but the draft's fc reads {K} taps (capture.feature_width "
                    f"{c.capture.feature_width} = {K} x {c.draft.target_hidden_size})"))
    bad = False
    for i, v in enumerate(ids):
        if v < 0 or v >= L:
            bad = True
            out.append((("dflash", "target_layer_ids", i),
                        f"id {v} taps B_{v + 1} (output of layer {v}), beyond the target's depth: L = {L}, ids "
                        f"must be 0..{L - 1} (SGLang raises at load, dflash_utils.py:580-586; other readers fail "
                        "at the first matmul or tap the wrong tensor)"))
    out += _block_problems(c)
    if bad or len(ids) != K:
        return out
    want = [b.index for b in c.aux]
    got = dflash_output_of(ids)
    if got != want:
        hint = ""
        if list(ids) == want:
            hint = (": these ids give the declared boundaries only under the EAGLE boundary rule (id i = B_i), "
                    "the wrong one of the two rules: every tap one layer early")
        fix = [w - 1 for w in want]
        out.append((("dflash", "target_layer_ids"),
                    f"ids {list(ids)} tap {[f'B_{g}' for g in got]} (output-of: id i = B_{{i+1}}); capture.boundaries "
                    f"says {[f'B_{w}' for w in want]}{hint}; write {fix}"))
    return out


def _block_problems(c: "Contract") -> list[tuple[KeyPath, str]]:
    """R91: a draft that predicts from the anchor row, named for an engine that samples row 1
    (:func:`eagle3_conformance.draft_config.dflash_block.serving_problem`)."""
    from eagle3_conformance.draft_config.dflash_block import serving_problem

    d = c.dflash
    if d is None or not (c.engines.sglang_model_file or c.engines.sglang_validated):
        return []
    why = serving_problem(d.sample_from_anchor, "sglang")
    return [(("dflash", "sample_from_anchor"), f"{why}; the contract names SGLang (engines)")] if why else []


def mtp_input_streams(c: "Contract") -> int:
    """Residual streams in the hidden state an MTP head reads (``mtp.input_streams``; null: 1)."""
    return int(c.mtp.input_streams or 1) if c.method == "mtp" and c.mtp is not None else 1


def _stream_problems(c: "Contract") -> list[tuple[KeyPath, str]]:
    """R93: on a hyper-connection target (``target.residual_streams`` > 1) the MTP head's input streams
    must be stated (engines differ: SGLang 0.5.23 deepseek_v4_nextn.py:157-161 reads all hc_mult streams,
    glm5_next_nextn.py one), be 1 or all of them, and the multi-stream state exists only before hc_head
    and the final norm (B_L, never F)."""
    assert c.mtp is not None
    n, s = c.target.residual_streams, c.mtp.input_streams
    if s is None:
        if n > 1:
            return [(("mtp", "input_streams"),
                     f"the target has {n} residual streams (target.residual_streams, hc_mult) but the contract does "
                     f"not say how many the MTP head reads: {n} (the state before hc_head, {n} x d wide: SGLang 0.5.23 "
                     "deepseek_v4_nextn.py:157-161; R93, the single buffer gave AL 1.09) or 1 (a contracted state: "
                     "glm5_next_nextn.py); state mtp.input_streams")]
        return []
    if s not in (1, n):
        return [(("mtp", "input_streams"), f"{s} streams: the target has {n} (target.residual_streams); the head "
                                           f"reads all of them or one")]
    if s > 1 and c.aux and c.aux[0].final:
        return [(("mtp", "input_streams"), f"{s} streams but the head reads F: F is one stream (after hc_head and "
                                           f"the final norm); the multi-stream state is B_{c.L}")]
    return []


def mtp_problems(c: "Contract") -> list[tuple[KeyPath, str]]:
    """Why an MTP / NextN contract is inconsistent: ``(key path, message)`` pairs.

    Checked: the ``mtp`` block is present, no EAGLE key is declared, the head reads one tensor,
    ``[B_L]`` (pre-norm) or ``[F]`` (post-norm) (``capture.boundaries``, width d) and
    ``verifier_last`` names the same one, one source per MTP layer, and layer 0 reads the target.
    """
    out: list[tuple[KeyPath, str]] = []
    m = c.mtp
    if m is None:
        return [(("method",), "method is mtp but there is no mtp block (num_layers, layer_sources)")]
    if c.draft.layer_ids.location != "absent":
        out.append((("draft", "layer_ids", "location"),
                    "an MTP head reads the target's last hidden state, not EAGLE aux ids: set location: absent"))
    L = c.L
    if [str(b) for b in c.aux] not in ([f"B_{L}"], ["F"]):
        out.append((("capture", "boundaries"),
                    f"an MTP head reads the target's last hidden state only: capture.boundaries must be ['B_{L}'] "
                    f"(pre-norm) or ['F'] (post-norm), got {c.capture.boundaries}"))
    elif c.aux[0] != c.verifier_last.parsed:
        out.append((("verifier_last", "tensor"),
                    f"an MTP head's hidden input is capture.boundaries {c.capture.boundaries}; verifier_last says "
                    f"{c.verifier_last.tensor}: one tensor, written the same in both"))
    if len(m.layer_sources) != m.num_layers:
        out.append((("mtp", "layer_sources"),
                    f"{len(m.layer_sources)} sources for {m.num_layers} MTP layers: one per layer"))
    if m.layer_sources and m.layer_sources[0] != "target":
        out.append((("mtp", "layer_sources", 0), "MTP layer 0 has no previous MTP layer: it reads the target"))
    return out + _stream_problems(c)


def method_problems(c: "Contract") -> list[tuple[KeyPath, str]]:
    """The per-method rules: a block of another method is refused, and DFlash / MTP contracts
    are checked by :func:`dflash_problems` / :func:`mtp_problems`."""
    out: list[tuple[KeyPath, str]] = []
    if c.method != "dflash" and c.dflash is not None:
        out.append((("dflash",), f"a dflash block in a {c.method} contract: remove it or set method: dflash"))
    if c.method != "mtp" and c.mtp is not None:
        out.append((("mtp",), f"an mtp block in a {c.method} contract: remove it or set method: mtp"))
    if c.method == "dflash":
        out += dflash_problems(c)
    elif c.method == "mtp":
        out += mtp_problems(c)
    return out


def mtp_source_boundary(c: "Contract") -> Boundary:
    """The tensor an MTP contract's head reads: ``verifier_last`` (``B_L`` or ``F``)."""
    return c.verifier_last.parsed
