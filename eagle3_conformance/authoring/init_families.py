"""``eagle3-conformance init`` for DFlash and MTP / NextN drafts (issue 14).

Each method's own keys are read (:func:`eagle3_conformance.authoring.configs.dflash_ids`); the taps come
from the named engine's own code for that method (:mod:`eagle3_conformance.engine_ids.dflash`). Nothing falls
back to an EAGLE-3 default: a config without its method's key, or for an engine whose rule for
that method is not known, is refused with the reason (``DataError`` / ``UsageError``: exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from eagle3_conformance.authoring.configs import dflash_ids, dir_name, int_field, read_config, sub_dict
from eagle3_conformance.authoring.init import (
    CaptureFacts,
    DraftFacts,
    TargetFacts,
    _seq,
    build_document,
    derive_contract,
    draft_method,
    set_serving_dtype,
    target_facts,
)
from eagle3_conformance.authoring.yaml_doc import eol
from eagle3_conformance.core.errors import DataError, UsageError

if TYPE_CHECKING:
    from ruamel.yaml.comments import CommentedMap

#: what SGLang 0.5.23 hands an MTP / NextN head: ``spec_info.hidden_states`` = the target's
#: stored hidden states, i.e. the tensor the LM head reads (F) unless the model body returns a
#: pre-norm copy (``srt/layers/logits_processor.py:853-872``; ``deepseek_nextn.py:198``)
SGLANG_MTP_SOURCE = "sglang 0.5.23 logits_processor.py:853-872 stores the LM head's input (F) as spec_info.hidden_states"
#: speculators 0.9.0 MTP trains on ``verifier_last_hidden_states`` (B_L, pre-norm) and chains steps
SPECULATORS_MTP_SOURCE = ("speculators 0.9.0 models/mtp/data.py:6-19 (hidden_states = verifier_last_hidden_states, "
                          "B_L pre-norm) and core.py:238-275 (current_hidden = mtp_output: each step reads the previous)")


def _engine(engine: Optional[str], method: str, default: Optional[str]) -> tuple[str, str, str]:
    if engine is None:
        if default is None:
            raise UsageError(f"a {method} draft and no --engine: what the head is fed differs by engine "
                             "(SGLang 0.5.23 feeds F, speculators trains on B_L); name the engine")
        return default, default, f"not named; {default} assumed (every DFlash reader here reads the ids output-of)"
    tool = engine.partition("==")[0].strip().lower()
    return engine, tool, ""


def _draft_facts(cfg: dict[str, Any], f: Path, d: Optional[Path], t: TargetFacts, K: int, method: str) -> DraftFacts:
    archs = cfg.get("architectures")
    if not archs or not isinstance(archs, list):
        raise DataError(f"{f}: no 'architectures' list")
    tl = sub_dict(cfg, "transformer_layer_config", cfg)
    dh, dh_key = int_field(tl, "hidden_size", f)
    if dh != t.d:
        raise DataError(f"{f}: the {method} draft's hidden_size is {dh} but the target's is {t.d}: its fc reads "
                        f"taps of the draft's width ({K} x {dh}), so the target's states do not fit")
    dv = cfg.get("draft_vocab_size") or tl.get("vocab_size") or t.V
    return DraftFacts(f, d, "speculators_config" in cfg, str(archs[0]),
                      str(cfg.get("_name_or_path") or dir_name(d or f.parent)), dh, dh_key, dh, None, int(dv),
                      "draft_vocab_size" if cfg.get("draft_vocab_size") else "vocab_size (shared with the target)",
                      "none", None, None, {}, None)


def _method_comments(doc: CommentedMap, method: str, reads: str) -> None:
    eol(doc["draft"], f"the {method} draft's width: its fc reads taps of this width", "target_hidden_size")
    eol(doc["draft"]["layer_ids"], f"no EAGLE key: a {method} draft reads {reads}", "location")


def _block_alignment(cfg: dict[str, Any], f: Path, given: Optional[bool]) -> tuple[bool, str]:
    """Which row of a DFlash block predicts (R91): the draft config's key, else ``given`` (``init
    --dflash-sample-from-anchor``); a config key that ``given`` contradicts, or neither, is refused."""
    from eagle3_conformance.draft_config.dflash_block import BlockKeyConflict, declared_block_alignment, refusal

    try:
        found = declared_block_alignment(cfg)
    except BlockKeyConflict as e:
        raise DataError(f"{f}: {e}") from None
    if found is not None:
        v, key = found
        if given is not None and given != v:
            raise UsageError(f"--dflash-sample-from-anchor {str(given).lower()}: {f} says {key} = {str(v).lower()}")
        return v, f"{f.name}: {key} (R91: {'the anchor row predicts' if v else 'row 1 predicts first'})"
    if given is None:
        raise DataError(refusal(str(f)))
    return given, (f"--dflash-sample-from-anchor {str(given).lower()}: {f.name} has no key (R91: "
                   f"{'the anchor row predicts' if given else 'row 1 predicts first'})")


def _dflash(t: TargetFacts, cfg: dict[str, Any], f: Path, d: Optional[Path], engine: Optional[str],
            name: Optional[str], out_dir: Path, sample_from_anchor: Optional[bool] = None) -> CommentedMap:
    from ruamel.yaml.comments import CommentedMap

    from eagle3_conformance.engine_ids import TranslationError
    from eagle3_conformance.engine_ids.dflash import DFLASH_TOOLS, dflash_formula, dflash_tool_to_boundaries

    try:
        ids, location = dflash_ids(cfg)
    except DataError as e:
        raise DataError(f"{f}: {e}") from None
    dc = sub_dict(cfg, "dflash_config", {})
    n_draft = cfg.get("num_hidden_layers", 1)
    if not isinstance(n_draft, int) or isinstance(n_draft, bool) or n_draft < 1:
        raise DataError(f"{f}: num_hidden_layers must be a positive integer (the DFlash draft's depth), got {n_draft!r}")
    engine, tool, inferred = _engine(engine, "dflash", "sglang")
    if tool not in DFLASH_TOOLS:
        raise UsageError(f"--engine {engine!r}: expected sglang[==X.Y.Z], vllm, speculators or specforge")
    if ids is None:
        try:
            formula = f": {tool} would derive {dflash_formula(tool, t.L, int(n_draft))} from its formula"
        except TranslationError:
            formula = ""
        raise DataError(f"{f}: no dflash_config.target_layer_ids{formula} (build_target_layer_ids: one tap per draft layer, "
                        "the trained layers only if the drafter was trained on them); write the ids the draft was trained with")
    ntl = dc.get("num_target_layers", cfg.get("num_target_layers"))
    if isinstance(ntl, int) and ntl != t.L:
        raise DataError(f"{f}: dflash_config.num_target_layers is {ntl} but the target has {t.L} layers: the drafter "
                        "was trained on another target depth")
    try:
        bds = dflash_tool_to_boundaries(tool, ids, t.L, architecture=t.arch, num_draft_layers=int(n_draft))
    except TranslationError as e:
        raise DataError(f"{f}: {e}") from None
    if len(bds) != len(ids):
        raise DataError(f"{f}: {tool} taps {[str(b) for b in bds]} for ids {ids}: duplicates collapse, the fc "
                        f"expects {len(ids)} taps")
    if [b.index for b in bds] != sorted(b.index for b in bds):
        raise DataError(f"{f}: ids {ids} are not ascending: SGLang captures in layer order")
    dr = _draft_facts(cfg, f, d, t, len(ids), "DFlash")
    cap = CaptureFacts(engine, tool, None, inferred, None, "absent", bds,
                       f"{f}: {'dflash_config.target_layer_ids' if location == 'dflash_config' else 'target_layer_ids'}",
                       f"DFlash output-of ids (id i taps B_{{i+1}}), asked of {tool}'s code")
    doc = build_document(t, dr, cap, False, name, False, out_dir)
    doc.insert(2, "method", "dflash")
    eol(doc, f"{f.name}: dflash_config", "method")
    m = CommentedMap()
    _method_comments(doc, "DFlash", "dflash_config.target_layer_ids")
    m["target_layer_ids"] = _seq(list(ids))
    eol(m, "as written (output-of ids)", "target_layer_ids")
    m["location"] = location
    m["num_draft_layers"] = int(n_draft)
    bs = dc.get("block_size", cfg.get("block_size"))
    if isinstance(bs, int):
        m["block_size"] = bs
    anchor, words = _block_alignment(cfg, f, sample_from_anchor)
    m["sample_from_anchor"] = anchor
    eol(m, words, "sample_from_anchor")
    doc["dflash"] = m
    doc["provenance"]["verifier_last"] = "B_L pre-norm (speculators' DFlash training stores it as the verifier slot)"
    return doc


#: SGLang 0.5.23 NextN heads that read every residual stream of a hyper-connection target (the state
#: before hc_head, viewed as hc_mult rows of d): target architecture -> the line that says so
SGLANG_MULTI_STREAM_MTP = {"DeepseekV4ForCausalLM": "sglang 0.5.23 deepseek_v4_nextn.py:157-161 views "
                                                    "spec_info.hidden_states as hc_mult x d per token (R93)"}


def _mtp_streams(t: TargetFacts, tool: str, streams: int, f: Path) -> tuple[int, str]:
    """How many residual streams the MTP head reads on a target of ``streams`` (R93): 1 on a one-stream
    target; on a hyper-connection target what the engine's code says, else refused."""
    if streams <= 1:
        return 1, ""
    src = SGLANG_MULTI_STREAM_MTP.get(t.arch) if tool == "sglang" else None
    if src is None:
        raise DataError(f"{f}: the target has {streams} residual streams (hc_mult) and which of them an MTP head "
                        f"reads under {tool} for {t.arch} is not asked of its code here (SGLang 0.5.23 "
                        "deepseek_v4_nextn.py reads all of them, glm5_next_nextn.py one; R93): refused rather than "
                        "guessed; write mtp.input_streams yourself")
    return streams, src


