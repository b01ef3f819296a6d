"""Wiring shared by the CLI and the pytest plugin: resolve a contract's local pair, run a path,
run the checks. Knows every path adapter; the adapters know nothing of each other."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

from conformance.contract import Contract, contract_source
from conformance.findings import Finding


class PairUnavailable(Exception):
    """The contract's target/draft/data are not available on this machine."""


@dataclass(frozen=True)
class LocalPair:
    target_dir: Optional[Path]
    draft_dir: Optional[Path]
    data_dir: Optional[Path]
    origin: str


def resolve_pair(c: Contract) -> LocalPair:
    """Where the contract's target, draft and data live on this machine.

    A contract naming a ``fixture`` is built (deterministically, cached); otherwise
    ``target.path`` / ``draft.path`` are taken relative to the contract file.

    Raises:
        PairUnavailable: no fixture and no local target path.
    """
    if c.fixture:
        from conformance.fixtures import FixtureError, build_fixture

        try:
            b = build_fixture(c.fixture)
        except FixtureError as e:
            what = "not found" if "no such fixture" in str(e) else "cannot be built"
            raise PairUnavailable(f"fixture {c.fixture!r} {what} ({e})") from None
        return LocalPair(b.target_dir, b.draft_dir, b.data_dir, f"fixture {c.fixture}")
    src = contract_source(c)
    base = src.parent if src else Path.cwd()

    def rel(p: Optional[str]) -> Optional[Path]:
        if not p:
            return None
        q = Path(p)
        return q if q.is_absolute() else (base / q)

    t = rel(c.target.path)
    if t is None:
        raise PairUnavailable(f"target {c.target.name} is not available locally (no fixture, no target.path)")
    if not t.is_dir():
        raise PairUnavailable(f"target.path {c.target.path!r} of {src or 'the contract'} is not a directory "
                              f"(resolved to {t})")
    return LocalPair(t, rel(c.draft.path), None, "local paths")


def contract_reference(c: Contract) -> Optional[Path]:
    """The reference target directory the contract itself names (its ``fixture``, else its
    ``target.path``), or None when it names neither.

    Raises:
        PairUnavailable: the contract names a fixture or a target.path that cannot be resolved;
            callers treat that as bad input, never as "no reference".
    """
    if not c.fixture and not c.target.path:
        return None
    return resolve_pair(c).target_dir


def _dtype(name: str):
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def training_findings(c: Contract, data_dir: Path, reference_dir: Optional[Path],
                      batches: Iterable[Sequence[int]], loader=None, ref_model=None) -> list[Finding]:
    """Run the real speculators loader over ``batches`` of sample indices and check every sample.

    ``ref_model`` (an already loaded reference) is used instead of loading ``reference_dir``.

    Raises:
        conformance.paths.training.TrainingDataError: the directory is not a dataset at all.
        conformance.reference.ReferenceError: the reference directory cannot be loaded.
    """
    from conformance.paths.training import TrainingLoader
    from conformance.reference import load_reference_model

    if ref_model is None and reference_dir:
        ref_model = load_reference_model(reference_dir, c.target)
    loader = loader or TrainingLoader(data_dir, c.draft.target_hidden_size, c.num_slots, _dtype(c.data_dtype))
    out: list[Finding] = []
    for batch in batches:
        for cap in loader.batch(list(batch)):
            out += sample_findings(c, cap, ref_model)
    return out


def sample_findings(c: Contract, cap, ref_model=None) -> list[Finding]:
    """Every check on one capture, robust to bad samples: an empty or one-token sample, token ids
    outside the vocabulary, a reference forward that fails, NaN/Inf rows (fingerprints are judged
    on the finite rows; ``check_finite`` still reports the others). Never raises for bad data."""
    from conformance import datacheck
    from conformance.checks import run_checks
    from conformance.reference import ReferenceError

    out = datacheck.sample_length_findings(cap)
    bad_ids = datacheck.token_range_findings(cap, c.target.vocab_size)
    out += bad_ids
    ref = None
    if ref_model is not None and not cap.unavailable and len(cap.token_ids) and not bad_ids:
        try:
            ref = ref_model.capture(cap.token_ids)
        except ReferenceError as e:
            out.append(Finding("reference", "fail", cap.path, None, "reference forward runs", str(e), cap.where,
                               f"{cap.where}: the reference forward failed: {e}", "K11"))
    if ref is None:
        return out + run_checks(c, cap, None)
    clean = datacheck.finite_rows(cap)
    if clean is cap:
        return out + run_checks(c, cap, ref)
    from conformance.checks import check_finite

    fs = run_checks(c, clean if clean is not None else cap, ref if clean is not None else None)
    return out + [f for f in fs if f.check != "finite"] + check_finite(c, cap)


def default_batches(n: int, batch_size: int = 4) -> list[list[int]]:
    """Consecutive batches covering every sample once."""
    return [list(range(i, min(i + batch_size, n))) for i in range(0, n, batch_size)]
