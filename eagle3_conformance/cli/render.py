"""``eagle3-conformance render --html OUT REPORT.json [REPORT.json ...]``: the self-contained HTML
page of saved JSON reports (check-data / check-offline / the pytest plugin's ``--conformance-json``,
merge-reports, ``faults --json``, ``upgrade-check --format json``), one part per file
(:func:`eagle3_conformance.htmlreport.render_html`; docs/html-report.md).

A report of an older version or with fields missing is drawn from what it has, and the page names
what is missing. Exit 0 when the page is written; 2 on bad input: a file that cannot be read or is
not JSON (the message names the file and line), or a document that is no report this version
recognises (the page is still written, and says so).
"""

from __future__ import annotations

import json
from pathlib import Path

from eagle3_conformance.cli.common import check_output, error
from eagle3_conformance.core.errors import UsageError
from eagle3_conformance.core.exit_codes import ExitCode


def add_parser(sub) -> None:
    p = sub.add_parser("render", help="draw saved JSON reports as one self-contained HTML page")
    p.add_argument("reports", nargs="+", metavar="REPORT.json", help="JSON reports written by this tool")
    p.add_argument("--html", required=True, metavar="OUT", help="the HTML file to write")
    p.add_argument("--title", help="the page's title (default: the pair of the first findings report)")
    p.set_defaults(func=run)


def _read(path: str):
    """The JSON document at ``path``.

    Raises:
        UsageError: missing, unreadable, or not JSON (with the line and column).
    """
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{path}: no such report file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot be read ({e})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}:{e.lineno}: not JSON ({e.msg}, column {e.colno})") from None


def run(args) -> int:
    from eagle3_conformance.htmlreport import kind_of, render_html

    check_output(args.html, "--html", inputs=tuple(args.reports))
    if Path(args.html).suffix.lower() == ".json":
        raise UsageError(f"--html {args.html}: a .json name; give the HTML file to write (e.g. report.html)")
    docs = [(Path(r).name, _read(r)) for r in args.reports]
    render_html(docs, args.html, title=args.title)
    unknown = [n for n, d in docs if kind_of(d) == "unknown"]
    print(f"wrote {args.html} ({Path(args.html).stat().st_size / 1024:.0f} KiB) from {len(docs)} report(s)")
    if unknown:
        error(f"{', '.join(unknown)}: not a report this version recognises (the page says what it holds)")
        return ExitCode.INPUT_ERROR
    return ExitCode.CONFORMS
