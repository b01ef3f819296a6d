"""What a path observed -> findings: which checks judge which part of an observation.

Paths (:mod:`eagle3_conformance.paths`) never check anything; they return an
:class:`eagle3_conformance.paths.base.Observation`. This module applies the checks
(:mod:`eagle3_conformance.checks`, :mod:`eagle3_conformance.checks.dataset`) to it:

==================  =======================================================================
observation part    judged by
==================  =======================================================================
``captures``        every capture check against the reference forward on the capture's own
                    tokens (:func:`capture_findings`); captures read from stored data
                    (``stored=True``) through :func:`sample_findings`, where a bad sample is
                    a finding, never an error
``shapes_only``     slot count, widths and norm bands (rows with no per-token reference,
                    e.g. an engine's decode rows)
``pairs``           the two captures of the same tokens on two paths agree row by row
                    (:func:`eagle3_conformance.checks.check_cross_path`)
``variants``        one prompt's capture under an engine variation agrees with its plain run
                    row by row (the ``variant`` checks: :func:`eagle3_conformance.checks.check_engine_invariance`)
``facts``           one check per named fact of the whole run: the check registered for it
                    (:func:`eagle3_conformance.checks.registry.fact_checks`); stored captures also
                    give the fact ``slot_writers`` (their slot identities across samples,
                    :func:`eagle3_conformance.checks.writers.writer_findings`)
==================  =======================================================================
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import Finding


def capture_findings(c: Contract, cap, ref_model) -> list[Finding]:
    """Every capture check on ``cap`` against ``ref_model``'s forward on ``cap.token_ids``."""
    from eagle3_conformance.checks import run_checks

    return run_checks(c, cap, ref_model.capture(cap.token_ids))


def shape_findings(c: Contract, cap) -> list[Finding]:
    """The capture checks declared ``rowless`` (slot count, widths, norm bands): what can be judged
    without per-token reference rows."""
    from eagle3_conformance.checks import registry

    return [f for spec in registry.of(registry.CAPTURE) if spec.rowless for f in spec.fn(c, cap)]


def sample_findings(c: Contract, cap, ref_model=None) -> list[Finding]:
    """Every check on one capture, robust to bad samples: an empty or one-token sample, token ids
    outside the vocabulary, a reference forward that fails, NaN/Inf rows (fingerprints are judged
    on the finite rows; ``check_finite`` still reports the others). Never raises for bad data."""
    from eagle3_conformance.checks import dataset as datacheck
    from eagle3_conformance.checks import run_checks
    from eagle3_conformance.reference import ReferenceError

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
    from eagle3_conformance.checks import check_finite

    fs = run_checks(c, clean if clean is not None else cap, ref if clean is not None else None)
    return out + [f for f in fs if f.check != "finite"] + check_finite(c, cap)


def assess(c: Contract, obs, reference: Callable[[], Any], path: Optional[str] = None) -> list[Finding]:
    """Findings of one observation, in the order captures, shapes-only, pairs, variants, facts.

    Args:
        c: the contract.
        obs: a :class:`eagle3_conformance.paths.base.Observation`.
        reference: returns the reference model (loaded on first need; called only when
            ``obs`` holds captures to fingerprint and brings no ``obs.reference`` of its own).
        path: the name of the path that made ``obs``; handed to the fact checks that take a
            ``path`` (the accept-length gate names the path that measured it).

    Raises:
        ValueError: a fact this module has no check for.
    """
    out: list[Finding] = []
    if obs.captures:
        ref_model = obs.reference if getattr(obs, "reference", None) is not None else reference()
        for cap in obs.captures:
            out += sample_findings(c, cap, ref_model) if obs.stored else capture_findings(c, cap, ref_model)
        if obs.stored:  # one dataset's samples: one boundary per slot across them (R90, writers that disagree)
            from eagle3_conformance.checks import writer_findings

            out += writer_findings(c, out, path=obs.captures[0].path)
    for cap in obs.shapes_only:
        out += shape_findings(c, cap)
    if obs.pairs:
        from eagle3_conformance.checks import check_cross_path

        for a, b in obs.pairs:
            out += check_cross_path(c, a, b)
    if getattr(obs, "variants", ()):
        from eagle3_conformance.checks import registry

        for plain, variant in obs.variants:
            for spec in registry.of(registry.VARIANT):
                out += spec.fn(c, plain, variant)
    if obs.facts:
        from eagle3_conformance.checks.registry import fact_checks

        known = fact_checks()
        for name, value in obs.facts.items():
            if name not in known:
                raise ValueError(f"no check for the fact {name!r}; known: {', '.join(known)}")
            fn = known[name].fn
            if path is not None and "path" in inspect.signature(fn).parameters:
                out += fn(c, value, path=path)  # the finding names the path that measured it
            else:
                out += fn(c, value)
    if getattr(obs, "variants", ()) and "engine_variations" in (obs.facts or {}):
        from eagle3_conformance.checks.invariance import with_invariance_failures

        out = with_invariance_failures(out)  # a variation with failed pairs is not summarised as served fine
    return out


def reference_loader(c: Contract, target_dir) -> Callable[[], Optional[Any]]:
    """A function returning the (process-wide cached) reference model of ``target_dir``, loaded
    on first call; None when there is no target directory."""
    def get():
        if target_dir is None:
            return None
        from eagle3_conformance.reference.suite_model import suite_reference_model

        return suite_reference_model(target_dir, c.target)

    return get
