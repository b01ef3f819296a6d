"""The contract's root model (:class:`Contract`), the draft-method sections (DFlash, MTP / NextN)
and the vocab, tokenizer, dtype and position sections.

A contract states, for one target/draft pair, what every tensor at the draft boundary means.
Boundaries are written in canonical notation (``B_k``, ``F``; see :mod:`eagle3_conformance.core.notation`).
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import BeforeValidator, Field

from eagle3_conformance.contract.sections import (
    Alignment,
    Capture,
    Draft,
    Engines,
    Gates,
    NormBand,
    NormBands,
    Precision,
    Target,
    Training,
    VerifierLast,
    _not_bool,
    _Strict,
)
from eagle3_conformance.core.notation import Boundary

# --- draft method: DFlash and MTP / NextN (issue 14) -------------------------------------------

Method = Literal["eagle3", "eagle1", "eagle2", "dflash", "mtp"]


class DFlashSpec(_Strict):
    """What a DFlash draft reads: the target layers it taps (``capture.boundaries`` holds them in
    canonical notation, any number, in concat order; ``capture.feature_width`` is the draft
    ``fc`` input width = K x d).

    DFlash ids are *output-of* ids in every reader whose code or docs say so: id i = ``B_{i+1}``
    (SGLang 0.5.23 ``llama.py:943-953`` ``set_dflash_layers_to_capture`` adds 1; SpecForge
    ``specforge/modeling/draft/dflash.py`` ``extract_context_feature`` reads
    ``hidden_states[i + 1]``; vLLM since vllm-project/vllm#40727), unlike EAGLE-3 ids, which are
    boundaries in vLLM and speculators.
    """

    target_layer_ids: Optional[list[int]] = Field(
        None, description="dflash_config.target_layer_ids as written (output-of ids); null when absent."
    )
    location: Literal["dflash_config", "top_level", "absent"] = Field(
        description="dflash_config: nested under dflash_config; top_level: target_layer_ids at the top of "
        "config.json; absent: no key (SGLang 0.5.23 and SpecForge then derive ids from a formula, "
        "dflash_utils.py:348-385 build_target_layer_ids)."
    )
    num_draft_layers: int = Field(gt=0, description="The draft's num_hidden_layers (the formula's input).")
    block_size: Optional[int] = Field(None, gt=0, description="dflash_config.block_size (or top-level block_size).")
    sample_from_anchor: Optional[bool] = Field(
        None, description="Which row of a draft block predicts (R91, sgl-project/sglang-jax#1619). false: row 0 is "
        "the anchor (the last verified token) and predicts nothing, row k predicts the token at anchor + k, the "
        "first draft comes from row 1 (z-lab DFlash; speculators 0.9.0 DFlashConfig.sample_from_anchor default "
        "false; SpecForge 0.2.0 DFlash labels; SGLang 0.5.23's DFlash worker samples rows 1.., "
        "dflash_worker_v2.py:183, 301, reading no key). true: the anchor row predicts the token after the anchor "
        "(DeepSpec / DSpark: speculators 0.9.0 DSparkConfig default true; SpecForge and SGLang Domino's "
        "dflash_config.shift_label). null: not stated (contracts written before this key; init refuses to guess).")


class MTPSpec(_Strict):
    """What an MTP / NextN head reads: the target's last hidden state (``capture.boundaries`` is
    ``[B_L]``, pre-norm, or ``[F]``, post-norm, and ``verifier_last`` names the same tensor;
    ``capture.feature_width`` is d) and the embedding of the next token, concatenated
    ``[embed, hidden]`` before ``eh_proj`` / ``fc`` (SGLang 0.5.23 ``deepseek_nextn.py:195-222``,
    ``qwen3_5_mtp.py:222-240``).
    """

    num_layers: int = Field(1, gt=0, description="MTP layers (num_nextn_predict_layers / mtp_num_hidden_layers).")
    embedding_input: Literal["next_token"] = Field(
        "next_token", description="The token whose embedding is concatenated with the hidden row t: token t+1."
    )
    layer_sources: list[Literal["target", "previous"]] = Field(
        default_factory=lambda: list[Literal["target", "previous"]](["target"]),
        description="Per MTP layer, the hidden tensor it reads: target (the target's last hidden state, "
        "NextN style: every layer reads it) or previous (the previous MTP layer's output, chained MTP, "
        "DeepSeek-V3 paper section 2.2). Layer 0 always reads the target.",
    )
    input_streams: Optional[int] = Field(
        None, ge=1,
        description="Residual streams in the hidden state H_0 the head reads (R93): 1 for a one-stream target; for a "
        "hyper-connection target (target.residual_streams > 1) either all of them, the state before hc_head "
        "(SGLang 0.5.23 deepseek_v4_nextn.py:157-161 views it as hc_mult rows of d; R93: the single buffer gave AL "
        "1.09), or 1, a contracted state (SGLang 0.5.23 glm5_next_nextn.py reads one). capture.feature_width is "
        "input_streams x d. null: 1, and refused for a target with residual_streams > 1 (engines differ: state it).",
    )


# --- vocab mapping / tokenizer / dtypes / positions (K10, K11, K12, K14) ---------------------


class VocabMapping(_Strict):
    """The draft-to-target vocabulary mapping (K10).

    speculators 0.9.0 (src/speculators/train/vocab_mapping.py) writes ``d2t`` as an int64
    *offset* of length ``draft_size`` (target id = i + d2t[i]) and ``t2d`` as a bool mask over the
    target vocab, saved beside the data as ``d2t-{N}.npy`` / ``t2d-{N}.npy`` (train/cli.py:387-393).
    SGLang turns d2t into ``hot_token_id = d2t + arange`` and ignores t2d (llama_eagle3.py:350-352).
    """

    size: int = Field(gt=0, description="Target vocab size (= target.vocab_size).")
    draft_size: int = Field(gt=0, description="Draft vocab size (= draft.draft_vocab_size).")
    d2t_present: bool = Field(True, description="The mapping must exist (checkpoint and data).")
    t2d_present: bool = Field(True, description="The bool target mask t2d must exist beside d2t.")
    d2t_convention: Literal["offset", "absolute"] = Field(
        "offset", description="offset: target id = i + d2t[i] (speculators, SGLang, vLLM); absolute: "
        "target id = d2t[i]."
    )
    mapping_sha256: Optional[str] = Field(
        None, description="sha256 of the int64 little-endian bytes of the absolute target ids "
        "(arange(draft_size) + d2t); checked wherever the mapping is loaded."
    )


class GoldenConversation(_Strict):
    """A fixed conversation and the token ids both sides must produce for it (K11)."""

    messages: list[dict[str, str]] = Field(
        min_length=1, description="[{role, content}, ...] rendered through the chat template."
    )
    ids: list[int] = Field(min_length=1, description="The ids the serving engine produces for it.")


class TokenizerSpec(_Strict):
    """Tokenizer and chat template shared by training and serving (K11)."""

    chat_template_sha256: Optional[str] = Field(
        None, description="sha256 of the chat template text (UTF-8) both sides must use."
    )
    add_bos: Optional[bool] = Field(None, description="Whether a BOS token starts every sequence.")
    enable_thinking: Optional[bool] = Field(None, description="Template thinking flag, if any.")
    golden: Optional[GoldenConversation] = None


class TensorDtypes(_Strict):
    """dtype of each tensor at the draft boundary (K12). ``hidden: null`` means data_dtype on the
    training path and target.dtype on serving paths (what check_dtype already asserts)."""

    hidden: Optional[Literal["float32", "bfloat16", "float16"]] = None
    input_ids: Literal["int64", "int32"] = "int64"
    positions: Literal["int64", "int32"] = "int64"


class Positions(_Strict):
    """Position ids the draft sees (K14). Row offsets live in ``alignment.position`` (training)
    and ``alignment.serving_position`` (serving)."""

    advance_per_row: int = Field(1, description="Position increment between consecutive rows.")
    per_document_restart: bool = Field(
        True, description="Packed training batches restart positions per document (speculators "
        "CollateFn)."
    )
    ttt_step_offset: int = Field(1, description="Extra position offset per TTT step (speculators).")
    draft_max_position_embeddings: Optional[int] = Field(None, gt=0)
    serving_max_len: Optional[int] = Field(
        None, gt=0, description="Longest sequence served; must not exceed the draft's window."
    )


class Multimodal(_Strict):
    """A multimodal target's image tokens at the draft boundary (R92, vllm-project/speculators#606): data written
    text-only hold the image placeholder ids but the hidden states of the placeholder's embedding, never of the
    vision tower's features, while serving feeds the draft the B_k of real image tokens."""

    image_token_id: int = Field(ge=0, description="The placeholder id the processor writes for each image patch "
                                                  "(config.json image_token_id, e.g. Qwen2.5-VL 151655).")
    image_tokens_served: bool = Field(
        description="Serving feeds the draft image tokens (requests carry images). true: check-data refuses training "
                    "data with no sample written with vision features, and fails samples that hold the placeholder "
                    "id but were written without them.")


