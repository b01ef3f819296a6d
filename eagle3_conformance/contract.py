"""The contract: pydantic models, YAML loading with line numbers, semantic validation.

A contract states, for one target/draft pair, what every tensor at the draft boundary means.
Boundaries are written in canonical notation (``B_k``, ``F``; see :mod:`eagle3_conformance.notation`).

Loading never modifies the file, uses a safe YAML loader, and reports every problem with the
file and YAML line (:class:`ContractError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional, Sequence

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from eagle3_conformance import shipped
from eagle3_conformance.notation import Boundary

SCHEMA_VERSION = 1


def _not_bool(v: Any) -> Any:
    """Refuse a boolean where a number literal is expected (``True == 1`` in Python, not in JSON Schema)."""
    if isinstance(v, bool):
        raise ValueError(f"expected a number, got the boolean {str(v).lower()}")
    return v


def _integral(v: Any) -> Any:
    """Floats with no fractional part as the ints they are (8.0 -> 8, also inside a list); anything
    else unchanged.

    JSON Schema's ``integer`` is "a number with a zero fractional part" (draft 2020-12 validation
    section 6.1.1; ``jsonschema`` 4.26 and ajv accept 8.0), and in JSON's data model 8.0 *is* 8, so
    an editor validating against ``contract.schema.json`` accepts ``8.0`` for an integer: the model
    does too. Strings ("8") and booleans are left alone, for the strict types to refuse."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, list):
        return [_integral(x) for x in v]
    return v


class _Strict(BaseModel):
    """Base of every contract model: unknown keys refused, frozen, and *strict* types, so that
    ``validate`` refuses exactly what the JSON Schema refuses: no string-to-number ("8"), no
    string-to-bool ("no", "true", "1"), no number-to-bool (0, 1), no bool-to-number (True). A
    ``number`` field still takes an int (as JSON Schema's ``number`` does)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _json_numbers(cls, v: Any) -> Any:
        return _integral(v)


# --- target / draft --------------------------------------------------------------------------


class Target(_Strict):
    """The target (verifier) model."""

    name: str = Field(description="Hub id or path of the target model.")
    path: Optional[str] = Field(
        None,
        description="Local HF-format directory (config.json + weights), relative to the contract "
        "file. Used as the reference model; absent for contracts of public pairs.",
    )
    architecture: str = Field(description="`architectures[0]` of the target config.json.")
    num_hidden_layers: int = Field(gt=0, description="L: number of decoder layers.")
    hidden_size: int = Field(gt=0, description="d: target hidden size.")
    vocab_size: int = Field(gt=0)
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "bfloat16",
        description="dtype of the checkpoint (config.json torch_dtype). The precision hidden states were "
        "*produced* in can differ (vLLM and SGLang serve a float32 checkpoint in half precision by "
        "default): that is the precision block; null there means this value.",
    )
    final_norm: Literal["rmsnorm", "rmsnorm_one_plus", "layernorm"] = Field(
        "rmsnorm",
        description="Final norm form: rmsnorm is x/rms(x)*w; rmsnorm_one_plus is x/rms(x)*(1+w) "
        "(Gemma, Qwen3.5).",
    )


class LayerIds(_Strict):
    """The layer ids exactly as written in the draft config, and where they sit."""

    values: Optional[list[int]] = Field(
        None, description="The integers as written in the draft config.json; null when absent."
    )
    location: Literal["nested", "top_level", "absent"] = Field(
        description="nested: eagle_config.eagle_aux_hidden_state_layer_ids; top_level: "
        "eagle_aux_hidden_state_layer_ids at the top of config.json; absent: no key (an engine "
        "default applies)."
    )


class Draft(_Strict):
    """The EAGLE-3 draft model."""

    name: str
    path: Optional[str] = Field(None, description="Local draft directory, relative to the contract.")
    architecture: str = Field(description="e.g. LlamaForCausalLMEagle3, Eagle3Speculator.")
    hidden_size: int = Field(gt=0, description="Draft hidden size (fc output width).")
    target_hidden_size: int = Field(gt=0, description="Width of one aux slot (= target d).")
    draft_vocab_size: int = Field(gt=0)
    pre_fc_norm: Literal["none", "norm_before_fc", "fc_norm"] = "none"
    norm_output: Optional[bool] = Field(
        None, description="Eagle3.1 norm_output as the draft was trained with it: true = the draft feeds its "
        "post-norm state back across steps (SGLang 0.5.23 llama_eagle3.py:207, 267-268; speculators 0.9.0 "
        "Eagle3SpeculatorConfig.norm_output), false = pre-norm; null: not stated (SGLang and speculators default "
        "false; SpecForge 0.2.0 reads the same key, default true, as 'norm before the LM head')")
    layer_ids: LayerIds


# --- capture / verifier / alignment ----------------------------------------------------------


class Capture(_Strict):
    """The aux slots the draft's fc reads, in canonical notation and slot order."""

    boundaries: list[str] = Field(
        min_length=1,
        description="Aux slots as canonical boundaries, e.g. [B_2, B_4, B_6], strictly ascending (DFlash: its "
        "taps; MTP: the one tensor the head reads, [B_L] or [F]).",
    )
    allow_embedding: bool = Field(
        False, description="Whether B_0 (the embedding output) may be an aux slot."
    )
    feature_width: int = Field(
        gt=0, description="K x target_hidden_size: width of the concatenated fc input."
    )

    @field_validator("boundaries")
    @classmethod
    def _parse(cls, v: list[str]) -> list[str]:
        for b in v:
            Boundary.parse(b)  # F is refused by semantic_problems except for method mtp (families.py)
        return v

    @property
    def parsed(self) -> list[Boundary]:
        return [Boundary.parse(b) for b in self.boundaries]


