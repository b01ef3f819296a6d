"""The contract's sections as pydantic models: target, draft, capture, verifier, alignment,
training, norm bands, precision, gates, engines (the root model is in :mod:`.models`).

Every model is strict, frozen and refuses unknown keys (:class:`_Strict`), so ``validate`` refuses
exactly what the JSON Schema (:mod:`.schema`) refuses.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from eagle3_conformance.core.notation import Boundary

SCHEMA_VERSION = 1

KeyPath = tuple[Any, ...]
"""A key path into a contract, e.g. ``("capture", "boundaries", 0)``."""


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


DTypeName = Literal["float32", "bfloat16", "float16"]

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
    residual_streams: int = Field(
        1, ge=1,
        description="Residual streams of the target: config.json hc_mult for a hyper-connection target (DeepSeek-V4: "
        "4, SGLang 0.5.23 configs/deepseek_v4.py:134; GLM-5 mHC), whose residual stream is hc_mult x d wide until "
        "hc_head contracts it; 1: one stream (every other target, and every contract written before this key).",
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
    dtype: Optional[DTypeName] = Field(
        None, description="The dtype the draft was trained in (its config.json torch_dtype / dtype as trained). The "
        "engine must run the draft in a dtype that holds this one's range: float16 (largest finite 65504) cannot "
        "run a float32- or bfloat16-trained draft (R89, vllm-project/vllm#55250: a bf16 DFlash2 draft served with "
        "--dtype float16 overflowed to NaN; 0 of 1,100+ drafts accepted). SGLang and vLLM run the draft in the "
        "server's --dtype. null: not stated (the engine paths report the draft's runtime dtype without judging it).")
    quantization: Optional[str] = Field(
        None, description="The quantization the draft checkpoint declares: config.json quantization_config."
        "quant_method (e.g. 'fp8'), or 'none' when it declares none. The engine paths compare it with how the "
        "engine built each of the draft's linear layers (R94: a checkpoint storing FP8 weights built unquantized and "
        "read raw). null: not stated (the engine paths compare the draft checkpoint's own config.json).")
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
            Boundary.parse(b)  # F is refused by semantic_problems except for method mtp (contract/families.py)
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


class Precision(_Strict):
    """The dtype the target ran in when it *produced* the hidden states, per path, apart from the
    checkpoint's dtype (``target.dtype``). Every precision-dependent gate (identity noise, row floor,
    cross-path, magnitude, FP8 tolerance; :mod:`eagle3_conformance.core.gates`) follows it: a float32
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
        description="Deprecated since 0.2.0 and ignored: a fixed cosine margin failed correct data on trained "
        "models, whose adjacent boundaries differ by less (docs/gates.md). Slot identity is decided "
        "by rank, with the noise allowance of identity_noise_deg. Every read warns; `eagle3-conformance "
        "upgrade-contract` removes it; it may be refused from 0.3.0 on (docs/compatibility.md).",
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
        default_factory=lambda: list[Literal["v1", "v2"]](["v1", "v2"]), min_length=1,
        description="model runners that may serve the draft; each must capture capture.boundaries.",
    )


class ValidatedOn(_Strict):
    """What a passing conformance run ran against (written by the run into its JSON report's
    ``meta.validated_on[].engines_update.validated``: :mod:`eagle3_conformance.environment.validated`)."""

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
