"""The contract: pydantic models, YAML loading with line numbers, semantic validation.

A contract states, for one target/draft pair, what every tensor at the draft boundary means.
Boundaries are written in canonical notation (``B_k``, ``F``; see :mod:`conformance.notation`).

Loading never modifies the file, uses a safe YAML loader, and reports every problem with the
file and YAML line (:class:`ContractError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from conformance.notation import Boundary

SCHEMA_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
    dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
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
    layer_ids: LayerIds


# --- capture / verifier / alignment ----------------------------------------------------------


class Capture(_Strict):
    """The aux slots the draft's fc reads, in canonical notation and slot order."""

    boundaries: list[str] = Field(
        min_length=1,
        description="Aux slots as canonical boundaries, e.g. [B_2, B_4, B_6], strictly ascending.",
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
            bd = Boundary.parse(b)
            if bd.final:
                raise ValueError("F cannot be an aux slot; aux slots are B_k boundaries")
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


class Gates(_Strict):
    slot_identity_margin: float = Field(
        0.02,
        ge=0,
        description="cos(slot, declared boundary) must exceed cos with every other boundary by "
        "this much.",
    )
    slot_identity_min_cosine: float = Field(
        0.99, ge=-1, le=1, description="cos(slot, declared boundary) must reach this."
    )
    cross_path_min_cosine: float = Field(0.999, ge=-1, le=1)
    min_accept_length: Optional[float] = Field(
        None, ge=1, description="GPU runs: avg_spec_accept_length floor; null = not gated."
    )


class Engines(_Strict):
    sglang_validated: list[str] = Field(
        default_factory=list, description="SGLang versions this contract was validated with."
    )
    sglang_model_file: Optional[str] = Field(
        None, description="SGLang model family rule used to translate ids, e.g. 'llama'."
    )


class Contract(_Strict):
    """One target/draft pair's contract (the YAML file's root)."""

    schema_version: Literal[1] = 1
    name: str
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
    norm_bands: NormBands = Field(default_factory=NormBands)
    gates: Gates = Field(default_factory=Gates)
    engines: Engines = Field(default_factory=Engines)
    data_dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "bfloat16", description="dtype of hidden states on disk and at the draft input."
    )

    # -- derived -----------------------------------------------------------------------------
    @property
    def num_slots(self) -> int:
        return len(self.capture.boundaries)

    @property
    def aux(self) -> list[Boundary]:
        return self.capture.parsed

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
        return f"{where}: {key}: {self.message}"


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
            key = k.value
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


def parse_contract(text: str, file: str = "<string>") -> Contract:
    """Parse and validate contract YAML text.

    Raises:
        ContractError: malformed YAML (with line:column), schema violations and unknown keys (all
            listed at once, each with its line), or semantic inconsistencies.
    """
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        msg = f"{getattr(e, 'problem', None) or e}"
        ctx = getattr(e, "context", None)
        if ctx:
            msg = f"{ctx}: {msg}"
        raise ContractError(
            file,
            [Problem((), f"malformed YAML: {msg}", mark.line + 1 if mark else None,
                     mark.column + 1 if mark else None)],
        ) from None
    if node is None or not isinstance(data, dict):
        raise ContractError(file, [Problem((), "a contract must be a YAML mapping", 1, 1)])
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
            problems.append(Problem(loc, msg, line, col))
        raise ContractError(file, problems) from None
    problems = [
        Problem(loc, msg, *_locate(lines, loc)) for loc, msg in semantic_problems(contract)
    ]
    if problems:
        raise ContractError(file, problems)
    return contract


def load_contract(path: str | Path) -> Contract:
    """Load a contract file (read-only).

    Raises:
        ContractError: the file is missing or unreadable, or any problem listed in
            :func:`parse_contract`.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ContractError(str(p), [Problem((), f"cannot read contract: {e}")]) from None
    c = parse_contract(text, str(p))
    object.__setattr__(c, "_source", p)  # frozen model: remember where it came from
    return c


def contract_source(c: Contract) -> Optional[Path]:
    """The file a contract was loaded from, if any."""
    return getattr(c, "_source", None)


# --- semantic validation ---------------------------------------------------------------------


def semantic_problems(c: Contract) -> list[tuple[tuple, str]]:
    """Cross-field consistency. Returns (key path, message) pairs; empty when consistent."""
    out: list[tuple[tuple, str]] = []
    L = c.target.num_hidden_layers
    aux = c.capture.parsed
    for i, b in enumerate(aux):
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
    return out


# --- JSON Schema -----------------------------------------------------------------------------

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "contracts" / "schema" / "contract.schema.json"


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
