"""The engine checked against itself (issue 45 item 1), what the engine tools share: the variations,
the prompts they run, the request ids that tag each request with its variation, and the pairing of
each variation's captures with the plain run's.

Every engine tool runs the same held-out prompts P (``n`` of them) plus, for the shared-prefix cache
hit, S: ``S[i] = P[i][:h] + P[i+1][h:]`` (``h`` = half the prompt: the first ``h`` tokens are P[i]'s,
so after P[i] ran they sit in the prefix cache). The *plain* run serves each prompt alone with an empty
prefix cache, no chunking, no logprobs, at TP 1. Each variation changes one thing (:data:`VARIATIONS`).
A request's id is ``<phase>/<key>`` (key ``p<i>`` or ``s<i>``): the engines record it with every
forward (SGLang ``ForwardBatch.rids``, vLLM ``input_batch.req_ids``), so each capture says which
variation and which prompt it is.

:func:`pair_captures` joins a request's extend captures (one per prefill chunk) into one, and pairs
each variation's capture of prompt ``key`` with the plain run's; verify-step captures are paired where
both runs reached the same tokens at the same positions. The captures' provenance then carries
``variation``, ``first_row`` (the first row the engine recomputed: a cache hit's cached tokens),
``exercised`` (whether the engine's own records show the variation happened) and ``condition``
(what they show), read by :func:`eagle3_conformance.checks.invariance.check_engine_invariance`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from eagle3_conformance.core.capture import Capture, join_rows

PLAIN = "plain"
WARM = "warm"


@dataclass(frozen=True)
class Variation:
    """One variation of the plain run.

    Attributes:
        name: its name in findings (``"chunked-prefill"``).
        run: the engine run it needs: ``"base"`` (request options and cache states, in the plain run's
            engine), or its own engine start (``"chunked"``, ``"tp2"``, ...).
        what: what differs from the plain run, in words.
        reports: the field reports of the fault it exposes.
        shows: ``conditions -> bool``: the engine's records show it happened (a request's conditions:
            ``first_row``, ``chunks``, ``batch_size``, ``return_logprob``, ``tp_size``).
        keys: which prompts it runs: ``"p"`` (P) or ``"s"`` (S).
    """

    name: str
    run: str
    what: str
    reports: str
    shows: Callable[[dict], bool]
    keys: str = "p"


VARIATIONS: tuple[Variation, ...] = (
    Variation("batch", "base", "the prompts in one batch (the plain run serves each alone)", "R79, R105",
              lambda c: c.get("batch_size", 1) > 1),
    Variation("input-logprobs", "base", "logprobs asked for, input logprobs from position 0 with the top 2",
              "R102", lambda c: bool(c.get("return_logprob"))),
    Variation("prefix-cache-repeat", "base", "the prompt again right after it ran: the prefix cache holds it",
              "R95", lambda c: c.get("first_row", 0) > 0),
    Variation("prefix-cache-shared", "base", "a prompt sharing its first half with one that just ran: a partial "
              "prefix-cache hit", "R95", lambda c: c.get("first_row", 0) > 0, keys="s"),
    Variation("chunked-prefill", "chunked", "chunked prefill with chunk ends inside the prompt", "R84, R85",
              lambda c: c.get("chunks", 1) > 1),
    Variation("tp2", "tp2", "tensor parallelism 2 (the plain run: TP 1)", "R86, R87",
              lambda c: c.get("tp_size", 1) > 1),
)
BY_NAME = {v.name: v for v in VARIATIONS}


def variations(names: Optional[list[str]] = None) -> list[Variation]:
    """The variations named (all of them for None), in :data:`VARIATIONS` order.

    Raises:
        ValueError: an unknown name (the message lists the known ones)."""
    if names is None:
        return list(VARIATIONS)
    bad = [n for n in names if n not in BY_NAME]
    if bad:
        raise ValueError(f"unknown variation(s) {bad}; known: {', '.join(BY_NAME)}")
    return [v for v in VARIATIONS if v.name in names]


@dataclass(frozen=True)
class Prompts:
    """P, S and the shared prefix length ``h`` (module docstring); ``prompt(key)`` gives one."""

    p: list[list[int]]
    s: list[list[int]]
    shared: int

    def keys(self, which: str) -> list[str]:
        return [f"{which}{i}" for i in range(len(self.p if which == "p" else self.s))]

    def prompt(self, key: str) -> list[int]:
        return (self.p if key[0] == "p" else self.s)[int(key[1:])]


def prompt_set(prompts: list[list[int]]) -> Prompts:
    """P = ``prompts``; S[i] = P[i][:h] + P[i+1][h:] (the next prompt's tail; with one prompt its own
    tail reversed), ``h`` = half the shortest prompt.

    Raises:
        ValueError: no prompts, or a prompt under 4 tokens (no cache hit inside it)."""
    if not prompts or min(len(p) for p in prompts) < 4:
        raise ValueError("the variations need at least one prompt of 4 tokens or more")
    h = min(len(p) for p in prompts) // 2
    tails = [list(prompts[(i + 1) % len(prompts)][h:]) if len(prompts) > 1 else list(prompts[0][h:])[::-1]
             for i in range(len(prompts))]
    return Prompts([list(p) for p in prompts], [list(p[:h]) + t for p, t in zip(prompts, tails)], h)


def rid(phase: str, key: str) -> str:
    return f"{phase}/{key}"


def parse_rid(r: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """``(phase, key)`` of a request id made by :func:`rid`; ``(None, None)`` for any other id."""
    if not r or "/" not in r:
        return None, None
    phase, _, key = r.rpartition("/")
    return (phase, key) if key[:1] in ("p", "s") and key[1:].isdigit() else (None, None)


@dataclass
class Paired:
    """:func:`pair_captures`' result: ``pairs`` (plain, variant) for the ``variant`` checks, ``notes``
    (what could not be paired, and why), ``counts`` {variation: {"extend": n, "verify": m, "verify_unpaired": k}}."""

    pairs: list[tuple[Capture, Capture]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)


def _by_rid(caps: list[Capture]) -> dict[str, list[Capture]]:
    out: dict[str, list[Capture]] = {}
    for cap in caps:
        out.setdefault(str(cap.provenance.get("rid")), []).append(cap)
    return out


def _tag(cap: Capture, v: Variation, extra: dict[str, Any], path: str) -> None:
    cond = {**(cap.provenance.get("conditions") or {}), **extra}
    cap.path = path
    cap.provenance.update(variation=v.name, first_row=int(cond.get("first_row", 0) or 0), conditions=cond,
                          exercised=bool(v.shows(cond)), condition=v.what)


def pair_captures(extend: list[Capture], decode: list[Capture], wanted: list[Variation], path: str,
                  conditions: Optional[dict[str, dict[str, Any]]] = None) -> Paired:
    """Pair each variation's captures with the plain run's (module docstring). ``conditions``:
    phase -> conditions read off its engine run, not its records (``{"tp2": {"tp_size": 2}}``: the ranks
    that wrote records); ``path``: the path name
    the captures' findings carry."""
    out = Paired()
    ext = {r: join_rows(sorted(cs, key=lambda c: int(c.rows[0]) if len(c.rows) else 0))
           for r, cs in _by_rid(extend).items()}
    dec = _by_rid(decode)
    for v in wanted:
        n = out.counts.setdefault(v.name, {"extend": 0, "verify": 0, "verify_unpaired": 0})
        for r, cap in ext.items():
            phase, key = parse_rid(r)
            if phase != v.name or key is None:
                continue
            plain = ext.get(rid(PLAIN, key))
            if plain is None:
                out.notes.append(f"{v.name}: request {r} has no plain run of prompt {key} to compare with")
                continue
            plain.path = path
            _tag(cap, v, (conditions or {}).get(phase, {}), path)
            out.pairs.append((plain, cap))
            n["extend"] += 1
            plain_steps = {(tuple(c.token_ids.tolist()), tuple(c.rows.tolist())): c for c in dec.get(rid(PLAIN, key), [])}
            for step in dec.get(r, []):
                match = plain_steps.get((tuple(step.token_ids.tolist()), tuple(step.rows.tolist())))
                if match is None:
                    n["verify_unpaired"] += 1
                    continue
                match.path = path
                step.provenance.setdefault("conditions", cap.provenance.get("conditions"))
                _tag(step, v, (conditions or {}).get(phase, {}), path)
                step.provenance["first_row"] = 0
                out.pairs.append((match, step))
                n["verify"] += 1
        if not n["extend"]:
            out.notes.append(f"{v.name}: no request of this variation was captured")
    return out


