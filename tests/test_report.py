"""The report people read (eagle3_conformance.report): verdict and diagnoses first, failing checks one
line each, passes folded; the same content as JSON (``diagnoses`` beside ``findings``), as
Markdown for CI job summaries, and under pytest (short failure text, junitxml properties naming
the contract, path and check). A failing run fits a screen at 100 columns."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from eagle3_conformance.cli import main
from eagle3_conformance.core.findings import Finding
from eagle3_conformance.report import WIDTH, failure_text, render_markdown, render_text
from eagle3_conformance.testbed.datagen import write_speculators_dataset
from eagle3_conformance.testbed.fixtures import sample_token_ids

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"
SCREEN = 40  # lines: what "a screenful" means here

pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def too_deep(tmp_path_factory, tiny, tiny_ref):
    """A held-out dataset whose aux slots are all one boundary deeper than declared: the contract
    says B_2, B_4, B_5 (+ B_8); the data holds B_3, B_5, B_6 (+ B_8)."""
    out = tmp_path_factory.mktemp("deep") / "data"
    samples = sample_token_ids(tiny.spec, 6, 4, 20, seed=11)
    return write_speculators_dataset(out, tiny_ref, samples, slots=["B_3", "B_5", "B_6", "B_8"])


def _check_data(capsys, *args):
    rc = main(["check-data", str(TINY), *map(str, args)])
    return rc, capsys.readouterr().out


def test_check_data_first_lines_say_one_boundary_too_deep_and_give_the_ids(too_deep, tiny, tmp_path, capsys):
    rc, out = _check_data(capsys, "--data", too_deep, "--reference", tiny.target_dir,
                          "--json", tmp_path / "r.json", "--markdown", tmp_path / "r.md")
    assert rc == 1
    lines = out.splitlines()
    head = "\n".join(lines[:15])
    assert lines[0].startswith("VIOLATIONS")
    assert "K2 convention-shift" in head and "one boundary deeper than declared" in head
    assert "slot 0 is B_3, slot 1 is B_5, slot 2 is B_6; contract says B_2, B_4, B_5" in head
    assert "eagle_config.eagle_aux_hidden_state_layer_ids: [1, 3, 4]" in head  # SGLang, from translate
    assert "--target-layer-ids 2 4 5 (aux" in head  # the data generation list (the launcher appends 8)
    # readable at 100 columns, one screen
    assert max(len(ln) for ln in lines) <= WIDTH
    assert len(lines) <= SCREEN, out
    assert lines[-1].startswith("VIOLATIONS: ")
    # failing checks one line each, numbered by the diagnosis that accounts for them; passes folded
    fail_lines = [ln for ln in lines if ln.startswith("  1 ")]
    assert {ln.split()[1] for ln in fail_lines} == {"slot_identity", "slot_order", "row_fingerprint"}
    assert any(ln.startswith("passed: ") and "(-v lists them)" in ln for ln in lines)
    assert not any(" ok " in ln for ln in lines)
    # the same content in the JSON ...
    doc = json.loads((tmp_path / "r.json").read_text())
    (d,) = doc["diagnoses"]
    assert (d["kind"], d["fault"], d["paths"]) == ("convention-shift", "K2", ["training"])
    assert d["ids"]["sglang"]["ids"] == [1, 3, 4]
    assert d["ids"]["speculators"]["extra"]["data_generation_ids"] == [2, 4, 5, 8]
    assert d["ids"]["contract"] == {"capture.boundaries": ["B_3", "B_5", "B_6"], "draft.layer_ids.values": [2, 4, 5]}
    assert doc["findings"] and doc["meta"]["verdict"] == "VIOLATIONS"
    # ... and in the Markdown summary
    md = (tmp_path / "r.md").read_text()
    assert md.startswith("## ❌ VIOLATIONS")
    assert "### Diagnosis 1: K2 `convention-shift` on training" in md
    assert "eagle_config.eagle_aux_hidden_state_layer_ids: [1, 3, 4]" in md
    assert "| 1 | training | slot_identity | slot 0 | 6/6 |" in md
    assert "<details><summary>" in md and "| training | no_embedding | slot 0 |" in md


def test_check_data_verbose_lists_passes_and_quiet_names_the_diagnosis(too_deep, tiny, capsys):
    rc, out = _check_data(capsys, "--data", too_deep, "--reference", tiny.target_dir, "-v")
    assert rc == 1 and "PASSED AND SKIPPED" in out and "shard_files" in out and "scope training:" in out
    assert max(len(ln) for ln in out.splitlines()) <= WIDTH
    rc, out = _check_data(capsys, "--data", too_deep, "--reference", tiny.target_dir, "--quiet")
    assert rc == 1
    first, second = out.splitlines()[:2]
    assert first.startswith("VIOLATIONS:") and second.startswith("  K2 convention-shift: every aux slot")


def test_check_data_markdown_refuses_to_overwrite_an_input(too_deep, tiny, capsys):
    assert main(["check-data", str(TINY), "--data", str(too_deep), "--markdown", str(TINY)]) == 2
    assert "--markdown" in capsys.readouterr().err


def test_check_data_conforming_report_is_short(tiny, capsys):
    rc, out = _check_data(capsys, "--data", tiny.data_dir, "--reference", tiny.target_dir)
    lines = out.splitlines()
    assert rc == 0 and lines[0].startswith("CONFORMS") and lines[-1].startswith("CONFORMS:")
    assert "DIAGNOSIS" not in out and "FAILING" not in out and len(lines) <= 12


def test_seed_incident_is_named_first(tiny, tiny_ref, tmp_path, capsys):
    samples = sample_token_ids(tiny.spec, 4, 3, 16, seed=11)
    data = write_speculators_dataset(tmp_path / "d", tiny_ref, samples, slots=["B_0", "B_2", "B_4", "B_5"])
    rc, out = _check_data(capsys, "--data", data, "--reference", tiny.target_dir)
    head = "\n".join(out.splitlines()[:12])
    assert rc == 1 and "K2 embedding-for-last" in head and "in place of B_L" in head
    assert "--target-layer-ids 2 4 5 (aux" in out


# --- the pure renderers ----------------------------------------------------------------------


def _f(check, status, slot="slot 0", path="training", where="sample 0 (batch position 0)", msg="m", **kw):
    return Finding(check, status, path, slot, kw.get("expected"), kw.get("observed"), where, msg, "K2")


def test_render_text_layout():
    fs = [_f("slot_identity", "pass")] * 3 + [_f("dtype", "fail", "feature", msg="feature dtype is float32")] + \
        [_f("norm_band", "skip", None, msg="uncalibrated")]
    text = render_text(fs, [], title="c: data")
    lines = text.splitlines()
    assert lines[0] == "VIOLATIONS: c: data"
    assert "5 findings: 1 failed (1 checks), 1 skipped, 3 passed" in lines[1]
    assert "  - dtype" in text  # "-": no diagnosis accounts for it
    assert "sample 0: feature dtype is float32" in text  # the first failing sample, compactly
    assert "passed: 3 findings in 1 checks" in text
    assert "skipped (-v says why): norm_band 1" in text
    uncal = render_text([_f("norm_band", "skip", None, msg="uncalibrated", observed="uncalibrated")], [])
    assert "skipped (-v says why): norm_band 1 (uncalibrated)" in uncal
    assert lines[-1] == "VIOLATIONS: 5 findings, 1 failed, 1 skipped"
    verbose = render_text(fs, [], verbose=True)
    assert "slot_identity" in verbose and "3/3 ok" in verbose


def test_render_text_caps_failing_lines_and_clips_to_width():
    fs = [_f(f"check_{i}", "fail", msg="x" * 300) for i in range(30)]
    lines = render_text(fs, []).splitlines()
    assert max(len(ln) for ln in lines) <= WIDTH
    # 300 characters wrap whole onto 4 lines: 24 lines hold 6 such groups, the rest are counted
    assert any(ln.startswith("  ... and 24 more") for ln in lines) and len(lines) <= SCREEN
    verbose = render_text(fs, [], verbose=True)
    assert sum(ln.startswith("  - check_") for ln in verbose.splitlines()) == 30 and "more" not in verbose


def test_an_undiagnosed_failure_shows_its_cause_whole():
    """A fresh user's report: "the loader produced nothing for this sample: hidden…" hid which file
    and why; a failure no diagnosis explains now wraps its message (the cause is in it)."""
    msg = ("the loader produced nothing for this sample: hidden_states/hs_3.safetensors cannot be read "
           "(SafetensorError: incomplete metadata, file not fully covered)")
    lines = render_text([_f("sample_available", "fail", None, where="sample 3", msg=msg)], []).splitlines()
    assert " ".join(ln.strip() for ln in lines).count("hs_3.safetensors cannot be read (SafetensorError: "
                                                      "incomplete metadata, file not fully covered)") == 1
    assert max(len(ln) for ln in lines) <= WIDTH


def test_a_failures_text_is_never_cut_diagnosed_or_not():
    """Issue 41: the report wraps a failure's text, it never cuts it with "…", whether or not a
    diagnosis accounts for the failing check (before: a diagnosed check's line was cut at the width),
    and pytest's short failure text names every failing check."""
    from eagle3_conformance.diagnose import Diagnosis

    msg = ("slot 0 is B_2 (entering layer 2); contract says B_3 (cos 1.0000 to B_2, 0.6181 to B_3; 51.7 deg "
           "apart, beyond gates.identity_noise_deg 1) and the tail of this message names the fix: ids [2, 3, 4]")
    d = Diagnosis("slot-off", "K2", "slot 0 holds one boundary off", ("e",), ("f",), ("training",),
                  checks=("slot_identity",))
    for diags in ([], [d]):
        lines = render_text([_f("slot_identity", "fail", msg=msg)], diags).splitlines()
        assert " ".join(ln.strip() for ln in lines).count(msg) == 1, lines
        assert not any(ln.endswith("…") for ln in lines) and max(len(ln) for ln in lines) <= WIDTH
    checks = [f"check_number_{i}" for i in range(12)]
    text = failure_text("c", "training", [_f(c, "fail") for c in checks], [], width=80)
    assert all(c in text for c in checks) and "…" not in text


def test_failing_lines_span_paths_once():
    fs = [_f("slot_identity", "fail", path=p, where=w) for p, w in
          (("sglang-extend", "extend batch of 2, request 0"), ("sglang-decode", "verify batch of 1, request 0"))]
    lines = [ln for ln in render_text(fs, []).splitlines() if "slot_identity" in ln]
    assert len(lines) == 1 and "2/2" in lines[0] and "sglang-extend extend batch of 2, request 0: m" in lines[0]


def test_markdown_escapes_table_cells():
    md = render_markdown([_f("dtype", "fail", msg="a | b")], [])
    assert "a \\| b" in md and "| - | training | dtype | slot 0 | 1/1 |" in md


def test_failure_text_is_short():
    from eagle3_conformance.diagnose import Diagnosis

    d = Diagnosis("convention-shift", "K2", "every aux slot is one boundary deeper", ("e",), ("fix 1", "fix 2"),
                  ("training",))
    text = failure_text("c", "training", [_f("slot_identity", "fail")] * 40, [d], width=100)
    lines = text.splitlines()
    assert len(lines) == 2 and "[1] K2 convention-shift: every aux slot is one boundary deeper" in text
    assert lines[0] == "c on training: VIOLATIONS (report at the end), 40 failed findings in 1 checks: slot_identity"


# --- under pytest -------------------------------------------------------------------------------


def _wrong_contract(tmp_path) -> Path:
    """The fixture data holds [B_2, B_4, B_5, B_8] and the draft's ids capture B_2, B_4, B_5; this
    contract claims B_3 for slot 0."""
    text = TINY.read_text().replace("boundaries: [B_2, B_4, B_5]", "boundaries: [B_3, B_4, B_5]").replace(
        "values: [1, 3, 4]", "values: [2, 3, 4]").replace("schema/contract", str(REPO / "contracts/schema/contract"))
    c = tmp_path / "contracts" / "wrong.yaml"
    c.parent.mkdir()
    c.write_text(text)
    return c


def _contract_lines(stdout: list[str]) -> list[str]:
    """The lines a contract adds to a failing run: its failure sections and its report."""
    start = next(i for i, ln in enumerate(stdout) if "FAILURES" in ln)
    end = next(i for i, ln in enumerate(stdout) if "short test summary" in ln)
    out, warnings = [], False
    for ln in stdout[start + 1:end]:  # pytest's own warnings summary (in-process runs) is not the contract's
        warnings = (warnings or "warnings summary" in ln) and not ln.startswith("-- Docs:")
        if not warnings and not ln.startswith("-- Docs:") and "generated xml file" not in ln:
            out.append(ln)
    return out


def test_pytest_failure_is_short_and_junitxml_names_contract_path_check(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    c = _wrong_contract(tmp_path)
    xml = tmp_path / "j.xml"
    res = pytester.runpytest("-m", "conformance", "--contract", str(c), "-p", "no:cacheprovider",
                             "--conformance-paths", "training", f"--junitxml={xml}")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*tiny-llama-eagle3 on training: VIOLATIONS*",
                              "*[[]1[]] K2 slot-off: slot 0 holds one boundary off*",
                              "*DIAGNOSIS 1/1: K2 slot-off, on training*",
                              "*eagle_config.eagle_aux_hidden_state_layer_ids: [[]2, 3, 4[]]*"])
    lines = _contract_lines(res.stdout.lines)
    assert len(lines) - len(_wrapped_failure_text(lines)) <= SCREEN, "\n".join(lines)
    assert max(len(ln) for ln in lines) <= WIDTH
    case = ET.parse(xml).getroot().find(".//testcase")
    props = [(p.get("name"), p.get("value")) for p in case.iter("property")]
    assert ("contract", "tiny-llama-eagle3") in props and ("conformance_path", "training") in props
    assert ("contract_file", str(c)) in props
    assert ("check", "slot_identity") in props
    assert any(n == "diagnosis" and v.startswith("K2 slot-off") for n, v in props)


