"""Contract authoring, one module per verb:

- :mod:`~eagle3_conformance.authoring.init`: ``eagle3-conformance init``, a contract derived from the target's
  and the draft's ``config.json`` (read by :mod:`~eagle3_conformance.authoring.configs`; the facts it reads:
  :mod:`~eagle3_conformance.authoring.init_facts`; the document it writes:
  :mod:`~eagle3_conformance.authoring.init_document`);
- :mod:`~eagle3_conformance.authoring.calibrate`: ``eagle3-conformance calibrate``, norm bands measured on
  real data or a reference forward (the norm profile table and plot:
  :mod:`~eagle3_conformance.authoring.profile`);
- :mod:`~eagle3_conformance.authoring.yaml_doc`: the YAML writer both use (comments, schema line,
  validation before anything is written).

``eagle3-conformance translate`` needs no authoring code: :func:`eagle3_conformance.engine_ids.boundaries_to_tool`
does the work. Heavy imports (torch, SGLang, speculators, matplotlib) happen inside functions;
bad input raises :class:`eagle3_conformance.core.errors.UsageError` or :class:`eagle3_conformance.core.errors.DataError`.
"""
