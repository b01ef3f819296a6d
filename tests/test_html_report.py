"""The HTML report (eagle3_conformance/htmlreport, docs/html-report.md) without a browser: the
identity checks record the profile the heatmap draws, the page marks the expected and matched
boundary, is self-contained, names what an older report lacks, stays under its size budget, and
the verbs refuse bad output paths and bad report files. The real browser: test_html_browser.py."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from html_docs import ACCEPTANCE, KILL, UPGRADE, deep_report

REPO = Path(__file__).resolve().parent.parent


def _rows(html: str) -> dict[str, tuple[str, str]]:
    """``{slot: (expected, matched)}`` read from the page's slot rows (their data attributes)."""
    return {m[0]: (m[1], m[2]) for m in re.findall(
        r'data-slot="([^"]+)" data-expected="([^"]+)" data-matched="([^"]+)"', html)}


def _self_contained(html: str) -> None:
    assert "<script" not in html and "<link" not in html and "<iframe" not in html
    assert not re.search(r'\ssrc=', html)
    assert not re.search(r'(?<![:\w])href="(?!#)', html)  # only in-page references
    assert not re.search(r'xlink:href="(?!#|data:)', html)  # in-page, or inline data (the colour bar)
    assert "url(http" not in html and "@import" not in html


# --- the identity statistic reaches the report ------------------------------------------------------


def _embedding_in_slot0(cap, model, d):
    """``cap`` with slot 0 replaced by the reference's embedding output B_0 at the same tokens (the
    seed incident: the "fix" that captured the embedding)."""
    from eagle3_conformance.core.notation import Boundary

    feat = cap.feature.clone()
    feat[:, :d] = model.capture(cap.token_ids).boundary(Boundary(0))[cap.rows].to(feat.dtype)
    return replace(cap, feature=feat)


def test_identity_findings_carry_the_profile_their_verdict_rested_on(tiny_contract, tiny_ref, good_caps):
    from eagle3_conformance.checks import check_slot_identity
    from eagle3_conformance.core.findings import Finding

    c, L, d = tiny_contract, tiny_contract.L, tiny_contract.draft.target_hidden_size
    good = [f for cap in good_caps[:3] for f in check_slot_identity(c, cap, tiny_ref.capture(cap.token_ids))]
    bad = [f for cap in good_caps[:3] for f in check_slot_identity(c, _embedding_in_slot0(cap, tiny_ref, d),
                                                                   tiny_ref.capture(cap.token_ids))]
    for f in good + bad:
        assert f.profile is not None and len(f.profile["cosine"]) == L + 2, f
        assert f.profile["tokens"] > 0 and f.profile["over"] in ("resolvable tokens", "all kept tokens")
        assert Finding.from_json(f.to_json()).profile == f.to_json()["profile"]  # through JSON and back
    passed = [f for f in good if f.status == "pass"]
    assert passed
    for f in passed:  # a passing slot's profile peaks at the boundary the check named
        cos = f.profile["cosine"]
        assert cos.index(max(cos)) == int(str(f.observed).removeprefix("B_"))
    slot0 = [f for f in bad if f.slot == "slot 0"]
    assert slot0 and all(f.status == "fail" and f.observed == "B_0" for f in slot0)
    assert all(f.profile["cosine"].index(max(f.profile["cosine"])) == 0 for f in slot0)


def test_page_marks_expected_and_matched_boundary_from_real_findings(tiny_contract, tiny_ref, good_caps, tmp_path):
    from eagle3_conformance.checks import check_slot_identity, check_verifier_identity
    from eagle3_conformance.htmlreport import render_html
    from eagle3_conformance.report import report_doc

    c, d = tiny_contract, tiny_contract.draft.target_hidden_size
    for holds, caps in (("B_2", good_caps[:3]), ("B_0", [_embedding_in_slot0(x, tiny_ref, d) for x in good_caps[:3]])):
        fs = [f for cap in caps for chk in (check_slot_identity, check_verifier_identity)
              for f in chk(c, cap, tiny_ref.capture(cap.token_ids))]
        out = render_html(report_doc("contracts/tiny-llama.yaml", fs), tmp_path / f"{holds}.html")
        html = out.read_text()
        _self_contained(html)
        rows = _rows(html)
        assert rows["slot 0"] == ("B_2", holds), rows
        assert rows["verifier"][0] == str(c.verifier_last.parsed)
        assert 'id="matched-training-0"' in html and 'id="expected-training-0"' in html
        assert 'id="col-training-B_0"' in html and f'id="col-training-B_{c.L}"' in html
        kind = 'data-verdict="conforms"' if holds == "B_2" else 'data-verdict="violations"'
        assert kind in html


