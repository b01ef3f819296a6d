"""Docs a newcomer can walk (issue 43 item 8): every relative link of README.md and docs/*.md reaches a
file of the repository (and an in-page ``#anchor`` a heading of its page), every ``docs/NAME.md`` a page
cites in a code span exists, and docs/index.md lists every page of docs/.

Links are Markdown's inline form, ``[text](target)`` and ``![alt](target)``; absolute URLs and
``mailto:`` are left alone, and so are fenced code blocks and code spans (they quote, they do not link).
Anchors follow GitHub's rule: the heading lower-cased, punctuation other than ``-`` and ``_`` dropped,
spaces made hyphens.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`[^`]*`")
CITED_PAGE = re.compile(r"`(?:\.\./)?(docs/[A-Za-z0-9_.-]+\.md)")


def _pages(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    out, fenced = [], False
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.append((i, line))
    return out


def _anchors(page: Path) -> set[str]:
    heads = [line.lstrip("#").strip() for _, line in _prose(page.read_text()) if line.startswith("#")]
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every relative link on the page, outside code."""
    found = []
    for i, line in _prose(page.read_text()):
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):
                found.append((i, target))
    return found


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """``page:line: target`` for each link that reaches no file (or no heading), and each cited
    ``docs/NAME.md`` code span that names no page."""
    where = page.relative_to(root)
    bad = []
    for i, target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_file():
            bad.append(f"{where}:{i}: {target}")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{where}:{i}: {target} (no such heading)")
    for i, line in _prose(page.read_text()):
        bad += [f"{where}:{i}: `{p}`" for p in CITED_PAGE.findall(line) if not (root / p).is_file()]
    return bad


def test_every_relative_link_of_the_docs_resolves():
    bad = [b for page in _pages(REPO) for b in broken_links(page)]
    assert bad == [], "links that reach nothing: " + "; ".join(bad)


def test_the_link_check_finds_what_it_exists_for(tmp_path):
    """A page renamed under its links, a missing picture and a heading that was reworded are found; a URL, a
    link quoted in a code span or a fence, and good links are not."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("# A heading, here\n")
    page = tmp_path / "README.md"
    page.write_text("[ok](docs/there.md) [ok](docs/there.md#a-heading-here) [web](https://example.org/x.md)\n"
                    "[gone](docs/renamed.md)\n![pic](docs/missing.png)\n[old](docs/there.md#old-heading)\n"
                    "`[quoted](docs/nope.md)`\n```\n[fenced](docs/nope.md)\n```\nsee `docs/moved.md`, `docs/there.md`\n")
    assert broken_links(page, tmp_path) == ["README.md:2: docs/renamed.md", "README.md:3: docs/missing.png",
                                            "README.md:4: docs/there.md#old-heading (no such heading)",
                                            "README.md:9: `docs/moved.md`"]


def test_the_index_lists_every_page_of_docs():
    index = REPO / "docs" / "index.md"
    listed = {(index.parent / t.partition("#")[0]).resolve() for _, t in links(index)}
    missing = [p.name for p in sorted((REPO / "docs").glob("*.md")) if p != index and p.resolve() not in listed]
    assert missing == [], f"docs/index.md does not list: {missing}"


def test_the_readme_links_the_index():
    assert "docs/index.md" in [t for _, t in links(REPO / "README.md")]
