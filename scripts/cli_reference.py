"""Print the command-line reference of ``eagle3-conformance`` as Markdown, walked from the real argparse
parser (:func:`eagle3_conformance.cli.build_parser`), so docs/cli.md cannot drift from what the CLI
accepts (issue 43 item 8). docs/cli.md holds its output as a generated block: `tox -e docs` rewrites it
and tests/test_docs_generated.py fails when the parser changed and the page was not regenerated.

    python scripts/cli_reference.py

Per verb, in the order ``eagle3-conformance --help`` lists them: its one-line help, its description,
its usage (at a fixed width of 100 columns, so the output does not depend on the terminal), and a table
of its arguments (flags, metavar, default, help with argparse's ``%(default)s`` expanded). Then the
pytest plugin's options (``pytest -m conformance ...``), read from the plugin's own ``pytest_addoption``,
so ``pytest --help``'s "EAGLE-3 draft-boundary conformance" group and this page say the same. Exit 0.
"""

from __future__ import annotations

import argparse
import sys

from eagle3_conformance.cli import build_parser

WIDTH = 100


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(parser.prog, width=WIDTH)


def _usage(parser: argparse.ArgumentParser) -> str:
    fmt = _formatter(parser)
    fmt.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return fmt.format_help().strip()


def _cell(text: str) -> str:
    """One Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _invocation(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(f"`{o}`" for o in action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or ("{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper())
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    return f"{names} `{metavar}`"


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS) or action.required:
        return ""
    return f"`{action.default}`"


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    fmt = _formatter(parser)
    rows = ["| argument | default | what it does |", "|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
            continue
        text = fmt._expand_help(action) if action.help else ""
        if action.required and action.option_strings:
            text = f"(required) {text}"
        rows.append(f"| {_invocation(action)} | {_default(action)} | {_cell(text)} |")
    return rows


def _verbs(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    return [(name, helps.get(name, ""), p) for name, p in sub.choices.items()]


def render(parser: argparse.ArgumentParser) -> str:
    out = [f"Every verb of `{parser.prog}`, in the order `{parser.prog} --help` lists them.", "",
           "```text", _usage(parser), "```", "", *_arguments(parser), "", _cell(parser.epilog or ""), ""]
    verbs = _verbs(parser)
    out += ["| verb | what it does |", "|---|---|"]
    out += [f"| [`{name}`](#{name}) | {_cell(help_)} |" for name, help_, _ in verbs]
    for name, help_, sub in verbs:
        out += ["", f"## {name}", ""]
        if help_:
            out += [_cell(help_), ""]
        if sub.description and _cell(sub.description) != _cell(help_):
            out += [_cell(sub.description), ""]
        out += ["```text", _usage(sub), "```", "", *_arguments(sub)]
        if sub.epilog:
            out += ["", _cell(sub.epilog)]
    return "\n".join(out)


class _PluginOptions:
    """What the plugin's ``pytest_addoption`` is handed in place of pytest's ``Parser``: its ``getgroup``
    returns this object, whose ``addoption(*names, **attrs)`` hands them to argparse's ``add_argument``, as
    pytest does (its ``addoption`` takes "the same attributes as the argparse library's add_argument()")."""

    def __init__(self) -> None:
        self.parser = argparse.ArgumentParser(prog="pytest -m conformance", add_help=False)

    def getgroup(self, name: str, description: str = "") -> "_PluginOptions":
        return self

    def addoption(self, *names: str, **attrs) -> None:
        self.parser.add_argument(*names, **attrs)


def plugin_parser() -> argparse.ArgumentParser:
    """The pytest plugin's options (``eagle3_conformance.suite.plugin.pytest_addoption``) as an argparse parser."""
    from eagle3_conformance.suite import plugin

    options = _PluginOptions()
    plugin.pytest_addoption(options)
    return options.parser


def render_plugin(parser: argparse.ArgumentParser) -> str:
    return "\n".join(["", "## The pytest plugin", "",
                      "`pytest -m conformance` (the plugin is registered by the package's `pytest11` entry point; "
                      "`pytest --help` lists the same options in its group \"EAGLE-3 draft-boundary conformance\"):",
                      "", *_arguments(parser)])


def main() -> int:
    sys.stdout.write(render(build_parser()) + "\n" + render_plugin(plugin_parser()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
