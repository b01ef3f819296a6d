"""Faults injected where SpecForge training data is made or read: the scenario's samples are
written in SpecForge 0.2.0's offline layout with the knobs' data faults
(:func:`eagle3_conformance.tools.specforge_loader.write_dataset`; sample 1 as ``.ckpt.gz``), and
SpecForge's REAL offline loader chain reads them (``OfflineManifestReader`` -> ``LocalFeatureStore``
-> ``FeatureDataLoader(normalize_offline_sample, DataCollatorWithPadding)`` ->
``TargetHead.preprocess``), with the knobs' trainer faults (``sf_transform`` after
``normalize_offline_sample``: the pre-SpecForge#448 extra shift).

The column's contract is the scenario's, restated for SpecForge (:func:`specforge_contract`):
the verifier is F (post final norm, with its calibrated band), the alignment is SpecForge 0.2.0's
(h_t, x_t+1, F_t+1, l_t) at position t with the loss-mask reason, ``training.tool: specforge``.
"""

from __future__ import annotations

import shutil

from eagle3_conformance.environment import torch_env

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.contract import Contract  # noqa: E402
from eagle3_conformance.core.findings import Finding  # noqa: E402
from eagle3_conformance.core.notation import Boundary  # noqa: E402
from eagle3_conformance.faults.example import Example, Knobs, NoOp, apply_capture  # noqa: E402
from eagle3_conformance.faults.scenario import Scenario, _bands  # noqa: E402
from eagle3_conformance.faults.tokens import GOOD_TEMPLATE, render_ids  # noqa: E402

LOSS_MASK_REASON = ("SpecForge 0.2.0 TargetHead.preprocess shifts input_ids and target but not loss_mask "
                    "(sgl-project/SpecForge#885)")


def specforge_contract(scn: Scenario, c: Contract) -> Contract:
    """``c`` restated for SpecForge 0.2.0: verifier F (band calibrated like the others, from the
    reference on the scenario's samples), SpecForge's alignment, ``training.tool: specforge``."""
    F = Boundary.parse("F")
    bands = [b.model_dump() for b in c.norm_bands.bands if Boundary.parse(b.slot) != c.verifier_last.parsed]
    bands += _bands(scn.ref, [F], list(scn.samples))
    data = c.model_dump()
    data["verifier_last"] = {"tensor": "F", "norm": "post"}
    data["alignment"].update(loss_mask=0, position=0, loss_mask_reason=LOSS_MASK_REASON)
    data["training"] = {"tool": "specforge", "version": "0.2.0"}
    data["norm_bands"]["bands"] = bands
    return Contract.model_validate(data)


def _same_file(a, b) -> bool:
    from eagle3_conformance.tools.specforge_loader import safe_load_feature_file

    x, y = safe_load_feature_file(str(a)), safe_load_feature_file(str(b))
    return all(x[key].shape == y[key].shape and torch.equal(x[key], y[key]) for key in x)


def write_specforge(scn: Scenario, contract: Contract, k: Knobs):
    """The scenario's samples as SpecForge files with ``k``'s data faults; raises :class:`NoOp`
    when the faults change no stored row."""
    from eagle3_conformance.environment.torch_env import torch_dtype
    from eagle3_conformance.tools.specforge_loader import write_dataset

    slots = k.slots or [str(b) for b in contract.aux] + [contract.verifier_last.tensor]
    dtype = torch_dtype(k.disk_dtype or contract.data_dtype)
    transform = k.hs_transform
    tf = (lambda r, hs: transform(scn, r, hs)) if transform is not None else None
    # the scenario's in-memory target has no checkpoint directory; the column's contract states its data dtype,
    # which the writer is told (an override, as dtype-cast needs one), not derived from the config
    kw = dict(aux=slots[:-1], target=slots[-1], checkpoint=scn.ref.model.config, dtype=dtype, batch_size=1,
              compress=(1,))
    out = scn.fresh_dir("specforge")
    write_dataset(out, scn.ref.capture, scn.samples, scn.masks, hs_transform=tf, rows_from=k.rows_from, **kw)
    if k.slots is None and (tf is not None or k.rows_from is not None):
        good = scn.fresh_dir("specforge-good")
        write_dataset(good, scn.ref.capture, scn.samples, scn.masks, **kw)
        same = all(_same_file(a, b) for a, b in zip(sorted(out.rglob("data_*")), sorted(good.rglob("data_*"))))
        shutil.rmtree(good, ignore_errors=True)
        if same:
            shutil.rmtree(out, ignore_errors=True)
            raise NoOp("the data fault changed no stored row of this example")
    return out


def run_specforge(scn: Scenario, contract: Contract, ex: Example, k: Knobs = Knobs()) -> list[Finding]:
    """Write the SpecForge data (with ``k``'s faults), read it with SpecForge's real loader chain
    (with ``k.sf_transform``), check against the contract (with ``k.alignment`` stated)."""
    from eagle3_conformance.checks import check_chat_template, check_golden_tokens, run_checks, writer_findings
    from eagle3_conformance.tools.specforge_loader import SpecForgeLoader

    if k.alignment:
        data = contract.model_dump()
        data["alignment"].update(k.alignment)
        contract = Contract.model_validate(data)
    data_dir = write_specforge(scn, contract, k)
    loader = SpecForgeLoader(data_dir, contract.draft.target_hidden_size)
    out: list[Finding] = []
    for batch in ex.batches:
        caps = apply_capture(k, scn, loader.batch(list(batch), transform=k.sf_transform))
        for cap in caps:
            ref = scn.ref.capture(cap.token_ids) if (not cap.unavailable and len(cap.token_ids)) else None
            out += run_checks(contract, cap, ref)
    out += writer_findings(contract, out)  # one boundary per slot across the samples (R90), as assess
    tmpl = k.train_template or GOOD_TEMPLATE
    out += check_chat_template(contract, tmpl, "training-specforge")
    out += check_golden_tokens(contract, render_ids(tmpl), None, "training-specforge")
    shutil.rmtree(data_dir, ignore_errors=True)
    return out