class VerifierLast(_Strict):
    """The tensor the training data stores as its last slot (the verifier state)."""

    tensor: str = Field(description="B_L (pre-final-norm) or F (post-final-norm), e.g. 'B_8'.")
    norm: Literal["pre", "post"] = Field(
        description="pre: before the final norm (B_L); post: after it (F)."
    )

    @field_validator("tensor")
    @classmethod
    def _parse(cls, v: str) -> str:
        Boundary.parse(v)
        return v

    @property
    def parsed(self) -> Boundary:
        return Boundary.parse(self.tensor)


class Alignment(_Strict):
    """Which token each feature row pairs with, after the one-token shift.

    Offsets are relative to the token whose forward produced the feature row (row t = aux of
    token t). speculators 0.9.0 `shift_batch` (src/speculators/models/eagle3/data.py) pairs
    (g_t, x_{t+1}, y_{t+1}, mask_{t+1}) at position t+1.
    """

    feature: int = Field(0, description="Token offset of the aux feature row itself.")
    input_token: int = Field(1, description="Offset of the draft input token paired with row t.")
    target: int = Field(1, description="Offset of the verifier state row paired with row t.")
    loss_mask: int = Field(1, description="Offset of the loss-mask entry paired with row t.")
    position: int = Field(1, description="Position id given to row t, minus t (training).")
    serving_position: int = Field(
        0,
        description="Position id SGLang gives the draft for row t, minus t (the draft extend "
        "reuses the target's positions: python/sglang/srt/speculative/eagle_worker_v2.py).",
    )
    loss_mask_reason: Optional[str] = Field(
        None,
        description="Why the loss-mask offset differs from the target offset, when it does (e.g. "
        "SpecForge 0.2.0 TargetHead.preprocess shifts input_ids and target but not loss_mask, "
        "sgl-project/SpecForge#885). Without it, validate rejects loss_mask != target: the first "
        "drafted position gets no loss and a stale one is supervised.",
    )


class Training(_Strict):
    """Which trainer's loader the training data of this pair goes through (the ``training`` path
    runs speculators', the ``specforge`` path SpecForge's); its pairing is ``alignment``."""

    tool: Literal["speculators", "specforge"] = Field(
        "speculators", description="speculators (ArrowDataset + CollateFn(shift_batch)) or specforge "
        "(OfflineManifestReader -> FeatureDataLoader -> TargetHead.preprocess).")
    version: Optional[str] = Field(None, description="The trainer release the pairing was stated for, e.g. '0.2.0'.")
    transfer: Literal["file", "fp8"] = Field(
        "file", description="speculators only: the hs-connectors 0.9.0 backend the trainer reads hidden_states/hs_{i}"
        ".safetensors with. file: FileTransfer, the tensors as stored (speculators ArrowDataset's default, "
        "train/data.py:184); fp8: FP8Transfer, float8_e4m3fn hidden_states times their per-token "
        "hidden_states_scales [T, 1, 1], dequantised to data_dtype (hs_connectors/transfer.py:212-248), as "
        "FP8HiddenStatesConnector writes them (fp8_hidden_states_connector.py:41-56).")


class NormBand(_Strict):
    slot: str = Field(description="The boundary this band is for (an aux slot or the verifier).")
    lo: float = Field(ge=0)
    hi: float = Field(gt=0)


class NormBands(_Strict):
    """Per-slot per-token RMS bands. RMS(x) = sqrt(mean(x**2)) over the hidden dim, in the
    units of the stored tensor (dequantised)."""

    status: Literal["calibrated", "uncalibrated"] = "uncalibrated"
    exclude_positions: list[int] = Field(
        default_factory=lambda: [0], description="Token positions never banded (e.g. 0)."
    )
    massive_activation_ratio: Optional[float] = Field(
        None,
        gt=1,
        description="Tokens whose RMS exceeds this multiple of the slot's median are excluded "
        "(massive activations, arXiv 2402.17762). null: none excluded.",
    )
    bands: list[NormBand] = Field(default_factory=list)
    safety_factor: Optional[float] = Field(None, ge=1)
    source: Optional[str] = Field(None, description="Where the calibration data came from.")


DTypeName = Literal["float32", "bfloat16", "float16"]


