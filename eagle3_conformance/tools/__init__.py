"""The tools whose real code runs in-process, one module (or package) per tool, each returning
:class:`eagle3_conformance.core.capture.Capture` objects: what the tool hands the draft. No checks, no
hypothesis, no knowledge of paths; heavy imports (torch, SGLang, speculators) happen here, when
a tool module is imported, never when :mod:`conformance` is.

- :mod:`~eagle3_conformance.tools.speculators_loader`: speculators 0.9.0's ``ArrowDataset`` ->
  ``CollateFn(shift_batch)``;
- :mod:`~eagle3_conformance.tools.sglang_cpu`: SGLang 0.5.23's target and EAGLE-3 draft classes on CPU;
- :mod:`~eagle3_conformance.tools.sglang_engine`: a real ``sglang.Engine`` (on CPU with guarded stand-ins; on a GPU
  prepared, never run on one);
- :mod:`~eagle3_conformance.tools.specforge_loader`: SpecForge 0.2.0's offline loader chain
  (``OfflineManifestReader`` -> ``FeatureDataLoader`` -> ``TargetHead.preprocess``) and its layout;
- :mod:`~eagle3_conformance.tools.offline_files`: legacy speculators ``.pt`` and SpecForge ``.ckpt``
  files through ``torch.load(weights_only=True)``, for files SpecForge's chain cannot read here.

:mod:`~eagle3_conformance.tools.shared` is not a tool: what the tools share (the CPU harnesses'
lifecycle, the FP8 payload of hs-connectors' files); a tool imports no other tool, only it.
"""