def _mtp(t: TargetFacts, cfg: dict[str, Any], f: Path, d: Optional[Path], engine: Optional[str],
         name: Optional[str], out_dir: Path, streams: int = 1) -> CommentedMap:
    from ruamel.yaml.comments import CommentedMap

    from eagle3_conformance.core.notation import Boundary

    engine, tool, inferred = _engine(engine, "mtp", None)
    n = cfg.get("num_nextn_predict_layers") or cfg.get("mtp_num_hidden_layers") or 1
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise DataError(f"{f}: num_nextn_predict_layers / mtp_num_hidden_layers must be a positive integer, got {n!r}")
    if tool == "sglang":
        if n != 1:
            raise DataError(f"{f}: {n} MTP layers: which tensor SGLang feeds each layer after the first is not asked "
                            "of its code here; refused rather than guessed")
        v_final, sources, src = True, ["target"], SGLANG_MTP_SOURCE
    elif tool == "speculators":
        v_final, sources, src = False, ["target"] + ["previous"] * (int(n) - 1), SPECULATORS_MTP_SOURCE
    else:
        raise DataError(f"{f}: an MTP draft under --engine {engine}: that engine's MTP code is not installed here, so "
                        "what it feeds the head (B_L or F, target or previous layer) cannot be asked; refused "
                        "(use sglang or speculators)")
    n_in, in_src = _mtp_streams(t, tool, streams, f)
    if n_in > 1:
        v_final = False  # the multi-stream state exists only before hc_head and the final norm
    dr = _draft_facts(cfg, f, d, t, 1, "MTP")
    src_b = Boundary.parse("F") if v_final else Boundary(t.L)
    cap = CaptureFacts(engine, tool, None, inferred, None, "absent", [src_b], f"{f}: MTP reads no layer ids",
                       f"the target's last hidden state, {'F post-norm' if v_final else 'B_L pre-norm'}")
    doc = build_document(t, dr, cap, v_final, name, False, out_dir)
    doc.insert(2, "method", "mtp")
    doc["alignment"]["target"] = 0
    eol(doc["alignment"], "MTP: the hidden row t is token t's own state (speculators shift_batch_mtp: no shift)",
        "target")
    doc["alignment"]["loss_mask_reason"] = (
        "MTP: target offset 0 (the hidden row t is the state of token t itself) while the loss mask keeps the EAGLE "
        "offset 1 of speculators shift_batch; unverified for MTP heads (docs/families.md)")
    doc["provenance"]["verifier_last"] = src if n_in == 1 else f"B_L, all {n_in} streams: {in_src}"
    _method_comments(doc, "MTP", "no layer ids (the head reads the target's last hidden state)")
    m = CommentedMap()
    m["num_layers"] = int(n)
    m["embedding_input"] = "next_token"
    m["layer_sources"] = _seq(list(sources))
    eol(m, src, "layer_sources")
    if n_in > 1:
        m["input_streams"] = n_in
        eol(m, in_src, "input_streams")
        doc["capture"]["feature_width"] = n_in * t.d
        eol(doc["capture"], f"input_streams x d = {n_in} x {t.d}", "feature_width")
    doc["mtp"] = m
    return doc