class Precision(_Strict):
    """The dtype the target ran in when it *produced* the hidden states, per path, apart from the
    checkpoint's dtype (``target.dtype``). Every precision-dependent gate (identity noise, row floor,
    cross-path, magnitude, FP8 tolerance; :mod:`eagle3_conformance.gates`) follows it: a float32
    checkpoint served with vLLM's or SGLang's ``dtype="auto"`` produces bf16/fp16 hidden states,
    whose noise against the float32 reference the float32 gates would call a fault.
    ``eagle3-conformance init`` derives both from the named engine's own ``auto`` rule."""

    training: Optional[DTypeName] = Field(
        None, description="Training data generation (stored training data): the dtype of the forward that wrote the "
        "hidden states (e.g. the vLLM server behind speculators' generate-offline-data, SpecForge's capture). "
        "null: target.dtype.",
    )
    serving: Optional[DTypeName] = Field(
        None, description="Serving (every other path): the dtype the engine runs the target in. null: "
        "target.dtype.",
    )


class Gates(_Strict):
    """Identity and agreement gates. Null values are derived from the precision the target is
    served in (``precision.training`` / ``precision.serving`` by path, else ``target.dtype``), from the measurements written down in docs/gates.md; set a
    number only to override them for a pair whose noise was measured otherwise."""

    slot_identity_margin: Optional[float] = Field(
        None,
        ge=0,
        description="Deprecated and ignored: a fixed cosine margin failed correct data on trained "
        "models, whose adjacent boundaries differ by less (docs/gates.md). Slot identity is decided "
        "by rank, with the noise allowance of identity_noise_deg.",
    )
    slot_identity_min_cosine: Optional[float] = Field(
        None, ge=-1, le=1,
        description="Per-row floor (row_fingerprint): every resolvable row's cosine to its declared "
        "boundary must reach this. null: by the path's precision (float32 0.99, bfloat16/float16 0.85).",
    )
    identity_noise_deg: Optional[float] = Field(
        None, ge=0, le=90,
        description="Precision-noise allowance of one sample, in degrees: a slot whose best-matching "
        "boundary is not the declared one fails only when the declared boundary is farther by more "
        "than this angle; within it the sample is counted as undecidable, never failed. null: by "
        "the path's precision (float32 1.0, bfloat16/float16 6.0).",
    )
    resolvable_max_cosine: Optional[float] = Field(
        None, gt=0, le=1,
        description="A token is excluded from identity checks when, in the reference itself, its "
        "declared boundary has at least this cosine with another boundary (massive-activation and "
        "repeated tokens: the boundaries cannot be told apart). null: 0.999.",
    )
    cross_path_min_cosine: Optional[float] = Field(
        None, ge=-1, le=1,
        description="Two paths over the same tokens: per-row, per-slot cosine floor. null: by "
        "the lower precision of the two paths (float32 0.999, bfloat16/float16 0.98).",
    )
    min_accept_length: Optional[float] = Field(
        None, ge=1, description="avg accept length floor (cpu-accept, sglang-engine); null = not gated."
    )
    fp8_max_relative_error: Optional[float] = Field(
        None, gt=0, le=1,
        description="Training data (fp8_scale_error): per token and slot, ||x - B|| / ||B|| of what the trainer "
        "receives against the reference boundary must not exceed this. hs-connectors' fp8 backend shares one scale "
        "per token across all slots (fp8_utils.py:29-51), so a large value in one slot coarsens the others. null: "
        "by precision.training (float32 0.10, bfloat16/float16 0.55; docs/gates.md, FP8 transport).",
    )


class VLLMServing(_Strict):
    """The draft is served with vLLM: the release and the model runners whose aux-id readers the
    contract's ids were resolved for (vLLM 0.33.0 has two, each with its own reader of the draft
    config: V1 ``v1/worker/gpu_model_runner.py:5190-5227``, V2 ``v1/worker/gpu/spec_decode/eagle/
    eagle3_utils.py:113-150``; ``VllmConfig.use_v2_model_runner``, ``config/vllm.py:731-767``,
    picks one). The ``vllm-extend`` path runs vLLM's classes with each runner's ids."""

    version: str = Field(description="vLLM release the ids were resolved with, e.g. '0.33.0'.")
    runners: list[Literal["v1", "v2"]] = Field(
        default_factory=lambda: ["v1", "v2"], min_length=1,
        description="model runners that may serve the draft; each must capture capture.boundaries.",
    )


class ValidatedOn(_Strict):
    """What a passing conformance run ran against (written by the run into its JSON report's
    ``meta.validated_on[].engines_update.validated``: :mod:`eagle3_conformance.validated`)."""

    tool: Literal["sglang", "vllm"] = Field(description="The engine whose own classes the passing paths ran.")
    version: str = Field(description="Its installed release.")
    runners: Optional[list[Literal["v1", "v2"]]] = Field(None, description="vLLM: the model runners checked.")
    date: str = Field(description="UTC date of the run, YYYY-MM-DD.")
    contract_sha256: str = Field(description="sha256 of the contract without its engines block, at the run.")
    paths: list[str] = Field(default_factory=list, description="The conformance paths that ran and passed.")
    tool_versions: dict[str, str] = Field(default_factory=dict, description="Installed tools at the run.")


