"""``eagle3-conformance calibrate``: per-slot norm bands measured on real data or a reference forward.

Per-token RMS (``sqrt(mean(x**2))`` over the hidden dim, in the units of the stored tensor) of
each slot, rows the ``norm_band`` check bands (:func:`eagle3_conformance.checks.band_rows`), then
``[p0.1/kappa, p99.9*kappa]`` widened to hold every calibration value (docs/REFERENCE.md section
7.3; a band its own data fails is never written), written into a copy of the
contract keeping its comments and key order (:func:`write_bands`). On data, the slots' identity
is verified against the reference first (:func:`identity_problems`): calibrating the wrong
layers' norms would make the bands pass the wrong data.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from eagle3_conformance.authoring.yaml_doc import contract_yaml, render, section
from eagle3_conformance.core.errors import DataError


def band_from(values, kappa: float) -> tuple[float, float]:
    """``[p0.1 / kappa, p99.9 * kappa]`` of per-token RMS values (REFERENCE.md 7.3 band recipe),
    widened to hold every calibration value (a band its own calibration data fails would fail a
    correct release: one real SmolLM2 token at position 1 has RMS 988, beyond p99.9 x 2), and
    rounded outward to 4 significant digits so rounding never narrows the band.

    Raises:
        ValueError: no values.
    """
    import torch

    r = torch.as_tensor(values, dtype=torch.float64).flatten()
    if r.numel() == 0:
        raise ValueError("no RMS values to calibrate from")
    lo = min(float(torch.quantile(r, 0.001)) / kappa, float(r.min()))
    hi = max(float(torch.quantile(r, 0.999)) * kappa, float(r.max()))
    return _round_out(lo, down=True), _round_out(hi, down=False)


def _round_out(x: float, down: bool) -> float:
    if x <= 0:
        return 0.0
    e = math.floor(math.log10(x)) - 3
    q = 10.0 ** e
    v = (math.floor if down else math.ceil)(x / q) * q
    return float(f"{v:.4g}")


def quantiles(r) -> tuple[float, float, float]:
    """(p0.1, median, p99.9) of ``r``."""
    import torch

    r = r.double().flatten()
    return (float(torch.quantile(r, 0.001)), float(r.median()), float(torch.quantile(r, 0.999)))


def _open_loader(c, data_dir: Path):
    """speculators 0.9.0's loader over ``data_dir`` as the contract reads it
    (:class:`eagle3_conformance.tools.speculators_loader.TrainingLoader`).

    Raises:
        DataError: not a dataset the loader can open (its own message); vLLM extraction output (one
            line naming its first file: the loader's own message would be the datasets library's).
    """
    from eagle3_conformance.scan.formats import VLLM_EXTRACTION, detect_format, extraction_files
    from eagle3_conformance.suite.pairs import torch_dtype
    from eagle3_conformance.tools.speculators_loader import TrainingDataError, TrainingLoader

    try:
        fmt = detect_format(data_dir)
    except Exception:  # neither layout: the loader's own message below says what it needs
        fmt = None
    if fmt == VLLM_EXTRACTION:
        folder, files = extraction_files(Path(data_dir))
        raise DataError(f"{files[0] if files else folder}: vLLM extraction output ({len(files)} file(s) holding "
                        "'hidden_states' and 'token_ids', no speculators Arrow table); calibrate --data reads "
                        "speculators datasets only: calibrate from --reference MODEL_DIR, and check these files "
                        "with check-data")
    try:
        return TrainingLoader(data_dir, c.draft.target_hidden_size, c.num_slots, torch_dtype(c.data_dtype),
                              transfer=c.training.transfer)
    except TrainingDataError as e:
        raise DataError(str(e)) from None


def collect_data_rms(c, data_dir: Path) -> tuple[dict, list[list[int]], int]:
    """Per-slot per-token RMS over every sample of a speculators 0.9.0 dataset, read through the
    real loader (:class:`eagle3_conformance.tools.speculators_loader.TrainingLoader`), excluding the contract's
    ``exclude_positions`` and massive activations (:func:`eagle3_conformance.checks.band_rows`, the
    exact rows the ``norm_band`` check bands).

    Returns:
        ({Boundary: float32 [N] tensor}, the samples' token ids, number of samples).

    Raises:
        DataError: not a dataset, no sample, a sample the loader cannot read (named: calibrating
            from the others would hide it), a sample of another shape than the contract's, or a
            slot holding NaN or Inf (sample and slot named).
    """
    import torch

    from eagle3_conformance.checks import band_rows
    from eagle3_conformance.core.batches import every_sample
    from eagle3_conformance.reference import rms

    loader = _open_loader(c, data_dir)
    n = len(loader)
    if n == 0:
        raise DataError(f"{data_dir}: the dataset holds no samples")
    d = c.draft.target_hidden_size
    acc: dict = {b: [] for b in c.aux + [c.verifier_last.parsed]}
    token_ids = []
    for batch in every_sample(n, 4):
        for cap in loader.batch(batch):
            if cap.unavailable:
                raise DataError(f"{data_dir}: {cap.where.split(' (')[0]}: {cap.unavailable}; calibrate reads "
                                "every sample (bands from fewer samples than the data holds would not describe it): "
                                "repair or remove it (check-data lists every such sample)")
            if cap.feature.shape[0] == 0:
                continue
            token_ids.append(cap.token_ids.tolist())
            if cap.feature.shape[-1] != c.num_slots * d:
                raise DataError(f"{data_dir}: {cap.where}: feature width {cap.feature.shape[-1]} != "
                                 f"{c.num_slots} x {d}; calibrate needs data that matches the contract's shape")
            _refuse_non_finite(c, data_dir, cap, d)
            for i, s in enumerate(cap.slots(d)):
                keep = band_rows(c, cap.rows, s)
                acc[c.aux[i]].append(rms(s[keep]))
            if cap.verifier_last is not None:
                rows = cap.rows + c.alignment.target
                keep = band_rows(c, rows, cap.verifier_last)
                acc[c.verifier_last.parsed].append(rms(cap.verifier_last[keep]))
    if not token_ids:
        raise DataError(f"{data_dir}: no sample could be read")
    return {b: torch.cat(v) if v else torch.zeros(0) for b, v in acc.items()}, token_ids, n


def _refuse_non_finite(c, data_dir: Path, cap, d: int) -> None:
    """Raises: DataError: a slot of ``cap`` holds NaN or Inf (named: sample, slot and boundary, rows)."""
    from eagle3_conformance.checks.shape import nonfinite_rows

    named = list(zip(c.aux, cap.slots(d)))
    if cap.verifier_last is not None:
        named.append((c.verifier_last.parsed, cap.verifier_last))
    for j, (b, t) in enumerate(named):
        rows = nonfinite_rows(t)
        if rows:
            slot = f"slot {j} ({b})" if j < len(c.aux) else f"verifier slot ({b})"
            raise DataError(f"{data_dir}: {cap.where.split(' (')[0]}: {slot}: {len(rows)} rows hold NaN or Inf "
                            f"(rows {rows[:8]}); a norm band cannot be calibrated from non-finite values "
                            "(check-data lists every such row)")


def default_prompts(vocab_size: int, bos: int = 1, n: int = 8, length: int = 48, seed: int = 0) -> list[list[int]]:
    """``n`` deterministic prompts of ``length`` tokens: ``bos`` then ids drawn from [3, vocab)
    with a seeded torch generator (the fixture builder's own sampler)."""
    from eagle3_conformance.testbed.fixtures import sample_token_ids

    spec = {"target": {"vocab_size": vocab_size, "bos_token_id": bos}}
    return sample_token_ids(spec, n, length, length, seed)


def reference_profile(c, ref_model, prompts: list[list[int]]) -> dict:
    """Per-token RMS of every boundary B_0..B_L and F over ``prompts`` (float32 reference
    forward), excluding the contract's positions and massive activations per boundary.

    Returns:
        {Boundary: float32 [N] tensor}, ordered B_0..B_L, F.
    """
    import torch

    from eagle3_conformance.checks import band_rows
    from eagle3_conformance.core.notation import Boundary, all_boundaries
    from eagle3_conformance.reference import rms

    L = ref_model.num_layers
    out: dict[Boundary, list[torch.Tensor]] = {b: [] for b in all_boundaries(L)}
    for ids in prompts:
        ref = ref_model.capture(ids)
        rows = torch.arange(len(ids))
        for b in out:
            x = ref.boundary(b)
            keep = band_rows(c, rows, x)
            out[b].append(rms(x[keep]))
    return {b: torch.cat(v) for b, v in out.items()}



def write_bands(contract_text: str, bands: dict, kappa: float, source: str, out_file: Path) -> str:
    """The contract text with ``norm_bands`` calibrated, comments and key order kept (ruamel
    round trip); the schema line is recomputed for ``out_file``. Validated before returning.

    Raises:
        DataError: the result does not validate.
    """
    from ruamel.yaml.comments import CommentedMap

    y = contract_yaml()
    doc = y.load(contract_text)
    nb = section(doc, "norm_bands")
    order = ["status", "exclude_positions", "massive_activation_ratio", "bands", "safety_factor", "source"]

    def put(key, value):
        if key in nb:
            nb[key] = value
            return
        # insert after the last existing key that precedes it in the model's order
        pos = 0
        for i, k in enumerate(list(nb.keys())):
            if k in order and order.index(k) < order.index(key):
                pos = i + 1
        nb.insert(pos, key, value)

    put("status", "calibrated")
    if "status" in nb.ca.items:
        nb.ca.items.pop("status", None)
    blist = []
    for b, (lo, hi) in bands.items():
        m = CommentedMap([("slot", str(b)), ("lo", lo), ("hi", hi)])
        m.fa.set_flow_style()
        blist.append(m)
    put("bands", blist)
    put("safety_factor", kappa)
    put("source", source)
    return render(y, doc, out_file, "calibrated")


IDENTITY_SAMPLE = 32
"""Samples (seeded, like check-data's fingerprint sample) whose slots calibrate verifies first."""


def identity_problems(c, data_dir: Path, ref_model, sample: int = IDENTITY_SAMPLE) -> list[tuple[str, str]]:
    """Slot-identity and verifier-identity failures of a seeded sample of ``data_dir`` against
    ``ref_model`` (the checks of :func:`eagle3_conformance.suite.runner.training_findings`), one
    ``(line, gate)`` per wrong slot and deciding gate: ``"DATA: sample 0: slot 0 is B_0 (embedding
    output); contract says B_2 (...) (wrong in 12 of 12 samples checked)"`` and the contract key
    whose value decided it (``gates.identity_noise_deg``, ``gates.slot_identity_min_cosine``, or
    ``""`` when no tunable value did: a slot matching no boundary). Empty when every slot is
    what the contract declares.

    Raises:
        DataError: not a dataset.
    """
    from eagle3_conformance.core.batches import in_batches
    from eagle3_conformance.scan import fingerprint_sample
    from eagle3_conformance.suite.runner import training_findings

    loader = _open_loader(c, data_dir)
    n = len(loader)
    idx = fingerprint_sample(n, sample, 0)
    batches = in_batches(idx)
    fs = training_findings(c, data_dir, None, batches, loader=loader, ref_model=ref_model)
    judged: dict = {}
    wrong: dict = {}
    for f in fs:
        if f.check not in ("slot_identity", "verifier_identity") or f.status == "skip":
            continue
        judged[f.slot] = judged.get(f.slot, 0) + 1
        if f.status == "fail":
            wrong.setdefault((f.slot, f.gate), []).append(f)
    out = []
    for (slot, gate), bad in wrong.items():
        first = bad[0]
        out.append((f"{data_dir}: {first.where.split(' (')[0]}: {first.message} "
                    f"(wrong in {len(bad)} of {judged[slot]} samples checked)", gate))
    return out



def bos_token(ref_dir: Optional[Path]) -> int:
    """The target's ``bos_token_id`` from its config.json (1 when it names none)."""
    if ref_dir is None:
        return 1
    try:
        cfg = json.loads((Path(ref_dir) / "config.json").read_text())
        b = cfg.get("bos_token_id")
        return int(b) if isinstance(b, int) else 1
    except (OSError, ValueError, TypeError):
        return 1


@dataclass
class Calibration:
    """Measured bands and where they came from.

    Attributes:
        per_slot: ``{Boundary: float32 [N] per-token RMS}`` for every aux slot and the verifier.
        bands: ``{Boundary: (lo, hi)}``.
        prompts: the token ids measured on (the data's samples, or the deterministic prompts).
        source: one line for the contract's ``norm_bands.source``.
        kappa: the safety factor.
    """

    per_slot: dict
    bands: dict
    prompts: list
    source: str
    kappa: float


def measure_bands(c, data: Optional[Path], ref_model, ref_dir: Optional[Path], kappa: float) -> Calibration:
    """Bands of every slot from ``data`` (through the real loader) or, without data, from the
    reference forward on deterministic prompts.

    Raises:
        DataError: see :func:`collect_data_rms`; or no rows left for a slot after exclusions.
    """
    if data is not None:
        per_slot, prompts, n = collect_data_rms(c, data)
        source = f"speculators 0.9.0 data {data} ({n} samples, real loader)"
    else:
        prompts = default_prompts(c.target.vocab_size, bos=bos_token(ref_dir))
        profile_for_bands = reference_profile(c, ref_model, prompts)
        per_slot = {b: profile_for_bands[b] for b in c.aux + [c.verifier_last.parsed]}
        source = f"reference forward of {ref_dir} on {len(prompts)} deterministic prompts (seed 0)"
    source += f"; positions {list(c.norm_bands.exclude_positions)} excluded"
    if c.norm_bands.massive_activation_ratio:
        source += f", tokens above {c.norm_bands.massive_activation_ratio}x the median excluded"
    bands = {}
    for b, r in per_slot.items():
        if r.numel() == 0:
            raise DataError(f"no rows left to calibrate {b} after exclusions")
        bands[b] = band_from(r, kappa)
    return Calibration(per_slot, bands, prompts, source, kappa)
