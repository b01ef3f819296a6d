"""More of the target's own text for the SmolLM2-135M draft: what the target writes, and the shipped file.

The draft's recipe (:data:`eagle3_conformance.testbed.trained_draft.RECIPE`) trains on the target's own
greedy text (self-distillation: acceptance measures whether the draft predicts the target's greedy
output). Its first part is the shipped continuations of training-item cuts (``regen_file``); this
module writes the second, more varied part (``RECIPE["extra"]``, shipped as ``extra_file``), all of
it written by the target itself (no corpus beyond the project's, no model hub):

- ``magpie``: the chat template's header up to ``<|im_start|>user\\n`` (with SmolLM2's default system
  turn); the target samples a user turn (``sampling``, ``magpie_tokens`` tokens, stopped at
  ``<|im_end|>``), then answers it greedily (the "Magpie" recipe, Xu et al. 2024, arXiv:2406.08464);
- ``branches``: training-item prefixes of ``branch_cuts`` tokens, ``branches_per_cut`` sampled
  branches of ``branch_tokens`` tokens each, then greedy;
- ``cuts``: training items cut after ``cuts`` tokens (where 8 tokens follow).

Every greedy continuation runs ``new_tokens`` tokens through end-of-turn tokens, as the acceptance
loop decodes. Held-out items are never used. Generation is HF ``generate`` on the float32 target
(:func:`generate_batched`): about 5.6 ms per token on 2 idle threads (635 s wall for 113,492 tokens;
the shipped file took 23 minutes beside another job), which is why the ids are shipped
(``python -m eagle3_conformance.testbed.trained_draft --write-extra`` rewrites the file; another CPU can flip a
float32 near-tie, so a rewrite need not be byte-identical).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.testbed.fixture_base import FixtureError


def _split_header(recipe: dict[str, Any]) -> dict[str, Any]:
    """What every shipped token-id file records of the data it was cut from: fixture, corpus, split."""
    from eagle3_conformance.testbed.corpus import DEFAULT_CORPUS, corpus_digest

    return {"fixture": recipe["fixture"], "corpus_sha256": corpus_digest(DEFAULT_CORPUS),
            "eval_items": recipe["eval_items"], "eval_seed": recipe["eval_seed"], "max_tokens": recipe["max_tokens"]}


def extra_header(recipe: dict[str, Any]) -> dict[str, Any]:
    """What the extra file was made from: checked against the recipe before use."""
    return {**_split_header(recipe), "extra": recipe["extra"]}


def write_extra_sequences(recipe: dict[str, Any], target_dir: Path, *, limit: int = 0, log=None) -> dict[str, Any]:
    """The three kinds of extra text (module docstring) as token ids: ``{header..., "counts": {...},
    "sequences": [[int, ...], ...]}`` (prompt + continuation per sequence, magpie then branches then
    cuts). ``limit`` > 0 keeps the first ``limit`` training items for branches and cuts (smoke runs)."""
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.testbed.fixtures_real import load_tokenizer

    x = recipe["extra"]
    tok = load_tokenizer(target_dir)
    model = load_reference_model(target_dir).model
    pad, im_end = int(tok.eos_token_id or 0), tok.convert_tokens_to_ids("<|im_end|>")
    items = train_item_ids(recipe, target_dir)
    items = items[:limit] if limit else items
    until_turn_end, past_eos = copy.deepcopy(model.generation_config), copy.deepcopy(model.generation_config)
    until_turn_end.eos_token_id, past_eos.eos_token_id = im_end, None
    head = tok.apply_chat_template([{"role": "user", "content": "X"}], tokenize=False)
    header = tok(head[:head.index("X")], add_special_tokens=False).input_ids
    sample, batch = dict(x["sampling"]), x["batch"]
    queries = generate_batched(model, [list(header)] * x["magpie"], x["magpie_tokens"], pad, batch=batch,
                               gen_cfg=until_turn_end, sample=sample, seed=x["seeds"][0], log=log)
    queries = [q[:q.index(im_end, len(header))] if im_end in q[len(header):] else q for q in queries]
    turn = tok("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False).input_ids
    asks = [q + turn for q in queries if len(q) > len(header) + 3]
    roots = [t[:c] for t in items for c in x["branch_cuts"] if len(t) >= c + 8 for _ in range(x["branches_per_cut"])]
    branches = generate_batched(model, roots, x["branch_tokens"], pad, batch=batch, gen_cfg=past_eos,
                                sample=sample, seed=x["seeds"][1], log=log)
    cuts = cut_prompts(items, x["cuts"])
    seqs = generate_batched(model, asks + branches + cuts, x["new_tokens"], pad, batch=batch, gen_cfg=past_eos,
                            log=log)
    return {**extra_header(recipe), **({"limit": limit} if limit else {}),
            "counts": {"magpie": len(asks), "branches": len(branches), "cuts": len(cuts)}, "sequences": seqs}


def load_extra_sequences(recipe: dict[str, Any]) -> list[list[int]]:
    """The shipped extra sequences (``recipe["extra_file"]``), checked against the recipe and corpus.

    Raises:
        FixtureError: the file is missing, unreadable, or made for another recipe or corpus (the
            message names the file, the differing fields and the command that rewrites it).
    """
    return _read_ids_file(recipe["extra_file"], extra_header(recipe), "extra sequences", "--write-extra")


def _read_ids_file(rel: str, head: dict[str, Any], what: str, command: str) -> list[list[int]]:
    """The ``sequences`` of a shipped token-id file (``rel`` under the repository) whose header equals
    ``head``; every refusal names the file, what differs, and ``trained_draft`` ``command`` that
    rewrites it (:class:`FixtureError`)."""
    from eagle3_conformance.testbed.corpus import REPO_ROOT

    f = REPO_ROOT / rel
    fix = f"rewrite it with: python -m eagle3_conformance.testbed.trained_draft {command}"
    try:
        data = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise FixtureError(f"{f}: cannot read the target's {what} ({e}); {fix}") from e
    if not isinstance(data, dict):
        raise FixtureError(f"{f}: not a JSON object with a header and 'sequences'; {fix}")
    if data.get("limit"):
        raise FixtureError(f"{f}: a smoke set (only the first {data['limit']} training items); {fix}")
    got = {k: data.get(k) for k in head}
    if got != head:
        diff = ", ".join(f"{k}: {got[k]!r} != {head[k]!r}" for k in head if got[k] != head[k])
        raise FixtureError(f"{f}: made for another recipe or corpus ({diff}); {fix}")
    seqs = data.get("sequences")
    if not isinstance(seqs, list) or not all(isinstance(s, list) and s for s in seqs):
        raise FixtureError(f"{f}: 'sequences' is not a list of non-empty token-id lists; {fix}")
    return [list(map(int, s)) for s in seqs]


def split_items(recipe: dict[str, Any]):
    """``(train_items, eval_items)`` of the corpus: the held-out set chosen by
    :func:`eagle3_conformance.testbed.corpus.select` (seeded hash of the ids), the rest for training."""
    from eagle3_conformance.testbed.corpus import load_items, select

    items = load_items()
    held = select(items, recipe["eval_items"], recipe["eval_seed"])
    ids = {it.id for it in held}
    return [it for it in items if it.id not in ids], held


def train_item_ids(recipe: dict[str, Any], target_dir: Path) -> list[list[int]]:
    """Every training item (never a held-out one) tokenized with the target's tokenizer (chat items
    with its chat template) and cut at ``max_tokens``, in corpus order."""
    from eagle3_conformance.testbed.corpus import tokenize
    from eagle3_conformance.testbed.fixtures_real import load_tokenizer

    tok = load_tokenizer(target_dir)
    train, _ = split_items(recipe)
    return [list(tokenize(it, tok, max_tokens=recipe["max_tokens"]).input_ids) for it in train]


def cut_prompts(items: list[list[int]], cuts) -> list[list[int]]:
    """Each of ``items`` cut after each of ``cuts`` tokens where at least 8 tokens of it follow the cut."""
    return [ids[:c] for ids in items for c in cuts if len(ids) >= c + 8]


def regen_prompts(recipe: dict[str, Any], target_dir: Path) -> list[list[int]]:
    """The prompts the target continues: every training item tokenized (``max_tokens``) and cut
    after each of ``regen_cuts`` tokens where at least 8 tokens of the item follow the cut."""
    return cut_prompts(train_item_ids(recipe, target_dir), recipe["regen_cuts"])


def generate_batched(model, prompts: list[list[int]], new_tokens: int, pad: int, *, batch: int, gen_cfg,
                     sample: Optional[dict] = None, seed: int = 0, log=None) -> list[list[int]]:
    """HF ``generate`` of ``new_tokens`` after each prompt, in left-padded batches of ``batch`` prompts
    taken in stable length order; returns prompt + continuation per prompt, in the input order (no
    cut at any end token: ``gen_cfg.eos_token_id`` decides where generation stops and pads).

    Args:
        gen_cfg: the ``GenerationConfig`` to use (its ``eos_token_id`` None: past end-of-turn tokens).
        sample: None for greedy; else ``generate``'s sampling keywords (``temperature``, ``top_p``...),
            with ``torch.manual_seed(seed + batch index)`` before each batch.
    """
    import torch

    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[Any] = [None] * len(prompts)
    for bi, i in enumerate(range(0, len(order), batch)):
        idx = order[i:i + batch]
        n = max(len(prompts[j]) for j in idx)
        ids = torch.tensor([[pad] * (n - len(prompts[j])) + prompts[j] for j in idx])
        mask = torch.tensor([[0] * (n - len(prompts[j])) + [1] * len(prompts[j]) for j in idx])
        if sample is not None:
            torch.manual_seed(seed + bi)
        kw = {"do_sample": True, **sample} if sample is not None else {"do_sample": False}
        with torch.no_grad():
            rows = model.generate(ids, attention_mask=mask, generation_config=gen_cfg, max_new_tokens=new_tokens,
                                  num_beams=1, pad_token_id=pad, **kw).tolist()
        for j, row in zip(idx, rows):
            out[j] = prompts[j] + row[n:]
        (log or (lambda s: None))(f"continued {min(i + batch, len(order))}/{len(order)} prompts")
    return out


def _regen_header(recipe: dict[str, Any]) -> dict[str, Any]:
    return {**_split_header(recipe),
            "regen_cuts": list(recipe["regen_cuts"]), "regen_tokens": recipe["regen_tokens"],
            "regen_batch": recipe["regen_batch"], "regen_past_eos": bool(recipe.get("regen_past_eos"))}


def regenerate_continuations(recipe: dict[str, Any], target_dir: Path, *, log=None) -> dict:
    """The target's greedy continuations of :func:`regen_prompts` (``regen_tokens`` each; HF
    ``generate``, float32, left-padded batches of ``regen_batch`` prompts, stable-sorted by length): the JSON
    written to ``recipe["regen_file"]`` by ``python -m eagle3_conformance.testbed.trained_draft --regen``.
    Greedy in float32: another CPU or thread count can flip a near-tie, which is why the file is
    shipped and its sha256 is part of the draft's cache key."""
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.testbed.fixtures_real import load_tokenizer

    tok = load_tokenizer(target_dir)
    model = load_reference_model(target_dir).model
    prompts = sorted(regen_prompts(recipe, target_dir), key=len)
    # past the end-of-turn token, as the acceptance loop decodes (it never stops at EOS): HF
    # generate would stop there and pad with EOS, rows the target never chose
    gen_cfg = copy.deepcopy(model.generation_config)
    if recipe.get("regen_past_eos"):
        gen_cfg.eos_token_id = None
    seqs = generate_batched(model, prompts, recipe["regen_tokens"], int(tok.eos_token_id or 0),
                            batch=recipe["regen_batch"], gen_cfg=gen_cfg, log=log)
    return {**_regen_header(recipe), "sequences": seqs}


def load_continuations(recipe: dict[str, Any], target_dir: Path) -> list[list[int]]:
    """The shipped continuations (``recipe["regen_file"]``), checked against the recipe and corpus.

    Raises:
        FixtureError: the file is missing or was made for another recipe or corpus (the message
            gives the command that rewrites it).
    """
    return _read_ids_file(recipe["regen_file"], _regen_header(recipe), "continuations", "--regen")