class Engines(_Strict):
    sglang_validated: list[str] = Field(
        default_factory=list, description="SGLang versions this contract was validated with."
    )
    validated: list[ValidatedOn] = Field(
        default_factory=list, description="Validated-on records (engine, version, runners, date, tool versions, "
        "the contract's hash), pasted from a passing run's report (meta.validated_on)."
    )
    sglang_model_file: Optional[str] = Field(
        None, description="SGLang model family rule used to translate ids, e.g. 'llama'."
    )
    vllm: Optional[VLLMServing] = Field(
        None, description="vLLM serving (release and model runners); null: the draft is not served with vLLM "
        "and the vllm-extend path is skipped."
    )
    sglang_tp_size: int = Field(
        1, ge=1, description="Tensor-parallel size the pair is served with by SGLang (the sglang-engine path "
        "runs it; the engine reference records on attention-TP rank 0, docs/engine-reference.md)."
    )
    sglang_pp_size: int = Field(
        1, ge=1, description="Pipeline-parallel size of the SGLang server. SGLang 0.5.23 refuses EAGLE-3 with "
        "pp > 1 (arg_groups/validation_hook.py:131-138: PP supports only EAGLE; :724-728: no aux capture with "
        "pp != 1; sgl-project/sglang#39644): validate reports it and the serving paths do not run."
    )


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
        default_factory=lambda: ["target"],
        description="Per MTP layer, the hidden tensor it reads: target (the target's last hidden state, "
        "NextN style: every layer reads it) or previous (the previous MTP layer's output, chained MTP, "
        "DeepSeek-V3 paper section 2.2). Layer 0 always reads the target.",
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


# --- loading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One contract problem: a message at a key path and YAML line."""

    loc: tuple[Any, ...]
    message: str
    line: Optional[int] = None
    column: Optional[int] = None

    def format(self, file: str) -> str:
        where = file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        key = ".".join(str(p) for p in self.loc) or "<root>"
        msg = " ".join(str(self.message).split())  # always one line
        return f"{where}: {key}: {msg}"


class ContractError(Exception):
    """A contract file could not be loaded; carries every problem found, each with its line."""

    def __init__(self, file: str, problems: list[Problem]):
        self.file = file
        self.problems = problems
        super().__init__("\n".join(p.format(file) for p in problems))


def _line_map(node: yaml.Node, path: tuple = ()) -> dict[tuple, tuple[int, int]]:
    """Map key paths to (line, column), 1-based, from a composed YAML node tree."""
    out: dict[tuple, tuple[int, int]] = {path: (node.start_mark.line + 1, node.start_mark.column + 1)}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = _key_name(k)
            out[path + (key,)] = (k.start_mark.line + 1, k.start_mark.column + 1)
            for sub, pos in _line_map(v, path + (key,)).items():
                if sub != path + (key,):
                    out[sub] = pos
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out.update(_line_map(v, path + (i,)))
    return out


def _locate(lines: dict[tuple, tuple[int, int]], loc: tuple) -> tuple[Optional[int], Optional[int]]:
    loc = tuple(loc)
    while True:
        if loc in lines:
            return lines[loc]
        if not loc:
            return None, None
        loc = loc[:-1]


MAX_CONTRACT_BYTES = 256 * 1024  # a contract is a few KiB; anything near this is not one
MAX_NESTING = 16  # far deeper than any contract key path


def _mark(m) -> tuple[Optional[int], Optional[int]]:
    return (m.line + 1, m.column + 1) if m is not None else (None, None)


def _prescan(text: str) -> list[Problem]:
    """Event-level guards, run before anything is composed or constructed.

    - nesting deeper than :data:`MAX_NESTING` (PyYAML composes recursively: a deep document would
      otherwise end in RecursionError);
    - aliases of collections (anchors on scalars are fine): expanding them can grow a few lines into
      billions of nodes ("billion laughs"), and ``&a [*a]`` is a cycle. A contract never needs one.
    """
    depth = 0
    collection_anchors: set[str] = set()
    problems: list[Problem] = []
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if ev.anchor:
                collection_anchors.add(ev.anchor)
            if depth > MAX_NESTING:
                problems.append(Problem((), f"nested more than {MAX_NESTING} levels deep; no contract key is that deep",
                                        *_mark(ev.start_mark)))
                return problems
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(ev, yaml.AliasEvent) and ev.anchor in collection_anchors:
            problems.append(Problem((), f"alias *{ev.anchor} repeats a whole mapping or list; write it out "
                                    "(aliases of collections are refused: they can expand without bound)",
                                    *_mark(ev.start_mark)))
    return problems


def _key_name(k: yaml.Node) -> Any:
    return k.value if isinstance(k, yaml.ScalarNode) else f"<{k.tag.rsplit(':', 1)[-1]} key>"


