"""Fault operators and the kill matrix: every FAULTS.md kind (K1-K14), injected on every path.

An :class:`Operator` turns a good input (training data, engine wiring, draft config, or a capture
after the engine) into the faulty one for one fault kind, and names the check(s) meant to catch
it. For each path (``training``, ``sglang-extend``, ``sglang-decode``) it either says how it
applies or why it is not applicable.

Where the fault lives determines where it is injected:

* in the data generator: faulty files are written in the speculators 0.9.0 format and read back
  by the REAL speculators loader (``ArrowDataset`` + ``CollateFn(shift_batch)``, through
  :class:`conformance.paths.training.TrainingLoader`); vocab mappings are written as
  ``d2t-{N}.npy`` / ``t2d-{N}.npy`` (speculators ``train/cli.py:387-393``) and read with
  speculators' own ``_load_mappings``;
* in the engine wiring: through SGLang's real knobs on the live CPU harness: the draft config
  as SGLang's own resolver reads it (``resolve_spec_aux_hidden_state_config``) applied with
  SGLang's own ``configure_aux_hidden_state_capture`` (layer ids, nested/top-level key,
  ``use_aux_hidden_state``), the draft checkpoint's ``d2t`` through the real draft's
  ``load_weights``, the harness's ``feed_draft_states``, and harness rebuilds for what SGLang
  fixes at build time (``target_hidden_size`` -> fc shape, ``ServerArgs.dtype``);
* after the engine (a connector, a side buffer, the worker stand-in): the capture or the tensor
  handed to the draft is changed in memory; the real draft still runs on it where it matters.

A matrix cell reads ``caught`` only if, in the same run, the unmutated scenario passes the catching
check and the mutated one fails it; nothing is hard-coded. ``conformance faults`` prints the matrix
and exits 1 on any ``missed`` cell.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

from conformance.notation import Boundary

if TYPE_CHECKING:  # annotations only: importing this module (the CLI does) must stay light
    from conformance.capture import Capture
    from conformance.contract import Contract
    from conformance.findings import Finding


class _LazyTorch:
    """torch, imported (after :func:`conformance.torch_env.prepare`) on first use, so that the CLI
    can register ``conformance faults`` without paying for torch on every command."""

    def __getattr__(self, name: str) -> Any:
        from conformance import torch_env

        torch_env.prepare()
        import torch as _torch

        globals()["torch"] = _torch
        return getattr(_torch, name)


torch = _LazyTorch()

PATHS = ("training", "sglang-extend", "sglang-decode")
KINDS = tuple(f"K{i}" for i in range(1, 15))
KIND_NAMES = {
    "K1": "layer-id source / engine default", "K2": "index convention, embedding at 0",
    "K3": "final layer capture unreachable", "K4": "norm / residual state", "K5": "aux-mode width",
    "K6": "target vs draft hidden size", "K7": "side-path buffer widths", "K8": "parallel sharding",
    "K9": "decode state source", "K10": "vocab mapping", "K11": "tokenization / template",
    "K12": "dtype", "K13": "capture row alignment", "K14": "positions",
}


# =============================================================================================
# Scenarios: a random tiny target, its contract, draft config, data, vocab mapping, tokenizer
# =============================================================================================


@dataclass(frozen=True)
class ScenarioSpec:
    """Everything that defines a scenario pair.

    ``boundaries`` are the aux B indices (strictly ascending, 1..L); ``target_hidden`` is d,
    ``draft_hidden`` the draft width; ``vocab`` / ``draft_vocab`` the vocab sizes.
    """

    name: str
    layers: int
    target_hidden: int
    draft_hidden: int
    boundaries: tuple[int, ...]
    vocab: int = 256
    draft_vocab: int = 64
    seed: int = 0
    num_samples: int = 4
    min_len: int = 3
    max_len: int = 14


class _InMemoryReference:
    """A :class:`conformance.reference.ReferenceModel` over an in-memory HF model (no disk)."""

    def __new__(cls, model, final_norm_kind: str = "rmsnorm"):
        from conformance.reference import ReferenceModel

        rm = ReferenceModel.__new__(ReferenceModel)
        rm.model_dir = None
        rm.model = model
        rm.final_norm_kind = final_norm_kind
        rm.num_layers = int(model.config.num_hidden_layers)
        rm.hidden_size = int(model.config.hidden_size)
        rm._norm = model.model.norm
        rm._cache = {}
        return rm


def target_spec(s: ScenarioSpec) -> dict[str, Any]:
    """The fixture-style spec (conformance.fixtures.build_target) of the scenario's target."""
    d = s.target_hidden
    return {
        "seed": s.seed,
        "target": {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "num_hidden_layers": s.layers, "hidden_size": d, "intermediate_size": 2 * d,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": s.vocab,
            "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
        },
        "profile": {"embed_rms": 0.02, "growth": 1.9, "final_norm_spread": 0.3,
                    "massive": {"token_id": 1, "read_dim": 5, "write_dim": 11, "layer": 1, "value": 40.0}},
    }


_TARGETS: dict[tuple, Any] = {}
_DIR_COUNTER = itertools.count()


def build_scenario_target(s: ScenarioSpec):
    """A seeded tiny Llama with a trained-like norm profile (conformance.fixtures.build_target),
    plus per-layer input-norm gammas spread around 1 (as trained models have), so that a
    post-norm aux slot differs from its pre-norm boundary by more than a scale. Cached."""
    from conformance.fixtures import build_target

    key = (s.layers, s.target_hidden, s.vocab, s.seed)
    if key not in _TARGETS:
        m = build_target(target_spec(s))
        g = torch.Generator().manual_seed(s.seed + 77)
        with torch.no_grad():
            for layer in m.model.layers:
                w = layer.input_layernorm.weight
                w.copy_(1.0 + 0.3 * torch.randn(w.shape[0], generator=g))
        _TARGETS[key] = m
    return _TARGETS[key]


# --- tokenizer (K11) --------------------------------------------------------------------------

_WORDS = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|end|>", "<think>", "</think>"] + [
    f"w{i}" for i in range(24)]
GOOD_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
# training-mode template that injects an empty think block before the last assistant turn
# (the Qwen3 pattern of sgl-project/SpecForge#296)
THINK_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if loop.last and m['role'] == 'assistant' %}<think> </think> "
    "{% endif %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
# serving-side variant: the BOS token dropped by the engine's template
NO_BOS_TEMPLATE = GOOD_TEMPLATE.replace("{{ bos_token }}", "")
GOLDEN_MESSAGES = [{"role": "user", "content": "w3 w7 w1"}, {"role": "assistant", "content": "w4 w4 w9 w2"}]

_TOKENIZER = None


def tiny_tokenizer():
    """A WordLevel tokenizer built offline with ``tokenizers`` (whitespace split), wrapped in
    transformers' ``PreTrainedTokenizerFast`` so templates render through ``apply_chat_template``."""
    global _TOKENIZER
    if _TOKENIZER is None:
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel
        from tokenizers.pre_tokenizers import WhitespaceSplit
        from transformers import PreTrainedTokenizerFast

        tok = Tokenizer(WordLevel({w: i for i, w in enumerate(_WORDS)}, unk_token="<unk>"))
        tok.pre_tokenizer = WhitespaceSplit()
        _TOKENIZER = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                             unk_token="<unk>")
    return _TOKENIZER


