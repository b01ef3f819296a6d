"""Real-model fixtures (``"kind": "real"`` in ``fixture.json``): a trained target from a pinned
wheel, an EAGLE-3 draft config, and speculators-format data from the target's forward over the
project's corpus.

Spec fields (besides ``kind`` and ``description``):

- ``extends``: another fixture's name; its spec is the base, this one's keys override it (nested
  objects are merged key by key). Used by the bf16 variants.
- ``model``: the model spec of :mod:`eagle3_conformance.testbed.model_cache` (parts, pinned hashes).
- ``target_dtype``: the dtype the target is saved and served in (``float32`` or ``bfloat16``).
  The reference forward is always float32 (:class:`eagle3_conformance.reference.ReferenceModel`
  upcasts the saved weights).
- ``draft``: the SGLang-style draft ``config.json`` (no weights: the SGLang path seeds them, as
  for the seeded fixtures).
- ``data``: ``corpus`` (repo-relative path), ``num_samples``, ``include`` (ids always taken),
  ``seed``, ``max_tokens``, ``add_bos``, ``slots``, ``dtype`` (stored), ``capture_dtype`` (the
  dtype the forward that writes the data runs in: ``bfloat16`` is what a GPU server writes).

The target lives in the model cache (outside the repo); the draft, the data and a
``samples.json`` (which corpus item each sample is, its length, whether it was truncated) go
under the fixture cache like the seeded fixtures'.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.testbed.fixture_base import (
    REPO_ROOT,
    BuiltFixture,
    FixtureError,
    build_once,
    fixture_spec,
    write_draft,
)

BUILDER_VERSION = "1"
_DTYPES = ("float32", "bfloat16", "float16")


def resolve_spec(name: str, spec: dict[str, Any], _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """``spec`` with its ``extends`` chain merged in (the base first, overrides on top).

    Raises:
        FixtureError: an unknown base, a cycle, or a base of another kind.
    """
    base_name = spec.get("extends")
    if not base_name:
        return copy.deepcopy(spec)
    if base_name in _seen + (name,):
        raise FixtureError(f"fixture {name}: 'extends' cycle through {base_name!r}")
    bname, base = fixture_spec(base_name)
    if base.get("kind") != spec.get("kind"):
        raise FixtureError(f"fixture {name} (kind {spec.get('kind')!r}) extends {bname} of kind {base.get('kind')!r}")
    merged = _merge(resolve_spec(bname, base, _seen + (name,)), {k: v for k, v in spec.items() if k != "extends"})
    merged["extends"] = base_name
    return merged


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _check(name: str, spec: dict[str, Any]) -> None:
    missing = [k for k in ("model", "target_dtype", "draft", "data") if k not in spec]
    if missing:
        raise FixtureError(f"fixture {name}: a real fixture needs {missing}")
    d = spec["data"]
    missing = [k for k in ("corpus", "num_samples", "seed", "slots") if k not in d]
    if missing:
        raise FixtureError(f"fixture {name}: data needs {missing}")
    for key, val in (("target_dtype", spec["target_dtype"]), ("data.dtype", d.get("dtype", "bfloat16")),
                     ("data.capture_dtype", d.get("capture_dtype", "float32"))):
        if val not in _DTYPES:
            raise FixtureError(f"fixture {name}: {key} {val!r} is not one of {list(_DTYPES)}")


def _digest(spec: dict[str, Any], corpus_sha: str) -> str:
    blob = json.dumps(spec, sort_keys=True) + corpus_sha + BUILDER_VERSION
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def corpus_path(spec: dict[str, Any]) -> Path:
    p = Path(spec["data"]["corpus"])
    return p if p.is_absolute() else REPO_ROOT / p


def build_real_fixture(name: str, raw_spec: dict[str, Any], out_root: Path) -> BuiltFixture:
    """Build (or reuse) a real fixture: the target from the model cache, then the draft config
    and the data under ``out_root/<name>-<digest>`` (the digest covers the resolved spec, the
    corpus file and this builder's version).

    Raises:
        FixtureError: a malformed spec, a missing wheel, a hash mismatch, an unreadable corpus.
    """
    from eagle3_conformance.testbed.corpus import CorpusError, corpus_digest
    from eagle3_conformance.testbed.model_cache import ensure_model

    spec = resolve_spec(name, raw_spec)
    _check(name, spec)
    try:
        corpus_sha = corpus_digest(corpus_path(spec))
    except CorpusError as e:
        raise FixtureError(f"fixture {name}: {e}") from None
    target_dir = ensure_model(spec["model"], spec["target_dtype"])
    root = Path(out_root) / f"{name}-{_digest(spec, corpus_sha)}"
    built = BuiltFixture(name, root, target_dir, root / "draft", root / "data", spec)

    def build(stage: Path) -> None:
        stage.mkdir()
        t0 = time.perf_counter()
        write_draft(spec, stage / "draft", target_dir)
        samples = write_data(spec, target_dir, stage / "data")
        (stage / "samples.json").write_text(json.dumps(samples, indent=1) + "\n")
        (stage / "DONE").write_text(json.dumps({
            "fixture": name, "spec_digest": _digest(spec, corpus_sha), "corpus_sha256": corpus_sha,
            "target_dir": str(target_dir), "data_seconds": round(time.perf_counter() - t0, 1)}) + "\n")

    build_once(root, build)
    return built


def corpus_samples(spec: dict[str, Any], tokenizer) -> list:
    """The fixture's samples: the corpus items its ``data`` block selects, tokenized
    (:class:`eagle3_conformance.testbed.corpus.Tokenized`, in corpus order)."""
    from eagle3_conformance.testbed.corpus import load_items, select, tokenize_all

    d = spec["data"]
    items = select(load_items(corpus_path(spec)), d["num_samples"], d["seed"], d.get("include", ()))
    return tokenize_all(items, tokenizer, add_bos=bool(d.get("add_bos", False)), max_tokens=d.get("max_tokens"))


def write_data(spec: dict[str, Any], target_dir: Path, out: Path) -> list[dict[str, Any]]:
    """Run the target over the selected corpus items and write the speculators 0.9.0 dataset.

    The forward runs in ``data.capture_dtype`` (a private copy of the model; the reference used by
    the checks stays float32). A float32 capture is that reference's forward itself, so the boundaries it
    computes land in the suite's reference disk cache
    (:func:`eagle3_conformance.reference.suite_model.suite_cache_dir`) and the suite's first run reads them
    back instead of running the target again. Returns one ``{"item", "kind", "tokens", "truncated",
    "loss_tokens"}`` record per sample, in sample order.
    """
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    import torch

    from eagle3_conformance.reference import ReferenceModel
    from eagle3_conformance.reference.suite_model import suite_cache_dir
    from eagle3_conformance.testbed.corpus import CorpusError
    from eagle3_conformance.testbed.datagen import write_speculators_dataset

    d = spec["data"]
    tok = load_tokenizer(target_dir)
    try:
        toks = corpus_samples(spec, tok)
    except CorpusError as e:
        raise FixtureError(f"corpus: {e}") from None
    cap = d.get("capture_dtype", "float32")
    # float32: the suite's own reference forward (same weights, dtype, final norm, tokens), so its boundaries go
    # into the suite's disk cache and the suite's first run reads them back; a cast copy is never cached (the
    # cache's key says float32)
    ref = ReferenceModel(target_dir, cache_dir=suite_cache_dir() if cap == "float32" else None)
    if cap != "float32":
        ref.model.to(getattr(torch, cap))
        emulate_half_gemm(ref.model)
    write_speculators_dataset(out, ref, [t.input_ids for t in toks], slots=d["slots"],
                              dtype=d.get("dtype", "bfloat16"), loss_masks=[t.loss_mask for t in toks])
    return [{"item": t.item_id, "kind": t.kind, "tokens": len(t.input_ids), "truncated": t.truncated,
             "loss_tokens": int(sum(t.loss_mask))} for t in toks]


def emulate_half_gemm(model) -> int:
    """Make every ``nn.Linear`` of a bf16/fp16 ``model`` compute as a GPU GEMM does: half
    operands, fp32 accumulation, the result rounded to the half dtype (in place; returns the
    number of layers changed).

    The CPU's native bf16 matmul gives the same rounding (measured: 99.99% of outputs bit-equal,
    the rest one rounding apart from a different summation order) but, without AVX512-BF16, runs
    8x slower than fp32: 2.3 s instead of 0.3 s per 100 tokens of SmolLM2-135M. Everything else
    (embeddings, norms, residual adds, attention) keeps running in the half dtype.
    """
    import torch

    n = 0
    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear):
            w32 = mod.weight.detach().float()
            b32 = mod.bias.detach().float() if mod.bias is not None else None

            def forward(x, _w=w32, _b=b32):
                return torch.nn.functional.linear(x.float(), _w, _b).to(x.dtype)

            mod.forward = forward
            n += 1
    return n


def load_tokenizer(target_dir: Path):
    """The tokenizer saved beside a converted target (chat template included)."""
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(target_dir)


def samples_of(built: BuiltFixture) -> Optional[list[dict[str, Any]]]:
    """The ``samples.json`` records of a built real fixture (None for another kind)."""
    p = built.root / "samples.json"
    return json.loads(p.read_text()) if p.is_file() else None
