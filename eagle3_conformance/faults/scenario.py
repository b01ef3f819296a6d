"""Scenarios of the kill matrix: a random tiny target, its contract, draft config, data samples,
vocab mapping and tokenizer, built deterministically from a :class:`ScenarioSpec`."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from eagle3_conformance.environment import torch_env

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.contract import Contract  # noqa: E402
from eagle3_conformance.core.notation import Boundary  # noqa: E402
from eagle3_conformance.faults.tokens import GOLDEN_MESSAGES, GOOD_TEMPLATE, render_ids, sha256_text, vocab_mapping  # noqa: E402


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
    """A :class:`eagle3_conformance.reference.ReferenceModel` over an in-memory HF model (no disk)."""

    def __new__(cls, model, final_norm_kind: str = "rmsnorm"):
        from eagle3_conformance.reference import ReferenceModel

        rm = ReferenceModel.__new__(ReferenceModel)  # no model_dir: no disk cache (ReferenceModel._cache_file)
        rm.model = model
        rm.final_norm_kind = final_norm_kind
        rm.num_layers = int(model.config.num_hidden_layers)
        rm.hidden_size = int(model.config.hidden_size)
        rm._norm = model.model.norm
        rm._cache = {}
        return rm


def target_spec(s: ScenarioSpec) -> dict[str, Any]:
    """The fixture-style spec (eagle3_conformance.testbed.fixtures.build_target) of the scenario's target."""
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
    """A seeded tiny Llama with a trained-like norm profile (eagle3_conformance.testbed.fixtures.build_target),
    plus per-layer input-norm gammas spread around 1 (as trained models have), so that a
    post-norm aux slot differs from its pre-norm boundary by more than a scale. Cached."""
    from eagle3_conformance.testbed.fixtures import build_target

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


_REFS: dict[int, Any] = {}


def scenario_reference(model):
    """The in-memory reference of a scenario target, one per target object (cached): scenarios on one
    target (``base`` and ``final``) share its forwards (:meth:`~eagle3_conformance.reference.ReferenceModel.capture`
    and ``greedy_next`` are cached per token sequence in the reference)."""
    ref = _REFS.get(id(model))
    if ref is None or ref.model is not model:
        ref = _REFS[id(model)] = _InMemoryReference(model)
    return ref


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

    def saved_dirs(self) -> tuple[Path, Path]:
        """``(target_dir, draft_dir)`` on disk, for the CPU harnesses.

        Raises:
            ValueError: the scenario was built without ``for_sglang`` (neither is saved).
        """
        if self.target_dir is None or self.draft_dir is None:
            raise ValueError("the scenario was built without for_sglang=True: no target or draft on disk")
        return self.target_dir, self.draft_dir

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
    from eagle3_conformance.testbed.fixtures import loss_mask_for, sample_token_ids

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    model = build_scenario_target(s)
    ref = scenario_reference(model)
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
    from eagle3_conformance.reference import rms

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
    from eagle3_conformance.checks import mapping_sha256

    data = {
        "name": f"faults-{s.name}",
        "description": "kill-matrix scenario (eagle3_conformance.faults)",
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
        "engines": {"sglang_model_file": "llama"},
        "data_dtype": "bfloat16",
        "vocab": {"size": s.vocab, "draft_size": s.draft_vocab, "mapping_sha256": mapping_sha256(ids_abs)},
        "tokenizer": {"chat_template_sha256": sha256_text(GOOD_TEMPLATE), "add_bos": True,
                      "golden": {"messages": GOLDEN_MESSAGES, "ids": render_ids(GOOD_TEMPLATE)}},
    }
    return Contract.model_validate(data)
