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
        return Skipped("no training data for this pair")
    loader = TrainingLoader(pair.data_dir, c.draft.target_hidden_size, c.num_slots, _dtype(c.data_dtype))
    n = len(loader)
    findings = training_findings(c, pair.data_dir, pair.target_dir, default_batches(n), loader)
    if any(f.status == "fail" for f in findings):
        return findings

    def body(data):
        batch = data.draw(strategies.sample_batches(n), label="batch")
        return training_findings(c, pair.data_dir, pair.target_dir, [batch], loader)

    return findings + _drive(body)


def run_sglang_extend(c: Contract, pair: LocalPair):
    """SGLang extend (prefill) path; see :mod:`conformance.paths.sglang_cpu`."""
    return Skipped("SGLang extend path not wired yet")


def run_sglang_decode(c: Contract, pair: LocalPair):
    """SGLang decode (target verify -> draft extend) path; see :mod:`conformance.paths.sglang_cpu`."""
    return Skipped("SGLang decode path not wired yet")


def run_cross_path(c: Contract, pair: LocalPair):
    """Training features vs SGLang extend capture on the same tokens."""
    return Skipped("cross-path agreement not wired yet")
