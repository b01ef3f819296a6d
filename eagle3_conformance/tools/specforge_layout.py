"""What a SpecForge offline directory holds besides its samples, each entry named with the reason.

SpecForge 0.2.0's ``scripts/prepare_hidden_states.py`` writes the samples as
``rows_{g}-{g+2000}/data_{i}.ckpt`` (``.ckpt.gz`` with ``--compress``) and, beside them,
``vocab_mapping/vocab_mapping.pt`` (the d2t / t2d mapping of the draft vocabulary); a user's
directory also collects ``.lock`` files, logs and notes. SpecForge's own reader
(``specforge.algorithms.eagle3.data.build_offline_reader`` -> ``OfflineManifestReader``) lists only
``*.ckpt`` / ``*.ckpt.gz``; everything else is listed here as skipped, never read as a sample and never
silently dropped (issue 23 item 2).
"""

from __future__ import annotations

from pathlib import Path

from eagle3_conformance.core.findings import Finding

SAMPLE_SUFFIXES = (".ckpt", ".ckpt.gz")


def is_sample(p: Path) -> bool:
    """A file SpecForge's reader lists as a sample (``*.ckpt`` / ``*.ckpt.gz``)."""
    return p.is_file() and p.name.endswith(SAMPLE_SUFFIXES)


def has_samples(d: Path) -> bool:
    """``d`` is a directory holding at least one SpecForge sample file (searched recursively)."""
    return d.is_dir() and any(is_sample(p) for p in d.rglob("*"))


def _reason(rel: str) -> str:
    if rel.split("/")[0] == "vocab_mapping":
        return "SpecForge's vocab mapping (prepare_hidden_states.py writes it beside the samples), not a sample"
    if rel.endswith(".lock"):
        return "a lock file"
    if rel.endswith(".pt"):
        return "a .pt file: not a SpecForge sample (its reader lists *.ckpt / *.ckpt.gz only)"
    return "not a *.ckpt / *.ckpt.gz file"


def other_entries(d: Path) -> list[tuple[str, str]]:
    """``(relative path, reason)`` of every file under ``d`` that is not a sample, sorted; a
    ``vocab_mapping/`` directory is one entry."""
    out: dict[str, str] = {}
    for p in sorted(d.rglob("*")):
        if not p.is_file() or is_sample(p):
            continue
        rel = p.relative_to(d).as_posix()
        key = "vocab_mapping/" if rel.startswith("vocab_mapping/") else rel
        out.setdefault(key, _reason(rel))
    return sorted(out.items())


def layout_finding(d: Path, n_samples: int) -> Finding:
    """One ``data_files`` finding (path ``"data"``): skip naming every non-sample entry with its reason,
    or pass when the directory holds samples only."""
    others = other_entries(d)
    if not others:
        return Finding("data_files", "pass", "data", None, "*.ckpt / *.ckpt.gz", f"{n_samples} samples", str(d),
                       f"{d} holds {n_samples} SpecForge samples and nothing else", "K13")
    listed = "; ".join(f"{rel} ({why})" for rel, why in others[:8]) + (
        f"; and {len(others) - 8} more" if len(others) > 8 else "")
    return Finding("data_files", "skip", "data", None, "*.ckpt / *.ckpt.gz", f"{len(others)} other entries", str(d),
                   f"{n_samples} samples read; {len(others)} entries are not samples and were not read: {listed}",
                   "K13")


def unread_finding(d: Path, read: list[Path]) -> list[Finding]:
    """For the project's own reader (a contract whose ``training.tool`` is not specforge): one skipped
    ``data_files`` finding naming the SpecForge samples (``.ckpt.gz``) and the vocab mapping it did not
    read, so that nothing is skipped silently; nothing when it read everything."""
    done = {q.resolve() for q in read}
    left = [p.relative_to(d).as_posix() for p in sorted(d.rglob("*"))
            if p.is_file() and p.resolve() not in done
            and (p.name.endswith(".ckpt.gz") or "vocab_mapping" in p.relative_to(d).parts[:-1])]
    if not left:
        return []
    shown = ", ".join(left[:8]) + (f" and {len(left) - 8} more" if len(left) > 8 else "")
    return [Finding("data_files", "skip", "data", None, "every sample read", f"{len(left)} not read", str(d),
                    f"{len(left)} files were not read: {shown} (.ckpt.gz samples and SpecForge's vocab mapping are "
                    "read through SpecForge's own chain, for a contract with training.tool: specforge)", "K13")]
