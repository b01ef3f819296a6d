"""Does more self-distilled data, or more epochs, make the SmolLM2-135M draft speculate (issue 26 item 1)?

The build's recipe (:data:`eagle3_conformance.trained_draft.RECIPE`) trains on 268 shipped greedy
continuations (31,520 tokens). This benchmark adds more of the target's own text and trains again with
the same builder (speculators' ``Eagle3DraftModel`` + ``Trainer``, :func:`trained_draft._train`), then
measures the loop and the engine-free estimate on the same 8 held-out prompts as the gate
(:func:`eagle3_conformance.acceptance_attribution.compare`). Three kinds of extra text, all written by
the target itself (no corpus beyond the project's, no model hub):

- ``magpie``: the chat template's header up to ``<|im_start|>user\\n`` (with SmolLM2's default system
  turn); the target samples the user turn (temperature 0.9, top-p 0.95, 40 tokens, stopped at
  ``<|im_end|>``), then answers it greedily (the "Magpie" recipe, Xu et al. 2024, arXiv:2406.08464);
- ``branches``: training-item prefixes of 8 and 24 tokens, two sampled 24-token branches each, then
  greedy;
- ``cuts``: training items cut after 16, 36, 64, 100 and 160 tokens (where 8 tokens follow).

Every greedy continuation runs ``--new`` tokens through end-of-turn tokens, as the loop decodes.
Held-out items are never used. The extra sequences are written to ``OUT/extra.json`` (token ids) and
reused by a second run with ``--reuse``; the captured dataset is rebuilt each run.

Usage::

    python benchmarks/bench_draft_scaling.py --out /tmp/scale --epochs 4 --docs-per-step 4   # ~35 min, 2 cores
    python benchmarks/bench_draft_scaling.py --out /tmp/scale --reuse --epochs 8             # ~35 min more
    python benchmarks/bench_draft_scaling.py --out /tmp/smoke --magpie 4 --limit 8 --epochs 1  # smoke

Threads: ``CONFORMANCE_TORCH_THREADS`` (the figures in docs/acceptance.md used 2). Prints one JSON
object: data sizes, seconds (wall and CPU), final training metrics, the loop's and the estimate's
per-position acceptance and mean accept length.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import time
from pathlib import Path

from eagle3_conformance import torch_env

SAMPLING = {"temperature": 0.9, "top_p": 0.95, "top_k": 0}
"""How the target samples user turns and branches (greedy for every continuation after them)."""


def extra_sequences(target_dir: Path, *, magpie: int, new: int, limit: int = 0) -> dict:
    """The three kinds of extra text (module docstring): ``{"sequences": [...], "counts": {...}}``."""
    from eagle3_conformance.fixtures_real import load_tokenizer
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.trained_draft import RECIPE, cut_prompts, generate_batched, train_item_ids

    tok = load_tokenizer(target_dir)
    model = load_reference_model(target_dir).model
    pad, im_end = int(tok.eos_token_id or 0), tok.convert_tokens_to_ids("<|im_end|>")
    items = train_item_ids(RECIPE, target_dir)
    items = items[:limit] if limit else items
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    until_turn_end, past_eos = copy.deepcopy(model.generation_config), copy.deepcopy(model.generation_config)
    until_turn_end.eos_token_id, past_eos.eos_token_id = im_end, None
    head = tok.apply_chat_template([{"role": "user", "content": "X"}], tokenize=False)
    header = tok(head[:head.index("X")], add_special_tokens=False).input_ids
    queries = generate_batched(model, [list(header)] * magpie, 40, pad, batch=48, gen_cfg=until_turn_end,
                               sample=SAMPLING, seed=1000, log=log)
    queries = [q[:q.index(im_end, len(header))] if im_end in q[len(header):] else q for q in queries]
    turn = tok("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False).input_ids
    asks = [q + turn for q in queries if len(q) > len(header) + 3]
    roots = [t[:c] for t in items for c in (8, 24) if len(t) >= c + 8 for _ in range(2)]
    branches = generate_batched(model, roots, 24, pad, batch=48, gen_cfg=past_eos, sample=SAMPLING, seed=2000,
                                log=log)
    cuts = cut_prompts(items, (16, 36, 64, 100, 160))
    seqs = generate_batched(model, asks + branches + cuts, new, pad, batch=48, gen_cfg=past_eos, log=log)
    return {"sequences": seqs, "counts": {"magpie": len(asks), "branches": len(branches), "cuts": len(cuts)}}


def train_and_measure(out: Path, target_dir: Path, seqs, recipe: dict) -> dict:
    """Capture ``seqs`` (the target's float32 forward, the recipe's slots), train with the builder's
    own ``_train``/``_export``, then loop vs estimate on the gate's 8 held-out prompts."""
    from eagle3_conformance import trained_draft as T
    from eagle3_conformance.acceptance_attribution import compare
    from eagle3_conformance.datagen import write_speculators_dataset
    from eagle3_conformance.reference import load_reference_model

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
    ap.add_argument("--reuse", action="store_true", help="reuse OUT/extra.json instead of generating")
    ap.add_argument("--magpie", type=int, default=256, help="user turns the target samples")
    ap.add_argument("--new", type=int, default=96, help="greedy tokens per extra continuation")
    ap.add_argument("--limit", type=int, default=0, help="training items used for branches and cuts (0: all)")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--docs-per-step", type=int, default=4)
    a = ap.parse_args(argv)
    torch_env.prepare()
    from eagle3_conformance import trained_draft as T
    from eagle3_conformance.model_cache import ensure_model

    target_dir = ensure_model(T._spec()["model"], "float32")
    a.out.mkdir(parents=True, exist_ok=True)
    f = a.out / "extra.json"
    t0 = time.perf_counter()
    if not a.reuse:
        f.write_text(json.dumps(extra_sequences(target_dir, magpie=a.magpie, new=a.new, limit=a.limit)) + "\n")
    gen_s = time.perf_counter() - t0
    extra = json.loads(f.read_text())
    seqs = T.load_continuations(T.RECIPE, target_dir) + extra["sequences"]
    for d in ("data", "ckpt", "draft"):
        shutil.rmtree(a.out / d, ignore_errors=True)
    recipe = {**T.RECIPE, "epochs": a.epochs, "docs_per_step": a.docs_per_step}
    res = train_and_measure(a.out, target_dir, seqs, recipe)
    import torch

    print(json.dumps({"sequences": len(seqs), "tokens": sum(map(len, seqs)), "extra_counts": extra["counts"],
                      "generate_s": round(gen_s, 1) if not a.reuse else None, "epochs": a.epochs,
                      "docs_per_step": a.docs_per_step, "torch_threads": torch.get_num_threads(), **res}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
