"""The contract YAML writer ``init`` and ``calibrate`` share: one ruamel round-trip writer (same
indent and width), the schema line on top, validation before anything is written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from eagle3_conformance.core.errors import DataError, UsageError

if TYPE_CHECKING:  # ruamel is imported where it is used (init and calibrate only)
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedBase, CommentedMap

SCHEMA_HEADER = "yaml-language-server: $schema="

COMMENT_COLUMN = 36
"""Column of end-of-line comments in derived contracts."""


def schema_ref(out_file: Path) -> str:
    """The schema path for the yaml-language-server line: in a checkout, relative to ``out_file``'s directory
    (contracts and schema travel with the repository); from an installed package, the installed schema's
    absolute path (newuser finding 17: a path relative to the contract climbed into the venv's
    site-packages, ``../../venv/lib/...``, and broke as soon as the contract moved)."""
    from eagle3_conformance.contract import SCHEMA_PATH
    from eagle3_conformance.environment.shipped import in_checkout

    if not in_checkout():
        return Path(SCHEMA_PATH).resolve().as_posix()
    return Path(os.path.relpath(SCHEMA_PATH, Path(out_file).resolve().parent)).as_posix()


def eol(m: CommentedBase, text: str, key: str) -> None:
    """Attach an end-of-line comment to ``key`` of ruamel map ``m`` at a fixed column."""
    m.yaml_add_eol_comment(text, key, column=COMMENT_COLUMN)


def section(doc: CommentedMap, key: str) -> CommentedMap:
    """The mapping at ``doc[key]`` of a ruamel round-trip document, created (empty, at the end) when absent."""
    from ruamel.yaml.comments import CommentedMap

    m: CommentedMap | None = doc.get(key)  # a contract section is a mapping (validated on render)
    if m is None:
        m = CommentedMap()
        doc[key] = m
    return m


def contract_yaml() -> YAML:
    """The ruamel round-trip writer both init and calibrate use (same indent and width)."""
    from ruamel.yaml import YAML

    y = YAML()
    y.preserve_quotes = True
    y.indent(mapping=2, sequence=4, offset=2)
    y.width = 110
    return y


def strip_schema_line(text: str) -> str:
    lines = text.splitlines(keepends=True)
    if lines and lines[0].startswith("#") and SCHEMA_HEADER in lines[0]:
        lines = lines[1:]
    return "".join(lines)


def render(y: YAML, doc: CommentedMap, out_file: Path, what: str) -> str:
    """Dump ``doc`` with the schema line (relative to ``out_file``) on top and validate it.

    Raises:
        DataError: the text does not validate; ``what`` names whose contract it was.
    """
    import io

    from eagle3_conformance.contract import ContractError, parse_contract

    buf = io.StringIO()
    y.dump(doc, buf)
    text = f"# {SCHEMA_HEADER}{schema_ref(out_file)}\n" + strip_schema_line(buf.getvalue())
    try:
        parse_contract(text, str(out_file))
    except ContractError as e:
        raise DataError(f"{what} contract does not validate: {e}") from None
    return text


def dump_contract(doc: CommentedMap, out_file: Path) -> str:
    """YAML text of ``doc`` with the schema line (relative to ``out_file``) on top; validated.

    Raises:
        DataError: the text does not validate (a bug in the derivation; the problems are listed).
    """
    return render(contract_yaml(), doc, out_file, "derived")


def write_new(out: Path, text: str, force: bool) -> None:
    """Write ``text`` to ``out``; its directory must exist (the callers check it first, as every verb's outputs
    are checked: :func:`eagle3_conformance.cli.common.check_output`); no directory is created.

    Raises:
        UsageError: ``out`` exists and ``force`` is not given, or its directory does not exist.
    """
    if out.exists() and not force:
        raise UsageError(f"{out}: exists; refusing to overwrite (pass --force)")
    if not out.parent.is_dir():
        raise UsageError(f"{out}: parent directory {out.parent} does not exist")
    out.write_text(text, encoding="utf-8")
