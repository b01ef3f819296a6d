"""The user's own SGLang server checked against itself (issue 45 item 1; ``check-invariance``).

The same held-out prompts the ``sglang-engine-invariance`` path runs are sent to a running server whose
``--forward-hooks`` value (``serve-hooks --out DIR``) records into DIR: plain (each prompt alone, the radix
cache flushed before it, no logprobs) and under each variation SGLang's HTTP API offers per request
(:data:`PER_REQUEST`): ``batch`` (the prompts in one ``/generate`` call), ``input-logprobs``
(``return_logprob`` with ``logprob_start_len`` inside the prompt), ``prefix-cache-repeat`` (the prompt again)
and ``prefix-cache-shared`` (a prompt sharing its first half). The phases are the in-process path's
(:func:`eagle3_conformance.tools.sglang_engine.variations.phases`), posted by :func:`post_phase` the way
the engine's driver calls ``generate``; every request id is ``<tag>:<phase>/<key>`` (``tag`` fresh per run,
so an earlier run's records or other traffic in DIR are never paired). The records are then read back
(:func:`eagle3_conformance.serving.captures.read_dir`), attributed as ``check-captures`` attributes them,
paired by :func:`eagle3_conformance.tools.shared.variations.pair_captures` and judged by
:func:`eagle3_conformance.checks.invariance.check_engine_invariance`, the in-process path's check.

Fixed per server, not per request (:func:`fixed_per_server`, read from SGLang's ``/server_info``):
``chunked-prefill`` (``chunked_prefill_size``: chunk ends lie inside a prompt only when it is below the
prompt's length, and then the plain run is chunked too) and ``tp2`` (``tp_size``). They are reported
``not run here`` with the server's value, unless a second server launched like the first but for that one
flag is given (:func:`run_second`): its plain run is then that variation, compared with the first server's. A server with ``--disable-radix-cache`` cannot hit its prefix cache: both cache
variations are reported the same way.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from eagle3_conformance.core.errors import DataError, UsageError

if TYPE_CHECKING:
    from eagle3_conformance.contract import Contract
    from eagle3_conformance.core.findings import Finding
    from eagle3_conformance.tools.shared.variations import VariationObservation

PATH = "sglang-server-invariance"
PROMPT_TOKENS = 48
#: the variations one running server offers per request (the others are fixed at launch: :func:`fixed_per_server`)
PER_REQUEST = ("batch", "input-logprobs", "prefix-cache-repeat", "prefix-cache-shared")
#: ``return_logprob`` from inside the prompt (its second half), the top 2: a forward that returns input logprobs
LOGPROB_START = PROMPT_TOKENS // 2


def _url(base: str, route: str) -> str:
    return base.rstrip("/") + route


def _call(base: str, route: str, body: Optional[dict] = None, timeout: float = 300.0) -> tuple[int, str]:
    """``(HTTP status, the server's words)`` of one request (POST with ``body``, else GET), through the
    project's HTTP client (:func:`eagle3_conformance.server_accept.http.request`): an error answer is returned,
    not raised, since a variation the server breaks under is reported, not fatal.

    Raises:
        UsageError: the server cannot be reached or dropped the connection (one line naming the URL and why)."""
    from eagle3_conformance.server_accept.http import ServerError, request

    try:
        return 200, request("POST" if body is not None else "GET", _url(base, route), body, timeout=timeout,
                            parse=False)
    except ServerError as e:
        if e.status is not None:
            return e.status, e.words
        why = str(e).split(f"{_url(base, route)}: ", 1)[-1]  # the client's words after the URL
        raise UsageError(f"--server {base}: cannot reach the server: {why}") from None


def server_info(base: str, timeout: float = 30.0) -> dict[str, Any]:
    """SGLang's ``/server_info`` (``/get_server_info`` before 0.5.23): the server's resolved arguments
    (``chunked_prefill_size``, ``tp_size``, ``disable_radix_cache``, ...) and ``version``.

    Raises:
        UsageError: no server at ``base``, or not an SGLang server (neither route answers JSON)."""
    for route in ("/server_info", "/get_server_info"):
        status, text = _call(base, route, timeout=timeout)
        if status == 200:
            try:
                doc = json.loads(text)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    raise UsageError(f"--server {base}: not an SGLang server (/server_info answered {status}: {text[:120]!r})")


def fixed_per_server(info: dict[str, Any], prompt_tokens: int) -> dict[str, str]:
    """Variation -> why it is not varied on this server, in words, from its ``/server_info``: chunked
    prefill and TP are launch flags (every request, the plain run's too, has them); a server with
    ``--disable-radix-cache`` has no prefix cache to hit."""
    chunk = info.get("chunked_prefill_size")
    inside = isinstance(chunk, int) and 0 < chunk < prompt_tokens
    out = {"chunked-prefill": (
        f"fixed per server: chunked_prefill_size {chunk} {'<' if inside else '>='} the {prompt_tokens}-token "
        f"prompts, so {'every run here, the plain one too, is chunked' if inside else 'no chunk end lies inside them'}"
        "; to vary it, give a second server launched with a smaller --chunked-prefill-size (--second-server)"),
        "tp2": (f"fixed per server: tp_size {info.get('tp_size', '?')} for every run here, the plain one too; to vary "
                "it, give a second server launched with another --tp-size (--second-server)")}
    if info.get("disable_radix_cache"):
        why = "the server runs with --disable-radix-cache: no prefix-cache hit is possible"
        out.update({"prefix-cache-repeat": why, "prefix-cache-shared": why})
    return out


def flush(base: str, timeout: float = 60.0) -> None:
    """Empty the server's radix cache (``/flush_cache``), retried while SGLang refuses with requests pending.

    Raises:
        DataError: not flushed within ``timeout`` seconds (SGLang's message: other traffic kept it busy)."""
    end = time.monotonic() + timeout
    while True:
        status, text = _call(base, "/flush_cache", {}, timeout=timeout)
        if status == 200:
            return
        if time.monotonic() > end:
            raise DataError(f"{base}/flush_cache: the radix cache could not be flushed within {timeout:.0f} s "
                            f"(HTTP {status}: {text.strip()[:160]}); the plain run needs an empty cache: run when the "
                            "server is idle")
        time.sleep(0.1)


def post_phase(base: str, ph: dict, max_new_tokens: int, tag: str, timeout: float = 300.0,
               sent: Optional[list[int]] = None) -> list[dict]:
    """One phase (:func:`eagle3_conformance.tools.shared.variations.phase`) through ``/generate``, as the
    engine's driver runs it (``driver.run_phase``): the prompts as ``input_ids``, greedy, ``ignore_eos``, the
    request ids ``<tag>:<rid>``, each prompt alone or all in one call, the cache flushed as asked, and the
    phase's request options. Returns SGLang's outputs. ``sent``: ``[n]``, ``n`` counts the ``/generate`` calls
    answered.

    Raises:
        RuntimeError: the server answered an error (its message): generation broke under this phase.
        UsageError: the server cannot be reached."""
    sp = {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True}
    prompts, rids = ph["prompts"], [f"{tag}:{r}" for r in ph["rids"]]
    groups = [[i] for i in range(len(prompts))] if ph.get("alone") else [list(range(len(prompts)))]
    if ph.get("flush"):
        flush(base)
    out: list[dict] = []
    for g in groups:
        if ph.get("flush_each"):
            flush(base)
        body = {"input_ids": [prompts[i] for i in g], "rid": [rids[i] for i in g], "sampling_params": sp,
                **(ph.get("options") or {})}
        status, text = _call(base, "/generate", body, timeout=timeout)
        if sent is not None:
            sent[0] += 1
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {' '.join(text.split())[:200]}")
        try:
            doc = json.loads(text)
        except ValueError:
            raise RuntimeError(f"HTTP 200 with a body that is not JSON: {' '.join(text.split())[:120]!r}") from None
        out += doc if isinstance(doc, list) else [doc]
    return out


def run_phases(base: str, phases: list[dict], max_new_tokens: int, tag: str,
               log: Callable[[str], None] = lambda s: None) -> tuple[dict[str, float], dict[str, str]]:
    """Post every phase; ``(timings, failed)``: ``timings["phase <name>_s"]`` (seconds, summed over a
    phase's repeats) and ``wall_s``; ``failed``: variation -> the server's error (a phase that broke is
    reported, the rest still run).

    Raises:
        DataError: the plain run broke (nothing to compare with).
        UsageError: the server went away during a phase (one line: the phase, the requests it had answered)."""
    timings: dict[str, float] = {}
    failed: dict[str, str] = {}
    sent = [0]
    t0 = time.perf_counter()
    for ph in phases:
        if ph["name"] in failed:
            continue
        t = time.perf_counter()
        try:
            post_phase(base, ph, max_new_tokens, tag, sent=sent)
        except UsageError as e:  # reachable at /server_info before the run: it went away since
            why = str(e).split("cannot reach the server: ", 1)[-1]
            raise UsageError(f"--server {base}: the server went away during phase {ph['name']} after {sent[0]} "
                             f"requests: {why}; see its log") from None
        except RuntimeError as e:
            if ph["name"] == "plain":
                raise DataError(f"{base}/generate: the plain run failed ({e})") from None
            failed[ph["name"]] = str(e)
        key = f"phase {ph['name']}_s"
        timings[key] = timings.get(key, 0.0) + time.perf_counter() - t
        log(f"{ph['name']}: {time.perf_counter() - t:.1f} s")
    timings["wall_s"] = time.perf_counter() - t0
    return timings, failed


def _streams_with(sd, tag: str) -> tuple[dict[str, list], int]:
    """The one scheduler stream holding this run's requests (the lowest pid: under TP every rank records the
    same batch, :func:`eagle3_conformance.tools.sglang_engine.variations.first_stream`), and how many
    processes recorded them."""
    mine = sorted(pid for pid, recs in sd.streams.items()
                  if any(str(r).startswith(tag + ":") for rec in recs for r in (rec.get("rids") or [])))
    return ({mine[0]: sd.streams[mine[0]]} if mine else {}), len(mine)


def _ours(caps: list, tag: str) -> list:
    """The captures of this run's requests, their request ids without the run's tag."""
    out = []
    for cap in caps:
        r = str(cap.provenance.get("rid"))
        if r.startswith(tag + ":"):
            cap.provenance["rid"] = r[len(tag) + 1:]
            out.append(cap)
    return out


def _settle(d: Path, quiet_s: float, max_s: float = 5.0) -> None:
    """Wait until no record has been added to ``d`` for ``quiet_s`` seconds (at most ``max_s``)."""
    end, last = time.monotonic() + max_s, -1
    while quiet_s > 0 and time.monotonic() < end:
        n = sum(1 for _ in d.glob("*.pt"))
        if n == last:
            return
        last = n
        time.sleep(quiet_s)


def read_back(c: Contract, d: Path, tag: str, version: str, settle_s: float = 0.3) -> tuple[list, list, int, list]:
    """DIR's captures of this run's requests (``tag``, stripped from their ids): ``(extend, decode, processes that
    recorded them, unattributed records)``.

    Raises:
        DataError: DIR cannot be judged (:func:`~eagle3_conformance.serving.captures.read_dir`'s refusals), or
            none of this run's requests is in its records (the server records elsewhere)."""
    from eagle3_conformance.serving.captures import attribute_all, read_dir

    _settle(d, settle_s)  # the hooks write each record in its forward; the last draft forward may trail the reply
    elsewhere = (f"{d}: none of this run's requests (ids {tag}:...) is in the records{{}}: the server was not started "
                 "with this directory's --forward-hooks value (serve-hooks --out DIR), or it records elsewhere")
    if not any(d.glob("*.pt")):
        raise DataError(elsewhere.format(" (it holds none)"))
    sd = read_dir(d, c)
    if sd.broken:  # a record still being written: read again once
        time.sleep(2.0)
        sd = read_dir(d, c)
    streams, ranks = _streams_with(sd, tag)
    if not streams:
        raise DataError(elsewhere.format(""))
    sd.streams = streams
    extend, decode, unattributed, _modes, _rows = attribute_all(sd, {"engine": "sglang HTTP server (the user's own)",
                                                                     "sglang": version, "records": str(d)})
    return _ours(extend, tag), _ours(decode, tag), ranks, unattributed


def observe(c: Contract, d: Path, tag: str, wanted: list, timings: dict[str, float], failed: dict[str, str],
            unavailable: dict[str, str], version: str, second: Optional[dict[str, Any]] = None) -> VariationObservation:
    """Read DIR back and pair this run's captures (``tag``) variation by variation with the plain run's;
    ``second``: the second server's run (:func:`run_second`: ``dir``, ``tag``, ``variation``, ``seconds``), whose
    captures are that variation's.

    Raises:
        DataError: :func:`read_back`'s refusals, of either directory."""
    from eagle3_conformance.tools.shared.variations import VariationObservation, pair_captures, variation_cost

    extend, decode, ranks, unattributed = read_back(c, d, tag, version)
    ran = [v for v in wanted if v.name not in failed and v.name not in unavailable]
    shown = {v.name: {"tp_size": ranks} for v in ran}
    if second is not None:
        e2, d2, ranks2, u2 = read_back(c, second["dir"], second["tag"], version)
        extend, decode, unattributed = extend + e2, decode + d2, unattributed + u2
        shown[second["variation"]] = {"tp_size": ranks2}
    paired = pair_captures(extend, decode, ran, PATH, shown)
    paired.notes += [f"record {r.get('_file', '?')} not attributed: {why}" for r, why in unattributed[:3]]
    cost = variation_cost("base", timings, wanted)
    for v in cost.values():
        v["engine_starts"] = 0  # the server was running: no start is this run's
    if second is not None:
        cost[second["variation"]] = {"engine_starts": 0, "seconds": round(second["seconds"], 2)}
    return VariationObservation(paired, cost, dict(failed), dict(unavailable), version=version,
                                timings={"server": timings})


def second_variation(first: dict[str, Any], second: dict[str, Any], prompt_tokens: int) -> str:
    """The variation a second server's plain run is of the first's (``/server_info`` of each):
    ``chunked-prefill`` (only the second has chunk ends inside the prompts) or ``tp2`` (only its TP size differs).

    Raises:
        UsageError: the servers differ in neither or in both, or the first is the chunked / the larger-TP one
            (``--server`` is the plain run)."""
    def chunked(i: dict) -> bool:
        return isinstance(i.get("chunked_prefill_size"), int) and 0 < i["chunked_prefill_size"] < prompt_tokens

    def show(i: dict) -> str:
        return f"chunked_prefill_size {i.get('chunked_prefill_size')}, tp_size {i.get('tp_size', 1)}"

    diff = (["chunked-prefill"] if chunked(first) != chunked(second) else []) + \
        (["tp2"] if first.get("tp_size", 1) != second.get("tp_size", 1) else [])
    if len(diff) != 1:
        raise UsageError(f"--second-server: {'differs from --server in both' if diff else 'varies nothing of'} "
                         f"chunked prefill (chunk ends inside the {prompt_tokens}-token prompts) and TP ({show(second)}; "
                         f"--server: {show(first)}): one difference at a time")
    if chunked(first) or first.get("tp_size", 1) > second.get("tp_size", 1):
        raise UsageError(f"--server ({show(first)}) is the plain run: give the chunked / larger-TP server as "
                         f"--second-server ({show(second)}), the other as --server")
    return diff[0]


def run_second(c: Contract, base: str, d: Path, first_info: dict[str, Any], prompts: list[list[int]],
               max_new_tokens: int, log: Callable[[str], None]) -> dict[str, Any]:
    """The second server's plain run, as the variation it is (:func:`second_variation`): each prompt alone, its
    radix cache flushed before each. Returns ``{"server", "dir", "tag", "variation", "seconds", "info"}``.

    Raises:
        UsageError / DataError: as :func:`check_prepared`, :func:`server_info`, :func:`second_variation`; the
            second server failing the run."""
    from eagle3_conformance.tools.shared.variations import phase, prompt_set

    check_prepared(d, c)
    info = server_info(base)
    name = second_variation(first_info, info, min(len(p) for p in prompts))
    ps = prompt_set(prompts)
    tag = f"e3c-{uuid.uuid4().hex[:8]}"
    t0 = time.perf_counter()
    try:
        post_phase(base, phase(name, ps, ps.keys("p"), alone=True, flush_each=True), max_new_tokens, tag)
    except RuntimeError as e:
        raise DataError(f"{base}/generate: the second server's run failed ({e})") from None
    log(f"{name} (second server): {time.perf_counter() - t0:.1f} s")
    return {"server": base, "dir": d, "tag": tag, "variation": name, "seconds": time.perf_counter() - t0, "info": info}


def plan(c: Contract, names: list[str], info: dict[str, Any], prompts: list[list[int]]) -> tuple[list, list[dict], dict]:
    """``(wanted variations, phases to post, unavailable)``: the in-process path's phases
    (:func:`eagle3_conformance.tools.sglang_engine.variations.phases`) of the variations this server can vary
    per request, logprobs asked from inside the prompt (:data:`LOGPROB_START`)."""
    from eagle3_conformance.tools.sglang_engine.variations import phases
    from eagle3_conformance.tools.shared.variations import prompt_set, variations

    wanted = variations(names)
    unavailable = {k: v for k, v in fixed_per_server(info, min(len(p) for p in prompts)).items() if k in names}
    ps = prompt_set(prompts)
    run = [v for v in wanted if v.name not in unavailable]
    out = phases("base", ps, run)
    for ph in out:
        if ph["name"] == "input-logprobs":
            ph["options"] = {"return_logprob": True, "logprob_start_len": min(LOGPROB_START, ps.shared),
                             "top_logprobs_num": 2}
    return wanted, out, unavailable


def check_prepared(d: Path, c: Contract) -> None:
    """DIR is a directory ``serve-hooks`` prepared for ``c`` and a server called its hook factory (checked before
    any traffic is sent).

    Raises:
        UsageError: ``d`` is a file or no directory. DataError: no manifest, another contract or tool version,
            no ``factory-*.json`` (no server was started with this directory's ``--forward-hooks`` value)."""
    from eagle3_conformance.serving.captures import check_manifest

    if not d.is_dir():
        raise UsageError(f"{d}: {'a file, not a' if d.is_file() else 'no such'} capture directory: give the "
                         "directory serve-hooks' --out wrote")
    check_manifest(d, c)
    if not any(d.glob("factory-*.json")):
        raise DataError(f"{d}: no server called this directory's hook factory (no factory-*.json): start the server "
                        "with the --forward-hooks value `eagle3-conformance serve-hooks --out` printed for it")


def check_server_invariance(c: Contract, base: str, d: Path, prompts: list[list[int]], names: list[str],
                            max_new_tokens: int = 8, log: Callable[[str], None] = lambda s: None,
                            second: Optional[tuple[str, Path]] = None) -> tuple[list[Finding], dict[str, Any]]:
    """Run the plain run and each variation of ``names`` on the server at ``base``, read DIR ``d`` back, judge.

    ``second``: ``(URL, DIR)`` of a second server launched like the first but for one fixed flag (a
    ``chunked_prefill_size`` below the prompts' length, or another ``tp_size``): its plain run is that variation
    (:func:`run_second`).

    Returns ``(findings, meta)``: the findings of ``engine_invariance`` per (plain, variant) capture pair and of
    ``engine_variations`` (what ran, its seconds, what was not varied and why); ``meta``: the server, its
    SGLang version, the tag, seconds per variation, what was fixed per server.

    Raises:
        UsageError: the server cannot be reached / is not SGLang; DIR is not a directory.
        DataError: DIR was not prepared by ``serve-hooks`` for this contract, the server never called its
            hook factory, the plain run failed, or the records hold none of this run's requests."""
    from eagle3_conformance.paths.base import Observation
    from eagle3_conformance.serving.captures import expected_sglang
    from eagle3_conformance.suite.assess import assess
    from eagle3_conformance.tools.sglang_engine.variations import OFFERED
    from eagle3_conformance.tools.shared.variations import WARM, variations, variations_fact

    check_prepared(d, c)  # before any traffic: a directory the server does not record into is refused first
    info = server_info(base)
    version = str(info.get("version", "?"))
    if version != expected_sglang():  # refused before any request, as check-captures refuses its records
        raise DataError(f"--server {base}: SGLang {version}; these hooks know SGLang {expected_sglang()} (module "
                        "names, ForwardBatch fields): not judged")
    wanted, phases, unavailable = plan(c, names, info, prompts)
    tag = f"e3c-{uuid.uuid4().hex[:8]}"
    other = run_second(c, second[0], Path(second[1]), info, prompts, max_new_tokens, log) if second else None
    if other is not None:
        if other["variation"] not in names:
            names = names + [other["variation"]]
            wanted = variations(names)
        unavailable.pop(other["variation"], None)
    if all(v.name in unavailable for v in wanted):
        raise UsageError(f"--variations {','.join(names)}: none can be varied on the server at {base}: "
                         + "; ".join(f"{k}: {v}" for k, v in unavailable.items()))
    timings, failed = run_phases(base, phases, max_new_tokens, tag, log)
    if WARM in failed:  # the cache variations' warm-up broke: both are reported failed with its reason
        failed.update({n: failed.pop(WARM) for n in ("prefix-cache-repeat", "prefix-cache-shared") if n in names})
    t0 = time.perf_counter()
    vobs = observe(c, d, tag, wanted, timings, failed, unavailable, version, other)
    read_s = time.perf_counter() - t0
    fact = variations_fact(vobs, names, OFFERED, f"SGLang server {base} ({version})")
    fact["not_asked"] = {n: "not in --variations" for n in OFFERED if n not in names}

    def no_reference():
        raise AssertionError("the invariance checks need no reference model")

    t0 = time.perf_counter()
    findings = dtype_findings(c, vobs.paired.pairs)
    findings += assess(c, Observation(variants=vobs.paired.pairs, facts={"engine_variations": fact}), no_reference, PATH)
    meta = {"server": base, "sglang": version, "records": str(d), "run_tag": tag,
            "seconds_per_variation": {k: v["seconds"] for k, v in vobs.cost.items()},
            "not_varied": unavailable, "second_server": _second_meta(other), "failed": failed,
            "pairs": len(vobs.paired.pairs), "counts": vobs.paired.counts,
            "seconds": {"requests": round(timings["wall_s"], 2), "read_back": round(read_s, 2),
                        "judge": round(time.perf_counter() - t0, 2)}}
    return findings, meta


def dtype_findings(c: Contract, pairs: list) -> list[Finding]:
    """``dtype`` / ``id_dtype`` of the plain run's captures, judged by the check ``check-captures`` judges them
    with (:func:`eagle3_conformance.checks.shape.check_dtype`): a server launched with another ``--dtype`` than
    ``precision.serving`` fails here as it fails there (the ``serving-dtype`` diagnosis)."""
    from eagle3_conformance.checks.shape import check_dtype

    plains = list({id(p): p for p, _ in pairs}.values())
    return [f for p in plains for f in check_dtype(c, p)]


def _second_meta(other: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    if other is None:
        return None
    return {"server": other["server"], "records": str(other["dir"]), "variation": other["variation"],
            "chunked_prefill_size": other["info"].get("chunked_prefill_size"), "tp_size": other["info"].get("tp_size")}


def variation_names(value: str) -> list[str]:
    """The variations of ``--variations`` (``all`` or a comma list of
    :data:`~eagle3_conformance.tools.shared.variations.VARIATIONS` names).

    Raises:
        UsageError: an unknown name, or none."""
    from eagle3_conformance.tools.shared.variations import BY_NAME, variations

    names = list(BY_NAME) if value.strip() == "all" else [x.strip() for x in value.split(",") if x.strip()]
    try:
        variations(names)
    except ValueError as e:
        raise UsageError(f"--variations {value!r}: {e}") from None
    if not names:
        raise UsageError(f"--variations {value!r}: name at least one")
    return names


def held_out_prompts(target_dir: Path, n: int) -> list[list[int]]:
    """The ``sglang-engine-invariance`` path's prompts: the first ``n`` held-out corpus items, tokenized by the
    target's tokenizer, cut to :data:`PROMPT_TOKENS` tokens.

    Raises:
        DataError: no tokenizer in ``target_dir``."""
    from eagle3_conformance.testbed.trained_draft import eval_prompts

    try:
        return eval_prompts(Path(target_dir), n, PROMPT_TOKENS)
    except (OSError, ValueError) as e:
        raise DataError(f"{target_dir}: no tokenizer for the held-out prompts ({' '.join(str(e).split())[:160]})") \
            from None


def check_tokenizer_fits(c: Contract, target_dir: Path, prompts: list[list[int]]) -> None:
    """The tokenizer that made the prompts fits the contract's target: its vocabulary (``len(tokenizer)``,
    added tokens included) is at most ``target.vocab_size``, and so is every prompt id. Checked before any
    request: ids at or past the server's vocabulary crash its embedding lookup.

    Raises:
        UsageError: one line naming the tokenizer directory and both sizes."""
    from eagle3_conformance.testbed.fixtures_real import load_tokenizer

    v = c.target.vocab_size
    try:
        n = len(load_tokenizer(target_dir))
    except (OSError, ValueError):
        n = 0  # held_out_prompts loaded it already; the ids below still decide
    top = max((t for p in prompts for t in p), default=-1)
    if n > v or top >= v:
        raise UsageError(f"{target_dir}: its tokenizer's vocabulary ({n} tokens{f', ids up to {top}' if top >= v else ''})"
                         f" does not fit the contract's target.vocab_size {v}: the prompts would send ids the server "
                         "does not have; give --reference the contract's target")