#: the variations a path runs unless told (``CONFORMANCE_ENGINE_VARIATIONS``): all but TP 2, which needs
#: a second core per rank and doubles the engine's memory
DEFAULT = tuple(v.name for v in VARIATIONS if v.name != "tp2")
ENV = "CONFORMANCE_ENGINE_VARIATIONS"
#: why a variation is left out unless asked for (the ``engine_variations`` fact says it)
NOT_BY_DEFAULT = {"tp2": "one more engine start of 2 ranks (a core each, twice the memory): only with all or tp2 in"}


def requested(value: Optional[str], offered: tuple[str, ...]) -> list[str]:
    """The variations to run from ``CONFORMANCE_ENGINE_VARIATIONS`` (``value``), of those the engine
    ``offered``: unset or ``default`` -> :data:`DEFAULT`; ``all``; ``none`` -> []; else a comma list.

    Raises:
        ValueError: a name that is no variation, or one this engine does not offer."""
    v = (value or "default").strip()
    if v == "none":
        return []
    names = list(DEFAULT) if v == "default" else list(BY_NAME) if v == "all" else \
        [x.strip() for x in v.split(",") if x.strip()]
    variations(names)  # unknown names raise
    if v not in ("default", "all"):
        bad = [n for n in names if n not in offered]
        if bad:
            raise ValueError(f"{ENV}: {', '.join(bad)} not offered by this engine (it offers {', '.join(offered)})")
    return [n for n in names if n in offered]


