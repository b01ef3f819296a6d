"""The conformance suite: one function per path, each running a contract's local pair through
that path with hypothesis drawing the inputs, and returning every finding.

Used by the pytest plugin (``pytest -m conformance``); each function can also be called directly.
A function returns :class:`Skipped` when its path cannot run here (e.g. SGLang not installed).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from conformance import strategies
from conformance.contract import Contract
from conformance.findings import Finding
from conformance.runner import LocalPair, _dtype, default_batches, training_findings


@dataclass(frozen=True)
class Skipped:
    reason: str


class _Violations(AssertionError):
    pass


def _drive(body) -> list[Finding]:
    """Run ``body(data) -> findings`` under the active hypothesis profile; collect every finding.

    The first failing example stops the search (the findings already hold what failed)."""
    collected: list[Finding] = []

    @settings(settings.default)
    @given(st.data())
    def prop(data):
        fs = body(data)
        collected.extend(fs)
        if any(f.status == "fail" for f in fs):
            raise _Violations()

    try:
        prop()
    except _Violations:
        pass
    return collected


def run_training(c: Contract, pair: LocalPair):
    """Training path: every sample once in consecutive batches, then hypothesis-drawn batch
    compositions (which samples, how many, in which order) through speculators' loader."""
    from conformance.paths.training import TrainingLoader

    if pair.data_dir is None:
        return Skipped("no training data for this pair under pytest (embedded fixtures only): check a "
                       "dataset with `conformance check-data CONTRACT --data DIR`")
    loader = TrainingLoader(pair.data_dir, c.draft.target_hidden_size, c.num_slots, _dtype(c.data_dtype))
    n = len(loader)
    findings = training_findings(c, pair.data_dir, pair.target_dir, default_batches(n), loader)
    if any(f.status == "fail" for f in findings):
        return findings

    def body(data):
        batch = data.draw(strategies.sample_batches(n), label="batch")
        return training_findings(c, pair.data_dir, pair.target_dir, [batch], loader)

    return findings + _drive(body)


_HARNESS: dict = {}


def sglang_harness(c: Contract, pair: LocalPair):
    """The process-wide SGLang CPU harness for this pair (SGLang keeps one runtime per process,
    so building another pair's harness closes the previous one)."""
    from conformance.paths.sglang_cpu import SGLangCPUHarness

    key = (str(pair.target_dir), str(pair.draft_dir), c.target.dtype)
    h = _HARNESS.get("h")
    if h is None or h.closed or _HARNESS.get("key") != key:
        h = SGLangCPUHarness(pair.target_dir, pair.draft_dir, dtype=_dtype(c.target.dtype))
        _HARNESS.update(h=h, key=key)
    return h


def _sglang_ready(pair: LocalPair):
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        return Skipped("SGLang is not installed in this environment")
    if pair.draft_dir is None or not (pair.draft_dir / "config.json").is_file():
        return Skipped("no local draft config for this pair")
    return None


def _sglang_setup(c: Contract, pair: LocalPair):
    """``(harness, reference model)`` for an SGLang path, or :class:`Skipped` when it cannot run."""
    not_ready = _sglang_ready(pair)
    if not_ready:
        return not_ready
    return sglang_harness(c, pair), _ref_model(c, pair)


def _start_token(c: Contract):
    return 1 if c.fixture else None


def _ref_model(c: Contract, pair: LocalPair):
    from conformance.reference import load_reference_model

    return load_reference_model(pair.target_dir, c.target)


def _check_all(c, caps, ref_model):
    from conformance.checks import run_checks

    out = []
    for cap in caps:
        out += run_checks(c, cap, ref_model.capture(cap.token_ids))
    return out


def run_sglang_extend(c: Contract, pair: LocalPair):
    """SGLang extend (prefill) path: hypothesis draws batches of prompts (batch 1..3, lengths
    1..24); SGLang's real target runs EXTEND with FULL capture and its real draft class receives
    the aux concat. Every request is checked against the reference on the same tokens."""
    ready = _sglang_setup(c, pair)
    if isinstance(ready, Skipped):
        return ready
    from conformance.checks import check_engine_version

    h, ref_model = ready

    def body(data):
        batch = data.draw(strategies.prompt_batches(c.target.vocab_size, start_token=_start_token(c)), label="batch")
        return _check_all(c, h.extend(batch), ref_model)

    return check_engine_version(c, h.sglang_version) + _drive(body)


