"""Validated-on records (issue 25): a passing run's block, pasted into a contract's ``engines``,
keeps the contract's hash and silences ``validate``'s never-validated warning; a failing run
records nothing; a changed contract gets a new hash."""

from __future__ import annotations

from pathlib import Path

import yaml

from eagle3_conformance.contract import load_contract
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.environment.validated import contract_hash, never_validated_warning, record

REPO = Path(__file__).resolve().parent.parent
KIMI = REPO / "contracts" / "kimi-k2.5--eagle3-mla.yaml"
INSTALLED = {"sglang": "0.5.23", "torch": "2.13.0"}


def _f(path: str, status: str) -> Finding:
    return Finding(check="slot_identity", status=status, path=path, slot="B_2", expected="B_2", observed="B_2",
                   where="sample 0")


def _with_engines(tmp_path: Path, engines: dict) -> Path:
    doc = yaml.safe_load(KIMI.read_text())
    doc["engines"].update(engines)
    out = tmp_path / "c.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def test_a_passing_sglang_run_gives_the_block_to_paste(tmp_path, monkeypatch):
    monkeypatch.setattr("eagle3_conformance.environment.validated.installed_versions", lambda: dict(INSTALLED))
    c = load_contract(str(KIMI))
    rec = record(c, [_f("sglang-extend", "pass"), _f("sglang-decode", "pass")], today="2026-12-01")
    assert rec["passed"] and rec["paths"] == ["sglang-decode", "sglang-extend"]
    up = rec["engines_update"]
    assert up["sglang_validated"] == ["0.5.23"]
    (v,) = up["validated"]
    assert v["tool"] == "sglang" and v["version"] == "0.5.23" and v["date"] == "2026-12-01"
    assert v["contract_sha256"] == contract_hash(c) and v["tool_versions"] == INSTALLED
    pasted = load_contract(str(_with_engines(tmp_path, up)))
    assert contract_hash(pasted) == contract_hash(c)  # pasting the record does not change the hash
    assert never_validated_warning(c, INSTALLED) and never_validated_warning(pasted, INSTALLED) is None


def test_a_failing_run_records_nothing(monkeypatch):
    monkeypatch.setattr("eagle3_conformance.environment.validated.installed_versions", lambda: dict(INSTALLED))
    rec = record(load_contract(str(KIMI)), [_f("sglang-extend", "pass"), _f("sglang-decode", "fail")])
    assert not rec["passed"] and rec["engines_update"] == {}


def test_the_hash_follows_what_the_contract_declares(tmp_path):
    doc = yaml.safe_load(KIMI.read_text())
    doc["draft"]["layer_ids"]["values"] = [1, 29, 57]
    doc["capture"]["boundaries"] = ["B_2", "B_30", "B_58"]
    p = tmp_path / "other.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert contract_hash(load_contract(str(p))) != contract_hash(load_contract(str(KIMI)))


def test_validate_warns_when_never_validated_on_the_installed_sglang(tmp_path, capsys):
    from eagle3_conformance.cli import main
    from eagle3_conformance.environment.validated import installed_versions

    sg = installed_versions().get("sglang")
    assert main(["validate", str(KIMI)]) == 0
    err = capsys.readouterr().err
    assert (f"never validated on the installed sglang {sg}" in err) == bool(sg)
    ok = _with_engines(tmp_path, {"validated": [{"tool": "sglang", "version": sg or "0.0.0", "date": "2026-12-01",
                                                  "contract_sha256": "0" * 64}]})
    assert main(["validate", str(ok)]) == 0
    assert "never validated" not in capsys.readouterr().err