def _duplicate_keys(node: yaml.Node, path: tuple = ()) -> list[Problem]:
    """Keys given twice in one mapping. PyYAML silently keeps the last; both lines are reported."""
    out: list[Problem] = []
    stack = [(node, path)]
    while stack:
        n, p = stack.pop()
        if isinstance(n, yaml.MappingNode):
            seen: dict[tuple, yaml.Node] = {}
            for k, v in n.value:
                if isinstance(k, yaml.ScalarNode):
                    ident = (k.tag, k.value)
                    if ident in seen:
                        first = seen[ident].start_mark.line + 1
                        out.append(Problem(p + (k.value,),
                                           f"duplicate key {k.value!r}: given at line {first} and again at line "
                                           f"{k.start_mark.line + 1} (YAML would silently keep only the last)",
                                           *_mark(k.start_mark)))
                    else:
                        seen[ident] = k
                stack.append((v, p + (_key_name(k),)))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend((v, p + (i,)) for i, v in enumerate(n.value))
    return sorted(out, key=lambda q: (q.line or 0, q.column or 0))


def _yaml_problem(e: yaml.YAMLError, text: str) -> Problem:
    if isinstance(e, yaml.reader.ReaderError):  # a character YAML does not allow (NUL, other controls)
        pos = e.position
        line = text.count("\n", 0, pos) + 1
        col = pos - (text.rfind("\n", 0, pos) + 1) + 1
        ch = e.character if isinstance(e.character, str) else chr(e.character)
        return Problem((), f"malformed YAML: character {ord(ch):#06x} is not allowed in YAML text", line, col)
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    msg = f"{getattr(e, 'problem', None) or e}"
    ctx = getattr(e, "context", None)
    if ctx:
        msg = f"{ctx}: {msg}"
    return Problem((), f"malformed YAML: {msg}", *_mark(mark))


_MTP_INPUT_KEYS = (("verifier_last",), ("capture", "boundaries"))
_MTP_INPUT_HINT = ("an MTP head reads the target's last hidden state, B_L (pre-norm) or F (post-norm), and engines "
                   "differ (SGLang 0.5.23 feeds F, speculators 0.9.0 trains on B_L); state the one the head was "
                   "trained on in capture.boundaries and verifier_last (fault-kinds.md R49): it is never defaulted")
_KINDS = {list: "a list", str: "a single string", int: "a number", float: "a number", bool: "a boolean"}


Check = Callable[["Contract"], list[tuple[tuple, str]]]
"""A further contract check for :func:`parse_contract`: ``(key path, message)`` pairs, empty when fine."""


def parse_contract(text: str, file: str = "<string>", *, known_fixture: bool = False, checks: Sequence[Check] = (),
                   source: Optional[Path] = None) -> Contract:
    """Parse and validate contract YAML text.

    Args:
        text: the YAML.
        file: how to name it in problems.
        known_fixture: also refuse a ``fixture`` that names no fixture (:func:`fixture_problems`;
            ``eagle3-conformance validate`` sets it; commands that run a contract do not, so that an
            explicit ``--reference`` / ``--no-reference`` still runs one whose fixture is absent).
        checks: further checks, run once the contract is consistent in itself, each returning
            ``(key path, message)`` pairs reported at their lines (``validate`` passes
            :func:`eagle3_conformance.local_configs.config_problems`).
        source: the file the text came from; relative ``target.path`` / ``draft.path`` are taken
            relative to it (:func:`load_contract` passes it).

    Raises:
        ContractError: malformed YAML (with line:column), a document that is not a mapping, keys
            given twice (both lines), over-deep nesting or aliased collections, schema violations
            and unknown keys (all listed at once, each with its line), or semantic inconsistencies.
    """
    if len(text) > MAX_CONTRACT_BYTES:
        raise ContractError(file, [Problem((), f"{len(text)} characters; a contract is at most "
                                               f"{MAX_CONTRACT_BYTES} (is this a contract file?)")])
    try:
        pre = _prescan(text)
        if pre:
            raise ContractError(file, pre)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ContractError(file, [_yaml_problem(e, text)]) from None
    except RecursionError:  # not reachable after _prescan; kept so no traceback can escape
        raise ContractError(file, [Problem((), "nested too deeply to read")]) from None
    if node is None:
        raise ContractError(file, [Problem((), "the file holds no YAML document (empty or only comments); "
                                               "a contract is a mapping", 1, 1)])
    if not isinstance(data, dict):
        kind = _KINDS.get(type(data), f"a {type(data).__name__}")
        raise ContractError(file, [Problem((), f"the document is {kind}; a contract must be a YAML mapping "
                                               "(key: value lines)", *_mark(node.start_mark))])
    dups = _duplicate_keys(node)
    if dups:
        raise ContractError(file, dups)
    lines = _line_map(node)
    try:
        contract = Contract.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = tuple(err["loc"])
            line, col = _locate(lines, loc)
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            elif err["type"] == "missing" and data.get("method") == "mtp" and loc in _MTP_INPUT_KEYS:
                msg += f": {_MTP_INPUT_HINT}"
            elif err["type"].endswith("_type") and isinstance(err.get("input"), (str, bool, int, float)):
                v = err["input"]  # strict types: say what was given (a quoted "8" is a string in YAML)
                kind = ("the boolean" if isinstance(v, bool) else "the string" if isinstance(v, str)
                        else "the number")
                msg += f", got {kind} {str(v).lower() if isinstance(v, bool) else repr(v)}"
            problems.append(Problem(loc, msg, line, col))
        raise ContractError(file, problems) from None
    if source is not None:
        object.__setattr__(contract, "_source", source)  # frozen model: remember where it came from
    found = semantic_problems(contract) + (fixture_problems(contract) if known_fixture else [])
    if checks and not found:  # a contract that contradicts itself is fixed first
        found = [p for check in checks for p in check(contract)]
    problems = [Problem(loc, msg, *_locate(lines, loc)) for loc, msg in found]
    if problems:
        raise ContractError(file, problems)
    return contract


