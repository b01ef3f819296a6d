"""One accept run from start to findings, shared by the ``accept`` verb and the pytest plugin's
``--conformance-server``: plan (prompts, tokens, the baseline checked offline), connect, run, figures,
the paired comparison, and the findings of the contract's floor and the baseline rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

from eagle3_conformance.core.errors import UsageError

if TYPE_CHECKING:
    from eagle3_conformance.contract import Contract
    from eagle3_conformance.core.findings import Finding
    from eagle3_conformance.server_accept.prompts import Prompt
    from eagle3_conformance.server_accept.result import PromptResult, ServerInfo
    from eagle3_conformance.server_accept.run import RunResult

DEFAULT_MAX_TOKENS = 64


@dataclass
class Options:
    """What a run is asked for (the verb's options; see ``eagle3-conformance accept --help``)."""

    server: str
    baseline: Optional[str] = None
    prompts: Optional[int] = None
    max_tokens: Optional[int] = None
    concurrency: int = 4
    tolerance: float = 0.05
    request_timeout: float = 300.0
    run_timeout: float = 1800.0


@dataclass
class Outcome:
    """A finished run: the server, the run, its figures, the comparison rows (None without a baseline),
    the findings, the baseline document and the changes since it, the prompts run, the served draft's
    identity (:func:`eagle3_conformance.server_accept.baseline.draft_identity`)."""

    info: ServerInfo
    res: RunResult
    fig: dict[str, Any]
    rows: Optional[list[dict[str, Any]]]
    findings: list[Finding]
    base: Optional[dict[str, Any]]
    changes: dict[str, list[Any]]
    prompts: list[Prompt]
    draft: Optional[dict[str, Any]] = None


def plan(opts: Options, c: Contract) -> tuple[list[Prompt], int, Optional[dict[str, Any]]]:
    """(prompts, max_tokens, baseline document or None); the baseline is checked against this prompt set
    and sampling before the server is contacted (:func:`eagle3_conformance.server_accept.baseline.check_offline`).

    Raises:
        DataError: the baseline is unreadable or not comparable (the field is named).
        UsageError: ``prompts`` / ``max_tokens`` contradict the baseline's.
    """
    from eagle3_conformance.server_accept import baseline, prompts

    if not opts.baseline:
        return prompts.select(opts.prompts), opts.max_tokens or DEFAULT_MAX_TOKENS, None
    doc = baseline.load(opts.baseline)
    baseline.check_offline(doc, opts.baseline, prompt_version=prompts.PROMPT_SET_VERSION,
                           prompt_sha256=prompts.prompt_set_sha256())
    ids = list(doc["prompt_set"].get("ids") or [])
    if opts.prompts is not None and opts.prompts != len(ids):
        raise UsageError(f"--prompts {opts.prompts}: the baseline {opts.baseline} ran {len(ids)}; leave --prompts out")
    if opts.max_tokens is not None and opts.max_tokens != doc["max_tokens"]:
        raise UsageError(f"--max-tokens {opts.max_tokens}: the baseline {opts.baseline} ran {doc['max_tokens']}; "
                         "leave --max-tokens out")
    return prompts.select(ids=ids), int(doc["max_tokens"]), doc


def measure(opts: Options, c: Contract) -> Outcome:
    """Run the prompt set against ``opts.server`` and judge it for contract ``c``.

    Raises:
        ServerError: unreachable, no speculative decoding, errors or dropped connections mid-run,
            another model or chain length than the baseline's.
        DataError / UsageError: see :func:`plan`; too few prompts for an interval.
    """
    from eagle3_conformance import __version__, server_accept
    from eagle3_conformance.server_accept import baseline, figures
    from eagle3_conformance.server_accept.run import run_prompts

    plist, max_tokens, base = plan(opts, c)
    adapter = server_accept.connect(opts.server, timeout=min(30.0, opts.request_timeout))
    info = adapter.info
    if base is not None and opts.baseline is not None:
        baseline.check_server(base, opts.baseline, info)
    res = run_prompts(adapter, plist, max_tokens=max_tokens, concurrency=opts.concurrency,
                      request_timeout=opts.request_timeout, run_timeout=opts.run_timeout)
    if not any(r.steps for r in res.results):
        raise server_accept.ServerError(f"{info.url}: no prompt reported a verify step: the server ran no "
                                        "speculative decoding on this run")
    fig = figures.figures(res.results, info.k, res.wall_s)
    rows = figures.compare(res.results, base["results"], info.k, opts.tolerance) if base is not None else None
    if rows:
        d = rows[0]["decision"]
        fig["detectable"] = {"tolerance": d["tolerance"], "detectable_drop": d["detectable_drop"],
                             "against": "the baseline"}
    else:
        fig["detectable"] = {**figures.detectable_drop(res.results, opts.tolerance),
                             "against": "this run (as a baseline)"}
    draft = baseline.draft_identity(info, c)
    changes = baseline.changes(base, info, contract=c, draft=draft, tool_version=__version__) if base is not None else {}
    findings = judge(c, fig, rows, res.results) + draft_vocab_findings(c, draft)
    return Outcome(info, res, fig, rows, findings, base, changes, plist, draft)


def draft_vocab_findings(c: Contract, draft: dict[str, Any]) -> list[Finding]:
    """The served draft checkpoint's vocabulary, statically (``check_draft_vocab``), where it is on this
    machine; nothing otherwise (the run measures the server, not a file)."""
    from eagle3_conformance.checks.vocab import check_draft_vocab
    from eagle3_conformance.draft_config.checkpoint import read_draft_vocab

    if not draft.get("path") or draft.get("digest") is None:
        return []
    return check_draft_vocab(c, read_draft_vocab(draft["path"]), path="server")


def judge(c: Contract, fig: dict[str, Any], rows: Optional[list[dict[str, Any]]],
          results: Optional[Sequence[PromptResult]] = None) -> list[Finding]:
    """The findings: the contract's ``gates.min_accept_length`` on the run's accept length
    (``check_accept_length``), whether the draft accepts more than almost nothing (``check_draft_acceptance``,
    on the verify steps of ``results``: each prompt's per-position counters) and, with a baseline,
    ``check_accept_regression`` per figure."""
    from eagle3_conformance.acceptance.stats import histogram_from_per_pos, merge_histograms
    from eagle3_conformance.checks.acceptance import check_draft_acceptance
    from eagle3_conformance.checks.facts import check_accept_length, check_accept_regression

    gate = {"spec_accept_length": fig["accept_length"]["value"], "spec_correct_drafts_histogram": fig["histogram"],
            "per_position_acceptance": [p["value"] for p in fig["per_position"]]}
    out = check_accept_length(c, gate, path="server")
    if results:
        hist = merge_histograms([histogram_from_per_pos(r.steps, r.accepted_per_pos) for r in results if r.steps])
        out += check_draft_acceptance(c, {"histogram": hist, "source": "the server's per-request accept counters",
                                          "requests": len(results)}, path="server")
    if rows is not None:
        out += check_accept_regression(c, rows, path="server")
    return out
