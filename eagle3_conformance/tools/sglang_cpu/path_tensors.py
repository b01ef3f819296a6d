"""The aux rows each SGLang path hands the draft for the same tokens, recorded from the speculative
loop: what the acceptance estimate (:mod:`eagle3_conformance.acceptance.estimate`) reruns the draft on
to attribute an acceptance loss to a path.

For one prompt the loop (:func:`.spec_loop.speculative_decode`, SGLang 0.5.23's classes) runs with
recording knobs, and gives:

* ``tokens``: prompt + the loop's output (lossless: the target's greedy decode);
* ``sglang-extend``: the target's EXTEND over all of ``tokens`` (FULL capture, one forward, as a
  prefill of the whole sequence would hand the draft extend after prefill);
* ``sglang-decode``: the rows the loop handed the draft: the prompt's extend rows, then per verify
  step the accepted rows of TARGET_VERIFY (``a`` of the ``k + 1``: the bonus and the accepted
  drafts, in position order); the final row (never verified) is the extend's.

Each is ``[len(tokens), K*d]`` float32 in token order. Recording changes nothing the draft gets
(the knobs return their input); a fault's knobs can be composed in to record a faulty path.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from eagle3_conformance.tools.sglang_cpu.spec_loop import LoopKnobs, speculative_decode


def _rec(store: list, inner: Optional[Callable]):
    def fn(x):
        y = inner(x) if inner is not None else x
        store.append(y.detach().clone())
        return y

    return fn


def target_extend_rows(h, tokens: list[int]) -> torch.Tensor:
    """The target's EXTEND (FULL capture) over ``tokens``: the aux concat ``[T, K*d]``."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode

    from eagle3_conformance.tools.sglang_cpu.spec_loop import _KEY, _clear

    _clear(h)
    try:
        fb = h._extend_batch([list(tokens)], [0], ForwardMode.EXTEND, CaptureHiddenMode.FULL)
        return h._target_forward(fb, [(_KEY, len(tokens))], store=False).hidden_states.detach().clone()
    finally:
        _clear(h)


def record_paths(h, prompt: list[int], *, k: int = 3, max_new: int = 32,
                 knobs: LoopKnobs = LoopKnobs()) -> dict[str, Any]:
    """Run the loop on one prompt and return ``{"tokens", "sglang-extend", "sglang-decode",
    "accept_lengths"}`` (see the module docstring). ``knobs``' ``extend_hidden`` / ``decode_hidden``
    run before the recording (a fault's tensors are what is recorded).

    Raises:
        RuntimeError: the loop failed on the prompt (its error).
    """
    ext: list = []
    dec: list = []
    rec = LoopKnobs(**{**knobs.__dict__, "extend_hidden": _rec(ext, knobs.extend_hidden),
                       "decode_hidden": _rec(dec, knobs.decode_hidden)})
    res = speculative_decode(h, [prompt], num_draft_tokens=k, max_new_tokens=max_new, knobs=rec)
    run = res.runs[0]
    if run.error:
        raise RuntimeError(f"the loop failed on the prompt: {run.error}")
    tokens = list(prompt) + list(run.output)
    full = target_extend_rows(h, tokens)
    rows = [ext[0]] + [v[:a] for v, a in zip(dec, run.accept_lengths)]
    decode = torch.cat(rows, dim=0)[: len(tokens)]
    if decode.shape[0] < len(tokens):
        decode = torch.cat([decode, full[decode.shape[0]:]], dim=0)
    return {"tokens": tokens, "sglang-extend": full, "sglang-decode": decode,
            "accept_lengths": list(run.accept_lengths)}
