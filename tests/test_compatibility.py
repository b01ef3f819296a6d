"""Compatibility (docs/compatibility.md): a contract committed for 0.1.0 still loads and warns of its
deprecated key with the file and line; `upgrade-contract` rewrites it, comments kept, input untouched;
the module paths that moved keep a deprecated alias."""

from __future__ import annotations

import hashlib
import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from eagle3_conformance.cli import main
from eagle3_conformance.contract import ContractDeprecationWarning, load_contract, parse_contract

REPO = Path(__file__).resolve().parents[1]
OLD = REPO / "tests" / "data" / "compat" / "tiny-llama-0.1.0.yaml"  # as the first commit shipped it
MARGIN_LINE = next(n for n, line in enumerate(OLD.read_text().splitlines(), 1) if "slot_identity_margin" in line)


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_a_0_1_0_contract_loads_and_warns_of_its_deprecated_key_with_its_line():
    with pytest.warns(ContractDeprecationWarning, match=rf"tiny-llama-0.1.0.yaml:{MARGIN_LINE}: "
                                                        r"gates.slot_identity_margin is deprecated since 0.2.0"):
        c = load_contract(OLD)
    assert c.gates.slot_identity_margin == 0.02 and c.capture.boundaries == ["B_2", "B_4", "B_5"]


def test_a_current_contract_loads_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContractDeprecationWarning)  # a warning would raise here
        c = load_contract(REPO / "contracts" / "tiny-llama.yaml")
    assert c.gates.slot_identity_margin is None


def test_the_command_line_prints_the_deprecation_as_one_warning_line(capsys):
    assert main(["validate", str(OLD)]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "slot_identity_margin" in line]
    assert lines == [f"eagle3-conformance: warning: {OLD}:{MARGIN_LINE}: gates.slot_identity_margin is deprecated "
                     "since 0.2.0 and ignored (a fixed cosine margin failed correct data on trained models; slot "
                     "identity is decided by rank with the noise allowance gates.identity_noise_deg, docs/gates.md); "
                     "remove it (eagle3-conformance upgrade-contract does); it may be refused from 0.3.0 on"]


def test_upgrade_contract_removes_the_key_keeps_every_comment_and_never_touches_the_input(tmp_path, capsys):
    before = _digest(OLD)
    new = tmp_path / "new.yaml"
    assert main(["upgrade-contract", str(OLD), "-o", str(new)]) == 0
    assert _digest(OLD) == before
    err = capsys.readouterr().err
    assert f"{OLD}:{MARGIN_LINE}: gates.slot_identity_margin: removed (value 0.02;" in err
    old_lines, new_lines = OLD.read_text().splitlines(), new.read_text().splitlines()
    assert [line for line in old_lines if line not in new_lines] == ["  slot_identity_margin: 0.02"]
    assert [line for line in new_lines if line not in old_lines] == []  # comments, order, spacing kept
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContractDeprecationWarning)
        c = load_contract(new)
    assert c.gates.slot_identity_margin is None and c.gates.slot_identity_min_cosine == 0.99


def test_upgrade_contract_writes_stdout_or_in_place_only_when_asked(tmp_path, capsys):
    assert main(["upgrade-contract", str(OLD)]) == 0
    out = capsys.readouterr().out
    assert "slot_identity_margin" not in out and "slot_identity_min_cosine: 0.99" in out
    copy = tmp_path / "mine.yaml"
    copy.write_text(OLD.read_text().replace("../../../contracts/schema", str(REPO / "contracts" / "schema")))
    assert main(["upgrade-contract", str(copy), "--in-place"]) == 0
    assert "slot_identity_margin" not in copy.read_text()
    assert main(["upgrade-contract", str(copy)]) == 0  # now current: said so, text unchanged
    cap = capsys.readouterr()
    assert "no deprecated key; the contract is current" in cap.err and cap.out == copy.read_text()


def test_upgrade_contract_refuses_to_overwrite_its_input_and_a_contract_that_does_not_load(tmp_path, capsys):
    before = _digest(OLD)
    assert main(["upgrade-contract", str(OLD), "-o", str(OLD)]) == 2
    assert "refusing to overwrite it" in capsys.readouterr().err and _digest(OLD) == before
    bad = tmp_path / "bad.yaml"
    bad.write_text(OLD.read_text().replace("feature_width: 192", "feature_width: [192"))
    assert main(["upgrade-contract", str(bad), "-o", str(tmp_path / "out.yaml")]) == 2
    assert re.search(r"bad.yaml:\d+:\d+: .*malformed YAML", capsys.readouterr().err)
    assert not (tmp_path / "out.yaml").exists()


def test_upgrade_text_of_a_text_without_the_key_is_the_same_text():
    from eagle3_conformance.authoring.upgrade_contract import upgrade_text

    text = (REPO / "contracts" / "tiny-llama.yaml").read_text()
    assert upgrade_text(text, "tiny-llama.yaml") == (text, [])
    parse_contract(text)  # and it is a contract


def _migration_table() -> dict[str, str]:
    """docs/migration.md's issue-36 table: old path -> new path (rows whose path did not change left out)."""
    text = (REPO / "docs" / "migration.md").read_text()
    rows = re.findall(r"^\| `(eagle3_conformance\.[\w.]+)` \| `(eagle3_conformance\.[\w.]+)` \|", text, re.M)
    return {old: new for old, new in rows if old != new and not new.startswith(old + ".")}


def test_every_moved_module_of_the_migration_table_has_its_alias():
    from eagle3_conformance.core.moved import MOVED

    assert MOVED == _migration_table()


@pytest.mark.parametrize("old", sorted(_migration_table()))
def test_an_old_module_path_imports_the_new_module_with_a_deprecation_warning(old):
    new = _migration_table()[old]
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"{re.escape(old)} moved to {re.escape(new)} in 0.2.0"):
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(new)


@pytest.mark.slow
def test_python_dash_m_of_an_old_path_runs_the_new_module():
    r = subprocess.run([sys.executable, "-W", "always", "-m", "eagle3_conformance.serve", "--help"],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert "eagle3_conformance.serve moved to eagle3_conformance.serving.serve" in r.stderr
    assert "run python -m eagle3_conformance.serving.serve" in r.stderr


def test_the_changelog_s_latest_release_is_the_package_version():
    """CHANGELOG.md's newest released section is the version the package and its metadata carry."""
    import tomllib

    import eagle3_conformance

    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", (REPO / "CHANGELOG.md").read_text(), re.M)
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert released and released[0] == eagle3_conformance.__version__ == meta, (released[:2], meta)
