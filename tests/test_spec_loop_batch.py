"""Issue 42 item 4: the speculative loop runs the prompts' target verify and draft extend after verify in one
batch (:mod:`eagle3_conformance.tools.sglang_cpu.spec_loop`), only where :mod:`.row_blocks` finds this torch
build giving each row the bits of a one-prompt forward. Its numbers must be those of one prompt at a time:
outputs, accept lengths, fc calls and errors, correct pair, fault knobs and a draft that raises alike."""

from __future__ import annotations

import pytest

# ------------------------------------------------------------------------------------ fast: the probe


def _linear(monkeypatch, fn):
    import torch.nn.functional as F

    from eagle3_conformance.tools.sglang_cpu import row_blocks

    monkeypatch.setattr(row_blocks, "_SEEN", {})
    monkeypatch.setattr(row_blocks.F, "linear", fn)
    return F, row_blocks


def test_probe_refuses_a_gemm_whose_rows_depend_on_the_row_count(monkeypatch):
    """A BLAS that takes another kernel (other bits) for a call of more than 4 rows: no batching."""
    import torch

    real = torch.nn.functional.linear

    def by_count(x, w, b=None):
        y = real(x, w, b)
        return y * (1 + 1e-6) if x.shape[0] > 4 else y

    _F, row_blocks = _linear(monkeypatch, by_count)
    lin = torch.nn.Linear(64, 32, bias=False)
    assert not row_blocks.rows_invariant([lin], 4, 3)


def test_probe_allows_a_gemm_whose_rows_are_computed_one_by_one(monkeypatch):
    import torch

    real = torch.nn.functional.linear

    def row_by_row(x, w, b=None):
        return torch.stack([real(r[None], w, b)[0] for r in x])

    _F, row_blocks = _linear(monkeypatch, row_by_row)
    lin = torch.nn.Linear(64, 32, bias=False)
    assert row_blocks.rows_invariant([lin], 4, 3)
    assert not row_blocks.rows_invariant([lin], 4, 1)  # one prompt: nothing to batch


# ---------------------------------------------------------------------------------- slow: the trained pair (the fixture loop, tests/conftest.py)


def _run(loop, monkeypatch, *, batched: bool, fault=None, knobs=None):
    """The loop on the two prompts (12 new tokens, k = 3) with ``fault`` injected; ``batched=False``
    forces one prompt at a time. Returns (every run's numbers, the verify batch sizes seen)."""
    from eagle3_conformance.faults.acceptance import apply, restore
    from eagle3_conformance.tools.sglang_cpu import row_blocks
    from eagle3_conformance.tools.sglang_cpu.spec_loop import LoopKnobs, speculative_decode

    h = loop["h"]
    if not batched:
        monkeypatch.setattr(row_blocks, "rows_invariant", lambda *a: False)
    sizes: list[int] = []
    real = h._verify_batch

    def spy(prefix, draft_tokens):
        sizes.append(len(prefix))
        return real(prefix, draft_tokens)

    monkeypatch.setattr(h, "_verify_batch", spy)
    try:
        knobs = apply(h, fault, loop["d2t"]) if fault is not None else knobs or LoopKnobs()
        res = speculative_decode(h, loop["prompts"], num_draft_tokens=3, max_new_tokens=12, knobs=knobs)
    finally:
        restore(h, loop["d2t"])
        monkeypatch.undo()
    return [(r.output, r.accept_lengths, r.proposed, r.accepted, r.fc_calls, r.error) for r in res.runs], sizes


def _batching(loop) -> None:
    from eagle3_conformance.tools.sglang_cpu.row_blocks import rows_invariant

    if not rows_invariant([loop["h"].target, loop["h"].draft], 4, len(loop["prompts"])):
        pytest.skip("this torch build's GEMM rows depend on the row count: the loop runs one prompt at a time here")


@pytest.mark.slow
def test_batched_loop_gives_each_prompt_its_numbers_by_itself(loop, monkeypatch):
    _batching(loop)
    batched, sizes = _run(loop, monkeypatch, batched=True)
    alone, alone_sizes = _run(loop, monkeypatch, batched=False)
    assert max(sizes) == len(loop["prompts"]) and set(alone_sizes) == {1}
    assert batched == alone
    assert not any(r[-1] for r in batched) and all(len(r[0]) == 12 for r in batched)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["positions-not-advanced", "draft-states-fed-back", "slots-swapped",
                                  "final-norm-output-as-aux@decode"])
def test_batched_loop_applies_a_fault_knob_per_prompt(loop, monkeypatch, name):
    from eagle3_conformance.faults.acceptance import FAULTS

    _batching(loop)
    fault = next(f for f in FAULTS if f.name == name)
    batched, sizes = _run(loop, monkeypatch, batched=True, fault=fault)
    alone, _ = _run(loop, monkeypatch, batched=False, fault=fault)
    assert max(sizes) == len(loop["prompts"]) and batched == alone


@pytest.mark.slow
def test_the_comparison_fails_when_a_knob_sees_the_whole_batch(loop, monkeypatch):
    """The fault the per-prompt knob exists for: a connector that sizes its buffer for one request's k+1
    verify rows (the identity on one request, zeros on more) handed the whole batch changes the numbers."""
    import torch

    from eagle3_conformance.tools.sglang_cpu import spec_loop
    from eagle3_conformance.tools.sglang_cpu.spec_loop import LoopKnobs

    _batching(loop)
    one_request = LoopKnobs(decode_hidden=lambda x: x if x.shape[0] == 4 else torch.zeros_like(x))
    correct, _ = _run(loop, monkeypatch, batched=False)
    alone, _ = _run(loop, monkeypatch, batched=True, knobs=one_request)
    monkeypatch.setattr(spec_loop, "_per_request", lambda fn, x, sizes: fn(x))
    whole, _ = _run(loop, monkeypatch, batched=True, knobs=one_request)
    assert alone == correct and whole != alone


@pytest.mark.slow
def test_a_draft_that_raises_in_a_batch_reruns_each_prompt_alone(loop, monkeypatch):
    """last-slot-unreachable: two slots reach a three-slot fc and the draft raises; each run records
    the error it records one prompt at a time."""
    from eagle3_conformance.faults.acceptance import FAULTS

    _batching(loop)
    fault = next(f for f in FAULTS if f.name == "last-slot-unreachable")
    batched, sizes = _run(loop, monkeypatch, batched=True, fault=fault)
    alone, _ = _run(loop, monkeypatch, batched=False, fault=fault)
    assert batched == alone and all(r[-1] for r in alone)