def consistent_drafts(ref_model, prefix: list[int], n: int, accepted: int, filler: list[int]) -> list[int]:
    """Draft tokens for one verify step that the target really accepts ``accepted`` of: token 0
    is the bonus token, tokens 1..accepted-1 are the target's greedy continuation, the rest are
    ``filler`` ids changed where they would happen to be accepted."""
    seq = list(prefix) + [filler[0]]
    drafts = [filler[0]]
    for j in range(1, n):
        g = ref_model.greedy_next(seq)
        t = g if j < accepted else (filler[j] if filler[j] != g else (filler[j] + 1) % ref_model.model.config.vocab_size)
        drafts.append(t)
        seq.append(t)
    return drafts


def run_sglang_decode(c: Contract, pair: LocalPair):
    """SGLang decode path: target verify (TARGET_VERIFY, FULL capture) over hypothesis-drawn
    batches, draft-token counts and accepted counts, then the draft extend after verify with the
    verify rows. Draft tokens are made consistent with the target so that accepted rows pair
    with real next tokens."""
    ready = _sglang_setup(c, pair)
    if isinstance(ready, Skipped):
        return ready
    h, ref_model = ready

    def body(data):
        prefixes, fillers, accepted = data.draw(strategies.verify_layouts(c.target.vocab_size), label="verify")
        n = len(fillers[0])
        drafts = [consistent_drafts(ref_model, p, n, a, f) for p, f, a in zip(prefixes, fillers, accepted)]
        return _check_all(c, h.verify(prefixes, drafts, accepted), ref_model)

    return _drive(body)


def run_cross_path(c: Contract, pair: LocalPair):
    """The same token ids through the training loader, SGLang extend and SGLang verify agree row
    by row (min per-slot cosine >= gates.cross_path_min_cosine; max abs difference reported)."""
    from conformance.checks import check_cross_path
    from conformance.paths.training import TrainingLoader

    not_ready = _sglang_ready(pair)
    if not_ready:
        return not_ready
    h = sglang_harness(c, pair)
    out: list[Finding] = []
    if pair.data_dir is not None:
        loader = TrainingLoader(pair.data_dir, c.draft.target_hidden_size, c.num_slots, _dtype(c.data_dtype))
        idx = [i for i in range(len(loader)) if len(loader.dataset_row(i)["input_ids"]) >= 2][:4]
        train = loader.batch(idx)
        ext = h.extend([cap.token_ids.tolist() for cap in train])
        for a, b in zip(train, ext):
            out += check_cross_path(c, a, b)

    def body(data):
        batch = data.draw(strategies.prompt_batches(c.target.vocab_size, start_token=_start_token(c), min_len=3), label="batch")
        n = data.draw(st.integers(1, 3), label="draft tokens")
        n = min(n, min(len(x) for x in batch) - 1)
        ext = h.extend(batch)
        prefixes = [x[:-n] for x in batch]
        drafts = [x[-n:] for x in batch]
        dec = h.verify(prefixes, drafts, [1] * len(batch))
        fs = []
        for a, b in zip(ext, dec):
            fs += check_cross_path(c, a, b)
        return fs

    return out + _drive(body)


def run_sglang_engine(c: Contract, pair: LocalPair):
    """GPU runner path: a real ``sglang.Engine`` (EAGLE3, hidden-state return) on hypothesis-drawn
    prompts; checks prefill and decode widths, per-block identity (prefill) and norm bands, and
    gates on ``avg_spec_accept_length >= gates.min_accept_length``. Skipped without a GPU."""
    from conformance.checks import check_accept_length, check_norm_bands, check_slot_count, check_width
    from conformance.paths.sglang_engine import gpu_available, run_engine

    ok, why = gpu_available()
    if not ok:
        return Skipped(f"GPU engine path: {why}")
    from hypothesis import find

    prompts = find(strategies.prompt_batches(c.target.vocab_size, max_batch=4, start_token=_start_token(c),
                                             min_len=4), lambda b: len(b) >= 2)
    res = run_engine(pair.target_dir, pair.draft_dir, prompts, dtype=c.target.dtype)
    ref_model = _ref_model(c, pair)
    out = _check_all(c, res.prefill, ref_model)
    for cap in res.decode:
        out += check_slot_count(c, cap) + check_width(c, cap) + check_norm_bands(c, cap)
    return out + check_accept_length(c, res.avg_accept_length)
