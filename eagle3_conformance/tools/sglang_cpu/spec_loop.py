"""A greedy EAGLE-3 speculative decoding loop on the in-process SGLang CPU harness: accept lengths.

The loop logic is the project's own (SGLang's is its scheduler and ``EAGLEWorkerV2``, CUDA-only);
every forward is SGLang 0.5.23's real model classes through :class:`.harness.SGLangCPUHarness`
(target EXTEND / TARGET_VERIFY with FULL aux capture, draft EXTEND / DRAFT_EXTEND_V2), and the
data flow between them follows ``srt/speculative/eagle_worker_v2.py`` (REFERENCE.md section 4):

1. **target extend** over the prompt (EXTEND, FULL): the aux concat ``[T, K*d]`` and the
   bonus token (greedy on the last row);
2. **draft extend after prefill** (``eagle_worker_v2.py:961-1016``): ids shifted left by one
   with the bonus token last, hidden = the target's aux concat, positions ``0..T-1``; the
   draft's last row gives the first draft token (``hot_token_id[argmax]``: ``d2t``,
   ``llama_eagle3.py:350-352``) and the draft state that seeds the next step;
3. **draft steps**: ``k - 1`` more tokens, each one row (the previous draft token at the next
   position, the draft's own ``[1, d]`` state: ``fc`` is skipped by the width guard,
   ``llama_eagle3.py:237-247``), attending to the draft's cache; the step rows are dropped from
   the cache afterwards (SGLang frees them);
4. **target verify** (TARGET_VERIFY, FULL) over ``[bonus, d_1..d_k]`` (a topk-1 chain): the
   target's greedy ``predict`` per row; the accepted length ``a`` (bonus included, SGLang's
   ``accept_lens``) is 1 + the longest prefix of drafts equal to ``predict``; the new bonus is
   ``predict[a-1]``; the target's cache keeps the accepted rows only;
5. **draft extend after verify** (DRAFT_EXTEND_V2, ``eagle_worker_v2.py:1110-1160``): all
   ``k+1`` verify rows (aux concat), ids = ``predict``, positions continuing the prefix; row
   ``a-1`` (``select_index``) seeds the next draft step; the draft's cache keeps ``a`` rows.

Stand-ins (beyond the harness's attention): the draft's multi-step decode rows run as one-token
EXTEND batches with ``prefix_lens`` = the cached length (same values as SGLang's DECODE batch: one
query row attending to the cache; CUDA graphs are not modelled). Batching: each prompt's extend and
draft steps run by themselves; its target verify and draft extend after verify run in one batch with
the other prompts still generating (SGLang batches its requests the same way; here it streams the
target's weights once per step instead of once per prompt, the loop's main CPU cost), only where
:func:`.row_blocks.rows_invariant` finds that a batch gives every row the bits a one-prompt forward
gives it, so the numbers are those of one prompt at a time (else the prompts run one at a time).

Fault knobs (:class:`LoopKnobs`) change what the draft is handed, where a fault lives after the
engine; faults in the engine's own wiring (capture ids, ``d2t``) are set on the harness with
SGLang's own setters before the loop runs (:mod:`eagle3_conformance.faults.acceptance`).

This module measures; it never judges (:func:`eagle3_conformance.checks.check_accept_length` does).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional, TypeAlias

import torch

from eagle3_conformance.tools.sglang_cpu.harness import greedy_accepted

Tensor: TypeAlias = torch.Tensor


@dataclass(frozen=True)
class LoopKnobs:
    """What a fault changes in the loop (all off by default: the correct wiring).

    Attributes:
        extend_hidden: ``fn(tensor [T, W]) -> tensor`` applied to what the draft extend after
            prefill is handed (a connector or side buffer between target and draft).
        decode_hidden: the same for the draft extend after verify (``[k+1, W]``).
        final_on_extend / final_on_decode: the target runs without aux capture, so its
            LogitsProcessor stores the post-norm F (``[rows, d]``, the no-aux fallback,
            ``logits_processor.py:866-872``) and the draft gets F; with equal widths its ``fc``
            is skipped silently.
        draft_states_on_decode: K9: the draft extend after verify is handed the draft's own
            output states of those rows (run once correctly first) instead of the target's.
        draft_positions: ``fn(positions [rows] int64) -> positions`` for every draft forward.

    Each function is called once per prompt and forward with that prompt's rows (also in a batched
    forward), in prompt order.
    """

    extend_hidden: Optional[Callable[[Tensor], Tensor]] = None
    decode_hidden: Optional[Callable[[Tensor], Tensor]] = None
    final_on_extend: bool = False
    final_on_decode: bool = False
    draft_states_on_decode: bool = False
    draft_positions: Optional[Callable[[Tensor], Tensor]] = None


@dataclass
class SpecRun:
    """One prompt through the loop.

    Attributes:
        prompt: the prompt's token ids.
        output: the generated token ids (``max_new_tokens`` of them; speculation is lossless,
            so they must equal the target's greedy decode).
        accept_lengths: per verify step, tokens committed (accepted drafts + the bonus token),
            SGLang's ``accept_lens``; 1 <= a <= k+1.
        proposed / accepted: draft tokens proposed and accepted over all verify steps.
        fc_calls: draft ``fc`` calls (0: the draft never projected the target features).
        error: ``repr`` of the exception a forward raised (the run stops there), else None.
    """

    prompt: list[int]
    output: list[int] = field(default_factory=list)
    accept_lengths: list[int] = field(default_factory=list)
    proposed: int = 0
    accepted: int = 0
    fc_calls: int = 0
    error: Optional[str] = None


@dataclass
class SpecResult:
    """Runs over several prompts, and their totals.

    Attributes:
        runs: one :class:`SpecRun` per prompt.
        num_draft_tokens: k, draft tokens proposed per verify step.
        seconds: wall time of the whole measurement.
    """

    runs: list[SpecRun]
    num_draft_tokens: int
    seconds: float

    @property
    def verify_steps(self) -> int:
        return sum(len(r.accept_lengths) for r in self.runs)

    @property
    def mean_accept_length(self) -> Optional[float]:
        """Mean tokens committed per verify step (SGLang's ``avg_spec_accept_length``); None
        when no verify step ran (every run failed before its first)."""
        n = self.verify_steps
        return None if n == 0 else sum(sum(r.accept_lengths) for r in self.runs) / n

    @property
    def acceptance_rate(self) -> Optional[float]:
        """Accepted draft tokens / proposed draft tokens (0..1)."""
        p = sum(r.proposed for r in self.runs)
        return None if p == 0 else sum(r.accepted for r in self.runs) / p

    @property
    def errors(self) -> list[str]:
        return [r.error for r in self.runs if r.error]

    @property
    def correct_drafts_histogram(self) -> list[int]:
        """``k + 1`` counts: verify steps with ``j`` drafts accepted (SGLang's
        ``spec_correct_drafts_histogram``, summed over prompts;
        :mod:`eagle3_conformance.acceptance.stats`)."""
        from eagle3_conformance.acceptance.stats import correct_drafts_histogram

        return correct_drafts_histogram([a for r in self.runs for a in r.accept_lengths], self.num_draft_tokens)

    @property
    def per_prompt(self) -> list[tuple[int, int]]:
        """Per prompt ``(sum of accept lengths, verify steps)``: the bootstrap's unit."""
        return [(sum(r.accept_lengths), len(r.accept_lengths)) for r in self.runs]


def speculative_decode(h, prompts: list[list[int]], *, num_draft_tokens: int = 3, max_new_tokens: int = 32,
                       knobs: LoopKnobs = LoopKnobs()) -> SpecResult:
    """Run the greedy speculative loop on every prompt with harness ``h``.

    Args:
        h: a live :class:`~eagle3_conformance.tools.sglang_cpu.harness.SGLangCPUHarness` whose draft has
            weights (``h.draft_weights == "checkpoint"``) for the numbers to mean anything.
        prompts: token id lists, each of length >= 2 (else ValueError, before any forward).
        num_draft_tokens: k >= 1 draft tokens per verify step (verify runs k+1 rows).
        max_new_tokens: tokens generated per prompt.
        knobs: fault injection (:class:`LoopKnobs`); default: none.

    The prompts' target verifies and draft extends after verify run in one batch per step where
    :func:`.row_blocks.rows_invariant` finds this torch build giving each row the bits a one-prompt forward
    gives it (the results are then those of one prompt at a time, which is how they run elsewhere). A
    forward that raises ends that prompt's run with ``error`` set (an engine crash is a result of the
    fault, reported as such); the other prompts still run: after a batched forward raised, every prompt
    runs again one at a time, so each run records its own error.
    """
    from eagle3_conformance.tools.sglang_cpu.row_blocks import rows_invariant

    h._check_open()
    t0 = time.perf_counter()
    for p in prompts:
        if len(p) < 2:
            raise ValueError(f"prompt of {len(p)} tokens: the loop needs >= 2")
    runs: Optional[list[SpecRun]] = None
    if len(prompts) > 1 and rows_invariant([h.target, h.draft], num_draft_tokens + 1, len(prompts)):
        runs = [SpecRun(prompt=list(p)) for p in prompts]
        try:
            _clear(h)
            _lockstep(h, runs, num_draft_tokens, max_new_tokens, knobs)
        except Exception:  # noqa: BLE001 - rerun one at a time below, where each run records its own error
            runs = None
        finally:
            _clear(h)
    if runs is None:
        runs = [_alone(h, p, num_draft_tokens, max_new_tokens, knobs) for p in prompts]
    return SpecResult(runs, num_draft_tokens, time.perf_counter() - t0)


def _alone(h, prompt: list[int], k: int, max_new: int, knobs: LoopKnobs) -> SpecRun:
    """One prompt through the loop by itself; a forward that raises sets ``error``."""
    run = SpecRun(prompt=list(prompt))
    try:
        _clear(h)
        _lockstep(h, [run], k, max_new, knobs)
    except Exception as e:  # noqa: BLE001 - the engine failing under a fault is the result
        run.error = f"{type(e).__name__}: {e}"
    finally:
        _clear(h)
    return run


# ----------------------------------------------------------------------------------- internals

_KEY = ("spec", 0)  # the cache key of the first (or only) prompt of a batch


@dataclass
class _Req:
    """One prompt's place in the loop: its run, its cache key, and what seeds its next step."""

    run: SpecRun
    key: tuple
    bonus: int
    d_logits: Tensor  # the draft's logits row that gives the first draft token
    d_state: Tensor  # [1, d]: the draft state that seeds the draft steps
    committed: int  # rows in the target's and the draft's caches
    drafts: list[int] = field(default_factory=list)


def _clear(h) -> None:
    for attn in (h.target_attn, h.draft_attn):
        attn.cache.clear()
        attn.latent.clear()


def _truncate(attn, key, keep: int) -> None:
    """Keep the first ``keep`` cached rows of request ``key`` (SGLang frees the rejected slots)."""
    for ck, (k, v) in list(attn.cache.items()):
        if ck[1] == key:
            attn.cache[ck] = (k[:keep], v[:keep])


def _per_request(fn: Callable[[Tensor], Tensor], x: Tensor, sizes: list[int]) -> Tensor:
    """A knob applied to each request's rows of ``x`` (a knob sees one request, as in a forward of one)."""
    return fn(x) if len(sizes) == 1 else torch.cat([fn(part) for part in x.split(sizes)])


def _to_target(h, draft_ids: Tensor) -> Tensor:
    """Draft-vocabulary ids -> target ids as SGLang does (``hot_token_id``, from ``d2t``; None: the
    draft id is used as it is)."""
    hot = h.draft.get_hot_token_id()
    return draft_ids if hot is None else hot[draft_ids]


def _draft(h, fb, segments, knobs: LoopKnobs, runs: list[SpecRun], *, store: bool, attend: bool):
    if knobs.draft_positions is not None:
        fb.positions = _per_request(knobs.draft_positions, fb.positions, [n for _, n in segments])
    h._fc_calls = 0
    out = h._run(h.draft, h.draft_attn, fb, segments, store=store, attend_cache=attend)
    for run in runs:  # fc runs once per forward, whatever the batch: each request's forward ran it
        run.fc_calls += h._fc_calls
    return out


def _lockstep(h, runs: list[SpecRun], k: int, max_new: int, knobs: LoopKnobs) -> None:
    """The loop on ``runs`` (prompts in ``run.prompt``) together: each prompt's extend and draft steps by
    itself, then one target verify and one draft extend after verify over the prompts still generating."""
    reqs = [_prefill(h, run, ("spec", i), knobs) for i, run in enumerate(runs)]
    active = [r for r in reqs if len(r.run.output) < max_new]
    while active:
        # 3. the draft proposes k tokens per prompt (one-row forwards, one prompt at a time)
        saved = dict(h.draft_attn.cache)
        for r in active:
            _propose(h, r, k, knobs)
        h.draft_attn.cache.clear()
        h.draft_attn.cache.update(saved)
        vh, predict, accepts = _verify(h, active, k, knobs)
        _extend_after_verify(h, active, vh, predict, accepts, k, knobs)
        active = [r for r in active if len(r.run.output) < max_new]
    for run in runs:
        del run.output[max_new:]


def _prefill(h, run: SpecRun, key, knobs: LoopKnobs) -> _Req:
    """Steps 1 and 2 for one prompt: the target extend, caching K/V, then the draft extend after prefill."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

    prompt, T = run.prompt, len(run.prompt)
    # 1. target extend (EXTEND, FULL), caching K/V
    fb = h._extend_batch([prompt], [0], ForwardMode.EXTEND, CaptureHiddenMode.FULL)
    out = h._target_forward(fb, [(key, T)], store=True, aux=not knobs.final_on_extend)
    hidden = out.hidden_states
    bonus = int(out.next_token_logits[-1].argmax())
    run.output.append(bonus)
    if knobs.extend_hidden is not None:
        hidden = knobs.extend_hidden(hidden)
    # 2. draft extend after prefill (EXTEND, LAST): ids shifted by one, bonus last
    dfb = h._extend_batch([prompt[1:] + [bonus]], [0], ForwardMode.EXTEND, CaptureHiddenMode.LAST,
                          spec_info=EagleDraftExtendInput(hidden_states=hidden, num_tokens_per_req=1,
                                                          num_tokens_for_logprob_per_req=1))
    dout = _draft(h, dfb, [(key, T)], knobs, [run], store=True, attend=False)
    return _Req(run, key, bonus, dout.next_token_logits[-1], dout.hidden_states[-1:], T)


def _propose(h, r: _Req, k: int, knobs: LoopKnobs) -> None:
    """Step 3 for one prompt: ``k`` draft tokens into ``r.drafts`` (the step rows stay in the draft's
    cache; the caller drops them, as SGLang frees them)."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

    drafts = [int(_to_target(h, r.d_logits.argmax()))]
    d_state = r.d_state
    for j in range(1, k):
        sfb = h._extend_batch([[drafts[-1]]], [r.committed - 1 + j], ForwardMode.EXTEND, CaptureHiddenMode.LAST,
                              spec_info=EagleDraftExtendInput(hidden_states=d_state, num_tokens_per_req=1,
                                                              num_tokens_for_logprob_per_req=1))
        sout = _draft(h, sfb, [(r.key, 1)], knobs, [r.run], store=True, attend=True)
        drafts.append(int(_to_target(h, sout.next_token_logits[-1].argmax())))
        d_state = sout.hidden_states[-1:]
    r.drafts = drafts


def _verify(h, active: list[_Req], k: int, knobs: LoopKnobs) -> tuple[Tensor, Tensor, list[int]]:
    """Step 4: target verify (TARGET_VERIFY, FULL) over each prompt's ``[bonus, d_1..d_k]``; commits the
    accepted tokens and the new bonus to each run. Returns the verify rows' hidden states ``[B*(k+1), W]``,
    ``predict`` ``[B*(k+1)]`` and the accept lengths."""
    n = k + 1
    prefixes = [r.run.prompt + r.run.output[:-1] for r in active]
    assert [len(p) for p in prefixes] == [r.committed for r in active]
    vfb = h._verify_batch(prefixes, [[r.bonus] + r.drafts for r in active])
    vout = h._target_forward(vfb, [(r.key, n) for r in active], store=True, attend_cache=True,
                             aux=not knobs.final_on_decode)
    predict = vout.next_token_logits.argmax(-1).to(torch.int64)
    accepts = []
    for i, r in enumerate(active):
        mine = predict[i * n:(i + 1) * n]
        a = greedy_accepted(mine.tolist(), [r.bonus] + r.drafts, n)
        run = r.run
        run.accept_lengths.append(a)
        run.proposed += k
        run.accepted += a - 1
        run.output.extend(r.drafts[: a - 1])
        r.bonus = int(mine[a - 1])
        run.output.append(r.bonus)
        _truncate(h.target_attn, r.key, r.committed + a)
        accepts.append(a)
    return vout.hidden_states, predict, accepts


def _extend_after_verify(h, active: list[_Req], vh: Tensor, predict: Tensor, accepts: list[int], k: int,
                         knobs: LoopKnobs) -> None:
    """Step 5: draft extend after verify (DRAFT_EXTEND_V2, FULL): all k+1 rows per prompt, ids = ``predict``;
    row ``a-1`` of each prompt (``select_index``) seeds its next draft step; the draft keeps ``a`` rows."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

    n, bs = k + 1, len(active)
    if knobs.decode_hidden is not None:
        vh = _per_request(knobs.decode_hidden, vh, [n] * bs)

    def extend(hs):
        spec = EagleDraftExtendInput(hidden_states=hs, num_correct_drafts=torch.tensor([a - 1 for a in accepts]),
                                     num_accept_tokens=torch.tensor(accepts), num_tokens_per_req=n,
                                     num_tokens_for_logprob_per_req=n)
        efb = h._extend_batch([predict[i * n:(i + 1) * n].tolist() for i in range(bs)],
                              [r.committed for r in active], ForwardMode.DRAFT_EXTEND_V2,
                              CaptureHiddenMode.FULL, spec_info=spec)
        return _draft(h, efb, [(r.key, n) for r in active], knobs, [r.run for r in active], store=True, attend=True)

    if knobs.draft_states_on_decode:
        saved = dict(h.draft_attn.cache)
        vh = extend(vh).hidden_states
        h.draft_attn.cache.clear()
        h.draft_attn.cache.update(saved)
    eout = extend(vh)
    logits, states = eout.next_token_logits, eout.hidden_states
    for i, (r, a) in enumerate(zip(active, accepts)):
        _truncate(h.draft_attn, r.key, r.committed + a)
        # all rows (no select_index: our EagleDraftExtendInput sets none), else the last row of each prompt
        li = i * n + a - 1 if logits.shape[0] == bs * n else (i + 1) * logits.shape[0] // bs - 1
        si = i * n + a - 1 if states.shape[0] == bs * n else (i + 1) * states.shape[0] // bs - 1
        r.d_logits, r.d_state = logits[li], states[si:si + 1]
        r.committed += a
