"""Contract authoring, one module per verb:

- :mod:`~conformance.authoring.init`: ``conformance init``, a contract derived from the target's
  and the draft's ``config.json`` (read by :mod:`~conformance.authoring.configs`);
- :mod:`~conformance.authoring.calibrate`: ``conformance calibrate``, norm bands measured on
  real data or a reference forward (the norm profile table and plot:
  :mod:`~conformance.authoring.profile`);
- :mod:`~conformance.authoring.yaml_doc`: the YAML writer both use (comments, schema line,
  validation before anything is written).

``conformance translate`` needs no authoring code: :func:`conformance.engine_ids.boundaries_to_tool`
does the work. Heavy imports (torch, SGLang, speculators, matplotlib) happen inside functions;
bad input raises :class:`conformance.errors.UsageError` or :class:`conformance.errors.DataError`.
"""
