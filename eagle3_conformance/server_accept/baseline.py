"""The ``--record`` file and its use by ``--baseline``.

A baseline holds what a later run must match to be compared like for like, and the per-prompt
counters the paired interval resamples:

``{"format": 1, "kind": "eagle3-conformance accept baseline", "tool_version", "contract", "contract_sha256",
"prompt_set": {"version", "sha256", "ids"}, "max_tokens", "concurrency", "recorded_at", "server": {kind, url,
version, model, served_name, draft, algorithm, k, flags}, "figures": {...}, "per_prompt": [...]}``

:func:`check_offline` refuses a baseline from another tool version, contract (its hash: the
contract's content without ``engines``, ``validated.contract_hash``) or prompt set, before the server
is contacted; :func:`check_server` refuses another server kind, target model or chain length ``k``.
A different draft, server release or launch flag is what a baseline exists to compare: it is
reported (:func:`changes`), never refused.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

from eagle3_conformance.core.errors import DataError
from eagle3_conformance.server_accept.result import PromptResult, ServerInfo

FORMAT = 1
KIND = "eagle3-conformance accept baseline"


def build(*, tool_version: str, contract_name: str, contract_sha256: str, prompt_set: dict, max_tokens: int,
          concurrency: int, info: ServerInfo, figures: dict, results: list[PromptResult]) -> dict[str, Any]:
    """The baseline document of one run (see the module docstring)."""
    return {"format": FORMAT, "kind": KIND, "tool_version": tool_version, "contract": contract_name,
            "contract_sha256": contract_sha256, "prompt_set": prompt_set, "max_tokens": max_tokens,
            "concurrency": concurrency,
            "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "server": info.to_json(), "figures": figures, "per_prompt": [r.to_json() for r in results]}


def load(path: str | Path) -> dict[str, Any]:
    """The baseline at ``path``.

    Raises:
        DataError: it cannot be read, is not JSON, is not a baseline, or lacks a field (named).
    """
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise DataError(f"--baseline {p}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise DataError(f"--baseline {p}: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise DataError(f"--baseline {p}: not an accept baseline (field 'kind' is {doc.get('kind') if isinstance(doc, dict) else None!r}, "
                        f"expected {KIND!r}; write one with accept --record)")
    for key in ("format", "tool_version", "contract_sha256", "prompt_set", "max_tokens", "server", "per_prompt"):
        if key not in doc:
            raise DataError(f"--baseline {p}: field {key!r} is missing")
    try:
        doc["results"] = [PromptResult.from_json(r) for r in doc["per_prompt"]]
    except (KeyError, TypeError) as e:
        raise DataError(f"--baseline {p}: field 'per_prompt' is malformed ({type(e).__name__}: {e})") from None
    return doc


def check_offline(doc: dict, path: str, *, tool_version: str, contract_sha256: str, prompt_version: str,
                  prompt_sha256: str) -> None:
    """Refuse a baseline that cannot be compared with a run of this tool, contract and prompt set.

    Raises:
        DataError: naming the field, the baseline's value and this run's.
    """
    for field, theirs, ours in (("format", doc["format"], FORMAT), ("tool_version", doc["tool_version"], tool_version),
                                ("contract_sha256", doc["contract_sha256"], contract_sha256),
                                ("prompt_set.version", doc["prompt_set"].get("version"), prompt_version),
                                ("prompt_set.sha256", doc["prompt_set"].get("sha256"), prompt_sha256)):
        if theirs != ours:
            raise DataError(f"--baseline {path}: field {field} is {theirs!r}, this run's is {ours!r}: the figures are "
                            "not comparable; record a new baseline with --record")


def check_server(doc: dict, path: str, info: ServerInfo) -> None:
    """Refuse a server that is not the baseline's kind, target model or chain length.

    Raises:
        DataError: naming the field, the baseline's value and the server's.
    """
    s = doc["server"]
    for field, ours in (("kind", info.kind), ("model", info.model), ("k", info.k)):
        if s.get(field) != ours:
            raise DataError(f"--baseline {path}: field server.{field} is {s.get(field)!r}, the server at {info.url} "
                            f"says {ours!r}: not the baseline's pair; record a baseline for this server with --record")


def changes(doc: dict, info: ServerInfo) -> dict[str, list]:
    """What differs from the baseline's server and is compared, not refused: ``{field: [baseline, now]}``
    (``draft``, ``version``, each recorded flag)."""
    s = doc["server"]
    out = {f: [s.get(f), getattr(info, f)] for f in ("draft", "version") if s.get(f) != getattr(info, f)}
    flags = s.get("flags") or {}
    for key in sorted(set(flags) | set(info.flags)):
        if key not in ("launch_command", "speculative_draft_model_path") and flags.get(key) != info.flags.get(key):
            out[f"flags.{key}"] = [flags.get(key), info.flags.get(key)]
    return out
