"""The ``--record`` file and its use by ``--baseline``.

A baseline records what it measured and what a later run must match to be compared like for like, and
the per-prompt counters the paired interval resamples:

``{"format": 2, "kind": "eagle3-conformance accept baseline", "tool_version", "contract", "contract_sha256",
"contract_fields" (flat key paths, :func:`eagle3_conformance.environment.validated.contract_fields`),
"prompt_set": {"version", "sha256", "ids"}, "max_tokens", "sampling": {"temperature": 0.0}, "concurrency",
"recorded_at", "server": {kind, url, version, model, served_name, draft, algorithm, k, flags},
"draft": {"path", "digest", "from"}, "figures": {...}, "per_prompt": [...]}``

What is compared is the prompts, their token budget and the sampling: :func:`check_offline` refuses a
baseline of another prompt set (version, sha256), and :func:`plan <eagle3_conformance.server_accept.session.plan>`
runs the baseline's prompts and tokens; :func:`check_server` refuses another server kind (SGLang's accept
length counts the prefill token, vLLM's does not: another figure) and another target model (other tokens).
Everything else is what a baseline exists to compare, and :func:`changes` reports it as "changed since the
baseline": the draft (by content digest: a re-export of the same draft under another path is the same
draft), the server's release, dtype and flags, the chain length (compared on the positions both have),
the contract's fields (``precision.serving`` set to the launch's ``--dtype``, ``draft.path`` re-pointed), the
tool version. Format 1 baselines (no fields, no digest, no sampling: greedy was the only mode) load and
compare; their contract changes are named by hash.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

from eagle3_conformance.core.errors import DataError
from eagle3_conformance.server_accept.result import PromptResult, ServerInfo

FORMAT = 2
FORMATS = (1, 2)
"""The formats this version reads (format 1: issue 34's, without contract fields, draft digest or sampling)."""
KIND = "eagle3-conformance accept baseline"
SAMPLING = {"temperature": 0.0}
"""How every accept run samples: greedy (a baseline without ``sampling`` was greedy too)."""


def build(*, tool_version: str, contract, prompt_set: dict, max_tokens: int, concurrency: int, info: ServerInfo,
          draft: dict, figures: dict, results: list[PromptResult]) -> dict[str, Any]:
    """The baseline document of one run (see the module docstring); ``draft``: :func:`draft_identity`."""
    from eagle3_conformance.environment.validated import contract_fields, contract_hash

    return {"format": FORMAT, "kind": KIND, "tool_version": tool_version, "contract": contract.name,
            "contract_sha256": contract_hash(contract), "contract_fields": contract_fields(contract),
            "prompt_set": prompt_set, "max_tokens": max_tokens, "sampling": dict(SAMPLING), "concurrency": concurrency,
            "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "server": info.to_json(), "draft": draft, "figures": figures,
            "per_prompt": [r.to_json() for r in results]}


def draft_identity(info: ServerInfo, contract) -> dict[str, Any]:
    """The served draft by content: the directory the server names (SGLang's ``speculative_draft_model_path``),
    else the contract's draft (its fixture's trained draft, or ``draft.path``) where the server names none
    (vLLM's public API does not), and its :func:`~eagle3_conformance.draft_config.checkpoint.draft_digest`
    (None where that directory is not on this machine).

    Returns:
        ``{"path": str | None, "digest": str | None, "from": "server" | "contract" | None}``.
    """
    from eagle3_conformance.draft_config.checkpoint import draft_digest

    if info.draft:
        return {"path": info.draft, "digest": draft_digest(info.draft), "from": "server"}
    d = contract_draft_dir(contract) if contract is not None else None
    return {"path": str(d) if d else None, "digest": draft_digest(d) if d else None, "from": "contract" if d else None}


def contract_draft_dir(c) -> "Path | None":
    """The contract's draft directory on this machine: its fixture's trained draft, or ``draft.path``; None."""
    from eagle3_conformance.suite.pairs import PairUnavailable, resolve_pair
    from eagle3_conformance.testbed.trained_draft import TRAINED

    if c.fixture in TRAINED:
        from eagle3_conformance.testbed.trained_draft import ensure_trained_draft

        return Path(ensure_trained_draft(TRAINED[c.fixture]).draft_dir)
    if c.fixture or not c.draft.path:
        return None
    try:
        d = resolve_pair(c).draft_dir
    except PairUnavailable:
        return None
    return d if d is not None and d.is_dir() else None


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


def check_offline(doc: dict, path: str, *, prompt_version: str, prompt_sha256: str) -> None:
    """Refuse a baseline whose measurement a run of this prompt set cannot repeat: another format, prompt set
    or sampling (the token budget is the baseline's: the run takes it).

    Raises:
        DataError: naming the field, the baseline's value and this run's.
    """
    if doc["format"] not in FORMATS:
        raise DataError(f"--baseline {path}: field format is {doc['format']!r}; this version reads {list(FORMATS)}: "
                        "record a new baseline with --record")
    for field, theirs, ours in (("prompt_set.version", doc["prompt_set"].get("version"), prompt_version),
                                ("prompt_set.sha256", doc["prompt_set"].get("sha256"), prompt_sha256),
                                ("sampling", doc.get("sampling", SAMPLING), SAMPLING)):
        if theirs != ours:
            raise DataError(f"--baseline {path}: field {field} is {theirs!r}, this run's is {ours!r}: another "
                            "measurement, not comparable; record a new baseline with --record")


def check_server(doc: dict, path: str, info: ServerInfo) -> None:
    """Refuse a server that is not the baseline's kind, target model or chain length.

    Raises:
        DataError: naming the field, the baseline's value and the server's.
    """
    s = doc["server"]
    why = {"kind": "another server kind counts the accept length another way (SGLang includes the prefill token)",
           "model": "another target model: other tokens"}
    for field, ours in (("kind", info.kind), ("model", info.model)):
        if s.get(field) != ours:
            raise DataError(f"--baseline {path}: field server.{field} is {s.get(field)!r}, the server at {info.url} "
                            f"says {ours!r}: {why[field]}; record a baseline for this server with --record")


def changes(doc: dict, info: ServerInfo, *, contract, draft: dict, tool_version: str) -> dict[str, list]:
    """What differs from the baseline and is compared, not refused: ``{field: [baseline, now]}``: the draft
    (``draft.digest``; ``draft.path`` alone when the content is the same: "same content"), the server's
    ``version``, ``k`` and each recorded flag (dtype among them), each contract field (or
    ``contract_sha256`` for a format-1 baseline; none where ``contract`` is None: ``monitor`` without a
    contract), ``tool_version``."""
    from eagle3_conformance.environment.validated import contract_fields, contract_hash, field_changes

    s = doc["server"]
    out: dict[str, list] = {}
    was = doc.get("draft") or {"path": s.get("draft"), "digest": None}
    if was.get("digest") and draft.get("digest") and was["digest"] != draft["digest"]:
        out["draft.digest"] = [was["digest"][:12], draft["digest"][:12]]
    if was.get("path") != draft.get("path"):
        same = was.get("digest") is not None and was.get("digest") == draft.get("digest")
        out["draft.path"] = [was.get("path"), f"{draft.get('path')} (same content, digest {draft['digest'][:12]})"
                             if same else draft.get("path")]
    out.update({f: [s.get(f), getattr(info, f)] for f in ("version", "k") if s.get(f) != getattr(info, f)})
    flags = s.get("flags") or {}
    for key in sorted(set(flags) | set(info.flags)):
        if key not in ("launch_command", "speculative_draft_model_path") and flags.get(key) != info.flags.get(key):
            out[f"flags.{key}"] = [flags.get(key), info.flags.get(key)]
    if contract is not None and doc.get("contract_sha256") != contract_hash(contract):
        fields = field_changes(doc.get("contract_fields"), contract_fields(contract))
        out.update({f"contract {k}": v for k, v in fields.items()} if fields else
                   {"contract_sha256": [str(doc.get("contract_sha256"))[:12], contract_hash(contract)[:12]]})
    if doc.get("tool_version") != tool_version:
        out["tool_version"] = [doc.get("tool_version"), tool_version]
    return out
