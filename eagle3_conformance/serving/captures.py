"""What a user's own SGLang server recorded while it served, judged against a contract.

The flow (docs/own-server.md): ``eagle3-conformance serve-hooks --contract C --out DIR`` writes
``DIR/manifest.json`` (:func:`write_manifest`) and prints the ``--forward-hooks`` value
(:func:`hooks_value`, the factory :mod:`eagle3_conformance.tools.sglang_engine.server_hooks`); the user
starts ``python -m sglang.launch_server ... --forward-hooks '<value>'`` with their own flags and
serves; ``eagle3-conformance check-captures DIR --contract C`` reads the directory
(:func:`read_dir`: every refusal is a :class:`~eagle3_conformance.core.errors.DataError` naming the file
and what differs) and judges it (:func:`judge`).

Rows are attributed from the records alone (:func:`eagle3_conformance.tools.sglang_engine.captures.attribute`):
the prompts are unknown. With CUDA graphs on, replayed forwards run no Python hooks
(``sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py:454-457``): decode (target
verify, draft extend after verify) is then not observed and the report says so
(:func:`mode_findings`), never that decode was checked.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, Union

from eagle3_conformance.core.errors import DataError, UsageError
from eagle3_conformance.core.findings import Finding

if TYPE_CHECKING:
    import torch

    from eagle3_conformance.contract import Contract
    from eagle3_conformance.core.capture import Capture
    from eagle3_conformance.reference.engine import EngineReference

Record = dict[str, Any]
"""One file the server's hooks wrote: a ``*.pt`` record, or a factory / model JSON file, as read."""

RowTokens = tuple[Record, dict[int, list[int]]]
"""``(target record, {row: the token prefix that row was computed on})``
(:class:`eagle3_conformance.tools.sglang_engine.captures.Attribution` ``row_tokens``)."""

MANIFEST = "manifest.json"
PATH = "sglang-server"
DECODE_MODES = ("target TARGET_VERIFY", "draft DRAFT_EXTEND_V2")
GRAPH_NOTE = ("with CUDA graphs on, SGLang replays decode forwards from graphs and runs no Python hooks "
              "(cuda_graph_setup.py:454-457); serve with --disable-cuda-graph to observe decode")


def expected_sglang() -> str:
    """The SGLang release the hooks' conventions are written for (:data:`eagle3_conformance.environment.engines.TESTED`)."""
    from eagle3_conformance.environment.engines import TESTED

    return TESTED["sglang"].lstrip("=")


def hooks_value(out_dir: Path, reference: Optional[dict[str, Any]] = None) -> str:
    """The ``--forward-hooks`` value (a JSON list of specs) recording into ``out_dir``; with
    ``reference`` (:func:`engine_reference_config`) the target's boundaries too."""
    from eagle3_conformance.tools.sglang_engine.server_hooks import specs

    return json.dumps(specs(Path(out_dir).resolve(), reference))


def engine_reference_config(c: Contract, max_bytes: int = 256 << 20) -> dict[str, Any]:
    """The hooks' ``reference`` config for contract ``c``: the boundaries the checks need
    (:func:`eagle3_conformance.reference.engine.needed_boundaries`), the family's module prefix
    (:func:`eagle3_conformance.tools.sglang_engine.boundaries.family`), all rows, ``max_bytes`` of
    boundary states per server process (then records say ``ref_dropped``)."""
    from eagle3_conformance.reference.engine import needed_boundaries
    from eagle3_conformance.tools.sglang_engine.boundaries import family

    return {"boundaries": needed_boundaries(c.aux, c.L), "max_rows": None, "max_bytes": int(max_bytes),
            "prefix": family([c.target.architecture]).prefix}