def test_an_engine_reference_profile_is_drawn_over_the_boundaries_it_recorded(tiny_contract, tiny_ref, good_caps,
                                                                               tmp_path):
    """The engine as its own reference records only some boundaries (docs/engine-reference.md): the
    profile names its columns, and the heatmap's columns are those, not B_0..B_{n-2}, F of its length."""
    from eagle3_conformance.checks import check_slot_identity
    from eagle3_conformance.core.notation import Boundary
    from eagle3_conformance.htmlreport import render_html
    from eagle3_conformance.report import report_doc

    c = tiny_contract
    keep = [Boundary(k) for k in range(0, 5)]  # B_0..B_4: the declared B_2 and its neighbours, among others
    fs = []
    for cap in good_caps[:3]:
        full = tiny_ref.capture(cap.token_ids)
        part = replace(full, stack=torch.stack([full.boundary(b) for b in keep]), present=keep, source="engine")
        fs += [f for f in check_slot_identity(c, cap, part) if f.slot == "slot 0"]
    assert fs and all(f.profile["boundaries"] == [str(b) for b in keep] for f in fs), fs[0].profile
    html = render_html(report_doc("contracts/tiny-llama.yaml", fs), tmp_path / "engine.html").read_text()
    assert _rows(html)["slot 0"] == ("B_2", "B_2")
    assert 'id="col-training-B_4"' in html and 'id="col-training-F"' not in html


# --- missing fields, other documents ------------------------------------------------------------------


def test_an_older_report_renders_what_it_has_and_names_what_is_missing(tmp_path):
    from eagle3_conformance.htmlreport import render_html

    doc = deep_report(L=8, aux=(2, 4, 5), samples=2)
    for f in doc["findings"]:
        f.pop("profile")
    del doc["meta"], doc["diagnoses"]
    html = render_html(doc, tmp_path / "old.html").read_text()
    assert 'id="verdict"' in html and 'id="missing"' in html
    for words in ("carry no cosine profile", "meta.tool_versions", "diagnoses: not in this report"):
        assert words in html, words
    assert 'class="heat"' not in html


@pytest.mark.parametrize("doc", [{"findings": ["not an object", 3], "meta": "a string"}, {"findings": []},
                                 {"cells": "x"}, {"baseline": 1, "contracts": [None, {"captures": "x"}]},
                                 {"acceptance": {"per_position": ["x", {"rate": "y"}]}}, [], {"unknown": 1}, "text"])