def _wrapped_failure_text(lines: list[str]) -> list[str]:
    """The continuation lines of failure text wrapped whole: a failing check's message (8 spaces), a short
    failure text's diagnosis or first failure (6), the failing checks named after its header (2)."""
    def indent(ln):
        return len(ln) - len(ln.lstrip(" "))

    out = []
    for prev, ln in zip([""] + lines, lines):
        if indent(ln) in (6, 8) or (indent(ln) == 2 and prev.endswith("checks:")):
            out.append(ln)
    return out


@pytest.mark.skipif(__import__("importlib").util.find_spec("sglang") is None, reason="SGLang is not installed")
def test_failing_run_on_every_path_fits_a_screen_per_contract(pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    c = _wrong_contract(tmp_path)
    res = pytester.runpytest("-m", "conformance", "--contract", str(c), "-p", "no:cacheprovider",
                             "--conformance-paths", "training,sglang-extend,sglang-decode")
    res.assert_outcomes(failed=3)
    lines = _contract_lines(res.stdout.lines)
    # a failure's text is never cut (issue 41): it wraps; the layout around it fits a screen
    assert len(lines) - len(_wrapped_failure_text(lines)) <= SCREEN, "\n".join(lines)
    assert not any(ln.endswith("…") for ln in lines if not ln.startswith("skipped"))
    assert max(len(ln) for ln in lines) <= WIDTH
    text = "\n".join(lines)
    # the same fault on the two engine paths is one diagnosis; training adds its data-generation fix
    assert text.count("DIAGNOSIS ") == 1 and "on training" in text and "sglang-extend" in text
    assert "--target-layer-ids 3 4 5 (aux" in text and "eagle_aux_hidden_state_layer_ids: [2, 3, 4]" in text


def test_finding_to_json_carries_every_field():
    """to_json writes the fields one by one: a field added to Finding must appear in the JSON."""
    import dataclasses

    from eagle3_conformance.core.findings import Finding

    f = Finding("slot_identity", "fail", "training", "slot 0", "B_2", {"best": "B_3", "cos": 0.912345678},
                "sample 3", "slot 0 is B_3", "K2", gate="gates.identity_noise_deg", count=3,
                profile={"cosine": [0.1, 0.9, 0.2], "tokens": 7, "over": "resolvable tokens"})
    d = f.to_json()
    assert list(d) == [x.name for x in dataclasses.fields(Finding) if x.name != "extra"]
    assert d["observed"] == {"best": "B_3", "cos": 0.912346}
    assert d["profile"] == {"cosine": [0.1, 0.9, 0.2], "tokens": 7, "over": "resolvable tokens"}
    assert "gate" not in dataclasses.replace(f, gate="").to_json()
    assert "count" not in dataclasses.replace(f, count=None).to_json()
    assert "profile" not in dataclasses.replace(f, profile=None).to_json()


def test_finding_from_json_keeps_every_key():
    """from_json . to_json is the identity on a finding's JSON: gate, count and keys this version
    does not know survive (two dict-to-Finding converters dropped ``gate`` before issue 27)."""
    from eagle3_conformance.core.findings import Finding, Report

    f = Finding("row_fingerprint", "fail", "training", "feature", "per-row cos >= 0.85", "min cos 0.2", "sample 1",
                "2 rows are not ...", "K13", gate="gates.slot_identity_min_cosine")
    d = f.to_json()
    assert Finding.from_json(d).to_json() == d and Finding.from_json(d).gate == f.gate
    foreign = {**d, "count": 4, "rank": 7}
    assert Finding.from_json(foreign).to_json() == foreign
    doc = {"contract": "c.yaml", "findings": [d, foreign], "meta": {"verdict": "VIOLATIONS"}}
    assert Report.from_json(doc).to_json() == doc  # no diagnoses key when the document has none


def test_shapes_only_verdict_names_why_from_the_findings():
    """A run of a path that does not judge slot identity (cpu-accept alone) is not blamed on a
    missing reference model; a skipped slot_identity finding gives its own reason."""
    from eagle3_conformance.core.findings import Finding
    from eagle3_conformance.report import verdict

    accept = Finding("accept_length", "pass", "cpu-accept", None, 1.1, 1.18, "3 prompts", "accept length 1.18")
    contract = Finding("layer_ids", "pass", "contract", None, None, None, "contract", "ids in range")
    kind, text = verdict([contract, accept])
    assert kind == "conforms on shapes only"
    assert "do not judge slot identity: cpu-accept" in text and "no reference model" not in text
    skip = Finding("slot_identity", "skip", "training", None, None, None, "sample 0",
                   "no reference model: slot identity, order and alignment not checked")
    text = verdict([accept, skip])[1]
    assert text.endswith("were not checked (no reference model)") and text.count("not checked") == 1, text
    assert verdict([contract, accept], "custom reason")[1].endswith("(custom reason)")


def test_an_acceptance_only_run_is_judged_on_acceptance_never_on_shapes():
    """Only acceptance findings (``accept``, or cpu-accept alone): no tensor was read, so the verdict
    speaks of acceptance: met (a floor or a baseline passed), not gated (nothing judged it), or
    violations (one failed)."""
    from eagle3_conformance.core.findings import Finding
    from eagle3_conformance.report import render_markdown, render_text, verdict

    met = Finding("accept_length", "pass", "server", None, 1.22, 1.5, "server", "accept length 1.5 (floor 1.22)")
    none = Finding("accept_length", "skip", "server", None, None, 1.5, "server", "no floor")
    drop = Finding("accept_regression", "fail", "server", "position 1", ">= 0.3", 0.01, "server", "dropped")
    assert verdict([met]) == ("acceptance met", "ACCEPTANCE MET")
    assert verdict([none])[0] == "not gated" and "gates.min_accept_length" in verdict([none])[1]
    assert verdict([met, drop])[0] == "violations"
    assert render_text([met]).splitlines()[-1].startswith("ACCEPTANCE MET: 1 findings")
    assert render_markdown([met]).startswith("## ✅ ACCEPTANCE MET") and "SHAPES" not in render_markdown([none])