def render_ids(template: str, messages=GOLDEN_MESSAGES) -> list[int]:
    """Token ids of ``messages`` rendered with ``template`` through transformers'
    ``apply_chat_template`` (tokenize=True) on the tiny tokenizer."""
    tok = tiny_tokenizer()
    out = tok.apply_chat_template(messages, chat_template=template, tokenize=True, add_generation_prompt=False)
    if hasattr(out, "keys"):
        out = out["input_ids"]
    return [int(x) for x in out]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- vocab mapping (K10) ----------------------------------------------------------------------


def vocab_mapping(samples: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], draft_vocab: int, vocab: int):
    """(d2t [draft_vocab] int64 offsets, t2d [vocab] bool) built by speculators' own
    ``build_vocab_mappings_from_distribution`` from the loss-masked token counts."""
    from collections import Counter

    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

    freq: Counter = Counter()
    for ids, m in zip(samples, masks):
        freq.update(int(t) for t, k in zip(ids, m) if k)
    return build_vocab_mappings_from_distribution(dict(freq), draft_vocab, vocab)


# --- the scenario -----------------------------------------------------------------------------


@dataclass
class Scenario:
    """A built scenario: spec, reference model, data samples, mapping, draft config and dirs."""

    spec: ScenarioSpec
    ref: Any
    workdir: Path
    samples: list[list[int]]
    masks: list[list[int]]
    d2t: torch.Tensor
    t2d: torch.Tensor
    draft_cfg: dict[str, Any]
    target_dir: Optional[Path] = None
    draft_dir: Optional[Path] = None
    _n: int = 0

    @property
    def L(self) -> int:  # noqa: N802
        return self.spec.layers

    def fresh_dir(self, stem: str) -> Path:
        """A path under ``workdir`` that does not exist yet (unique per process)."""
        return self.workdir / f"{stem}-{next(_DIR_COUNTER)}"

    def contract(self, boundaries: Optional[Sequence[int]] = None, extra_tokens: Sequence[Sequence[int]] = ()) -> Contract:
        """The scenario's contract, norm bands calibrated from the reference on the scenario's
        samples plus ``extra_tokens`` (REFERENCE.md 7.3 band recipe with kappa 2, position 0
        excluded)."""
        return make_contract(self, tuple(boundaries or self.spec.boundaries), extra_tokens)


def draft_config(s: ScenarioSpec, ids: Sequence[int], **over) -> dict[str, Any]:
    """SGLang-style EAGLE-3 draft config (ids nested under ``eagle_config``)."""
    dd = s.draft_hidden
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
        "hidden_size": dd, "target_hidden_size": s.target_hidden, "intermediate_size": 2 * dd,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": s.vocab,
        "draft_vocab_size": s.draft_vocab, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float32", "hidden_act": "silu",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(ids), "use_aux_hidden_state": True},
    }
    cfg.update(over)
    return cfg


def sglang_ids(boundaries: Sequence[int]) -> list[int]:
    """SGLang llama-family ids for boundaries (explicit id i captures B_{i+1}; REFERENCE 2.3)."""
    return [b - 1 for b in boundaries]


def build_scenario(s: ScenarioSpec, workdir: Path, *, for_sglang: bool = False,
                   samples: Optional[list[list[int]]] = None) -> Scenario:
    """Build the target (cached per process), samples (seeded, or ``samples`` as given), loss
    masks, vocab mapping and draft config; with ``for_sglang`` also save the target (HF format)
    and the draft config for the harness."""
    from conformance.fixtures import loss_mask_for, sample_token_ids

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    model = build_scenario_target(s)
    ref = _InMemoryReference(model)
    tspec = target_spec(s)
    if samples is None:
        samples = sample_token_ids(tspec, s.num_samples, s.min_len, s.max_len, s.seed + 5)
    masks = [loss_mask_for(len(x), s.seed + i) for i, x in enumerate(samples)]
    d2t, t2d = vocab_mapping(samples, masks, s.draft_vocab, s.vocab)
    scn = Scenario(s, ref, workdir, samples, masks, d2t, t2d, draft_config(s, sglang_ids(s.boundaries)))
    if for_sglang:
        scn.target_dir = workdir / "target"
        if not (scn.target_dir / "config.json").is_file():
            model.save_pretrained(scn.target_dir, safe_serialization=True)
        scn.draft_dir = write_draft_dir(workdir / "draft", scn.draft_cfg)
    return scn