class Contract(_Strict):
    """One target/draft pair's contract (the YAML file's root)."""

    schema_version: Annotated[Literal[1], BeforeValidator(_not_bool)] = 1
    name: str
    method: Method = Field(
        "eagle3", description="Draft method: eagle3 (default when absent), eagle1/eagle2, dflash (see the "
        "dflash block), mtp (MTP / NextN heads, see the mtp block)."
    )
    description: str = ""
    fixture: Optional[str] = Field(
        None,
        description="Name of a buildable fixture under fixtures/ that provides the target, draft "
        "and data for this contract (embedded CPU pairs only).",
    )
    provenance: dict[str, str] = Field(
        default_factory=dict, description="Where every number comes from (free text per field)."
    )
    target: Target
    draft: Draft
    capture: Capture
    verifier_last: VerifierLast
    alignment: Alignment = Field(default_factory=Alignment)
    training: Training = Field(default_factory=Training)
    norm_bands: NormBands = Field(default_factory=NormBands)
    precision: Precision = Field(
        default_factory=Precision, description="The dtype hidden states were produced in, per path (apart from "
        "the checkpoint's target.dtype); every precision-dependent gate follows it."
    )
    gates: Gates = Field(default_factory=Gates)
    engines: Engines = Field(default_factory=Engines)
    data_dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "bfloat16", description="dtype of hidden states on disk and at the draft input."
    )
    vocab: Optional[VocabMapping] = Field(
        None, description="Vocab mapping (d2t/t2d); null: not declared (mapping checks skip)."
    )
    tokenizer: Optional[TokenizerSpec] = Field(
        None, description="Tokenizer / chat template; null: not declared (golden checks skip)."
    )
    dtypes: TensorDtypes = Field(default_factory=TensorDtypes)
    positions: Positions = Field(default_factory=Positions)
    dflash: Optional[DFlashSpec] = Field(None, description="method dflash only: the tapped target layers.")
    mtp: Optional[MTPSpec] = Field(None, description="method mtp only: what each MTP layer reads.")
    multimodal: Optional[Multimodal] = Field(
        None, description="A multimodal target's image tokens (R92); null: a text-only pair (nothing checked).")
    reference: Literal["transformers", "engine"] = Field(
        "transformers", description="What the serving captures are judged against: 'transformers' (the "
        "project's own forward of the target: the independent oracle, needs the target to fit beside the "
        "engine) or 'engine' (the target's residual stream recorded by the engine's own forward_hooks in the "
        "same forward, docs/engine-reference.md). pytest --conformance-reference overrides it."
    )

    # -- derived -----------------------------------------------------------------------------
    @property
    def num_slots(self) -> int:
        return len(self.capture.boundaries)

    @property
    def aux(self) -> list[Boundary]:
        return self.capture.parsed

    @property
    def training_dtype(self) -> str:
        """dtype the training data's hidden states were produced in (``precision.training`` or ``target.dtype``)."""
        return self.precision.training or self.target.dtype

    @property
    def serving_dtype(self) -> str:
        """dtype the serving engine runs the target in (``precision.serving`` or ``target.dtype``)."""
        return self.precision.serving or self.target.dtype

    def produced_dtype(self, stored: bool) -> str:
        """The precision hidden states were produced in: stored training data (``Capture.stored``,
        written by the data generation) :attr:`training_dtype`, a serving capture :attr:`serving_dtype`."""
        return self.training_dtype if stored else self.serving_dtype

    @property
    def L(self) -> int:  # noqa: N802 - the field's letter
        return self.target.num_hidden_layers

    def band_for(self, boundary: Boundary) -> Optional[NormBand]:
        for b in self.norm_bands.bands:
            if Boundary.parse(b.slot) == boundary:
                return b
        return None
