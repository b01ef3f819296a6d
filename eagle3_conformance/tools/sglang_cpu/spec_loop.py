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
query row attending to the cache; CUDA graphs are not modelled); one request at a time.

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
    """Run the greedy speculative loop on every prompt (one at a time) with harness ``h``.

    Args:
        h: a live :class:`~eagle3_conformance.tools.sglang_cpu.harness.SGLangCPUHarness` whose draft has
            weights (``h.draft_weights == "checkpoint"``) for the numbers to mean anything.
        prompts: token id lists, each of length >= 2.
        num_draft_tokens: k >= 1 draft tokens per verify step (verify runs k+1 rows).
        max_new_tokens: tokens generated per prompt.
        knobs: fault injection (:class:`LoopKnobs`); default: none.

    A forward that raises ends that prompt's run with ``error`` set (an engine crash is a result
    of the fault, reported as such); the other prompts still run.
    """
    h._check_open()
    t0 = time.perf_counter()
    runs = []
    for p in prompts:
        if len(p) < 2:
            raise ValueError(f"prompt of {len(p)} tokens: the loop needs >= 2")
        run = SpecRun(prompt=list(p))
        try:
            _one(h, run, num_draft_tokens, max_new_tokens, knobs)
        except Exception as e:  # noqa: BLE001 - the engine failing under a fault is the result
            run.error = f"{type(e).__name__}: {e}"
        finally:
            _clear(h)
        runs.append(run)
    return SpecResult(runs, num_draft_tokens, time.perf_counter() - t0)


# ----------------------------------------------------------------------------------- internals

_KEY = ("spec", 0)


def _clear(h) -> None:
    for attn in (h.target_attn, h.draft_attn):
        attn.cache.clear()
        attn.latent.clear()


def _truncate(attn, keep: int) -> None:
    """Keep the first ``keep`` cached rows of the request (SGLang frees the rejected slots)."""
    for ck, (k, v) in list(attn.cache.items()):
        if ck[1] == _KEY:
            attn.cache[ck] = (k[:keep], v[:keep])


def _to_target(h, draft_ids: Tensor) -> Tensor:
    """Draft-vocabulary ids -> target ids as SGLang does (``hot_token_id``, from ``d2t``; None: the
    draft id is used as it is)."""
    hot = h.draft.get_hot_token_id()
    return draft_ids if hot is None else hot[draft_ids]


def _draft(h, fb, n: int, knobs: LoopKnobs, run: SpecRun, *, store: bool, attend: bool):
    if knobs.draft_positions is not None:
        fb.positions = knobs.draft_positions(fb.positions)
    h._fc_calls = 0
    out = h._run(h.draft, h.draft_attn, fb, [(_KEY, n)], store=store, attend_cache=attend)
    run.fc_calls += h._fc_calls
    return out


def _one(h, run: SpecRun, k: int, max_new: int, knobs: LoopKnobs) -> None:
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

    EXT, FULL, LAST = ForwardMode.EXTEND, CaptureHiddenMode.FULL, CaptureHiddenMode.LAST
    prompt = run.prompt
    T = len(prompt)
    _clear(h)
    # 1. target extend (EXTEND, FULL), caching K/V
    fb = h._extend_batch([prompt], [0], EXT, FULL)
    out = h._target_forward(fb, [(_KEY, T)], store=True, aux=not knobs.final_on_extend)
    hidden = out.hidden_states
    bonus = int(out.next_token_logits[-1].argmax())
    run.output.append(bonus)
    if knobs.extend_hidden is not None:
        hidden = knobs.extend_hidden(hidden)
    # 2. draft extend after prefill (EXTEND, LAST): ids shifted by one, bonus last
    dfb = h._extend_batch([prompt[1:] + [bonus]], [0], EXT, LAST,
                          spec_info=EagleDraftExtendInput(hidden_states=hidden, num_tokens_per_req=1,
                                                          num_tokens_for_logprob_per_req=1))
    dout = _draft(h, dfb, T, knobs, run, store=True, attend=False)
    d_logits, d_state = dout.next_token_logits[-1], dout.hidden_states[-1:]
    committed = T  # rows in the target's and the draft's caches
    while len(run.output) < max_new:
        # 3. the draft proposes k tokens
        saved = dict(h.draft_attn.cache)
        drafts = [int(_to_target(h, d_logits.argmax()))]
        for j in range(1, k):
            sfb = h._extend_batch([[drafts[-1]]], [committed - 1 + j], EXT, LAST,
                                  spec_info=EagleDraftExtendInput(hidden_states=d_state, num_tokens_per_req=1,
                                                                  num_tokens_for_logprob_per_req=1))
            sout = _draft(h, sfb, 1, knobs, run, store=True, attend=True)
            drafts.append(int(_to_target(h, sout.next_token_logits[-1].argmax())))
            d_state = sout.hidden_states[-1:]
        h.draft_attn.cache.clear()
        h.draft_attn.cache.update(saved)
        # 4. target verify (TARGET_VERIFY, FULL) over [bonus, d_1..d_k]
        prefix = prompt + run.output[:-1]
        assert len(prefix) == committed
        vfb = h._verify_batch([prefix], [[bonus] + drafts])
        vout = h._target_forward(vfb, [(_KEY, k + 1)], store=True, attend_cache=True,
                                 aux=not knobs.final_on_decode)
        predict = vout.next_token_logits.argmax(-1).to(torch.int64)
        a = greedy_accepted(predict.tolist(), [bonus] + drafts, k + 1)
        run.accept_lengths.append(a)
        run.proposed += k
        run.accepted += a - 1
        run.output.extend(drafts[: a - 1])
        bonus = int(predict[a - 1])
        run.output.append(bonus)
        _truncate(h.target_attn, committed + a)
        # 5. draft extend after verify (DRAFT_EXTEND_V2, FULL): all k+1 rows, ids = predict
        vh = vout.hidden_states
        if knobs.decode_hidden is not None:
            vh = knobs.decode_hidden(vh)

        def extend_after_verify(hs, store=True, a=a, predict=predict, committed=committed):
            spec = EagleDraftExtendInput(hidden_states=hs, num_correct_drafts=torch.tensor([a - 1]),
                                         num_accept_tokens=torch.tensor([a]), num_tokens_per_req=k + 1,
                                         num_tokens_for_logprob_per_req=k + 1)
            efb = h._extend_batch([predict.tolist()], [committed], ForwardMode.DRAFT_EXTEND_V2, FULL,
                                  spec_info=spec)
            return _draft(h, efb, k + 1, knobs, run, store=store, attend=True)

        if knobs.draft_states_on_decode:
            saved = dict(h.draft_attn.cache)
            own = extend_after_verify(vh).hidden_states
            h.draft_attn.cache.clear()
            h.draft_attn.cache.update(saved)
            vh = own
        eout = extend_after_verify(vh)
        _truncate(h.draft_attn, committed + a)
        logits = eout.next_token_logits
        states = eout.hidden_states
        d_logits = logits[a - 1] if logits.shape[0] == k + 1 else logits[-1]
        d_state = states[a - 1:a] if states.shape[0] == k + 1 else states[-1:]
        committed += a
    del run.output[max_new:]
