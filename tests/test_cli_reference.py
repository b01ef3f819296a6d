"""docs/cli.md is generated from the CLI's real parser (issue 43 item 8): scripts/cli_reference.py walks
:func:`eagle3_conformance.cli.build_parser`, so every verb and option on the page is the parser's, and a
verb or option added to the parser shows up in the output (tests/test_docs_generated.py then fails until
`tox -e docs` rewrites the page)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from eagle3_conformance.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("cli_reference", REPO / "scripts" / "cli_reference.py")
cli_reference = importlib.util.module_from_spec(_spec)
sys.modules["cli_reference"] = cli_reference
_spec.loader.exec_module(cli_reference)


def _verbs(parser):
    return [name for name, _, _ in cli_reference._verbs(parser)]


def test_the_page_has_every_verb_and_option_of_the_parser():
    page = (REPO / "docs" / "cli.md").read_text()
    parser = build_parser()
    assert len(_verbs(parser)) >= 18
    for name, _, sub in cli_reference._verbs(parser):
        assert f"\n## {name}\n" in page, name
        for action in sub._actions:
            for flag in action.option_strings:
                if action.help != "==SUPPRESS==" and flag not in ("-h", "--help"):
                    assert f"`{flag}`" in page, f"{name} {flag}"


def test_an_option_added_to_the_parser_appears_in_the_reference():
    """The fault: a verb or an option added to the CLI and not to the docs."""
    parser = build_parser()
    before = cli_reference.render(parser)
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    sub.choices["validate"].add_argument("--strictness", type=int, default=7, help="how strict, default %(default)s")
    new = sub.add_parser("frobnicate", help="a verb nobody documented")
    new.add_argument("--widget", metavar="W", required=True, help="the widget")
    after = cli_reference.render(parser)
    assert "--strictness" not in before and "frobnicate" not in before
    assert "| `--strictness` `STRICTNESS` | `7` | how strict, default 7 |" in after
    assert "\n## frobnicate\n\na verb nobody documented\n" in after
    assert "| `--widget` `W` |  | (required) the widget |" in after


def test_the_page_has_every_option_pytest_lists_for_the_plugin():
    """The plugin's options (``pytest -m conformance ...``) are on the page, each as ``pytest --help`` prints
    it in the plugin's group: pytest's own help, read in a subprocess, is the other side."""
    import re
    import subprocess

    page = (REPO / "docs" / "cli.md").read_text()
    section = page[page.index("\n## The pytest plugin\n"):]
    done = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:randomly"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    group = done.stdout.split("EAGLE-3 draft-boundary conformance:", 1)[1].split("\n\n", 1)[0]
    flags = re.findall(r"^\s+(--[a-z][a-z-]+)", group, flags=re.M)
    assert "--conformance-durations" in flags and "--contract" in flags, group
    for flag in flags:
        assert f"`{flag}`" in section, flag


def test_an_option_added_to_the_plugin_appears_in_the_reference(monkeypatch):
    """The fault: an option added to the plugin's ``pytest_addoption`` and not to the docs."""
    from eagle3_conformance.suite import plugin

    before = cli_reference.render_plugin(cli_reference.plugin_parser())
    real = plugin.pytest_addoption

    def more(parser):
        real(parser)
        parser.getgroup("conformance").addoption("--conformance-widget", metavar="W", help="a new knob")

    monkeypatch.setattr(plugin, "pytest_addoption", more)
    after = cli_reference.render_plugin(cli_reference.plugin_parser())
    assert "--conformance-widget" not in before
    assert "| `--conformance-widget` `W` |  | a new knob |" in after