def test_malformed_documents_give_a_page_never_a_traceback(doc, tmp_path):
    from eagle3_conformance.htmlreport import render_html

    html = render_html(doc, tmp_path / "x.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    _self_contained(html)


def test_kill_upgrade_and_acceptance_sections(tmp_path):
    from eagle3_conformance.htmlreport import render_html

    html = render_html([("kill.json", KILL), ("upgrade.json", UPGRADE), ("accept.json", ACCEPTANCE)],
                       tmp_path / "all.html").read_text()
    _self_contained(html)
    cells = re.findall(r'data-path="([^"]+)" data-status="([^"]+)"', html)
    assert sorted(cells) == sorted([("training", "caught"), ("sglang-extend", "n/a"), ("training", "missed"),
                                    ("sglang-extend", "not run")])
    assert "slot_identity" in html and "embedding-prepended" in html  # the catching check, the missed operator
    assert html.count('data-differs="true"') == 1  # 0.5.13's cell: slot 0 moved from B_2 to B_1
    assert '<span class="diff" title="slot 0">B_1</span>' in html
    assert "deepseek_v2.py:2733 layers_to_capture = layer_ids" in html  # the rule's source line
    assert 'id="accept-mean">2.410<' in html and "gate floor" in html and "seed fault" in html
    assert 'id="acceptance-floor"' in html


def test_deep_target_report_stays_under_the_size_budget(tmp_path):
    """L = 61, K = 3, three paths, 32 samples each: under 2 MB (docs/html-report.md records it)."""
    from eagle3_conformance.htmlreport import render_html

    out = render_html(deep_report(slot0_holds=0), tmp_path / "deep.html")
    assert out.stat().st_size < 2_000_000, out.stat().st_size
    rows = _rows(out.read_text())
    assert rows["slot 0"] == ("B_2", "B_0") and rows["verifier"] == ("B_61", "B_61")


# --- the verbs -------------------------------------------------------------------------------------------


def test_render_verb_exit_codes_and_bad_files(tmp_path, capsys):
    from eagle3_conformance.cli import main

    good = tmp_path / "r.json"
    good.write_text(json.dumps(deep_report(L=8, aux=(2, 4, 5), samples=1)))
    before = good.read_bytes()
    assert main(["render", "--html", str(tmp_path / "r.html"), str(good)]) == 0
    assert good.read_bytes() == before and (tmp_path / "r.html").stat().st_size > 1000
    bad = tmp_path / "bad.json"
    bad.write_text('{\n "findings": [\n')
    assert main(["render", "--html", str(tmp_path / "b.html"), str(bad)]) == 2
    assert f"{bad}:3: not JSON" in capsys.readouterr().err and not (tmp_path / "b.html").exists()
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    assert main(["render", "--html", str(tmp_path / "o.html"), str(other)]) == 2
    assert "not a report this version recognises" in (tmp_path / "o.html").read_text()
    assert main(["render", "--html", str(good), str(good)]) == 2 and good.read_bytes() == before
    assert main(["render", "--html", str(tmp_path / "missing" / "x.html"), str(good)]) == 2


def test_check_data_refuses_html_on_another_output(tiny, tmp_path, capsys):
    from eagle3_conformance.cli import main

    out = tmp_path / "r.json"
    rc = main(["check-data", str(REPO / "contracts" / "tiny-llama.yaml"), "--data", str(tiny.data_dir),
               "--no-reference", "--json", str(out), "--html", str(out)])
    assert rc == 2 and "is also the --json output" in capsys.readouterr().err


pytest_plugins = ["pytester"]


def test_plugin_writes_one_part_per_contract(pytester, tmp_path):
    """``pytest -m conformance --conformance-html OUT``: the page has the contract's verdict and
    its heatmap; an HTML path that is the contract is refused before anything runs."""
    tiny = REPO / "contracts" / "tiny-llama.yaml"
    out = tmp_path / "suite.html"
    res = pytester.runpytest("-m", "conformance", "--contract", str(tiny), "-p", "no:cacheprovider",
                             "--conformance-paths", "training", "--conformance-html", str(out))
    res.assert_outcomes(passed=1)
    html = out.read_text()
    _self_contained(html)
    assert 'data-verdict="conforms"' in html and "tiny-llama-eagle3" in html
    assert _rows(html)["slot 0"] == ("B_2", "B_2")
    c = tmp_path / "c.yaml"
    c.write_text(tiny.read_text())
    res = pytester.runpytest("-m", "conformance", "--contract", str(c), "--conformance-html", str(c),
                             "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR and c.read_text() == tiny.read_text()


def test_faults_html_shows_each_cell_of_the_matrix_it_ran(tmp_path):
    """``faults --paths contract --html``: the DFlash / MTP contract column (no engine needed); the
    page's cells are the JSON's, cell by cell."""
    from eagle3_conformance.cli import main

    out, js = tmp_path / "kill.html", tmp_path / "kill.json"
    assert main(["faults", "--paths", "contract", "--json", str(js), "--html", str(out)]) == 0
    html = out.read_text()
    _self_contained(html)
    cells = json.loads(js.read_text())["families"]["cells"]
    assert re.findall(r'data-path="([^"]+)" data-status="([^"]+)"', html) == [(c["path"], c["status"]) for c in cells]
    assert html.count("contract_method") >= sum(c["status"] == "caught" for c in cells) > 0