def variations_fact(vobs: "VariationObservation", names: list, offered: tuple[str, ...], engine: str,
                    note: str = "") -> dict[str, Any]:
    """The ``engine_variations`` fact of a run (:func:`eagle3_conformance.checks.invariance.check_engine_variations`):
    what was asked, its cost, what failed or could not run, the pairing's notes and counts, and each
    variation the engine ``offered`` that was not asked for (and why)."""
    return {"engine": engine, "asked": list(names), "cost": vobs.cost, "failed": vobs.failed,
            "unavailable": vobs.unavailable, "notes": vobs.paired.notes, "counts": vobs.paired.counts, "note": note,
            "not_asked": {n: f"{NOT_BY_DEFAULT.get(n, 'not in')} {ENV}" for n in offered if n not in names}}


def phase(name: str, ps: Prompts, keys: list[str], **kw) -> dict[str, Any]:
    """One driver phase: ``name``, the prompts of ``keys`` and their request ids (:func:`rid`), and ``kw``
    (``alone``, ``flush``, ``flush_each``, ``options``: what the engine's driver reads)."""
    return {"name": name, "prompts": [ps.prompt(k) for k in keys], "rids": [rid(name, k) for k in keys], **kw}


@dataclass
class VariationObservation:
    """What the variation runs observed.

    Attributes:
        paired: the (plain, variant) captures (:class:`~eagle3_conformance.tools.shared.variations.Paired`).
        cost: variation (and ``plain``) -> ``{"engine_starts": n, "seconds": s}``: a variation of the base
            run costs its phases' generate seconds and no start; one with its own run, that run's wall time.
        failed: variation -> why generation failed under it (the engine's reason): the engine broke where the
            plain run did not.
        unavailable: variation -> why it could not run here (the engine refused to start with it, or the
            machine lacks what it needs: TP 2 on one core).
        meta: request id -> the engine's per-request meta (SGLang's ``meta_info`` subset: ``cached_tokens`` ...).
        version: the engine's version.
        timings: engine run -> its timings.
    """

    paired: Paired
    cost: dict[str, dict[str, float]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    meta: dict[str, dict] = field(default_factory=dict)
    timings: dict[str, dict[str, float]] = field(default_factory=dict)
    version: str = ""


def variation_cost(run: str, timings: dict, wanted: list[Variation]) -> dict[str, dict[str, float]]:
    """Variation (and ``plain``) -> ``{"engine_starts", "seconds"}`` of one engine run: a variation of the base
    run costs its phases' seconds (``timings["phase <name>_s"]``; the warm-up requests shared by the cache
    variations) and no start; one with its own run, that run's wall time."""
    if run != "base":
        return {v.name: {"engine_starts": 1, "seconds": round(timings.get("wall_s", 0.0), 2)}
                for v in wanted if v.run == run}
    ph = {k[len("phase "):-2]: v for k, v in timings.items() if k.startswith("phase ")}
    out = {PLAIN: {"engine_starts": 1, "seconds": round(timings.get("wall_s", 0.0) - sum(
        v for k, v in ph.items() if k != PLAIN), 2)}}
    cache = [v.name for v in wanted if v.name.startswith("prefix-cache")]
    for v in wanted:
        if v.run == "base":
            s = ph.get(v.name, 0.0) + (ph.get(WARM, 0.0) / len(cache) if v.name in cache else 0.0)
            out[v.name] = {"engine_starts": 0, "seconds": round(s, 2)}
    return out
