"""The vocabulary every layer shares: the notation (B_k, F), the errors and their exit codes,
findings and reports, the :class:`~eagle3_conformance.core.capture.Capture` a path hands the
checks, batches of rows and the gates. Pure and cheap: nothing here imports torch or an engine."""
