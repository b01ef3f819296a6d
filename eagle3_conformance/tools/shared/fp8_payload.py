"""hs-connectors FP8 payloads: what a hidden-states file holds, shared by the readers (scan's
all-rows pass, ``tools.speculators_loader``, ``tools.vllm_hidden_states``), which may not import
each other. Judges nothing: the checks read the dicts built here from capture provenance.

The payload format is ``FP8HiddenStatesConnector``'s (hs_connectors/fp8_hidden_states_connector.py:49-56):
float8_e4m3fn ``hidden_states`` [T, N, H] and float32 ``hidden_states_scales`` [T, 1, 1] from
``hs_connectors.fp8_utils.quantize_tensor_to_fp8`` (fp8_utils.py:29-51).
"""

from __future__ import annotations

from typing import Optional

from eagle3_conformance.environment import torch_env

torch_env.prepare()
import torch  # noqa: E402

SCALES_KEY = "hidden_states_scales"
"""The FP8 scales' key (``hs_connectors.fp8_utils.SCALES_KEY``, fp8_utils.py:15)."""


def bad_scale(scales: torch.Tensor) -> Optional[dict]:
    """The first token whose FP8 scale is not a positive finite number, or None.

    ``scales``: ``hidden_states_scales`` [T, 1, 1] (any float dtype). A scale written by
    ``hs_connectors.fp8_utils.quantize_tensor_to_fp8`` is ``amax / 448`` clamped at 1e-12
    (fp8_utils.py:29-51), so always > 0; a zero, negative or non-finite scale zeroes, flips or
    poisons that token's values under ``FP8Transfer``. Returns ``{"token": t, "value": float,
    "count": tokens affected}``.
    """
    s = scales.detach().reshape(scales.shape[0], -1).float() if scales.dim() else scales.reshape(1, 1).float()
    bad = ~(torch.isfinite(s) & (s > 0)).all(dim=-1)
    if not bool(bad.any()):
        return None
    t = int(bad.nonzero()[0, 0])
    row = s[t]
    v = row[~(torch.isfinite(row) & (row > 0))][0]
    return {"token": t, "value": float(v), "count": int(bad.sum())}


def scale_values(scales: Optional[torch.Tensor]) -> Optional[list[float]]:
    """The T per-token scales as floats (the file's ``hidden_states_scales`` [T, 1, 1]), or None when
    they are absent or not one float per token. ``production_precision`` quantises the reference with
    them, so that a scale the data was written with (right or wrong) is not mistaken for value noise."""
    if scales is None or not scales.is_floating_point() or scales.dim() == 0 or scales.numel() != scales.shape[0]:
        return None
    return scales.detach().reshape(-1).float().tolist()


def payload(name: str, hs: torch.Tensor, scales: Optional[torch.Tensor]) -> dict:
    """The ``payload`` provenance of one file: ``{"file": name, "dtype", "shape" [T, N, H], "scales"
    (shape or None), "scales_dtype", "bad_scale", "scale_values"}`` (:func:`bad_scale` of float scales,
    else None; :func:`scale_values`). ``name`` is the file as the user finds it (relative to the data
    directory)."""
    def dt(t: torch.Tensor) -> str:
        return str(t.dtype).replace("torch.", "")

    return {"file": name, "dtype": dt(hs), "shape": list(hs.shape),
            "scales": None if scales is None else list(scales.shape),
            "scales_dtype": None if scales is None else dt(scales),
            "bad_scale": bad_scale(scales) if scales is not None and scales.is_floating_point()
            and scales.numel() and scales.dim() else None,
            "scale_values": scale_values(scales)}
