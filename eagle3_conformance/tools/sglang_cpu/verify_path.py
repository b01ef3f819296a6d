"""The decode path of the SGLang CPU harness: its one job is target verify (TARGET_VERIFY, FULL) then
the draft extend after verify (DRAFT_EXTEND_V2), as :class:`VerifyPath`, a base of
:class:`~eagle3_conformance.tools.sglang_cpu.harness.SGLangCPUHarness` (whose build, probes and
forwards it calls), and the greedy accept rule it applies (:func:`greedy_accepted`). The SGLang facts
and steps it follows are cited in :mod:`eagle3_conformance.tools.sglang_cpu.harness`' docstring."""

from __future__ import annotations

import time
from typing import Any, Callable

from eagle3_conformance.core.capture import Capture
from eagle3_conformance.environment.torch_env import prepare

prepare()

import torch  # noqa: E402

from eagle3_conformance.tools.sglang_cpu.errors import DraftForwardError  # noqa: E402


def greedy_accepted(predict: list[int], drafts: list[int], wanted: int) -> int:
    """Accepted tokens (bonus included) of one request under greedy verification, at most
    ``wanted``: draft token j+1 is accepted while it equals the target's argmax at verify row j
    (SGLang 0.5.23 ``speculative/eagle_utils.py`` -> ``verify_tree_greedy_func``, on a topk-1
    chain). Stood in: that function dispatches to CUDA/JIT, ``sgl_kernel`` CPU or Triton kernels,
    none of which runs in this CPU environment; on a chain the rule is this loop."""
    k = 1
    while k < wanted and drafts[k] == predict[k - 1]:
        k += 1
    return k


