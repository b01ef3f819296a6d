"""How data and epochs move the SmolLM2-135M draft's acceptance (issue 26 item 1).

The draft's recipe (:data:`eagle3_conformance.testbed.trained_draft.RECIPE`) trains 8 epochs on the target's
own text: 268 greedy continuations of training-item cuts (``regen_file``) and 793 more varied
sequences (``extra_file``, :mod:`eagle3_conformance.testbed.self_distill`: sampled user turns answered
greedily, sampled branches, more cuts), 145,012 tokens in all. This benchmark trains variants with the
same builder (speculators' ``Eagle3DraftModel`` + ``Trainer``, :func:`trained_draft._train`), then
measures the loop and the engine-free estimate on the same 8 held-out prompts as the gate
(:func:`eagle3_conformance.acceptance.attribution.compare`):

- ``--extra shipped`` (default): the recipe's data; ``--extra none``: the 268 continuations only;
  ``--extra generate``: the target writes a new extra set (``--magpie`` user turns, ``--new`` greedy
  tokens per continuation, ``--limit`` training items for branches and cuts) into ``OUT/extra.json``,
  reused by a later run with ``--extra reuse``;
- ``--epochs``, ``--docs-per-step``: the training schedule (the recipe: 8 and 3).

Usage::

    python benchmarks/bench_draft_scaling.py --out /tmp/scale --extra none --epochs 8    # ~8 min, 2 cores
    python benchmarks/bench_draft_scaling.py --out /tmp/scale --epochs 8                 # ~35 min: the recipe
    python benchmarks/bench_draft_scaling.py --out /tmp/smoke --extra generate --magpie 4 --limit 8 --epochs 1

Threads: ``CONFORMANCE_TORCH_THREADS`` (the figures in docs/acceptance.md used 2). Prints one JSON
object: data sizes, seconds (wall and CPU), final training metrics, the loop's and the estimate's
per-position acceptance and mean accept length.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from eagle3_conformance.environment import torch_env


def extra_sequences(target_dir: Path, *, magpie: int, new: int, limit: int = 0) -> dict:
    """The recipe's extra text (:func:`eagle3_conformance.testbed.self_distill.write_extra_sequences`) with
    ``magpie`` user turns and ``new`` greedy tokens per continuation; ``limit`` > 0 keeps the first
    ``limit`` training items for branches and cuts (a smoke run)."""
    from eagle3_conformance.testbed import trained_draft as T
    from eagle3_conformance.testbed.self_distill import write_extra_sequences

    recipe = {**T.RECIPE, "extra": {**T.RECIPE["extra"], "magpie": magpie, "new_tokens": new}}
    return write_extra_sequences(recipe, target_dir, limit=limit, log=lambda s: print(s, file=sys.stderr, flush=True))


def train_and_measure(out: Path, target_dir: Path, seqs, recipe: dict) -> dict:
    """Capture ``seqs`` (the target's float32 forward, the recipe's slots), train with the builder's
    own ``_train``/``_export``, then loop vs estimate on the gate's 8 held-out prompts."""
    from eagle3_conformance.acceptance.attribution import compare
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.testbed import trained_draft as T
    from eagle3_conformance.testbed.datagen import write_speculators_dataset

    t0, c0 = time.perf_counter(), time.process_time()
    write_speculators_dataset(out / "data", load_reference_model(target_dir), seqs, slots=recipe["slots"],
                              dtype="float32", loss_masks=[[1] * len(s) for s in seqs])
    t1 = time.perf_counter()
    model, final = T._train(recipe, target_dir, out / "data", seqs, out / "ckpt",
                            lambda s: print(s, file=sys.stderr, flush=True))
    t2 = time.perf_counter()
    draft = T._export(recipe, T._spec(), model, out / "draft")
    cpu = time.process_time() - c0
    r = compare(T.TrainedDraft(draft, target_dir, {}), T.eval_prompts(target_dir, 8, 48), k=3, max_new=32)
    est = r["estimates"]["training"]
    return {"capture_s": round(t1 - t0, 1), "train_s": round(t2 - t1, 1), "cpu_s": round(cpu, 1),
            "final_train_metrics": final,
            "loop": {k: r["loop"][k] for k in ("per_position", "mean_accept_length", "histogram")},
            "estimate": {k: est[k] for k in ("per_position", "mean_accept_length")}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="work folder (extra.json, data, draft)")
    ap.add_argument("--extra", choices=("shipped", "none", "generate", "reuse"), default="shipped",
                    help="the extra text: the recipe's, none, newly generated into OUT/extra.json, or reused from it")
    ap.add_argument("--magpie", type=int, default=256, help="user turns the target samples")
    ap.add_argument("--new", type=int, default=96, help="greedy tokens per extra continuation")
    ap.add_argument("--limit", type=int, default=0, help="training items used for branches and cuts (0: all)")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--docs-per-step", type=int, default=3)
    a = ap.parse_args(argv)
    torch_env.prepare()
    from eagle3_conformance.testbed import trained_draft as T
    from eagle3_conformance.testbed.model_cache import ensure_model

    target_dir = ensure_model(T._spec()["model"], "float32")
    a.out.mkdir(parents=True, exist_ok=True)
    f = a.out / "extra.json"
    t0 = time.perf_counter()
    if a.extra == "generate":
        f.write_text(json.dumps(extra_sequences(target_dir, magpie=a.magpie, new=a.new, limit=a.limit)) + "\n")
    gen_s = time.perf_counter() - t0
    if a.extra == "shipped":
        from eagle3_conformance.testbed.self_distill import load_extra_sequences

        extra = {"sequences": load_extra_sequences(T.RECIPE), "counts": "shipped"}
    else:
        extra = json.loads(f.read_text()) if a.extra != "none" else {"sequences": [], "counts": None}
    seqs = T.load_continuations(T.RECIPE, target_dir) + extra["sequences"]  # as the recipe's training_sequences
    for d in ("data", "ckpt", "draft"):
        shutil.rmtree(a.out / d, ignore_errors=True)
    recipe = {k: v for k, v in T.RECIPE.items() if k != "shipped"}
    recipe.update(epochs=a.epochs, docs_per_step=a.docs_per_step)
    res = train_and_measure(a.out, target_dir, seqs, recipe)
    import torch

    print(json.dumps({"sequences": len(seqs), "tokens": sum(map(len, seqs)), "extra_counts": extra["counts"],
                      "generate_s": round(gen_s, 1) if a.extra == "generate" else None, "epochs": a.epochs,
                      "docs_per_step": a.docs_per_step, "torch_threads": torch.get_num_threads(), **res}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