def write_draft_dir(out: Path, cfg: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    return out


def _bands(ref, slots: Sequence[Boundary], token_lists: Sequence[Sequence[int]], kappa: float = 2.0) -> list[dict]:
    from conformance.reference import rms

    out = []
    for b in slots:
        vals = []
        for ids in token_lists:
            if len(ids) < 2:
                continue
            r = ref.capture(list(ids))
            vals.append(rms(r.boundary(b)[1:]))
        v = torch.cat(vals) if vals else torch.tensor([1.0])
        out.append({"slot": str(b), "lo": float(v.min()) / kappa, "hi": float(v.max()) * kappa})
    return out


def _identity_margin(ref, slots: Sequence[Boundary], token_lists: Sequence[Sequence[int]], cap: float = 0.02) -> float:
    """The slot-identity margin this target supports on these tokens: half the smallest gap
    between a declared boundary's self-cosine (1) and its nearest other boundary (mean per-token
    cosine, position 0 excluded), capped at the default 0.02. A tiny target whose adjacent
    boundaries nearly coincide (e.g. L = 3) cannot meet the default gate on correct data."""
    gaps = []
    for ids in token_lists:
        if len(ids) < 2:
            continue
        r = ref.capture(list(ids))
        st = r.stack[:, 1:]
        for b in slots:
            x = r.boundary(b)[1:]
            cos = torch.nn.functional.cosine_similarity(st, x[None].expand_as(st), dim=-1).mean(-1)
            row = r.names.index(b)
            others = torch.cat([cos[:row], cos[row + 1:]])
            gaps.append(1.0 - float(others.max()))
    return max(0.0, min(cap, 0.5 * min(gaps))) if gaps else cap


def make_contract(scn: Scenario, boundaries: tuple[int, ...], extra_tokens: Sequence[Sequence[int]] = ()) -> Contract:
    """The contract for ``scn`` with aux ``boundaries`` (calibrated bands, vocab, tokenizer)."""
    s = scn.spec
    L, d = s.layers, s.target_hidden
    aux = [Boundary(b) for b in boundaries]
    ver = Boundary(L)
    ids_abs = torch.arange(s.draft_vocab) + scn.d2t
    from conformance.checks import mapping_sha256
    from conformance.contract import Contract

    data = {
        "name": f"faults-{s.name}",
        "description": "kill-matrix scenario (conformance.faults)",
        "provenance": {"scenario": json.dumps(s.__dict__, default=list)},
        "target": {"name": s.name, "architecture": "LlamaForCausalLM", "num_hidden_layers": L,
                   "hidden_size": d, "vocab_size": s.vocab, "dtype": "float32", "final_norm": "rmsnorm"},
        "draft": {"name": f"{s.name}-draft", "architecture": "LlamaForCausalLMEagle3",
                  "hidden_size": s.draft_hidden, "target_hidden_size": d, "draft_vocab_size": s.draft_vocab,
                  "pre_fc_norm": "none",
                  "layer_ids": {"values": sglang_ids(boundaries), "location": "nested"}},
        "capture": {"boundaries": [str(b) for b in aux], "allow_embedding": False,
                    "feature_width": len(aux) * d},
        "verifier_last": {"tensor": str(ver), "norm": "pre"},
        "norm_bands": {"status": "calibrated", "exclude_positions": [0],
                       "bands": _bands(scn.ref, list(dict.fromkeys(aux + [ver])), list(scn.samples) + list(extra_tokens)),
                       "safety_factor": 2.0, "source": "reference forward on the scenario's tokens"},
        "gates": {"slot_identity_margin": round(_identity_margin(
            scn.ref, list(dict.fromkeys(aux + [ver])), list(scn.samples) + list(extra_tokens)), 6)},
        "engines": {"sglang_model_file": "llama"},
        "data_dtype": "bfloat16",
        "vocab": {"size": s.vocab, "draft_size": s.draft_vocab, "mapping_sha256": mapping_sha256(ids_abs)},
        "tokenizer": {"chat_template_sha256": _sha(GOOD_TEMPLATE), "add_bos": True,
                      "golden": {"messages": GOLDEN_MESSAGES, "ids": render_ids(GOOD_TEMPLATE)}},
    }
    return Contract.model_validate(data)


# =============================================================================================
# Examples and knobs
# =============================================================================================


@dataclass
class Example:
    """The inputs of one run: training batches (sample indices), an extend batch (prompts) and a
    verify layout (prefixes, draft tokens, accepted counts). ``boundaries`` overrides the
    scenario's aux boundaries (same K on SGLang paths: the draft's fc is sized at build)."""

    batches: list[list[int]]
    extend: list[list[int]]
    prefixes: list[list[int]]
    drafts: list[list[int]]
    accepted: list[int]
    boundaries: Optional[tuple[int, ...]] = None

    def tokens(self) -> list[list[int]]:
        return [list(x) for x in self.extend] + [list(p) + list(d) for p, d in zip(self.prefixes, self.drafts)]


def default_example(scn: Scenario) -> Example:
    """A fixed example for the matrix: every sample in one training batch, a batch of 3 prompts
    and a verify step over 2 requests with 3 draft tokens, consistent with the target."""
    from conformance.suite import consistent_drafts

    ext = [list(x) for x in scn.samples[:3] if len(x) >= 2] or [[1, 5, 6, 7]]
    prefixes = [list(scn.samples[0][:5]), list(scn.samples[1][:4])]
    accepted = [2, 3]
    drafts = [consistent_drafts(scn.ref, p, 3, a, [7 + i, 9 + i, 11 + i]) for i, (p, a) in enumerate(zip(prefixes, accepted))]
    return Example([list(range(len(scn.samples)))], ext, prefixes, drafts, accepted)


@dataclass
class Knobs:
    """What an operator changes for one path run. Defaults: the good input.

    Training (the data generator / trainer): ``slots`` (on-disk slot list, aux then verifier),
    ``hs_transform(scn, ref, hs [T,N,d] f32) -> hs``, ``rows_from`` (flat-buffer row
    reassignment across samples), ``disk_dtype``, ``mapping`` (good/absolute/missing),
    ``train_template``.
    Serving (the engine): ``draft_config`` (the config SGLang's resolver reads), ``d2t``
    (good/absolute/missing in the draft checkpoint), ``handoff`` (the tensor handed to the draft
    after verify -> tensor: a side-path buffer), ``feed_draft_states``, ``serving_template``,
    ``variant`` (a harness rebuild: ``{"draft": {...}, "dtype": "bfloat16"}``).
    Both: ``capture(scn, caps) -> caps`` (after the engine / loader, in memory).
    """

    slots: Optional[list[str]] = None
    hs_transform: Optional[Callable] = None
    rows_from: Optional[Callable] = None
    disk_dtype: Optional[str] = None
    mapping: str = "good"
    train_template: Optional[str] = None
    draft_config: Optional[dict] = None
    d2t: str = "good"
    handoff: Optional[Callable] = None
    feed_draft_states: bool = False
    serving_template: Optional[str] = None
    variant: Optional[dict] = None
    capture: Optional[Callable] = None


# =============================================================================================
# Path runners
# =============================================================================================


class NoOp(Exception):
    """The fault changes nothing on this example (e.g. a row shift on a 1-row capture, rows
    permuted between identical requests): there is nothing to catch."""


def _same_caps(a: list[Capture], b: list[Capture]) -> bool:
    def eq(x, y):
        if x is None or y is None:
            return x is y
        return x.shape == y.shape and bool(torch.equal(x, y))

    return len(a) == len(b) and all(
        eq(x.feature, y.feature) and eq(x.position_ids, y.position_ids) and eq(x.rows, y.rows)
        for x, y in zip(a, b))


def apply_capture(k: "Knobs", scn: "Scenario", caps: list[Capture]) -> list[Capture]:
    """``k.capture`` applied in memory; raises :class:`NoOp` when it changed nothing."""
    if k.capture is None:
        return caps
    new = k.capture(scn, caps)
    if _same_caps(caps, new):
        raise NoOp("the in-memory fault changed no row of this example")
    return new

_FEATURES = None


def _speculators_features():
    """The Arrow features speculators' own ``build_speculator_training_dataset`` writes."""
    global _FEATURES
    if _FEATURES is None:
        import datasets
        from datasets import Dataset
        from speculators.data_generation.preprocessing import build_speculator_training_dataset

        datasets.disable_progress_bars()
        ds = build_speculator_training_dataset(Dataset.from_dict({"input_ids": [[1, 2]], "loss_mask": [[1, 1]]}),
                                               processor=None, max_length=10**9, num_proc=1)
        _FEATURES = ds.features
    return _FEATURES


def write_dataset(out: Path, scn: Scenario, contract: Contract, k: Knobs) -> Path:
    """Write a speculators 0.9.0 dataset (Arrow dir with speculators' own features, plus
    ``hidden_states/hs_{i}.safetensors`` [T, N, d] and ``token_ids`` [T], plus
    ``d2t-{N}.npy`` / ``t2d-{N}.npy``) as the data generator would, with the knobs' faults."""
    import numpy as np
    from datasets import Dataset
    from safetensors.torch import save_file

    from conformance.datagen import _DTYPES

    out.mkdir(parents=True)
    samples, masks = scn.samples, scn.masks
    Dataset.from_dict({"input_ids": samples, "loss_mask": masks, "seq_len": [len(x) for x in samples]},
                      features=_speculators_features()).with_format("torch").save_to_disk(str(out))
    slots = k.slots or [str(b) for b in contract.aux] + [contract.verifier_last.tensor]
    dtype = _DTYPES[k.disk_dtype or contract.data_dtype]
    hs_all = []
    for ids in samples:
        r = scn.ref.capture(ids)
        hs = torch.stack([r.boundary(b) for b in slots], dim=1)
        if k.hs_transform is not None:
            hs = k.hs_transform(scn, r, hs)
        hs_all.append(hs)
    if k.rows_from is not None:
        hs_all = k.rows_from(hs_all)
    if k.slots is None and (k.hs_transform is not None or k.rows_from is not None):
        good = [torch.stack([scn.ref.capture(ids).boundary(b) for b in slots], dim=1) for ids in samples]
        if all(g.shape == h.shape and torch.equal(g.to(dtype), h.to(dtype)) for g, h in zip(good, hs_all)):
            shutil.rmtree(out, ignore_errors=True)
            raise NoOp("the data fault changed no stored row of this example")
    (out / "hidden_states").mkdir()
    for i, (ids, hs) in enumerate(zip(samples, hs_all)):
        save_file({"hidden_states": hs.to(dtype).contiguous(), "token_ids": torch.tensor(ids, dtype=torch.long)},
                  str(out / "hidden_states" / f"hs_{i}.safetensors"))
    N = scn.spec.draft_vocab
    if k.mapping != "missing":
        d2t = scn.d2t if k.mapping == "good" else scn.d2t + torch.arange(N)
        np.save(out / f"d2t-{N}.npy", d2t.numpy())
        np.save(out / f"t2d-{N}.npy", scn.t2d.numpy())
    return out


def load_mapping(data_dir: Path, draft_vocab: int):
    """(d2t, t2d) through speculators' own ``_load_mappings`` from the files the trainer looks
    for (``d2t-{N}.npy`` / ``t2d-{N}.npy`` in the data dir, train/cli.py:411-418); (None, None)
    when they are absent (the trainer then falls back to the full verifier vocab)."""
    from speculators.train.cli import _load_mappings

    d, t = data_dir / f"d2t-{draft_vocab}.npy", data_dir / f"t2d-{draft_vocab}.npy"
    if not (d.exists() and t.exists()):
        return None, None
    d2t, t2d, _ = _load_mappings(d, t, draft_vocab)
    return d2t, t2d


def run_training(scn: Scenario, contract: Contract, ex: Example, k: Knobs = Knobs()) -> list[Finding]:
    """Write the data (with ``k``'s faults), read it with the real speculators loader, check."""
    from conformance.checks import check_chat_template, check_golden_tokens, check_vocab_mapping, run_checks
    from conformance.paths.training import TrainingLoader

    data = write_dataset(scn.fresh_dir("data"), scn, contract, k)
    loader = TrainingLoader(data, contract.draft.target_hidden_size, contract.num_slots, torch.bfloat16)
    out: list[Finding] = []
    for batch in ex.batches:
        caps = apply_capture(k, scn, loader.batch(list(batch)))
        for cap in caps:
            ref = scn.ref.capture(cap.token_ids) if (not cap.unavailable and len(cap.token_ids)) else None
            out += run_checks(contract, cap, ref)
    d2t, t2d = load_mapping(data, contract.draft.draft_vocab_size)
    out += check_vocab_mapping(contract, d2t, t2d, "training", str(data))
    tmpl = k.train_template or GOOD_TEMPLATE
    out += check_chat_template(contract, tmpl, "training")
    out += check_golden_tokens(contract, render_ids(tmpl), None, "training")
    shutil.rmtree(data, ignore_errors=True)
    return out


# --- SGLang -----------------------------------------------------------------------------------


class HarnessPool:
    """At most one SGLang CPU harness alive (SGLang keeps one runtime per process); rebuilds only
    when the (scenario, variant) key changes."""

    def __init__(self) -> None:
        self.key = None
        self.h = None
        self.builds = 0
        self.build_s = 0.0

    def get(self, scn: Scenario, variant: Optional[dict] = None):
        from conformance.paths.sglang_cpu import SGLangCPUHarness

        key = (str(scn.target_dir), json.dumps(variant or {}, sort_keys=True))
        if self.h is not None and not self.h.closed and self.key == key:
            return self.h
        draft_dir = scn.draft_dir
        dtype = torch.float32
        if variant:
            cfg = dict(scn.draft_cfg)
            for kk, vv in (variant.get("draft") or {}).items():
                if vv is None:
                    cfg.pop(kk, None)
                else:
                    cfg[kk] = vv
            draft_dir = write_draft_dir(scn.fresh_dir("draft-variant"), cfg)
            dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[
                variant.get("dtype", "float32")]
        t0 = time.perf_counter()
        self.h = SGLangCPUHarness(scn.target_dir, draft_dir, dtype=dtype)
        self.build_s += time.perf_counter() - t0
        self.builds += 1
        self.key = key
        return self.h

    def close(self) -> None:
        if self.h is not None:
            self.h.close()
        self.h = None
        self.key = None


def apply_draft_config(h, scn: Scenario, cfg: dict) -> None:
    """Resolve the capture ids from ``cfg`` with SGLang's own resolver
    (``resolve_spec_aux_hidden_state_config``: nested ``eagle_config`` key only, any exception ->
    defaults) and apply them with SGLang's own ``configure_aux_hidden_state_capture`` to the live
    target, starting from a freshly loaded model's state (capture off, no layers), as ModelRunner
    does (model_runner.py:1105-1116). Only the target side is re-resolved: the draft's fc stays as
    built."""
    from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
        configure_aux_hidden_state_capture,
    )
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    d = write_draft_dir(scn.fresh_dir("draft-config"), cfg)
    spec = get_spec()
    old = spec.speculative_draft_model_path
    object.__setattr__(spec, "speculative_draft_model_path", str(d))
    try:
        conf = resolve_spec_aux_hidden_state_config(
            server_args=h.server_args, model_config=h.target_config,
            spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"), is_draft_worker=False)
    finally:
        object.__setattr__(spec, "speculative_draft_model_path", old)
        shutil.rmtree(d, ignore_errors=True)
    h.target.capture_aux_hidden_states = False
    h.target.model.layers_to_capture = []
    configure_aux_hidden_state_capture(
        model=h.target, eagle_use_aux_hidden_state=conf.eagle_use_aux_hidden_state,
        eagle_aux_hidden_state_layer_ids=conf.eagle_aux_hidden_state_layer_ids,
        dflash_use_aux_hidden_state=False, dflash_target_layer_ids=None, is_dspark=False)
    ids = conf.eagle_aux_hidden_state_layer_ids
    h._override = None
    h.engine_ids = list(ids) if ids is not None else None
    h._resolved_engine_ids = h.engine_ids
    h.resolved_layers_to_capture = list(h.target.model.layers_to_capture)


def load_engine_d2t(h, scn: Scenario, mode: str) -> Optional[torch.Tensor]:
    """Load the draft checkpoint's ``d2t`` through the real draft's ``load_weights`` (SGLang turns
    it into ``hot_token_id = d2t + arange``, llama_eagle3.py:350-352) and return the offsets the
    engine now holds (``hot_token_id - arange``), or None when the checkpoint had no d2t."""
    h.draft.hot_token_id = None  # a freshly built draft (llama_eagle3.py:323)
    N = scn.spec.draft_vocab
    if mode != "missing":
        d2t = scn.d2t if mode == "good" else scn.d2t + torch.arange(N)
        h.draft.load_weights([("d2t", d2t.clone())])
    hot = h.draft.get_hot_token_id()
    return None if hot is None else (hot - torch.arange(hot.shape[0])).to(torch.int64)


@contextlib.contextmanager
def _handoff(h, fn: Optional[Callable]):
    """Replace the tensor handed to the draft (``spec_info.hidden_states``) with ``fn(tensor)``
    right before the real draft runs (a side-path buffer between verify and draft extend)."""
    if fn is None:
        yield
        return
    orig = h._draft_forward

    def wrapped(fb, segments):
        fb.spec_info.hidden_states = fn(fb.spec_info.hidden_states)
        return orig(fb, segments)

    h._draft_forward = wrapped
    try:
        yield
    finally:
        del h._draft_forward


def _serving_checks(scn, contract, h, caps, k: Knobs, path: str) -> list[Finding]:
    from conformance.checks import check_chat_template, check_golden_tokens, check_vocab_mapping, run_checks

    out: list[Finding] = []
    caps = apply_capture(k, scn, caps)
    for cap in caps:
        out += run_checks(contract, cap, scn.ref.capture(cap.token_ids))
    out += check_vocab_mapping(contract, load_engine_d2t(h, scn, k.d2t), scn.t2d, path, "draft hot_token_id")
    if path == "sglang-extend":
        tmpl = k.serving_template or GOOD_TEMPLATE
        out += check_chat_template(contract, tmpl, path)
        out += check_golden_tokens(contract, None, render_ids(tmpl), path)
    return out


def run_sglang(scn: Scenario, contract: Contract, ex: Example, path: str, pool: HarnessPool,
               k: Knobs = Knobs()) -> list[Finding]:
    """One SGLang path run (``sglang-extend`` or ``sglang-decode``) on the live CPU harness."""
    from conformance.paths.sglang_cpu import DraftForwardError

    h = pool.get(scn, k.variant)
    bnd = ex.boundaries or scn.spec.boundaries
    cfg = k.draft_config if k.draft_config is not None else draft_config(scn.spec, sglang_ids(bnd))
    apply_draft_config(h, scn, cfg)
    try:
        with _handoff(h, k.handoff):
            if path == "sglang-extend":
                caps = h.extend([list(x) for x in ex.extend])
            else:
                caps = h.verify([list(p) for p in ex.prefixes], [list(d) for d in ex.drafts], list(ex.accepted),
                                feed_draft_states=k.feed_draft_states)
    except DraftForwardError as e:  # loud in SGLang; what entered the draft is still checked
        caps = e.captures
    return _serving_checks(scn, contract, h, caps, k, path)


def run_path(scn: Scenario, contract: Contract, ex: Example, path: str, pool: Optional[HarnessPool],
             k: Knobs = Knobs()) -> list[Finding]:
    if path == "training":
        return run_training(scn, contract, ex, k)
    return run_sglang(scn, contract, ex, path, pool, k)


# =============================================================================================
# Operators
# =============================================================================================


@dataclass(frozen=True)
class NotApplicable:
    reason: str


@dataclass(frozen=True)
class Apply:
    """How an operator applies on one path: words, where it is injected, and the knob builder
    ``fn(scn, contract, example) -> Knobs | None`` (None: the fault is a no-op on this example,
    e.g. a shift on a 1-row capture)."""

    how: str
    where: str  # "data files" | "engine knob" | "engine rebuild" | "in memory (after the engine)" ...
    fn: Callable[[Scenario, Contract, Example], Optional[Knobs]]


@dataclass(frozen=True)
class Operator:
    """One fault. ``kind`` is the FAULTS.md kind; ``checks`` the check names meant to catch it;
    ``scenario`` the matrix scenario it needs ("base", "final": aux includes B_L, "wide": target
    96 / draft 64); ``paths`` maps each path to :class:`Apply` or :class:`NotApplicable`."""

    name: str
    kind: str
    title: str
    checks: tuple[str, ...]
    paths: dict[str, Union[Apply, NotApplicable]]
    scenario: str = "base"


def _aux(c: Contract) -> list[int]:
    return [b.index for b in c.aux]


def _cfg(scn, ids=None, **over):
    return draft_config(scn.spec, ids if ids is not None else [], **over)


def _with_eagle(scn, c, **eagle):
    cfg = draft_config(scn.spec, sglang_ids(_aux(c)))
    cfg["eagle_config"] = {**cfg["eagle_config"], **eagle}
    return cfg


# -- training knob builders --


def _t_swap(scn, c, ex):
    a = [str(b) for b in c.aux]
    if len(a) < 2:
        return None
    a[0], a[1] = a[1], a[0]
    return Knobs(slots=a + [c.verifier_last.tensor])


def _t_embed(scn, c, ex):
    return Knobs(slots=["B_0"] + [str(b) for b in c.aux])


def _t_shift(scn, c, ex):
    if max(_aux(c)) + 1 > c.L:
        return None
    return Knobs(slots=[f"B_{b + 1}" for b in _aux(c)] + [c.verifier_last.tensor])


def _defaults(L: int) -> list[int]:
    return sorted({2, L // 2, L - 3} & set(range(1, L + 1)))


def _t_default(scn, c, ex):
    dflt = _defaults(c.L)
    if dflt == _aux(c) or not dflt:
        return None
    return Knobs(slots=[f"B_{b}" for b in dflt] + [c.verifier_last.tensor])


def _t_unreachable(scn, c, ex):
    if _aux(c)[-1] != c.L:
        return None
    return Knobs(slots=[str(b) for b in c.aux[:-1]] + [c.verifier_last.tensor])


def _t_verifier_F(scn, c, ex):
    return Knobs(slots=[str(b) for b in c.aux] + ["F"])


def _t_no_residual(scn, c, ex):
    j = len(c.aux) - 1  # the deepest aux slot

    def tf(scn_, r, hs):
        b = c.aux[j].index
        hs = hs.clone()
        hs[:, j] = r.boundary(Boundary(b)) - r.boundary(Boundary(b - 1))
        return hs

    return Knobs(hs_transform=tf)


def _t_F_only(scn, c, ex):
    return Knobs(slots=["F", c.verifier_last.tensor])


def _t_sharded(scn, c, ex):
    if not any(len(scn.samples[i]) >= 3 for b in ex.batches for i in b):
        return None

    def tf(scn_, r, hs):  # rank 0 of 2 keeps its token shard; no gather
        return hs[: math.ceil(hs.shape[0] / 2)]

    return Knobs(hs_transform=tf)


def _rotate_rows(parts: list[torch.Tensor]) -> list[torch.Tensor]:
    """Concatenate per-request rows in a wrong request order (rotated by one, as a lexicographic
    sort of request ids does) and split them back by the original lengths."""
    lens = [p.shape[0] for p in parts]
    flat = torch.cat(parts[1:] + parts[:1])
    return list(torch.split(flat, lens))


def _t_permute(scn, c, ex):
    if len(scn.samples) < 2:
        return None
    return Knobs(rows_from=_rotate_rows)


def _t_dtype(scn, c, ex):
    return Knobs(disk_dtype="float32" if c.data_dtype != "float32" else "bfloat16")


def _freeze_positions(scn, caps):
    out = []
    for cap in caps:
        p = cap.position_ids
        if p is not None and p.numel() >= 2:
            cap = replace(cap, position_ids=torch.full_like(p, int(p[0])))
        out.append(cap)
    return out


def _positions(scn, c, ex):
    return Knobs(capture=_freeze_positions)


# -- serving knob builders --


def _s_embed(scn, c, ex):
    ids = sglang_ids(_aux(c))
    return Knobs(draft_config=_cfg(scn, [-1] + ids[:-1]))


def _s_shift(scn, c, ex):
    if max(_aux(c)) + 1 > c.L - 1:  # B_L is unreachable in llama.py: the shift would drop a slot
        return None
    return Knobs(draft_config=_cfg(scn, _aux(c)))  # boundary-convention ids; SGLang adds +1


def _s_default(scn, c, ex):
    L = c.L
    if [2, L // 2, L - 3] == _aux(c):
        return None
    cfg = _cfg(scn, sglang_ids(_aux(c)))
    cfg["eagle_aux_hidden_state_layer_ids"] = cfg["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")
    return Knobs(draft_config=cfg)  # ids at top level: SGLang's resolver ignores them


def _s_unreachable(scn, c, ex):
    ids = sglang_ids(_aux(c))
    if ids[-1] == c.L - 1:
        return None
    return Knobs(draft_config=_cfg(scn, ids[:-1] + [c.L - 1]))  # asks for B_L: layer L never runs


def _s_no_aux(scn, c, ex):
    return Knobs(draft_config=_with_eagle(scn, c, use_aux_hidden_state=False))


def _slot_map(c: Contract, j: int, fn):
    d = c.draft.target_hidden_size

    def cap_fn(scn, caps):
        out = []
        for cap in caps:
            f = cap.feature.clone()
            f[:, j * d:(j + 1) * d] = fn(scn, cap, f[:, j * d:(j + 1) * d].float()).to(f.dtype)
            out.append(replace(cap, feature=f))
        return out

    return cap_fn


def _s_postnorm(scn, c, ex):
    j = len(c.aux) - 1
    b = c.aux[j].index

    def normed(scn_, cap, x):  # the deepest slot handed over after layer b's input RMSNorm
        w = scn_.ref.model.model.layers[b].input_layernorm.weight.detach().float() if b < c.L else \
            scn_.ref.model.model.norm.weight.detach().float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    return Knobs(capture=_slot_map(c, j, normed))


def _t_postnorm(scn, c, ex):
    j = len(c.aux) - 1
    b = c.aux[j].index
    w = scn.ref.model.model.layers[b].input_layernorm.weight.detach().float() if b < c.L else \
        scn.ref.model.model.norm.weight.detach().float()

    def tf(scn_, r, hs):
        hs = hs.clone()
        x = hs[:, j]
        hs[:, j] = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
        return hs

    return Knobs(hs_transform=tf, slots=[str(x) for x in c.aux] + ["F"])


def _s_no_residual(scn, c, ex):
    j = len(c.aux) - 1
    b = c.aux[j].index

    def delta(scn_, cap, x):  # the layer's update without the residual it was added to
        return x - scn_.ref.capture(cap.token_ids).boundary(Boundary(b - 1))[cap.rows]

    return Knobs(capture=_slot_map(c, j, delta))


def _s_d_buffer(scn, c, ex):
    d = c.target.hidden_size

    def buf(x):  # verify rows copied into a buffer sized d (one slot), not K*d
        out = torch.zeros(x.shape[0], d, dtype=x.dtype)
        out.copy_(x[:, :d])
        return out

    return Knobs(handoff=buf)


def _s_sharded(scn, c, ex):
    def shard(scn_, caps):
        out = []
        for cap in caps:
            n = cap.feature.shape[0]
            out.append(replace(cap, feature=cap.feature[: math.ceil(n / 2)]) if n >= 2 else cap)
        return out

    return Knobs(capture=shard)


def _s_permute(scn, c, ex):
    def perm(scn_, caps):
        if len(caps) < 2:
            return caps
        parts = _rotate_rows([cap.feature for cap in caps])
        return [replace(cap, feature=p) for cap, p in zip(caps, parts)]

    return Knobs(capture=perm)


def _s_dtype(scn, c, ex):
    return Knobs(variant={"dtype": "bfloat16" if c.target.dtype != "bfloat16" else "float32"})


def _s_crossed(scn, c, ex):
    if scn.spec.draft_hidden == scn.spec.target_hidden:
        return None  # masked: equal widths cannot show K6
    return Knobs(variant={"draft": {"target_hidden_size": None}})


_NA_SGLANG_ORDER = NotApplicable(
    "SGLang concatenates aux states in layer order whatever the id order (llama.py:485-494): no "
    "wiring yields swapped blocks")
_NA_TRAIN_DRAFT_W = NotApplicable(
    "speculators 0.9.0 has one width H (the verifier's): fc = Linear(num_aux*H, H), target_hidden_size "
    "is never set (REFERENCE 5.3)")
_NA_TRAIN_SIDE = NotApplicable("the offline loader has no side-path buffers (decode/idle/PD/graph)")
_NA_EXTEND_SIDE = NotApplicable("the extend path is the main path whose width the side paths must match")
_NA_TRAIN_DECODE = NotApplicable("offline training data has no verify step; TTT feeds draft states by design")
_NA_EXTEND_DECODE = NotApplicable("after prefill the draft always gets the target's prefill states; the "
                                  "state-source choice exists only after verify")
_NA_DECODE_TEXT = NotApplicable("decode consumes ids the engine sampled; no text is tokenized on this path")


def _both(how: str, where: str, fn) -> dict[str, Apply]:
    return {"sglang-extend": Apply(how, where, fn), "sglang-decode": Apply(how, where, fn)}


OPERATORS: list[Operator] = [
    Operator("slots-swapped", "K2", "aux blocks in the wrong order", ("slot_order", "slot_identity"), {
        "training": Apply("data generator writes the first two aux slots swapped (list-order concat)",
                          "data files", _t_swap),
        "sglang-extend": _NA_SGLANG_ORDER, "sglang-decode": _NA_SGLANG_ORDER}),
    Operator("embedding-prepended", "K2", "B_0 (embedding) captured as slot 0",
             ("no_embedding", "slot_identity"), {
        "training": Apply("on-disk slots [B_0, aux...] (no verifier slot): the loader routes B_0 to fc "
                          "and the last aux to the verifier", "data files", _t_embed),
        **_both("draft config ids [-1, ...]: llama's +1 maps -1 to B_0", "engine knob (draft config)", _s_embed)}),
    Operator("ids-shifted", "K2", "every id shifted by one (convention crossed)", ("slot_identity", "engine_mapping"), {
        "training": Apply("data generator captures B_{b+1} (output-of ids read as boundaries)", "data files", _t_shift),
        **_both("draft config holds boundary ids b; SGLang adds +1 -> B_{b+1}", "engine knob (draft config)",
                _s_shift)}),
    Operator("engine-default-layers", "K1", "engine default layers instead of the configured ones",
             ("engine_mapping", "slot_identity", "slot_count"), {
        "training": Apply("data generator falls back to its defaults {2, L//2, L-3}", "data files", _t_default),
        **_both("ids moved to the top-level key: SGLang's resolver ignores it, setter defaults apply",
                "engine knob (draft config)", _s_default)}),
    Operator("last-slot-unreachable", "K3", "B_L requested but never captured (K-1 slots)",
             ("slot_count", "feature_width"), {
        "training": Apply("contract aux ends with B_L; the generator cannot reach it and writes K-1 aux slots",
                          "data files", _t_unreachable),
        **_both("draft config's last id L-1 -> layer L, never reached by llama.py's loop", "engine knob (draft config)",
                _s_unreachable)}, scenario="final+base"),
    Operator("final-norm-output-as-aux", "K5", "F handed over instead of the aux concat",
             ("slot_count", "feature_width", "draft_input_width", "fc_ran", "slot_identity"), {
        "training": Apply("on-disk slots [F, B_L]: fc gets the d-wide F", "data files", _t_F_only),
        **_both("draft config use_aux_hidden_state: false -> LogitsProcessor stores F (no-aux fallback)",
                "engine knob (draft config)", _s_no_aux)}),
    Operator("pre-post-norm-swapped", "K4", "post-norm state where the contract says pre-norm",
             ("verifier_norm_state", "verifier_identity", "slot_identity", "norm_band", "row_fingerprint"), {
        "training": Apply("verifier slot stored as F (post final norm) and the deepest aux slot stored after "
                          "its layer's input RMSNorm", "data files", _t_postnorm),
        **_both("deepest aux slot handed over after its layer's input RMSNorm (capture site after the norm)",
                "in memory (capture site)", _s_postnorm)}),
    Operator("hidden-without-residual", "K4", "layer update captured without the residual",
             ("slot_identity", "row_fingerprint", "norm_band"), {
        "training": Apply("deepest aux slot written as B_b - B_{b-1}", "data files", _t_no_residual),
        **_both("deepest aux slot minus the residual entering its layer", "in memory (capture site)",
                _s_no_residual)}),
    Operator("hidden-sizes-crossed", "K6", "fc sized from the draft width, not the target's",
             ("fc_shape",), {
        "training": _NA_TRAIN_DRAFT_W,
        **_both("draft config without target_hidden_size: SGLang sizes fc from hidden_size",
                "engine rebuild (draft config)", _s_crossed)}, scenario="wide"),
    Operator("decode-buffer-sized-d", "K7", "a decode-path buffer sized d instead of K*d",
             ("draft_input_width", "slot_count", "fc_ran"), {
        "training": _NA_TRAIN_SIDE, "sglang-extend": _NA_EXTEND_SIDE,
        "sglang-decode": Apply("verify rows copied into a d-wide buffer before the real draft extend",
                               "in memory (handoff buffer)", _s_d_buffer)}),
    Operator("token-sharded-rows", "K8", "rows token-sharded as under TP, no gather",
             ("row_count", "sample_available", "feature_alignment", "row_fingerprint"), {
        "training": Apply("generator on rank 0 of 2 stores only its token shard of each sample", "data files",
                          _t_sharded),
        **_both("rank 0's token shard handed on without the all-gather", "in memory (after the engine)",
                _s_sharded)}),
    Operator("draft-states-fed-back", "K9", "draft states instead of target-verified ones",
             ("draft_input_width", "slot_count", "fc_ran"), {
        "training": _NA_TRAIN_DECODE, "sglang-extend": _NA_EXTEND_DECODE,
        "sglang-decode": Apply("harness feed_draft_states: the draft's own FULL output states are fed back",
                               "engine knob (feed_draft_states)", lambda s, c, e: Knobs(feed_draft_states=True))}),
    Operator("d2t-absolute", "K10", "d2t holds absolute target ids, not offsets", ("vocab_mapping",), {
        "training": Apply("d2t-{N}.npy written as absolute ids", "data files",
                          lambda s, c, e: Knobs(mapping="absolute")),
        **_both("draft checkpoint d2t holds absolute ids (hot_token_id = d2t + arange)", "engine knob (checkpoint)",
                lambda s, c, e: Knobs(d2t="absolute"))}),
    Operator("d2t-missing", "K10", "vocab mapping missing", ("vocab_mapping",), {
        "training": Apply("no d2t/t2d files: the trainer falls back to the full vocab", "data files",
                          lambda s, c, e: Knobs(mapping="missing")),
        **_both("draft checkpoint without d2t: hot_token_id stays None", "engine knob (checkpoint)",
                lambda s, c, e: Knobs(d2t="missing"))}),
    Operator("chat-template-differs", "K11", "training text tokenized differently from serving",
             ("golden_tokens", "chat_template"), {
        "training": Apply("training-mode template injects an empty think block", "data generator template",
                          lambda s, c, e: Knobs(train_template=THINK_TEMPLATE)),
        "sglang-extend": Apply("the engine's template drops BOS", "engine tokenizer template",
                               lambda s, c, e: Knobs(serving_template=NO_BOS_TEMPLATE)),
        "sglang-decode": _NA_DECODE_TEXT}),
    Operator("dtype-cast", "K12", "hidden states in the wrong dtype", ("dtype", "tensor_dtype"), {
        "training": Apply("hidden states stored as float32 (contract: bfloat16)", "data files", _t_dtype),
        **_both("engine built with ServerArgs.dtype bfloat16 (contract: float32)", "engine rebuild (dtype)",
                _s_dtype)}),
    Operator("rows-permuted-across-requests", "K13", "rows assigned to the wrong request in a batch",
             ("row_fingerprint", "slot_identity", "feature_alignment", "verifier_identity", "row_count"), {
        "training": Apply("generator writes each sample's rows from a flat buffer split in the wrong request "
                          "order", "data files", _t_permute),
        **_both("a connector splits the batch's flat rows in the wrong request order",
                "in memory (after the engine)", _s_permute)}),
    Operator("positions-not-advanced", "K14", "every row gets the same position id", ("position_alignment",), {
        "training": Apply("trainer hands every row the first position id", "in memory (after the loader)", _positions),
        **_both("worker hands the draft the first position for every row", "in memory (worker stand-in)",
                _positions)}),
]

OPERATORS_BY_NAME = {op.name: op for op in OPERATORS}


# =============================================================================================
# Verdicts and the matrix
# =============================================================================================


@dataclass
class Verdict:
    status: str  # "caught" | "missed" | "n/a" | "noop"
    check: Optional[str] = None
    detail: str = ""
    baseline_failures: list[Finding] = field(default_factory=list)


def judge(checks: Sequence[str], base: list[Finding], mut: list[Finding]) -> Verdict:
    """``caught`` by check X iff the baseline has X passing (and not failing) and the mutated
    run fails X. Baseline failures of any check are returned too (false positives)."""
    bfail = [f for f in base if f.status == "fail"]
    for chk in checks:
        b = [f for f in base if f.check == chk]
        if not b or any(f.status == "fail" for f in b) or not any(f.status == "pass" for f in b):
            continue
        m = [f for f in mut if f.check == chk and f.status == "fail"]
        if m:
            return Verdict("caught", chk, m[0].message, bfail)
    why = "; ".join(sorted({f"{f.check}: {f.status}" for f in mut if f.check in checks})) or "no finding"
    return Verdict("missed", None, f"no catching check failed on the mutated run while passing on the baseline ({why})",
                   bfail)


def evaluate(op: Operator, path: str, scn: Scenario, contract: Contract, ex: Example,
             pool: Optional[HarnessPool], base: Optional[list[Finding]] = None) -> Verdict:
    """Run the baseline (unless given) and the mutated input for one operator on one path."""
    ap = op.paths[path]
    if isinstance(ap, NotApplicable):
        return Verdict("n/a", detail=ap.reason)
    k = ap.fn(scn, contract, ex)
    if k is None:
        return Verdict("noop", detail="the fault is a no-op on this example")
    if base is None:
        base = run_path(scn, contract, ex, path, pool)
    try:
        mut = run_path(scn, contract, ex, path, pool, k)
    except NoOp as e:
        return Verdict("noop", detail=str(e))
    return judge(op.checks, base, mut)


MATRIX_SCENARIOS = {
    # non-default boundaries (SGLang defaults for L=8 are [2,4,5]); shift +1 stays reachable
    "base": ScenarioSpec("base", layers=8, target_hidden=64, draft_hidden=64, boundaries=(3, 5, 6), seed=11),
    # aux includes B_L (training only: llama.py never reaches L)
    "final": ScenarioSpec("final", layers=8, target_hidden=64, draft_hidden=64, boundaries=(3, 5, 8), seed=11),
    # target 96, draft 64 (K6 is masked when the widths are equal)
    "wide": ScenarioSpec("wide", layers=8, target_hidden=96, draft_hidden=64, boundaries=(3, 5, 6), seed=12),
}


def _op_scenarios(op: Operator, path: str) -> list[str]:
    if op.scenario == "wide":
        return ["wide"]
    if op.scenario == "final+base":
        return ["final"] if path == "training" else ["base"]
    return ["base"]


@dataclass
class Cell:
    kind: str
    path: str
    status: str
    operators: list[tuple[str, Verdict]]

    @property
    def checks(self) -> list[str]:
        return sorted({v.check for _, v in self.operators if v.check})


def run_matrix(workdir: Optional[Path] = None, sglang: Optional[bool] = None,
               log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Run every operator on every path of its scenario(s); returns ``{"cells", "operators",
    "false_positives", "timings"}``. SGLang paths are skipped (reported ``not run``) when SGLang
    is not installed. The baseline of each (scenario, path) runs once and must be free of
    failures; each operator's mutated run is judged against it."""
    import importlib.util

    t_start = time.perf_counter()
    if sglang is None:
        sglang = importlib.util.find_spec("sglang") is not None
    own = workdir is None
    workdir = Path(workdir or tempfile.mkdtemp(prefix="conformance-faults-"))
    pool = HarnessPool()
    results: dict[tuple[str, str], Verdict] = {}
    false_pos: list[dict] = []
    timings: dict[str, float] = {}
    try:
        scns: dict[str, Scenario] = {}
        exs: dict[str, Example] = {}
        contracts: dict[str, Contract] = {}
        for name, spec in MATRIX_SCENARIOS.items():
            t0 = time.perf_counter()
            scns[name] = build_scenario(spec, workdir / name, for_sglang=sglang and name != "final")
            exs[name] = default_example(scns[name])
            contracts[name] = scns[name].contract(extra_tokens=exs[name].tokens())
            timings[f"build {name}"] = time.perf_counter() - t0
        # group work per (scenario, path, harness variant) so that each harness is built once
        work: dict[tuple[str, str], list[Operator]] = {}
        for op in OPERATORS:
            for path in PATHS:
                if isinstance(op.paths[path], NotApplicable):
                    results[(op.name, path)] = Verdict("n/a", detail=op.paths[path].reason)
                    continue
                if path != "training" and not sglang:
                    results[(op.name, path)] = Verdict("not run", detail="SGLang is not installed")
                    continue
                for sname in _op_scenarios(op, path):
                    work.setdefault((sname, path), []).append(op)
        for (sname, path), ops in sorted(work.items(), key=lambda kv: (kv[0][1] != "training", kv[0])):
            scn, c, ex = scns[sname], contracts[sname], exs[sname]
            t0 = time.perf_counter()
            base = run_path(scn, c, ex, path, pool)
            bad = [f for f in base if f.status == "fail"]
            for f in bad:
                false_pos.append({"scenario": sname, **f.to_json()})
            # knobs that need no rebuild first, then each rebuild variant once
            knobbed = [(op, op.paths[path].fn(scn, c, ex)) for op in ops]
            knobbed.sort(key=lambda t: (bool(t[1] and t[1].variant),
                                        json.dumps((t[1].variant if t[1] else None) or {}, sort_keys=True)))
            for op, k in knobbed:
                if k is None:
                    results[(op.name, path)] = Verdict("noop", detail="no-op on the matrix example")
                    continue
                try:
                    mut = run_path(scn, c, ex, path, pool, k)
                except NoOp as e:
                    results[(op.name, path)] = Verdict("noop", detail=str(e))
                    continue
                v = judge(op.checks, base, mut)
                results[(op.name, path)] = v
                log(f"{op.kind:>4} {op.name:<30} {path:<14} {sname:<6} {v.status} {v.check or ''}")
            timings[f"{sname} {path}"] = time.perf_counter() - t0
    finally:
        pool.close()
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    timings["harness builds"] = pool.build_s
    timings["total"] = time.perf_counter() - t_start
    cells = []
    for kind in KINDS:
        for path in PATHS:
            vs = [(op.name, results[(op.name, path)]) for op in OPERATORS if op.kind == kind]
            sts = [v.status for _, v in vs]
            if not vs:
                st = "missed"
            elif any(s in ("missed", "noop") for s in sts):
                st = "missed"
            elif all(s == "n/a" for s in sts):
                st = "n/a"
            elif "not run" in sts:
                st = "not run"
            else:
                st = "caught"
            cells.append(Cell(kind, path, st, vs))
    return {"cells": cells, "results": results, "false_positives": false_pos, "timings": timings,
            "harness_builds": pool.builds}


def matrix_json(m: dict[str, Any]) -> dict[str, Any]:
    return {
        "paths": list(PATHS),
        "cells": [{"kind": c.kind, "name": KIND_NAMES[c.kind], "path": c.path, "status": c.status,
                   "checks": c.checks,
                   "operators": [{"operator": n, "status": v.status, "check": v.check, "detail": v.detail}
                                 for n, v in c.operators]} for c in m["cells"]],
        "operators": [{"name": op.name, "kind": op.kind, "title": op.title, "checks": list(op.checks),
                       "paths": {p: ({"not_applicable": a.reason} if isinstance(a, NotApplicable) else
                                     {"how": a.how, "where": a.where}) for p, a in op.paths.items()}}
                      for op in OPERATORS],
        "false_positives": m["false_positives"],
        "timings": {k: round(v, 2) for k, v in m["timings"].items()},
    }


def render_matrix(m: dict[str, Any], console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    style = {"caught": "green", "n/a": "dim", "missed": "bold red", "not run": "yellow"}
    t = Table(title="EAGLE-3 kill matrix: fault kinds x paths (each caught cell names its catching check)")
    t.add_column("kind")
    t.add_column("fault")
    for p in PATHS:
        t.add_column(p)
    by = {(c.kind, c.path): c for c in m["cells"]}
    for kind in KINDS:
        row = [kind, KIND_NAMES[kind]]
        for p in PATHS:
            c = by[(kind, p)]
            txt = c.status
            if c.status == "caught":
                txt += " (" + ", ".join(c.checks) + ")"
            elif c.status == "missed":
                txt += " (" + ", ".join(n for n, v in c.operators if v.status in ("missed", "noop")) + ")"
            row.append(f"[{style[c.status]}]{txt}[/]")
        t.add_row(*row)
    console.print(t)
    fp = m["false_positives"]
    if fp:
        console.print(f"[bold red]{len(fp)} baseline failures (false positives)[/]: "
                      + "; ".join(f"{f['scenario']} {f['path']} {f['check']}: {f['message']}" for f in fp[:5]))
    missed = [c for c in m["cells"] if c.status == "missed"]
    tm = m["timings"]
    console.print(f"{sum(c.status == 'caught' for c in m['cells'])} caught, "
                  f"{sum(c.status == 'n/a' for c in m['cells'])} not applicable, {len(missed)} missed; "
                  f"{m['harness_builds']} SGLang harness builds ({tm.get('harness builds', 0):.1f} s), "
                  f"total {tm['total']:.1f} s")


def cmd_faults(args) -> int:
    from conformance.cli import EXIT_OK, EXIT_VIOLATIONS, _console

    con = _console()
    m = run_matrix(log=(lambda s: con.print(f"[dim]{s}[/dim]")) if args.verbose else (lambda s: None))
    render_matrix(m, con)
    if args.json:
        Path(args.json).write_text(json.dumps(matrix_json(m), indent=1))
    bad = any(c.status == "missed" for c in m["cells"]) or m["false_positives"]
    return EXIT_VIOLATIONS if bad else EXIT_OK


def _register() -> None:
    from conformance.cli import register

    @register
    def _add(sub) -> None:
        p = sub.add_parser("faults", help="run the kill matrix: every fault kind injected on every path")
        p.add_argument("--json", metavar="OUT", help="write the matrix as JSON")
        p.add_argument("--verbose", action="store_true", help="one line per operator and path as it runs")
        p.set_defaults(func=cmd_faults)


_register()
