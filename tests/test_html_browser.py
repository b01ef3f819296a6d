"""The HTML report in a real headless browser: Debian's chromium driven by playwright
(scripts/install_browser.sh installs both; no browser is downloaded). Each page opens from disk
with no console error and no request beyond the file itself; the heatmap's marked cell is read
from the page (the slot row's data attributes, and the position of the matched-cell mark against
the column labels, measured by the browser's layout).

The SmolLM2 pages are made as a user makes them: ``check-data --html`` on the real pair's
correct training data, and on data written with the seed fault (the embedding output B_0 captured
as slot 0). Without chromium the tests skip saying how to install it;
``CONFORMANCE_REQUIRE_BROWSER=1`` (CI) turns that skip into a failure.
``CONFORMANCE_SCREENSHOTS=DIR`` keeps a full-page PNG of each SmolLM2 page there (docs/ holds
the ones the README shows)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from html_docs import ACCEPTANCE, KILL, UPGRADE, deep_report

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("CONFORMANCE_CHROMIUM", "/usr/bin/chromium")
SMOL = "smollm2-135m"
BUDGET = 2_000_000  # bytes: a real pair's page with 3 paths and 30 boundaries (docs/html-report.md)

# the column (boundary) whose label lies nearest the matched-cell mark of row ``row`` of the
# heatmap with id ``pid``: read from the browser's layout, not from the code that drew it
_NEAREST_COLUMN = """([pid, row, kind]) => {
  const mark = document.querySelector(`g[id="${kind}-${pid}-${row}"]`);
  if (!mark) return null;
  const m = mark.getBoundingClientRect(), cx = m.x + m.width / 2;
  let best = null, dist = Infinity;
  for (const g of document.querySelectorAll(`g[id^="col-${pid}-"]`)) {
    const r = g.getBoundingClientRect(), d = Math.abs(r.x + r.width / 2 - cx);
    if (d < dist) { dist = d; best = g.id.slice(`col-${pid}-`.length); }
  }
  return best;
}"""


@pytest.fixture(scope="module")
def browser():
    why = None
    if not Path(CHROMIUM).is_file():
        why = f"no chromium at {CHROMIUM}: run scripts/install_browser.sh (Debian's chromium package)"
    else:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            why = "playwright is not installed: run scripts/install_browser.sh"
    if why:
        if os.environ.get("CONFORMANCE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"CONFORMANCE_REQUIRE_BROWSER=1 but {why}")
        pytest.skip(why)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


class Opened:
    """A page opened from disk, with what the browser reported while loading it."""

    def __init__(self, browser, path: Path, width: int = 1280):
        self.page = browser.new_page(viewport={"width": width, "height": 900})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.url = path.resolve().as_uri()
        self.page.goto(self.url)
        self.page.wait_for_load_state("load")

    def clean(self) -> None:
        assert not self.errors, self.errors
        assert self.requests == [self.url], self.requests  # nothing loaded beyond the file

    def slot(self, slot: str) -> dict:
        return self.page.eval_on_selector(f'tr.slot-row[data-slot="{slot}"]', "e => ({...e.dataset})")

    def mark_column(self, pid: str, row: int, kind: str = "matched") -> str:
        return self.page.evaluate(_NEAREST_COLUMN, [pid, row, kind])


def _heat_id(o: Opened) -> str:
    return o.page.eval_on_selector("div.heat", "e => e.id").removeprefix("heatmap-")


def test_report_pages_open_clean_and_show_their_sections(browser, tmp_path):
    from eagle3_conformance.htmlreport import render_html

    pages = {"deep": deep_report(slot0_holds=0), "kill": KILL, "upgrade": UPGRADE, "accept": ACCEPTANCE,
             "old": {"findings": [{"check": "slot_identity", "status": "pass", "path": "training"}]}}
    for name, doc in pages.items():
        o = Opened(browser, render_html(doc, tmp_path / f"{name}.html"))
        o.clean()
        if name == "deep":  # L = 61, K = 3: slot 0 holds B_0 where the contract says B_2
            assert o.slot("slot 0") == {"slot": "slot 0", "expected": "B_2", "matched": "B_0"}
            pid = _heat_id(o)
            assert o.mark_column(pid, 0) == "B_0" and o.mark_column(pid, 0, "expected") == "B_2"
            assert o.mark_column(pid, 3) == "B_61"  # the verifier row
            assert o.page.locator("div.heat svg").count() == 3  # one heatmap per path
            box = o.page.locator("div.heat svg").first.bounding_box()
            assert box["width"] <= 1280 and box["height"] > 100  # fits the window, still tall enough to read
        if name == "kill":
            assert o.page.locator('td[data-status="missed"]').count() == 1
        if name == "upgrade":
            assert o.page.locator('td[data-differs="true"] span.diff').inner_text() == "B_1"
        if name == "accept":
            assert o.page.inner_text("#accept-mean") == "2.410" and o.page.locator("#acceptance svg").count() == 2
        if name == "old":
            assert "carry no cosine profile" in o.page.inner_text("#missing")
        o.page.close()


def _faulty_data(target_dir: Path, out: Path) -> Path:
    """SmolLM2 training data written by the project's data path from the real forward, with the seed
    fault: slots B_0, B_2, B_15 and the verifier B_27 where the contract says B_2, B_15, B_27 + B_30
    (the embedding captured first; tests/test_real_model.py's ``embedding-first``)."""
    from eagle3_conformance.reference import ReferenceModel
    from eagle3_conformance.testbed.datagen import write_speculators_dataset
    from eagle3_conformance.testbed.fixtures import fixture_spec
    from eagle3_conformance.testbed.fixtures_real import corpus_samples, load_tokenizer, resolve_spec

    spec = resolve_spec(*fixture_spec(SMOL))
    spec["data"]["num_samples"] = 6
    samples = corpus_samples(spec, load_tokenizer(target_dir))
    return write_speculators_dataset(out, ReferenceModel(target_dir), [s.input_ids for s in samples],
                                     slots=["B_0", "B_2", "B_15", "B_27"], loss_masks=[s.loss_mask for s in samples])


@pytest.mark.slow
def test_smollm2_reports_mark_slot0_at_B2_correct_and_B0_with_the_seed_fault(browser, tmp_path):
    """check-data --html on the real SmolLM2 pair, correct and with the seed fault (about 3 minutes
    on 2 cores, most of it the two check-data runs)."""
    from eagle3_conformance.cli import main
    from eagle3_conformance.testbed.fixtures import build_fixture

    built = build_fixture(SMOL)
    contract = REPO / "contracts" / f"{SMOL}.yaml"
    shots = os.environ.get("CONFORMANCE_SCREENSHOTS")
    for name, data, rc_want, holds, verdict in (
            ("correct", built.data_dir, 0, "B_2", "conforms"),
            ("seed-fault", _faulty_data(built.target_dir, tmp_path / "fault-data"), 1, "B_0", "violations")):
        html, js = tmp_path / f"{name}.html", tmp_path / f"{name}.json"
        assert main(["check-data", str(contract), "--data", str(data), "--sample", "6", "--json", str(js),
                     "--html", str(html), "--quiet"]) == rc_want
        assert html.stat().st_size < BUDGET
        o = Opened(browser, html)
        o.clean()
        assert o.page.get_attribute("#verdict", "data-verdict") == verdict
        assert o.slot("slot 0")["expected"] == "B_2" and o.slot("slot 0")["matched"] == holds
        pid = _heat_id(o)
        assert o.mark_column(pid, 0) == holds and o.mark_column(pid, 0, "expected") == "B_2"
        assert o.page.locator(f'g[id^="col-{pid}-"]').count() == 32  # B_0..B_30, F
        if name == "seed-fault":  # the diagnosis, in the text report's words
            def words(t: str) -> str:
                return " ".join(t.split())

            text = words(o.page.inner_text("#verdict"))
            diag = json.loads(js.read_text())["diagnoses"][0]
            assert words(diag["title"]) in text and all(words(f) in text for f in diag["fix"])
        else:
            assert o.page.locator("div.diag").count() == 0
        if shots:
            Path(shots).mkdir(parents=True, exist_ok=True)
            o.page.screenshot(path=str(Path(shots) / f"html-report-smollm2-{name}.png"), full_page=True)
            shutil.copy(html, Path(shots) / f"html-report-smollm2-{name}.html")
        o.page.close()