def load_contract(path: str | Path, *, known_fixture: bool = False, checks: Sequence[Check] = ()) -> Contract:
    """Load a contract file (read-only). ``known_fixture``, ``checks``: see :func:`parse_contract`.

    Raises:
        ContractError: the file is missing, unreadable or not a regular file (a FIFO would block
            the read), or any problem listed in :func:`parse_contract`.
    """
    p = Path(path)
    try:
        if p.exists() and not p.is_file() and not p.is_dir():  # a directory keeps its own message
            raise ContractError(str(p), [Problem((), "not a regular file (a FIFO, socket or device): refusing to "
                                                     "read it, as reading could wait forever")])
        if p.is_file() and p.stat().st_size > MAX_CONTRACT_BYTES * 4:
            raise ContractError(str(p), [Problem((), f"{p.stat().st_size} bytes; a contract is at most "
                                                     f"{MAX_CONTRACT_BYTES} (is this a contract file?)")])
        raw = p.read_bytes()
    except OSError as e:
        raise ContractError(str(p), [Problem((), f"cannot read contract: {e.strerror or e}")]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ContractError(str(p), [Problem((), f"not UTF-8 text: byte 0x{raw[e.start]:02x} cannot be decoded "
                                                 f"({e.reason})", line, col)]) from None
    return parse_contract(text, str(p), known_fixture=known_fixture, checks=checks, source=p)


def contract_source(c: Contract) -> Optional[Path]:
    """The file a contract was loaded from, if any."""
    return getattr(c, "_source", None)


# --- semantic validation ---------------------------------------------------------------------


def semantic_problems(c: Contract) -> list[tuple[tuple, str]]:
    """Cross-field consistency. Returns (key path, message) pairs; empty when consistent."""
    from eagle3_conformance.families import method_problems  # DFlash / MTP rules (issue 14)

    return (_capture_problems(c) + _size_problems(c) + _verifier_problems(c) + _pairing_problems(c)
            + _layer_id_problems(c) + _band_problems(c) + _gate_vocab_position_problems(c) + method_problems(c)
            + _parallel_problems(c))


def pipeline_refusal(pp_size: int, method: str = "eagle3") -> Optional[str]:
    """Why SGLang 0.5.23 cannot serve this draft with pipeline parallelism ``pp_size``, or None.

    ``arg_groups/validation_hook.py:131-138`` (``check_pipeline_parallel_compat``): with pp > 1 the
    only speculative algorithm is EAGLE (not EAGLE3); ``:724-728``: no aux-hidden-state capture with
    pp != 1, "the capture hooks only see the layers on the last pipeline rank" (sgl-project/sglang#39644,
    docs/engine-reference.md)."""
    if int(pp_size) <= 1 or method not in ("eagle3", "dflash"):
        return None
    return (f"pipeline parallelism (pp_size {pp_size}): SGLang 0.5.23 refuses aux capture with pp > 1 "
            "(arg_groups/validation_hook.py:131-138 allows only EAGLE with PP; :724-728; sgl-project/sglang#39644): "
            "an EAGLE-3 draft cannot be served this way; serve with --pp-size 1 (tensor parallelism is fine)")


def _parallel_problems(c: Contract) -> list[tuple[tuple, str]]:
    why = pipeline_refusal(c.engines.sglang_pp_size, c.method)
    return [(("engines", "sglang_pp_size"), why)] if why else []


def _capture_problems(c: Contract) -> list[tuple[tuple, str]]:
    """The aux boundaries and the feature width."""
    out: list[tuple[tuple, str]] = []
    L = c.target.num_hidden_layers
    aux = c.capture.parsed
    for i, b in enumerate(aux):
        if b.final and c.method != "mtp":
            out.append((("capture", "boundaries", i), "F cannot be an aux slot; aux slots are B_k boundaries "
                                                      "(only an MTP head reads F: method mtp)"))
        if b.index > L:
            out.append((("capture", "boundaries", i), f"{b} is beyond B_{L} (target has L={L})"))
        if b.index == 0 and not c.capture.allow_embedding:
            out.append(
                (("capture", "boundaries", i),
                 "B_0 (embedding output) is an aux slot but capture.allow_embedding is false")
            )
    idx = [b.index for b in aux]
    if len(set(idx)) != len(idx):
        out.append((("capture", "boundaries"), f"duplicate boundaries {c.capture.boundaries}"))
    elif idx != sorted(idx):
        out.append((("capture", "boundaries"), f"boundaries must be strictly ascending: {c.capture.boundaries}"))
    K = len(aux)
    want = K * c.draft.target_hidden_size
    if c.capture.feature_width != want:
        out.append(
            (("capture", "feature_width"),
             f"{c.capture.feature_width} != K x target_hidden_size = {K} x "
             f"{c.draft.target_hidden_size} = {want}")
        )
    return out


def _size_problems(c: Contract) -> list[tuple[tuple, str]]:
    """Draft widths and vocabulary against the target."""
    out: list[tuple[tuple, str]] = []
    if c.draft.target_hidden_size != c.target.hidden_size:
        out.append(
            (("draft", "target_hidden_size"),
             f"{c.draft.target_hidden_size} != target.hidden_size {c.target.hidden_size}")
        )
    if c.draft.draft_vocab_size > c.target.vocab_size:
        out.append(
            (("draft", "draft_vocab_size"),
             f"{c.draft.draft_vocab_size} > target vocab_size {c.target.vocab_size}")
        )
    return out


def _verifier_problems(c: Contract) -> list[tuple[tuple, str]]:
    """The verifier slot: B_L pre-norm or F post-norm."""
    out: list[tuple[tuple, str]] = []
    L = c.target.num_hidden_layers
    v = c.verifier_last.parsed
    if v.final and c.verifier_last.norm != "post":
        out.append((("verifier_last", "norm"), "F is post-final-norm: norm must be 'post'"))
    if not v.final:
        if v.index != L:
            out.append(
                (("verifier_last", "tensor"),
                 f"verifier_last must be B_{L} (pre-norm) or F (post-norm), got {v}")
            )
        if c.verifier_last.norm != "pre":
            out.append((("verifier_last", "norm"), f"B_{L} is pre-final-norm: norm must be 'pre'"))
    return out


def _pairing_problems(c: Contract) -> list[tuple[tuple, str]]:
    """The loss-mask offset and the hs-connectors transfer backend."""
    out: list[tuple[tuple, str]] = []
    al = c.alignment
    if al.loss_mask != al.target and not (al.loss_mask_reason or "").strip():
        out.append((("alignment", "loss_mask"),
                    f"loss-mask offset {al.loss_mask} differs from the target offset {al.target}: the first "
                    "drafted position gets no loss and a stale one is supervised (sgl-project/SpecForge#885, "
                    "#895); align them, or state why in alignment.loss_mask_reason"))
    if c.training.transfer != "file" and c.training.tool != "speculators":
        out.append((("training", "transfer"),
                    f"transfer {c.training.transfer!r} is an hs-connectors backend, read by speculators; training.tool "
                    f"{c.training.tool!r} reads its own files (use transfer: file)"))
    return out


def _layer_id_problems(c: Contract) -> list[tuple[tuple, str]]:
    """The layer ids written into the draft config."""
    out: list[tuple[tuple, str]] = []
    L = c.target.num_hidden_layers
    K = len(c.capture.parsed)
    ids = c.draft.layer_ids
    if ids.location == "absent" and ids.values is not None:
        out.append((("draft", "layer_ids", "values"), "location is 'absent' but values are given"))
    if ids.location != "absent":
        if not ids.values:
            out.append((("draft", "layer_ids", "values"), f"location is {ids.location!r} but no values"))
        elif len(ids.values) != K:
            out.append(
                (("draft", "layer_ids", "values"),
                 f"{len(ids.values)} ids written but {K} aux boundaries declared")
            )
        if ids.values:
            dup = sorted({v for v in ids.values if ids.values.count(v) > 1})
            if dup:
                out.append((("draft", "layer_ids", "values"), f"duplicate layer ids {dup}: each aux slot needs its own layer"))
            for i, lid in enumerate(ids.values):
                if lid > L:
                    out.append((("draft", "layer_ids", "values", i), f"layer id {lid} is beyond the target's L={L} layers"))
        from eagle3_conformance.engine_ids import layer_id_problems  # the id rules, without an engine

        if c.method in ("eagle3", "eagle1", "eagle2"):
            out += [(("draft", "layer_ids") + loc, msg) for loc, msg in layer_id_problems(
                L, c.capture.boundaries, ids.values, ids.location, sglang=bool(c.engines.sglang_validated),
                model_file=c.engines.sglang_model_file, architecture=c.target.architecture)]
    return out


def _band_problems(c: Contract) -> list[tuple[tuple, str]]:
    """Norm bands: one per declared slot, ordered limits, calibrated to gate."""
    out: list[tuple[tuple, str]] = []
    aux = c.capture.parsed
    v = c.verifier_last.parsed
    nb = c.norm_bands
    seen = set()
    declared = set(aux) | {v}
    for i, band in enumerate(nb.bands):
        try:
            b = Boundary.parse(band.slot)
        except ValueError as e:
            out.append((("norm_bands", "bands", i, "slot"), str(e)))
            continue
        if b not in declared:
            out.append((("norm_bands", "bands", i, "slot"), f"{b} is not an aux slot or the verifier slot"))
        if b in seen:
            out.append((("norm_bands", "bands", i, "slot"), f"two bands for {b}"))
        seen.add(b)
        if band.lo >= band.hi:
            out.append((("norm_bands", "bands", i), f"lo {band.lo} >= hi {band.hi}"))
    if nb.status == "calibrated":
        missing = [str(b) for b in sorted(declared, key=Boundary.sort_key) if b not in seen]
        if missing:
            out.append((("norm_bands", "bands"), f"status is calibrated but no band for {missing}"))
    elif nb.bands:
        out.append(
            (("norm_bands", "status"),
             "bands are listed but status is 'uncalibrated': uncalibrated bands cannot gate; "
             "set status: calibrated or remove them")
        )
    for i, pos in enumerate(nb.exclude_positions):
        if pos < 0:
            out.append((("norm_bands", "exclude_positions", i), f"position {pos} is negative; positions start at 0"))
    return out


def _gate_vocab_position_problems(c: Contract) -> list[tuple[tuple, str]]:
    """The accept-length gate, the vocab mapping sizes, the draft's positions."""
    out: list[tuple[tuple, str]] = []
    nb = c.norm_bands
    g = c.gates
    if g.min_accept_length is not None and nb.status != "calibrated" and not _measured_on_cpu(c):
        out.append(
            (("gates", "min_accept_length"),
             "an accept-length floor is set but norm_bands.status is 'uncalibrated': the GPU gate would "
             "rest on magnitudes nobody checked; calibrate the bands or set min_accept_length: null")
        )
    if c.vocab is not None:
        if c.vocab.size != c.target.vocab_size:
            out.append((("vocab", "size"), f"{c.vocab.size} != target.vocab_size {c.target.vocab_size}"))
        if c.vocab.draft_size != c.draft.draft_vocab_size:
            out.append((("vocab", "draft_size"),
                        f"{c.vocab.draft_size} != draft.draft_vocab_size {c.draft.draft_vocab_size}"))
    pz = c.positions
    if (pz.draft_max_position_embeddings is not None and pz.serving_max_len is not None
            and pz.serving_max_len > pz.draft_max_position_embeddings):
        out.append((("positions", "serving_max_len"),
                    f"{pz.serving_max_len} > draft_max_position_embeddings {pz.draft_max_position_embeddings}"))
    return out


def fixture_problems(c: Contract) -> list[tuple[tuple, str]]:
    """``fixture`` names a fixture :func:`eagle3_conformance.fixtures.build_fixture` can find: a folder of
    ``fixtures/`` holding ``fixture.json``, or a folder path holding one (resolved as
    :func:`eagle3_conformance.fixture_base.fixture_spec` resolves it), whose ``fixture.json`` is JSON.
    Returns (key path, message) pairs naming the known fixtures; empty when it resolves or is unset.

    Not part of :func:`semantic_problems` (it reads the file system); ``eagle3-conformance validate``
    runs it, commands that run a contract report an absent fixture when they need it. From an
    installed package (no ``fixtures/``) a name of :data:`eagle3_conformance.shipped.EMBEDDED_FIXTURES`
    is no problem: ``validate`` prints :func:`~eagle3_conformance.shipped.checkout_fixture_note`."""
    if not c.fixture:
        return []
    from eagle3_conformance.fixture_base import FixtureError, known_fixtures, fixture_spec
    from eagle3_conformance.shipped import checkout_fixture_note

    if checkout_fixture_note(c.fixture):  # installed package: a checkout fixture, not a misspelling
        return []

    try:
        fixture_spec(c.fixture)
    except FixtureError as e:
        if "no such fixture" not in str(e):
            return [(("fixture",), f"fixture {c.fixture!r}: {e}")]
        known = known_fixtures()
        return [(("fixture",), f"fixture {c.fixture!r} is not a known fixture; known: "
                 + (", ".join(known) if known else "none (no fixtures/ folder next to the package)")
                 + " (or a folder path holding fixture.json)")]
    return []


# --- JSON Schema -----------------------------------------------------------------------------

SCHEMA_PATH = shipped.SCHEMA_PATH
"""The contract JSON Schema file: ``contracts/schema/contract.schema.json`` in a checkout, its copy in the wheel."""


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a contract file, generated from the pydantic models (the single source
    of truth). Checked in at ``contracts/schema/contract.schema.json``; a test fails on drift."""
    schema = Contract.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://github.com/eagle3-conformance/contracts/schema/contract.schema.json"
    return schema


def schema_text() -> str:
    import json

    return json.dumps(json_schema(), indent=2, sort_keys=False) + "\n"


def _measured_on_cpu(c) -> bool:
    """The pair has a trained draft whose acceptance the ``cpu-accept`` path measures on CPU
    (:data:`eagle3_conformance.trained_draft.TRAINED`): its accept-length floor is judged on a measured
    acceptance with every decode row identity-checked by the SGLang paths, so it does not rest on
    norm bands."""
    from eagle3_conformance.trained_draft import TRAINED

    return c.fixture in TRAINED
