"""Per-slot RMS statistics of a data scan's parts, combined (JSON in, JSON out; no torch): what
``check-data`` writes per shard (``meta.slot_stats``) and ``merge-reports`` merges on a core install."""

from __future__ import annotations

from typing import Any


def merge_slot_stats(parts: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Combine per-slot RMS statistics of several parts (rows, finite_rows, rms_sum summed; min,
    max combined; ``rms_mean`` = rms_sum / finite_rows recomputed)."""
    out: dict[str, dict[str, Any]] = {}
    for p in parts:
        for label, s in p.items():
            o = out.setdefault(label, {"rows": 0, "finite_rows": 0, "rms_sum": 0.0, "rms_min": None, "rms_max": None})
            o["rows"] += int(s["rows"])
            o["finite_rows"] += int(s["finite_rows"])
            o["rms_sum"] += float(s["rms_sum"])
            for k, fn in (("rms_min", min), ("rms_max", max)):
                if s.get(k) is not None:
                    o[k] = s[k] if o[k] is None else fn(o[k], s[k])
    for o in out.values():
        o["rms_mean"] = o["rms_sum"] / o["finite_rows"] if o["finite_rows"] else None
    return out
