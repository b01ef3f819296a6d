"""``eagle3-conformance upgrade-check CONTRACT... --from TOOL==V --to TOOL==V``: would an engine
upgrade change the tensors a draft receives? Each version's own code decides
(:mod:`eagle3_conformance.upgrade`); exit 0 same tensors, 1 a draft would receive different
tensors (or fewer slots than its contract declares), 2 a version could not be fetched or its rule
could not be run, or bad input (a contract ``validate`` refuses is named with its problems, each at its line).
Reports: the text on stdout; ``--json [OUT]``, ``--markdown [OUT]`` (alone: on stdout instead of the text),
``--html OUT``; ``--format`` / ``--output`` are the deprecated spellings."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from eagle3_conformance.cli.common import (
    add_contract_arguments,
    add_html_option,
    check_html,
    check_output,
    print_or_write,
    write_html,
)
from eagle3_conformance.core.errors import UsageError
from eagle3_conformance.core.exit_codes import ExitCode


def add_parser(sub) -> None:
    p = sub.add_parser("upgrade-check", help="compare what two versions of an engine capture for each contract")
    add_contract_arguments(p, many=True)
    p.add_argument("--from", dest="base", required=True, metavar="TOOL==V",
                   help="the version served today: sglang==0.5.12, vllm==0.33.0 (both runners) or vllm==0.33.0:v1")
    p.add_argument("--to", dest="to", required=True, action="append", metavar="TOOL==V",
                   help="the candidate version (repeat to compare several with the baseline)")
    p.add_argument("--json", nargs="?", const="-", metavar="OUT",
                   help="write the report as JSON to OUT (--json alone: on stdout, instead of the text)")
    p.add_argument("--markdown", nargs="?", const="-", metavar="OUT",
                   help="write the report as Markdown to OUT, for CI job summaries (alone: on stdout)")
    add_html_option(p)
    p.add_argument("--format", choices=("text", "json", "markdown"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--output", metavar="FILE", help=argparse.SUPPRESS)  # deprecated with --format: _old_spelling
    p.set_defaults(func=run)


def _old_spelling(args) -> Optional[str]:
    """``--format F [--output FILE]`` (deprecated) as ``--json`` / ``--markdown``; returns the file the text
    report goes to (``--format text --output FILE``), else None. Warns on stderr."""
    fmt, out = args.format, args.output
    if fmt is None and out is None:
        return None
    new = {"json": f"--json {out or ''}", "markdown": f"--markdown {out or ''}"}.get(fmt or "text",
                                                                                   "shell redirection (> FILE)")
    print(f"warning: --format/--output are deprecated; use {new.strip()}", file=sys.stderr)
    if fmt in ("json", "markdown"):
        if getattr(args, fmt):
            raise UsageError(f"--format {fmt} and --{fmt}: give one (--{fmt} OUT)")
        setattr(args, fmt, out or "-")
        return None
    return out


def run(args) -> int:
    from eagle3_conformance.upgrade import check, parse_spec

    base = parse_spec(args.base)
    to = [s for t in args.to for s in parse_spec(t)]
    text_out = _old_spelling(args)
    outs = [(f, o) for f, o in (("--output", text_out), ("--json", args.json), ("--markdown", args.markdown))
            if o and o != "-"]
    for flag, out in outs:
        check_output(out, flag, inputs=tuple(args.contracts))
    if len({Path(o).resolve() for _, o in outs}) < len(outs):
        raise UsageError(f"{', '.join(f for f, _ in outs)}: give a different file to each")
    if args.json == "-" and args.markdown == "-":
        raise UsageError("--json and --markdown both on stdout: give one of them a file (--json OUT)")
    check_html(args, inputs=tuple(args.contracts), others=("output", "json", "markdown"))
    report = check(list(args.contracts), base, to)
    stdout = args.json == "-" or args.markdown == "-"
    if text_out or not stdout:
        print_or_write(text_out or "-", plain(report))
    if args.json:
        print_or_write(args.json, json.dumps(report.to_json(), indent=1))
    if args.markdown:
        print_or_write(args.markdown, markdown(report))
    write_html(args, json.loads(json.dumps(report.to_json())))
    return report.exit_code


def _id(ids) -> str:
    """Ids as users read them: ``none`` (no key in the draft config, the defaults apply), never ``None``."""
    return "none" if ids is None else str(ids)


def _boundaries(cap, step: str) -> str:
    if cap.status != "ok":
        return f"[{cap.status}]"
    return " ".join(cap.steps[step].boundaries)


def _columns(r) -> list[tuple[str, str]]:
    """One row per column and step; a step shown apart only where some version differs between steps."""
    split = any(c.status == "ok" and c.steps["extend"].boundaries != c.steps["verify/decode"].boundaries
                for c in r.captures)
    return [("extend", "extend"), ("verify/decode", "verify/decode")] if split else [("extend", "all steps")]


def _merged(changes) -> list:
    """The changes with a step label ``all steps`` where extend and verify/decode change alike."""
    key = lambda ch: (ch.slot, ch.from_boundary, ch.to_boundary)  # noqa: E731
    ext = [ch for ch in changes if ch.step == "extend"]
    ver = [ch for ch in changes if ch.step != "extend"]
    if [key(c) for c in ext] == [key(c) for c in ver]:
        return [("all steps", ch) for ch in ext]
    return [(ch.step, ch) for ch in changes]


def _changes(changes) -> list[str]:
    """Text lines: each changed slot, then each distinct pair of rules once."""
    out, rules = [], []
    for step, ch in _merged(changes):
        out.append(f"    {step} slot {ch.slot}: {ch.from_boundary or '(none)'} -> {ch.to_boundary or '(none)'}"
                   f" (draft-config id {_id(ch.from_id)} -> {_id(ch.to_id)})")
        if (ch.from_rule, ch.to_rule) not in rules:
            rules.append((ch.from_rule, ch.to_rule))
    for a, b in rules:
        out += [f"      from rule: {a}", f"      to rule:   {b}"]
    return out


def plain(report) -> str:
    """The report as text: per contract, each version's boundaries, then each verdict's changed slots."""
    out = [f"upgrade-check: from {report.baseline} to {', '.join(report.candidates)} "
           f"({len(report.contracts)} contract{'' if len(report.contracts) == 1 else 's'}, {report.seconds:.1f} s)"]
    for s in report.sources:
        out.append(f"  {s.column}: " + (f"CANNOT FETCH: {s.error}" if s.error else
                                        f"{s.wheel} sha256 {s.sha256[:16]}… ({s.files} files)"))
    for r in report.contracts:
        out.append("")
        if r.error:  # whole, one line per problem (a refused contract: validate's lines)
            first, *rest = r.error.splitlines() or [""]
            out += [f"{r.contract}: ERROR {first}", *(f"  {line}" for line in rest)]
            continue
        out.append(f"{r.name} ({r.method}, {r.architecture}, L = {r.num_hidden_layers}) [{r.contract}]")
        for step, label in _columns(r):
            for c in r.captures:
                extra = f"  (ids read: {_id(c.ids_read)})" if c.status == "ok" else f"  {c.error}"
                out.append(f"  {label:>13}  {c.column:<26} {_boundaries(c, step):<24}{extra}")
        out += [f"  {n}" for c in r.captures for n in getattr(c, "notes", []) if n.startswith("id = L: ")]
        for v in r.verdicts:
            out.append(f"  {v.base} -> {v.to}: {v.status.upper() if v.status != 'same tensors' else v.status}"
                       + (f" ({v.reason})" if v.reason else ""))
            out += _changes(v.changes)
    out.append("")
    out.append(f"exit {int(report.exit_code)}: " + {
        ExitCode.CONFORMS: "same tensors for every contract",
        ExitCode.VIOLATIONS: "a draft would receive different tensors, or other or fewer slots than its contract "
                             "declares",
        ExitCode.INPUT_ERROR: "something could not be fetched or run, or a contract was refused (see above)",
    }[report.exit_code])
    return "\n".join(out)


def markdown(report) -> str:
    """The report as Markdown (a CI job summary): one table per contract, then the changed slots."""
    out = [f"## upgrade-check: {report.baseline} → {', '.join(report.candidates)}", ""]
    out += ["| version | wheel | sha256 |", "|---|---|---|"]
    out += [f"| {s.column} | {s.wheel or 'CANNOT FETCH'} | {s.sha256[:16] or s.error} |" for s in report.sources]
    for r in report.contracts:
        out += ["", f"### {r.name}" + (" — ERROR" if r.error else
                                       f" ({r.method}, {r.architecture}, L = {r.num_hidden_layers})"), ""]
        out += [f"- {line}" for line in (r.error or "").splitlines()]
        if r.error:
            continue
        out += ["| step | " + " | ".join(c.column for c in r.captures) + " |",
                "|---|" + "---|" * len(r.captures)]
        for step, label in _columns(r):
            out.append(f"| {label} | " + " | ".join(_boundaries(c, step) for c in r.captures) + " |")
        for v in r.verdicts:
            out.append(f"\n**{v.base} → {v.to}: {v.status}**" + (f" ({v.reason})" if v.reason else ""))
            for step, ch in _merged(v.changes):
                out.append(f"- {step} slot {ch.slot}: `{ch.from_boundary}` → `{ch.to_boundary}` "
                           f"(draft-config id {_id(ch.from_id)} → {_id(ch.to_id)}); rules: `{ch.from_rule}` / `{ch.to_rule}`")
    out += ["", f"exit code {int(report.exit_code)}"]
    return "\n".join(out)
