"""Acceptance measurements: per-position accept statistics with prompt-resampled intervals
(``stats``, read by the engine tools), the estimate of accept length from the draft's own
predictions (``estimate``) and the attribution of a measured difference to the boundary
(``attribution``)."""
