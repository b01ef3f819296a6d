"""Stored hidden states -> findings: run a dataset's real reader over its samples and judge each.

Used by ``eagle3-conformance check-data`` (through :mod:`eagle3_conformance.scan`), ``check-offline``,
``calibrate`` (slot identity first) and the ``training`` path. Every sample is judged with
:func:`eagle3_conformance.suite.assess.sample_findings`, so a bad sample is a finding, never an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional, Sequence

from eagle3_conformance.checks.writers import writer_findings
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.batches import every_sample
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.suite.assess import sample_findings
from eagle3_conformance.suite.pairs import torch_dtype
from eagle3_conformance.tools.speculators_loader import default_batches  # noqa: F401 (callers import it from here)


def training_findings(c: Contract, data_dir: Path, reference_dir: Optional[Path],
                      batches: Iterable[Sequence[int]], loader=None, ref_model=None) -> list[Finding]:
    """Run the real speculators loader over ``batches`` of sample indices and check every sample.

    ``ref_model`` (an already loaded reference) is used instead of loading ``reference_dir``.

    Raises:
        eagle3_conformance.tools.speculators_loader.TrainingDataError: the directory is not a dataset at all.
        eagle3_conformance.reference.ReferenceError: the reference directory cannot be loaded.
    """
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.tools.speculators_loader import TrainingLoader

    if ref_model is None and reference_dir:
        ref_model = load_reference_model(reference_dir, c.target)
    loader = loader or TrainingLoader(data_dir, c.draft.target_hidden_size, c.num_slots, torch_dtype(c.data_dtype),
                                      transfer=c.training.transfer)
    out: list[Finding] = []
    for batch in batches:
        for cap in loader.batch(list(batch)):
            out += sample_findings(c, cap, ref_model)
    return out


def offline_findings(contract: Contract, files: list[Path], reference_dir: Optional[Path] = None) -> list[Finding]:
    """Every check on every offline file (legacy speculators ``.pt``, SpecForge ``.ckpt``, read by
    :mod:`eagle3_conformance.tools.offline_files`; vLLM's extraction ``.safetensors``, read by
    :mod:`eagle3_conformance.tools.vllm_hidden_states`; one capture each), robust to bad files.

    Raises:
        eagle3_conformance.reference.ReferenceError: the reference directory cannot be loaded.
    """
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.tools import vllm_hidden_states
    from eagle3_conformance.tools.offline_files import load_capture

    ref_model = load_reference_model(reference_dir, contract.target) if reference_dir else None
    out: list[Finding] = []
    for i, f in enumerate(files):
        load = vllm_hidden_states.load_capture if Path(f).suffix == vllm_hidden_states.SUFFIX else load_capture
        out += sample_findings(contract, load(f, contract, i), ref_model)
    return out + writer_findings(contract, out)


def specforge_findings(contract: Contract, data_dir: Path, reference_dir: Optional[Path] = None,
                       batch_size: int = 4) -> tuple[list[Finding], list[str]]:
    """Every check on every sample of a SpecForge offline directory, read by SpecForge 0.2.0's own
    loader chain (:class:`eagle3_conformance.tools.specforge_loader.SpecForgeLoader`), in consecutive
    batches; a bad file is a finding naming it. Returns (findings, the files in SpecForge's order).

    Raises:
        eagle3_conformance.tools.specforge_loader.SpecForgeDataError: no feature file in ``data_dir``.
        eagle3_conformance.reference.ReferenceError: the reference directory cannot be loaded.
    """
    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.tools.specforge_loader import SpecForgeLoader

    ref_model = load_reference_model(reference_dir, contract.target) if reference_dir else None
    loader = SpecForgeLoader(data_dir, contract.draft.target_hidden_size)
    n = len(loader)
    out: list[Finding] = []
    for batch in every_sample(n, batch_size):
        for cap in loader.batch(batch):
            out += sample_findings(contract, cap, ref_model)
    return out + writer_findings(contract, out), [loader.file(i) for i in range(n)]

