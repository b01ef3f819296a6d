"""Validated-on records: what a passing conformance run ran against, as a block a contract's
``engines`` can be updated from, and the warning for a contract never validated on the installed
engine.

A record names the tool versions installed (read from package metadata, no import), the paths that
ran and passed, the date (UTC) and the contract's hash. The hash is the sha256 of the contract's
content *without* its ``engines`` block (the pydantic model dumped as sorted JSON), so that pasting
the record into ``engines`` does not change the hash it records, while any change to what the
contract declares does.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from typing import Any, Iterable, Optional

TOOLS = ("sglang", "vllm", "speculators", "specforge", "torch", "transformers")
#: the paths that run SGLang's own classes (a pass on them validates the installed SGLang)
SGLANG_PATHS = ("sglang-extend", "sglang-decode", "cross-path", "sglang-dflash", "sglang-mtp", "sglang-engine",
                "sglang-engine-invariance", "cpu-accept")


def installed_versions() -> dict[str, str]:
    """``{distribution: version}`` for the tools of :data:`TOOLS` that are installed."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for t in TOOLS:
        try:
            out[t] = version(t)
        except PackageNotFoundError:
            continue
    return out


def tool_versions() -> dict[str, str]:
    """``{"eagle3-conformance": this version, **installed_versions()}``: what a report's
    ``meta.tool_versions`` records (the HTML report's header shows it)."""
    from eagle3_conformance import __version__

    return {"eagle3-conformance": __version__, **installed_versions()}


def contract_hash(c) -> str:
    """sha256 (hex) of the contract's content without ``engines`` (see the module docstring) and
    without ``reference`` (which reference judges is how a run checks the pair, not the pair: a
    record stays valid whichever judged it; the run's report names it)."""
    doc = c.model_dump(mode="json", exclude={"engines", "reference"})
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def contract_fields(c) -> dict[str, Any]:
    """The contract's content as flat key paths (``{"precision.serving": "float16", "draft.path": ...}``),
    without ``engines`` and ``reference`` (as :func:`contract_hash`): what a baseline or a records manifest
    keeps, so a later run can say which fields changed since (:func:`field_changes`)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict) and v:
            for k, x in v.items():
                walk(f"{prefix}.{k}" if prefix else str(k), x)
        else:
            out[prefix] = v

    walk("", c.model_dump(mode="json", exclude={"engines", "reference"}))
    return out


def field_changes(before: Optional[dict], now: dict) -> dict[str, list]:
    """``{key path: [before, now]}`` for every field of ``now`` (:func:`contract_fields`) that differs from
    ``before``'s, in key order; ``{}`` when ``before`` is None (a record written before fields were kept)."""
    if before is None:
        return {}
    return {k: [before.get(k), now.get(k)] for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k)}


def record(c, findings: Iterable, today: Optional[str] = None, errors: Iterable[str] = ()) -> dict[str, Any]:
    """The validated-on block for contract ``c`` after a run that produced ``findings``.

    Returns ``{"contract", "contract_sha256", "date", "passed", "paths", "tool_versions",
    "engines_update"}``; ``engines_update`` is what to merge into the contract's ``engines`` (empty
    when the run did not pass or ran no engine path): ``sglang_validated`` gains the installed
    SGLang when an SGLang path passed, ``validated`` gains one record per engine. ``errors``
    ("path: why", paths stopped by bad input): a run with any did not pass."""
    fs = list(findings)
    paths = sorted({f.path for f in fs if f.status != "skip"})
    passed = bool(paths) and not any(f.status == "fail" for f in fs) and not list(errors)
    versions = installed_versions()
    date = today or _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    h = contract_hash(c)
    update: dict[str, Any] = {}
    if passed:
        recs = []
        if "sglang" in versions and any(p in SGLANG_PATHS for p in paths):
            update["sglang_validated"] = sorted(set(c.engines.sglang_validated) | {versions["sglang"]})
            recs.append({"tool": "sglang", "version": versions["sglang"], "date": date, "contract_sha256": h,
                         "paths": [p for p in paths if p in SGLANG_PATHS], "tool_versions": versions})
        if "vllm" in versions and "vllm-extend" in paths:
            runners = list(c.engines.vllm.runners) if c.engines.vllm else ["v1", "v2"]
            recs.append({"tool": "vllm", "version": versions["vllm"], "runners": runners, "date": date,
                         "contract_sha256": h, "paths": ["vllm-extend"], "tool_versions": versions})
        if recs:
            update["validated"] = recs
    return {"contract": c.name, "contract_sha256": h, "date": date, "passed": passed, "paths": paths,
            "tool_versions": versions, "engines_update": update}


def never_validated_warning(c, installed: Optional[dict[str, str]] = None) -> Optional[str]:
    """A one-line warning when the installed SGLang (or vLLM, for a contract served with vLLM) is
    not among the versions the contract was validated on; None otherwise or when not installed."""
    inst = installed if installed is not None else installed_versions()
    done = {(r.tool, r.version) for r in c.engines.validated}
    out = []
    sg = inst.get("sglang")
    if sg and sg not in c.engines.sglang_validated and ("sglang", sg) not in done:
        seen = sorted(set(c.engines.sglang_validated) | {v for t, v in done if t == "sglang"})
        out.append(f"never validated on the installed sglang {sg} (validated on: {', '.join(seen) or 'none'})")
    vl = inst.get("vllm")
    if vl and c.engines.vllm is not None and ("vllm", vl) not in done:
        out.append(f"never validated on the installed vllm {vl}")
    return "; ".join(out) or None
