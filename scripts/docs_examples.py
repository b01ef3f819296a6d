"""Transcripts of docs/ printed by running the command they show (checked blocks of scripts/docs_regen.py).

    python scripts/docs_examples.py diagnosis   docs/diagnosis.md: check-data on held-out data whose ids were
                                                read under the other convention (every aux slot one boundary
                                                deeper), the embedded tiny-llama pair; about 10 s
    python scripts/docs_examples.py html-sizes  docs/html-report.md: the HTML page's size on synthetic reports of
                                                growing depth (tests/html_docs.py's deep_report); seconds

Each prints ``$ COMMAND`` and what the command printed, run in a temporary directory so that the paths
in the output are the ones shown. The fixture is seeded, so the report is the same on every run; only the
measured read time varies, and is shown as ``N s`` (what regendoc does with timings).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def diagnosis() -> str:
    """tiny-llama's fixture samples written with slots B_3, B_5, B_6 (+ the verifier B_8) where the contract
    says B_2, B_4, B_5: the K2 convention shift, judged against the fixture's own target."""
    from eagle3_conformance.cli import main
    from eagle3_conformance.reference import ReferenceModel
    from eagle3_conformance.testbed.datagen import write_speculators_dataset
    from eagle3_conformance.testbed.fixtures import build_fixture, loss_mask_for, sample_token_ids

    fx = build_fixture("tiny-llama")
    d = fx.spec["data"]
    samples = sample_token_ids(fx.spec, d["num_samples"], d["min_len"], d["max_len"], d["seed"])
    work = Path(tempfile.mkdtemp(prefix="docs-diagnosis-"))
    cwd = os.getcwd()
    try:
        write_speculators_dataset(work / "held-out", ReferenceModel(fx.target_dir), samples,
                                  slots=["B_3", "B_5", "B_6", "B_8"], dtype=d.get("dtype", "bfloat16"),
                                  loss_masks=[loss_mask_for(len(s), d["seed"] + i) for i, s in enumerate(samples)])
        shutil.copytree(ROOT / "contracts", work / "contracts", ignore=shutil.ignore_patterns("*.json"))
        shutil.copytree(ROOT / "contracts" / "schema", work / "contracts" / "schema", dirs_exist_ok=True)
        (work / "tiny-llama-target").symlink_to(fx.target_dir, target_is_directory=True)
        os.chdir(work)
        argv = ["check-data", "contracts/tiny-llama.yaml", "--data", "held-out/", "--reference", "tiny-llama-target"]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main(argv)
        text = re.sub(r"^(read: .*) in [0-9.]+ s \([^)]*\)$", r"\1 in N s", out.getvalue().rstrip(), flags=re.M)
        return f"$ eagle3-conformance {' '.join(argv)}\n{text}"
    finally:
        os.chdir(cwd)
        shutil.rmtree(work, ignore_errors=True)


def html_sizes() -> str:
    """The page :func:`eagle3_conformance.htmlreport.render_html` writes for synthetic findings reports
    (3 paths, 32 samples each, K = 3; tests/html_docs.py), by target depth."""
    sys.path.insert(0, str(ROOT / "tests"))
    from html_docs import deep_report

    from eagle3_conformance.htmlreport import render_html

    rows = ["| synthetic report: 3 paths x 32 samples, K = 3 | page size |", "|---|---|"]
    work = Path(tempfile.mkdtemp(prefix="docs-html-"))
    try:
        for L, aux, note in ((30, (2, 15, 27), ""), (61, (2, 30, 58), " (Kimi-K2.5's shape)")):
            out = render_html(deep_report(L=L, aux=aux, slot0_holds=0), work / f"L{L}.html")
            rows.append(f"| L = {L}{note}, slot 0 holding the embedding | {out.stat().st_size / 1000:.0f} KB |")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return "\n".join(rows)


EXAMPLES = {"diagnosis": diagnosis, "html-sizes": html_sizes}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in EXAMPLES:
        print(f"usage: python scripts/docs_examples.py {{{'|'.join(EXAMPLES)}}}", file=sys.stderr)
        return 2
    os.environ.setdefault("COLUMNS", "100")
    print(EXAMPLES[argv[0]]())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