def write_manifest(out_dir: Path, contract_path: str, c: Contract,
                   reference: str = "transformers") -> dict[str, Any]:
    """Create ``out_dir`` (empty or new) and write its manifest (``reference``: "engine" also
    records the target's boundaries, so ``check-captures --conformance-reference engine`` needs no copy of the
    target).

    Raises:
        UsageError: ``out_dir`` is a file, already holds a server's records, or holds anything but an
            earlier manifest (a rerun before serving replaces it).
    """
    from eagle3_conformance import __version__
    from eagle3_conformance.environment.validated import contract_fields, contract_hash

    d = Path(out_dir)
    if d.exists() and not d.is_dir():
        raise UsageError(f"--out {d}: is a file; give a directory")
    if d.is_dir() and (any(d.glob("*.pt")) or any(d.glob("factory-*.json"))):
        raise UsageError(f"--out {d}: already holds a server's records; give an empty or new directory")
    other = sorted(e.name for e in d.iterdir() if e.name != MANIFEST) if d.is_dir() else []
    if other:  # the server writes records here and check-captures reads every file: keep it to its own
        raise UsageError(f"--out {d}: not empty (holds {', '.join(other[:3])}{', ...' if len(other) > 3 else ''}); "
                         "give an empty or new directory")
    d.mkdir(parents=True, exist_ok=True)
    ref = engine_reference_config(c) if reference == "engine" else None
    doc = {"tool": "eagle3-conformance", "tool_version": __version__, "contract": str(Path(contract_path).resolve()),
           "contract_name": c.name, "contract_sha256": contract_hash(c), "contract_fields": contract_fields(c),
           "sglang_expected": expected_sglang(),
           "reference": ref, "forward_hooks": json.loads(hooks_value(d, ref)),
           "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (d / MANIFEST).write_text(json.dumps(doc, indent=1) + "\n")
    return doc


@dataclass
class ServerDir:
    """A directory a server recorded into, read (:func:`read_dir`).

    Attributes:
        streams: pid -> that scheduler process's records in write order; an unreadable file is
            ``{"broken": name, "error": why}`` in its place.
        broken: ``(file name, why)`` of every record that could not be read.
        factories: the factory markers (pid, versions).
        models: the model facts files (role, config, layers_to_capture).
        manifest: the manifest.
    """

    path: Path
    manifest: Record
    factories: list[Record] = field(default_factory=list)
    models: list[Record] = field(default_factory=list)
    streams: dict[str, list[Record]] = field(default_factory=dict)
    broken: list[tuple[str, str]] = field(default_factory=list)


def _json(p: Path) -> Record:
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise DataError(f"{p}: not readable JSON ({e})") from None
    if not isinstance(doc, dict):
        raise DataError(f"{p}: not a JSON object ({type(doc).__name__})")
    return doc


def check_manifest(d: Path, c: Contract) -> Record:
    """DIR's manifest, written by serve-hooks for ``c`` (DataError: none, another contract or tool version)."""
    from eagle3_conformance import __version__
    from eagle3_conformance.environment.validated import contract_hash

    m = d / MANIFEST
    if not m.is_file():
        raise DataError(f"{d}: no {MANIFEST}: not a directory prepared by `eagle3-conformance serve-hooks "
                        "--contract C --out DIR`")
    doc = _json(m)
    if doc.get("contract_sha256") != contract_hash(c) and doc.get("contract_name") != c.name:
        raise DataError(f"{m}: recorded for the contract {doc.get('contract_name')!r} ({doc.get('contract')}, "
                        f"sha256 {str(doc.get('contract_sha256'))[:12]}), not this one ({c.name!r}, sha256 "
                        f"{contract_hash(c)[:12]}); judge it with that contract")
    if doc.get("tool_version") != __version__:
        raise DataError(f"{m}: prepared by eagle3-conformance {doc.get('tool_version')}, this is {__version__}: "
                        "record formats may differ; prepare a new directory")
    return doc


def contract_changes(manifest: Record, c: Contract) -> Optional[str]:
    """What changed in the contract since ``serve-hooks`` prepared the directory, in words, or None: the
    records are the server's, whatever the contract says since (the same target is checked by
    :func:`read_dir`), so an edit such as ``precision.serving`` set to the launch's ``--dtype`` is judged,
    and reported here, never refused. Manifests written before the fields were kept name only the hashes."""
    from eagle3_conformance.environment.validated import contract_fields, contract_hash, field_changes

    if manifest.get("contract_sha256") == contract_hash(c):
        return None
    ch = field_changes(manifest.get("contract_fields"), contract_fields(c))
    if not ch:
        return (f"edited since serve-hooks (sha256 {str(manifest.get('contract_sha256'))[:12]} -> "
                f"{contract_hash(c)[:12]}; this directory's manifest kept no fields)")
    return "edited since serve-hooks: " + "; ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in ch.items())


def reference_kind(d: Path, asked: Optional[str], c: Contract) -> str:
    """Which reference judges the directory: ``asked`` (``--conformance-reference``), else the one the
    directory recorded (``serve-hooks --conformance-reference engine`` writes the boundaries' config into
    the manifest: then ``engine``), else the contract's ``reference``."""
    if asked:
        return asked
    m = Path(d) / MANIFEST
    try:
        recorded = json.loads(m.read_text()).get("reference") if m.is_file() else None
    except (OSError, ValueError):
        recorded = None  # read_dir names the unreadable manifest
    return "engine" if recorded else c.reference


def _check_server(d: Path, doc: Record, factories: list[Record], models: list[Record], c: Contract) -> None:
    """The server that wrote ``d``: it ran the hooks, on the SGLang release they know, on the contract's target."""
    pats = doc.get("forward_hooks", [{}])[0].get("target_modules")
    if not factories:
        raise DataError(f"{d}: the server never called the hook factory: no factory-*.json marker (the server was "
                        "not started with this directory's --forward-hooks value, the JSON did not parse, or it "
                        "records elsewhere); print the value again with `eagle3-conformance serve-hooks`")
    seen = sorted({f.get("sglang_version") for f in factories}, key=str)
    if seen != [doc.get("sglang_expected")]:
        raise DataError(f"{d}: recorded by SGLang {', '.join(map(str, seen))}; these hooks know SGLang "
                        f"{doc.get('sglang_expected')} (module names, ForwardBatch fields): not judged")
    target = [m for m in models if m.get("role") == "target"]
    if not target:
        name = doc.get("forward_hooks", [{}])[0].get("name")
        raise DataError(f"{d}: the factory ran (pid {', '.join(str(f['pid']) for f in factories)}) but no hooked "
                        f"target forward was recorded: no module matched the patterns {pats} (SGLang logs "
                        f"\"No modules matched hook spec '{name}' patterns={pats}\") or the server served nothing")
    t = c.target
    for m in target:
        got = (m.get("num_hidden_layers"), m.get("hidden_size"), m.get("vocab_size"))
        if got != (t.num_hidden_layers, t.hidden_size, t.vocab_size):
            raise DataError(f"{d}/model-{m['pid']}-target.json: the server's target has {got[0]} layers x "
                            f"{got[1]} (vocab {got[2]}), {m.get('architectures')}; the contract's target is "
                            f"{t.num_hidden_layers} x {t.hidden_size} (vocab {t.vocab_size}): another pair")


def read_dir(d: Path, c: Contract, engine_reference: bool = False, pid: Optional[str] = None,
             last: Optional[int] = None) -> ServerDir:
    """Read and vet ``d`` for contract ``c`` (``engine_reference``: the target's boundaries must have
    been recorded). ``pid``: only that server process's records; ``last``: only its last ``last``
    records (the monitor judges what the server serving now recorded most recently).

    Raises:
        UsageError: ``d`` is not a directory.
        DataError: no manifest, another contract or tool version, a server that never ran the hooks
            or matched no module, another SGLang release, another target; nothing readable.
    """
    import torch

    from eagle3_conformance.tools.sglang_engine.captures import record_files

    d = Path(d)
    if d.is_file():  # a record file given for its directory (a fresh user's report)
        raise UsageError(f"{d}: a file, not a capture directory: give the directory serve-hooks' --out wrote "
                         f"({d.parent}, if this is one of its records)")
    if not d.is_dir():
        raise UsageError(f"{d}: no such capture directory")
    doc = check_manifest(d, c)
    if engine_reference:
        _need_boundaries(d, doc)
    factories = [_json(p) for p in sorted(d.glob("factory-*.json"))]
    models = [_json(p) for p in sorted(d.glob("model-*.json"))]
    _check_server(d, doc, factories, models, c)
    out = ServerDir(d, doc, factories, models)
    files = [f for f in record_files(d) if pid is None or f.stem.partition("-")[0] == pid]
    for f in files[-last:] if last else files:
        try:
            rec = torch.load(f, weights_only=True)
            rec["_file"] = f.name
        except Exception as e:  # noqa: BLE001 - a truncated file raises whatever the unpickler meets
            why = (f"not a complete record ({f.stat().st_size} bytes; a server stopped while torch.save wrote it?): "
                   + " ".join(f"{type(e).__name__}: {e}".split()))
            out.broken.append((f.name, why))
            rec = {"broken": f.name, "error": why}
        out.streams.setdefault(f.stem.partition("-")[0], []).append(rec)
    if not out.streams:
        raise DataError(f"{d}: the hooks ran but wrote no record (no request reached the server)")
    if not any("role" in r for s in out.streams.values() for r in s):
        raise DataError(f"{d}: none of the {len(out.broken)} records could be read (first: {out.broken[0][0]}: "
                        f"{out.broken[0][1]})")
    return out


def _record_finding(name: str, why: str, status: Literal["pass", "fail", "skip"], check: str,
                    expected: str) -> Finding:
    return Finding(check, status, PATH, None, expected, why, name, why, "")


def mode_findings(modes: dict[str, int], n_extend: int, n_decode: int) -> list[Finding]:
    """What the records did not show, as skips (the modes seen are in the report's ``forward_modes``):
    no decode attributed -> ``decode_observed`` skip naming CUDA graphs (decode is never reported as
    checked without decode rows); no extend attributed -> ``extend_observed`` skip."""
    seen = ", ".join(f"{k} x{v}" for k, v in sorted(modes.items())) or "none"
    out: list[Finding] = []
    if not n_extend:
        out.append(Finding("extend_observed", "skip", PATH, None, "draft EXTEND (prefill) rows", seen, "records",
                           f"prefill/extend NOT checked: no draft EXTEND rows attributed (modes recorded: {seen})"))
    if not (any(modes.get(m) for m in DECODE_MODES) and n_decode):
        out.append(Finding("decode_observed", "skip", PATH, None, "target verify + draft extend after verify",
                           "no decode records", "records", f"decode NOT checked: no target verify / draft extend "
                           f"after verify rows attributed (modes recorded: {seen}; {GRAPH_NOTE})"))
    return out


def select(extend: list[Capture], decode: list[Capture], max_captures: int) -> list[Capture]:
    """The captures judged: every extend, the decode steps the main job judges
    (:func:`eagle3_conformance.paths.sglang_engine.judged_decode`), then at most ``max_captures``
    spread evenly over that list (-1: no bound). Each costs one reference forward."""
    from eagle3_conformance.paths.sglang_engine import judged_decode

    caps = list(extend) + judged_decode(decode)
    if max_captures < 0 or len(caps) <= max_captures:
        return caps
    step = len(caps) / max_captures
    return [caps[int(i * step)] for i in range(max_captures)]


def attribute_all(sd: ServerDir, prov: dict[str, Any]) -> tuple[list[Capture], list[Capture], list[tuple[Record, str]],
                                                                 dict[str, int], list[RowTokens]]:
    """Every stream of ``sd`` (check-invariance passes one) through
    :func:`~eagle3_conformance.tools.sglang_engine.captures.attribute`: (extend, decode, unattributed, modes, row_tokens)."""
    from eagle3_conformance.tools.sglang_engine.captures import attribute

    extend: list[Capture] = []
    decode: list[Capture] = []
    modes: dict[str, int] = {}
    unattributed: list[tuple[Record, str]] = []
    row_tokens: list[RowTokens] = []
    for pid, recs in sd.streams.items():
        att = attribute(recs, {**prov, "pid": int(pid)})
        for cap in att.extend + att.decode:
            cap.path = PATH
            cap.where = f"pid {pid}, {cap.where.removeprefix('engine ')} ({cap.provenance['record']})"
        extend += att.extend
        decode += att.decode
        unattributed += att.unattributed
        row_tokens += att.row_tokens
        for k, v in att.modes.items():
            modes[k] = modes.get(k, 0) + v
    return extend, decode, unattributed, modes, row_tokens


def engine_reference(c: Contract, sd: ServerDir, row_tokens: list[RowTokens],
                     final_norm_weight: Optional[torch.Tensor] = None) -> EngineReference:
    """An :class:`~eagle3_conformance.reference.engine.EngineReference` from the boundaries the server
    recorded (``serve-hooks --reference engine``), each row keyed by the token prefix the records
    attribute to it.

    Raises:
        DataError: the directory was not prepared to record them, or no row was recorded.
    """
    from eagle3_conformance.reference.engine import EngineReference

    _need_boundaries(sd.path, sd.manifest)
    ref = EngineReference(c.L, final_norm_weight, final_norm_kind=c.target.final_norm)
    st = ref.stats
    for rec, rows in row_tokens:
        ref.note_record(rec)
        states = rec.get("ref_states")
        if states is None:
            continue
        for j, i in enumerate(rec["ref_rows"].tolist()):
            if i in rows:
                ref.add(rows[i], rec["ref_boundaries"], states[:, j].float())
                st["rows"] += 1
    if not st["rows"]:
        raise DataError(f"{sd.path}: no boundary row of the target was recorded ({st['records']} records; "
                        f"missing: {sorted(st['missing'])}; errors: {st['errors'][:1]})")
    rank = st["rank"] or {}
    ref.source = f"engine (the server's own forward, tp rank {rank.get('tp_rank', 0)} of {rank.get('tp_size', 1)})"
    return ref


def _need_boundaries(d: Path, manifest: Record) -> None:
    if not manifest.get("reference"):
        raise DataError(f"{d}/{MANIFEST}: prepared without the target's boundaries; the engine cannot be the "
                        "reference (prepare it with `serve-hooks --conformance-reference engine`, or judge with "
                        "transformers)")


def judge(c: Contract, sd: ServerDir, reference: Union[Callable[[], Any], str], max_captures: int = 64,
          final_norm_weight: Optional[torch.Tensor] = None) -> tuple[list[Finding], dict[str, Any]]:
    """Findings and report facts of a server's records (:func:`read_dir`).

    Args:
        reference: returns the reference model whose forward judges each capture (the transformers
            reference: :func:`eagle3_conformance.suite.assess.reference_loader`), or ``"engine"``: the
            boundaries the server recorded in the same forwards (:func:`engine_reference`; captures are
            judged on the rows it recorded).
        max_captures: bound on the captures judged (:func:`select`).
        final_norm_weight: [d] gamma of the target's final norm for the engine reference (None: ones).
    """
    from eagle3_conformance.paths.base import Observation
    from eagle3_conformance.suite.assess import assess

    version = sd.factories[0].get("sglang_version")
    prov = {"engine": "sglang HTTP server (the user's own)", "sglang": version, "records": str(sd.path)}
    extend, decode, unattributed, modes, row_tokens = attribute_all(sd, prov)
    findings = [_record_finding(n, why, "fail", "sample_available", "a complete record") for n, why in sd.broken]
    findings += [_record_finding(r.get("_file", "?"), why, "skip", "attributed", "rows attributed to a request")
                 for r, why in unattributed]
    findings += mode_findings(modes, len(extend), len(decode))
    judged = select(extend, decode, max_captures)
    source = "transformers forward of the contract's target"
    if reference == "engine":
        from eagle3_conformance.reference.engine import judged_rows

        eref = engine_reference(c, sd, row_tokens, final_norm_weight)
        judged = [j for j in (judged_rows(cap, eref) for cap in judged) if j is not None]
        reference, source = (lambda: eref), eref.source
    if not judged:
        raise DataError(f"{sd.path}: no row could be attributed to a request ({len(unattributed)} records "
                        f"unattributed{': ' + unattributed[0][1] if unattributed else ''}): nothing judged")
    if not callable(reference):
        raise UsageError(f"reference {reference!r}: give 'engine' or a reference loader")
    facts: dict[str, Any] = {"sglang_version": version, **acceptance_facts(c, decode)}
    from eagle3_conformance.tools.sglang_engine.runtime import draft_runtime, load_runtime

    rt = draft_runtime(load_runtime(sd.path), f"sglang {version} (your server)")
    if rt is not None:  # the draft's dtype and logits (issue 45 item 2); its checkpoint is not known here
        facts["draft_runtime"] = rt
    findings += assess(c, Observation(captures=judged, facts=facts), reference, PATH)
    findings += assess(c, Observation(facts={"draft_vocab": draft_vocab_facts(c, sd)}), reference, PATH)
    meta = {"records": str(sd.path), "sglang": version, "pids": sorted(sd.streams), "reference": source,
            "forward_modes": modes, "requests_extend_captures": len(extend), "decode_captures": len(decode),
            "judged": f"{len(judged)} of {len(extend) + len(decode)} captures ({len(extend)} extend, "
                      f"{len(decode)} decode)", "broken_records": [n for n, _ in sd.broken],
            "unattributed_records": len(unattributed),
            "decode": "observed" if decode else f"NOT observed ({GRAPH_NOTE})",
            "accept_length_from_records": _accept_length(decode),
            "per_request_acceptance": per_request_acceptance(decode),
            "contract_changes": contract_changes(sd.manifest, c)}
    return findings, meta


def _accept_length(decode: list[Capture]) -> Optional[float]:
    """Mean tokens committed per verify step (SGLang's ``num_accept_tokens``, bonus included)."""
    acc = [cap.provenance["accepted"] for cap in decode]
    return round(sum(acc) / len(acc), 3) if acc else None


def per_request_acceptance(decode: list[Capture]) -> list[tuple[int, int]]:
    """``(committed tokens, verify steps)`` per request of the records' decode captures (SGLang's
    ``num_accept_tokens`` per verify step, bonus included: accept length = committed / steps, without the
    token sampled at prefill), in the order requests first appear."""
    out: dict[Any, tuple[int, int]] = {}  # request -> (committed, steps)
    for cap in decode:
        t, n = out.get(cap.provenance["request"], (0, 0))
        out[cap.provenance["request"]] = (t + int(cap.provenance["accepted"]), n + 1)
    return list(out.values())


def records_histogram(decode: list[Capture]) -> list[int]:
    """The correct-drafts histogram of the records' verify steps (``h[j]``: steps whose
    ``num_accept_tokens`` was ``j + 1``)."""
    h: list[int] = []
    for cap in decode:
        j = int(cap.provenance["accepted"]) - 1
        h.extend([0] * (j + 1 - len(h)))
        h[j] += 1
    return h


def acceptance_facts(c: Contract, decode: list[Capture]) -> dict[str, Any]:
    """The records' acceptance as the checks judge it: ``draft_acceptance`` (the draft accepts more than
    almost nothing, :func:`eagle3_conformance.checks.acceptance.check_draft_acceptance`) and
    ``avg_accept_length`` (the contract's ``gates.min_accept_length``: accept length from the records, 1 +
    accepted drafts per verify step, the definition a floor written from records uses)."""
    from eagle3_conformance.acceptance.stats import per_position

    if not decode:
        why = f"no verify step was recorded ({GRAPH_NOTE})"
        return {"draft_acceptance": {"skip": why}, "avg_accept_length": {"skip": why}}
    h = records_histogram(decode)
    k = max(len(h) - 1, 1)
    src = "SGLang's num_accept_tokens per verify step in the server's records"
    return {"draft_acceptance": {"histogram": h, "source": src, "requests": len(per_request_acceptance(decode))},
            "avg_accept_length": {"spec_accept_length": 1 + sum(j * n for j, n in enumerate(h)) / sum(h),
                                  "spec_correct_drafts_histogram": h,
                                  "per_position_acceptance": per_position(h, k) if len(h) > 1 else []}}


def _named_drafts(sd: ServerDir) -> list[str]:
    """The ``name_or_path`` of each draft model the records name (``model-<pid>-draft.json``)."""
    return [str(m["name_or_path"]) for m in sd.models if m.get("role") == "draft" and m.get("name_or_path")]


def served_draft_dir(c: Contract, sd: ServerDir) -> Optional[Path]:
    """The draft directory the server served, where it is on this machine: the draft model's
    ``name_or_path`` in the records (``model-<pid>-draft.json``; None when that directory is not here: never
    another draft in its place), else, for records that name none, the contract's draft (its fixture's
    trained draft, or ``draft.path``)."""
    named = _named_drafts(sd)
    if named:
        return Path(named[0]) if (Path(named[0]) / "config.json").is_file() else None
    from eagle3_conformance.suite.pairs import PairUnavailable, resolve_pair
    from eagle3_conformance.testbed.trained_draft import TRAINED

    if c.fixture in TRAINED:
        from eagle3_conformance.testbed.trained_draft import ensure_trained_draft

        return Path(ensure_trained_draft(TRAINED[c.fixture]).draft_dir)
    try:
        d = resolve_pair(c).draft_dir if not c.fixture else None
    except PairUnavailable:
        return None
    return d if d is not None and d.is_dir() else None


def draft_vocab_facts(c: Contract, sd: ServerDir) -> dict[str, Any]:
    """The ``draft_vocab`` fact (:func:`eagle3_conformance.checks.vocab.check_draft_vocab`) of the served draft."""
    from eagle3_conformance.draft_config.checkpoint import read_draft_vocab

    d = served_draft_dir(c, sd)
    if d is None:
        named = _named_drafts(sd)
        return {"skip": f"the served draft {named[0]} is not on this machine" if named else
                "the served draft's directory is not on this machine (the records name none, the contract has no "
                "local draft.path)"}
    return read_draft_vocab(d)