def derive_family_contract(method: str, t: TargetFacts, cfg: dict[str, Any], f: Path, d: Optional[Path], *,
                           engine: Optional[str], name: Optional[str], out_dir: Path,
                           sample_from_anchor: Optional[bool] = None, streams: int = 1) -> CommentedMap:
    """A contract document for a DFlash or MTP draft (a ruamel ``CommentedMap``).

    Raises:
        DataError: no DFlash ids (the formula fallback is named), ids beyond the target's depth or
            refused by the engine's own code, a draft width that is not the target's, or an engine
            whose rule for the method is not known.
        UsageError: an MTP draft without ``--engine``, or an unknown engine.

    ``sample_from_anchor``: which row of a DFlash block predicts when the config has no key (R91; None:
    refused); ``streams``: the target's residual streams (``hc_mult``; R93).
    """
    if method == "dflash":
        return _dflash(t, cfg, f, d, engine, name, out_dir, sample_from_anchor)
    if method == "mtp":
        return _mtp(t, cfg, f, d, engine, name, out_dir, streams)
    raise UsageError(f"{f}: draft method {method!r} is not supported by init")


def derive_any_contract(target_arg: str, draft_arg: str, *, engine: Optional[str] = None, verifier: str = "B_L",
                        name: Optional[str] = None, allow_embedding: bool = False, out_file: Optional[Path] = None,
                        generation_dtype: str = "auto", serving_dtype: str = "auto",
                        dflash_sample_from_anchor: Optional[bool] = None) -> CommentedMap:
    """``eagle3-conformance init``: the contract for whichever method the draft config is written for
    (:func:`eagle3_conformance.authoring.init.draft_method`): EAGLE-3 through
    :func:`eagle3_conformance.authoring.init.derive_contract`, DFlash and MTP through
    :func:`derive_family_contract`; then the draft's runtime and the target's streams
    (:func:`eagle3_conformance.authoring.init_runtime.annotate_runtime`). Same arguments and errors as
    ``derive_contract``; ``dflash_sample_from_anchor``: see :func:`derive_family_contract`."""
    from eagle3_conformance.authoring.init_runtime import annotate_runtime, hc_mult

    dcfg, dfile, ddir = read_config(draft_arg, "draft")
    method = draft_method(dcfg, dfile)
    tcfg, tfile, tdir = read_config(target_arg, "target")
    if method == "eagle3":
        doc = derive_contract(target_arg, draft_arg, engine=engine, verifier=verifier, name=name,
                              allow_embedding=allow_embedding, out_file=out_file, generation_dtype=generation_dtype,
                              serving_dtype=serving_dtype)
    else:
        t = target_facts(tcfg, tfile, tdir)
        doc = derive_family_contract(method, t, dcfg, dfile, ddir, engine=engine, name=name,
                                     out_dir=Path(out_file).resolve().parent if out_file else Path.cwd(),
                                     sample_from_anchor=dflash_sample_from_anchor, streams=hc_mult(tcfg, tfile))
        set_serving_dtype(doc, serving_dtype)
    annotate_runtime(doc, tcfg, tfile, dcfg, dfile)
    return doc
