"""Dataset-level and per-sample input checks that need no model: pure functions -> findings.

Used by ``eagle3-conformance check-data`` (and available to the streaming scanner, ``eagle3_conformance.scan``)
so that a dataset built by a job that died half-way is reported file by file instead of
stopping the run:

- :func:`shard_file_findings`: the files in ``hidden_states/`` against the number of Arrow rows
  (speculators 0.9.0 names shard ``i`` ``hs_{i}.safetensors``, ``i`` being the Arrow row;
  docs/REFERENCE.md section 5.1). Extra shards (``i >= rows``), misnamed ``*.safetensors``
  files and missing shards are dataset-level failures with path ``"data"``; other entries (a
  ``.lock``, notes) are listed in one skipped finding.
- :func:`sample_length_findings`, :func:`token_range_findings`: a sample with no tokens, one
  with a single token (nothing survives the one-token shift), token ids outside the target
  vocabulary (which no reference forward can run on).
- :func:`finite_rows`: the rows of a capture that hold no NaN/Inf, so fingerprints are judged on
  the readable rows while ``check_finite`` still reports the broken ones.

Nothing here opens a file for writing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Optional

from eagle3_conformance.core.findings import Finding

DATA_PATH = "data"
SHARD_DIR = "hidden_states"
SHARD_RE = re.compile(r"^hs_(0|[1-9][0-9]*)\.safetensors$")
_LIST = 8  # names listed in one message before "and N more"


def _names(xs: list[str]) -> str:
    more = f" and {len(xs) - _LIST} more" if len(xs) > _LIST else ""
    return ", ".join(xs[:_LIST]) + more


def shard_file_findings(names: Iterable[str], num_rows: int, shard_dir: str = SHARD_DIR) -> list[Finding]:
    """Compare the entries of ``hidden_states/`` with the Arrow dataset's row count.

    Args:
        names: entry names found in the shard directory (not paths); empty when it is missing.
        num_rows: number of Arrow rows.
        shard_dir: how to name the directory in messages.

    Returns:
        One ``shard_files`` finding (path ``"data"``) per extra shard (``hs_{i}`` with
        ``i >= num_rows``) and per misnamed ``*.safetensors`` file, one summarising missing shards,
        or a single pass; plus one skip listing the entries that are not ``*.safetensors`` (a
        ``.lock``, notes, a subdirectory: never opened, as in the vLLM layout's ``data_files``).
    """
    names = sorted(set(names))
    present: set[int] = set()
    out: list[Finding] = []
    expected = f"hs_0..hs_{num_rows - 1}.safetensors" if num_rows else "no shards (no Arrow rows)"
    others: list[str] = []
    for name in names:
        m = SHARD_RE.match(name)
        if m is None and not name.endswith(".safetensors"):
            others.append(name)  # a lock file, notes, a subdirectory: not data, listed, never opened
            continue
        if m is None:
            out.append(Finding("shard_files", "fail", DATA_PATH, None, expected, name, f"{shard_dir}/{name}",
                               f"{shard_dir}/{name} is not a hs_{{i}}.safetensors shard (stray file)", "K13"))
            continue
        i = int(m.group(1))
        if i >= num_rows:
            out.append(Finding("shard_files", "fail", DATA_PATH, None, expected, name, f"{shard_dir}/{name}",
                               f"{shard_dir}/{name} has no Arrow row: index {i} >= {num_rows} rows (the Arrow "
                               "dataset and the shards are out of step)", "K13"))
        else:
            present.add(i)
    missing = [f"hs_{i}.safetensors" for i in range(num_rows) if i not in present]
    if missing:
        out.append(Finding("shard_files", "fail", DATA_PATH, None, expected, f"{len(missing)} missing", shard_dir,
                           f"{len(missing)} of {num_rows} shards are missing from {shard_dir}/: {_names(missing)}",
                           "K13"))
    if not out:
        out.append(Finding("shard_files", "pass", DATA_PATH, None, expected, f"{len(present)} shards", shard_dir,
                           f"{shard_dir}/ holds exactly one shard per Arrow row ({num_rows})", "K13"))
    if others:
        out.append(Finding("shard_files", "skip", DATA_PATH, None, "hs_{i}.safetensors only",
                           f"{len(others)} other entries", shard_dir,
                           f"{shard_dir}/ also holds {len(others)} entries that are not shards, not read: "
                           f"{_names(others)}", "K13"))
    return out


def dataset_findings(data_dir: str | Path, num_rows: int) -> list[Finding]:
    """:func:`shard_file_findings` for a dataset directory (lists ``hidden_states/``; reads nothing else)."""
    d = Path(data_dir) / SHARD_DIR
    if not d.is_dir():
        what = "is not a directory" if d.exists() else "is missing"
        return [Finding("shard_files", "fail", DATA_PATH, None, f"{SHARD_DIR}/ with {num_rows} shards", what,
                        str(d), f"{d} {what}: no sample has hidden states", "K13")]
    try:
        names = [p.name for p in d.iterdir()]
    except OSError as e:
        return [Finding("shard_files", "fail", DATA_PATH, None, f"{SHARD_DIR}/ readable", e.strerror or str(e),
                        str(d), f"{d} cannot be listed: {e.strerror or e}", "K13")]
    return shard_file_findings(names, num_rows)


def sample_length_findings(cap) -> list[Finding]:
    """T = 0 (an empty sample: fail) and T = 1 (nothing left after the one-token shift: skip)."""
    if cap.unavailable:
        return []
    T = int(cap.token_ids.shape[0])
    if T == 0:
        return [Finding("sample_length", "fail", cap.path, None, "T >= 2", 0, cap.where,
                        f"{cap.where}: the sample holds no tokens (T = 0)", "K13")]
    if T == 1:
        return [Finding("sample_length", "skip", cap.path, None, "T >= 2", 1, cap.where,
                        f"{cap.where}: one token: no feature row survives the one-token shift", "K13")]
    return []


def token_range_findings(cap, vocab_size: int) -> list[Finding]:
    """Token ids outside ``[0, vocab_size)``: the target cannot have produced these hidden states,
    and no reference forward can run on them. Empty when every id is in range."""
    if cap.unavailable or not cap.token_ids.numel():
        return []
    ids = cap.token_ids.long()
    bad = ((ids < 0) | (ids >= vocab_size)).nonzero().flatten()
    if not bad.numel():
        return []
    j = int(bad[0])
    return [Finding("token_range", "fail", cap.path, None, f"0 <= id < {vocab_size}",
                    f"{bad.numel()} ids out of range, first {int(ids[j])} at token {j}", cap.where,
                    f"{cap.where}: token id {int(ids[j])} at token {j} is outside the target vocabulary "
                    f"({vocab_size}); {bad.numel()} such ids", "K11")]


def finite_rows(cap):
    """``cap`` restricted to the rows whose feature and verifier values are all finite.

    Returns ``cap`` itself when every row is finite, None when no row is."""
    import torch

    if cap.unavailable or not cap.feature.shape[0]:
        return cap
    ok = torch.isfinite(cap.feature.float()).all(-1)
    if cap.verifier_last is not None and cap.verifier_last.shape[0] == ok.shape[0]:
        ok &= torch.isfinite(cap.verifier_last.float()).all(-1)
    if bool(ok.all()):
        return cap
    if not bool(ok.any()):
        return None
    from dataclasses import replace

    n = ok.shape[0]

    def sub(t: Optional[torch.Tensor]):
        return t[ok] if t is not None and t.shape[0] == n else t

    return replace(cap, feature=cap.feature[ok], rows=sub(cap.rows), verifier_last=sub(cap.verifier_last),
                   draft_input_ids=sub(cap.draft_input_ids), loss_mask=sub(cap.loss_mask),
                   position_ids=sub(cap.position_ids))