class VerifyPath:
    """:meth:`verify` and its steps; what it reads of the harness is declared below (set by
    :class:`~eagle3_conformance.tools.sglang_cpu.harness.SGLangCPUHarness`)."""

    engine_ids: Any
    target_attn: Any
    timings: dict
    captured_boundaries: Any
    _check_open: Callable[..., Any]
    _extend_batch: Callable[..., Any]
    _target_forward: Callable[..., Any]
    _draft_forward: Callable[..., Any]
    _provenance: Callable[..., Any]

    def verify(
        self,
        prefix: list[list[int]],
        draft_tokens: list[list[int]],
        accepted: list[int],
        *,
        feed_final_hidden: bool = False,
        feed_draft_states: bool = False,
    ) -> list[Capture]:
        """Target verify (TARGET_VERIFY, FULL) then the draft extend after verify (DRAFT_EXTEND_V2).

        Token layout (what the rows are): request i first runs a target EXTEND over
        ``prefix[i]`` whose K/V the stand-in attention caches. The verify forward then runs
        ``n = len(draft_tokens[i])`` rows (the same n for every request; SGLang's
        ``num_draft_tokens``). Row j is token ``draft_tokens[i][j]`` at position
        ``len(prefix[i]) + j``, attending to the whole prefix and causally to rows < j (a topk-1
        chain: SGLang's tree mask is causal). As in SGLang, ``draft_tokens[i][0]`` plays the
        verified/bonus token and the rest are the speculated tokens. So the reference must be
        run on ``token_ids = prefix[i] + draft_tokens[i]`` and row j of ``feature`` is reference
        row ``rows[j] = len(prefix[i]) + j``.

        Draft extend after verify (``eagle_worker_v2.py:1110-1160``, ``eagle_worker_common.py:
        112-226``): the draft is handed ALL ``bs*n`` verify rows (the V2 worker passes the whole
        verify window; only the first ``accepted[i]`` rows are accepted and row
        ``accepted[i]-1`` seeds the next draft step), input ids = ``predict`` = the target's
        greedy token per verify row, positions ``len(prefix[i]) + arange(n)``.
        ``accepted[i]`` counts accepted tokens including the bonus (``accept_lens``),
        ``1 <= accepted[i] <= n``. It is the count the caller made the draft tokens consistent
        with; the target's own greedy verification (SGLang's ``verify_tree_greedy`` accepts draft
        token j+1 while it equals the target's argmax at row j) may accept fewer: a bf16 target
        at a near-tie of the float32 reference's greedy choice. The smaller count is used and
        recorded in each capture's ``provenance["accepted"]``.

        Fault injection (explicit, off by default):
            feed_final_hidden: run the verify forward with aux capture off so the
                LogitsProcessor stores the d-wide post-norm F (the no-aux fallback) and hand that
                to the draft. With draft width == target width the draft's real guard skips fc
                silently (fc_ran False); with unequal widths fc raises a shape error.
            feed_draft_states: K9. First run the correct draft extend, then hand the draft its own
                output states (``[bs*n, draft_hidden]``, FULL capture) as if they were the target
                features; fc is skipped by the same guard.

        Returns one Capture per request with ``feature`` [n, W] (the tensor entering the draft
        for that request), ``rows`` [n], ``draft_input_ids`` [n], ``position_ids`` [n].
        """
        self._check_open()
        t0 = time.perf_counter()
        bs = len(prefix)
        assert bs == len(draft_tokens) == len(accepted)
        n = len(draft_tokens[0])
        assert n >= 1 and all(len(d) == n for d in draft_tokens), "equal num_draft_tokens"
        assert all(1 <= a <= n for a in accepted), "1 <= accepted <= num_draft_tokens"
        assert all(len(p) >= 1 for p in prefix)
        hidden, predict, accepted = self._target_verify(prefix, draft_tokens, accepted, feed_final_hidden)
        accept_lens = torch.tensor(accepted, dtype=torch.int32)
        select_index = torch.arange(0, bs * n, n) + accept_lens - 1
        dout, probe, fc_calls, err = self._draft_extend_after_verify(hidden, predict, accept_lens, prefix, n)
        fed = "target FULL aux concat"
        if feed_final_hidden:
            fed = "target post-norm F (no-aux fallback)"
        if feed_draft_states and err is None:
            dout, probe, fc_calls, err = self._draft_extend_after_verify(dout.hidden_states, predict, accept_lens,
                                                                         prefix, n)
            fed = "draft's own output states (K9)"
        self.target_attn.cache.clear()
        self.target_attn.latent.clear()
        self.timings["verify"] = time.perf_counter() - t0
        caps = self._verify_captures(prefix, draft_tokens, accepted, probe, fc_calls, fed, hidden, predict,
                                     select_index, err)
        if err is not None:
            raise DraftForwardError(f"SGLang draft forward failed on verify: {err!r}", caps) from err
        return caps

    def _target_verify(self, prefix: list[list[int]], draft_tokens: list[list[int]], accepted: list[int],
                       feed_final_hidden: bool):
        """The target's side of :meth:`verify`: a prefill over ``prefix`` (EXTEND, FULL) caching
        K/V per request, then the verify forward over the n draft rows per request (TARGET_VERIFY,
        FULL). Returns (hidden [bs*n, K*d] (or [bs*n, d] = F when ``feed_final_hidden``),
        predict [bs*n] int64 (the target's greedy token per row), accepted per request (the
        target's own greedy count, at most the caller's))."""
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode

        bs, n = len(prefix), len(draft_tokens[0])
        plens = [len(p) for p in prefix]
        self.target_attn.cache.clear()
        self.target_attn.latent.clear()
        keys = [("dec", i) for i in range(bs)]
        fb = self._extend_batch(prefix, [0] * bs, ForwardMode.EXTEND, CaptureHiddenMode.FULL)
        self._target_forward(fb, list(zip(keys, plens)), store=True)
        vfb = self._verify_batch(prefix, draft_tokens)
        vout = self._target_forward(vfb, [(k, n) for k in keys], attend_cache=True,
                                    aux=not feed_final_hidden)
        predict = vout.next_token_logits.argmax(-1).to(torch.int64)  # [bs*n]
        accepted = [greedy_accepted(predict[i * n:(i + 1) * n].tolist(), draft_tokens[i], a)
                    for i, a in enumerate(accepted)]
        return vout.hidden_states, predict, accepted

    def _draft_extend_after_verify(self, h: torch.Tensor, predict: torch.Tensor, accept_lens: torch.Tensor,
                                   prefix: list[list[int]], n: int):
        """The draft extend after verify (DRAFT_EXTEND_V2, FULL) on the ``bs*n`` rows ``h``:
        input ids ``predict``, positions ``len(prefix[i]) + arange(n)``. Returns
        :meth:`_draft_forward`'s (output, probe, fc calls, error)."""
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
        from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

        bs = len(prefix)
        spec = EagleDraftExtendInput(
            hidden_states=h,
            num_correct_drafts=accept_lens - 1,
            num_accept_tokens=accept_lens,
            num_tokens_per_req=n,
            num_tokens_for_logprob_per_req=n,
        )
        ids = [predict[i * n:(i + 1) * n].tolist() for i in range(bs)]
        dfb = self._extend_batch(ids, [len(p) for p in prefix], ForwardMode.DRAFT_EXTEND_V2,
                                 CaptureHiddenMode.FULL, spec_info=spec)
        return self._draft_forward(dfb, [(("dec", i), n) for i in range(bs)])

    def _draft_side(self, probe: dict, sl: slice, fc_calls: int) -> dict:
        """The Capture fields read off the draft probe for one request's rows ``sl``: input ids and
        positions the draft received, whether its fc ran and on what, and the engine's id mapping."""
        return dict(
            draft_input_ids=probe["input_ids"][sl].to(torch.int64),
            position_ids=probe["positions"][sl].to(torch.int64),
            fc_ran=fc_calls > 0,
            fc_input=probe["fc_input"][sl] if "fc_input" in probe else None,
            fc_source=probe["hidden"][sl] if "fc_input" in probe else None,
            draft_input_width=int(probe["hidden"].shape[-1]),
            engine_ids=None if self.engine_ids is None else list(self.engine_ids),
            engine_boundaries=self.captured_boundaries,
        )

    def _verify_captures(self, prefix, draft_tokens, accepted, probe, fc_calls, fed, hidden, predict,
                         select_index, err) -> list[Capture]:
        """One Capture per request of a verify step: the draft-extend input rows of that request."""
        bs, n = len(prefix), len(draft_tokens[0])
        plens = [len(p) for p in prefix]
        caps = []
        for i in range(bs):
            sl = slice(i * n, (i + 1) * n)
            caps.append(Capture(
                path="sglang-decode",
                where=f"verify batch of {bs}, request {i}",
                token_ids=torch.tensor(list(prefix[i]) + list(draft_tokens[i]), dtype=torch.int64),
                feature=probe["hidden"][sl],
                rows=torch.arange(plens[i], plens[i] + n, dtype=torch.int64),
                **self._draft_side(probe, sl, fc_calls),
                provenance=self._provenance(
                    "TARGET_VERIFY", draft_mode=probe["mode"], draft_capture_hidden_mode="FULL",
                    num_draft_tokens=n, accepted=int(accepted[i]),
                    select_row=int(select_index[i]) - i * n, fc_calls=fc_calls,
                    draft_fed=fed, target_output_width=int(hidden.shape[-1]),
                    verify_predict=predict[sl].tolist(),
                    **({"draft_error": repr(err)} if err is not None else {}),
                ),
            ))
        return caps

    def _verify_batch(self, prefix, draft_tokens):
        """TARGET_VERIFY ``ForwardBatch`` with an ``EagleVerifyInput`` (topk 1 chain)."""
        from sglang.srt.model_executor.forward_batch_info import (
            CaptureHiddenMode,
            ForwardBatch,
            ForwardMode,
        )
        from sglang.srt.speculative.eagle_info import EagleVerifyInput
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        bs, n = len(prefix), len(draft_tokens[0])
        plens = torch.tensor([len(p) for p in prefix], dtype=torch.int64)
        flat = torch.tensor([t for d in draft_tokens for t in d], dtype=torch.int64)
        positions = (plens[:, None] + torch.arange(n)[None, :]).reshape(-1)
        seq = plens  # verify runs with seq_lens = committed length (eagle_utils.py:305-414)
        retrieve = torch.arange(bs * n).reshape(bs, n)
        nxt = torch.full((bs, n), -1, dtype=torch.long)
        nxt[:, :-1] = torch.arange(1, n)
        spec = EagleVerifyInput(
            draft_token=flat,
            custom_mask=None,
            positions=positions,
            retrieve_index=retrieve,
            retrieve_next_token=nxt,
            retrieve_next_sibling=torch.full((bs, n), -1, dtype=torch.long),
            retrieve_cum_len=None,
            spec_steps=n - 1,
            topk=1,
            draft_token_num=n,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            seq_lens_sum=int(seq.sum()),
            seq_lens_cpu=seq.clone(),
        )
        return ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY,
            batch_size=bs,
            input_ids=flat,
            req_pool_indices=torch.arange(bs, dtype=torch.int64),
            seq_lens=seq.clone(),
            out_cache_loc=torch.arange(bs * n, dtype=torch.int64),
            seq_lens_sum=int(seq.sum()),
            seq_lens_cpu=seq.clone(),
            positions=positions,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_logprob=False,
            spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"),
            spec_info=spec,
        )
