"""The tutorial a newcomer walks (docs/tutorial.md, issue 43 item 8) cannot drift from what the tool says.

Each step's transcript on the page is printed by ``python scripts/tutorial.py step N``. Steps 1 and 5 are
checked blocks (tests/test_docs_generated.py reruns them: step 1 in the fast tier, step 5 in the slow one).
Steps 2-4 start a real SGLang CPU server each, so their blocks are recorded; here:

- fast: the page shows the verdicts the tutorial teaches (CONFORMS; VIOLATIONS naming slot 0 = B_0 with the
  fix line; CONFORMS after the fix; validate refusing the patched config), and that check fails on a page
  whose broken step was not caught; the page's edit of the draft config really makes SGLang's own id rule
  capture the embedding, and the fix line restores the contract's boundaries;
- slow (three server starts: 101, 229 and 193 s at load average 20 on the shared 2 cores, 8.7 min in all;
  the page's own run of every step took 4.6 min at load average 5): each server step rerun, its verdict
  lines equal to the page's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "tutorial.md"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


docs_regen = _load("docs_regen", REPO / "scripts" / "docs_regen.py")
tutorial = _load("tutorial_script", REPO / "scripts" / "tutorial.py")

SLOT0 = "slot 0 is B_0 (embedding output); contract says B_2"
FIX = "draft config.json, eagle_config.eagle_aux_hidden_state_layer_ids: [1, 14, 26]"
WANT = {
    "1": {"exit": ["0"], "has": ["ok contracts/smollm2-135m.yaml"]},
    "2": {"exit": ["0"], "has": ["CONFORMS: smollm2-135m-eagle3"]},
    "3": {"exit": ["1"], "has": ["VIOLATIONS: smollm2-135m-eagle3", "DIAGNOSIS 1/1: K2", SLOT0, FIX]},
    "4": {"exit": ["0"], "has": ["CONFORMS: smollm2-135m-eagle3"]},
    "5": {"exit": ["2", "0"], "has": ["eagle_aux_hidden_state_layer_ids = [-1, 1, 14]: negative id [-1]",
                                      "ok my-pair.yaml"]},
}
"""What each step must show: the exit statuses in order, and lines the reader is told to look for. The
fix is the training side's ids (the draft was trained on B_2, B_15, B_27: [1, 14, 26] under SGLang's +1)."""


def page_steps(page: Path = PAGE) -> dict[str, str]:
    """Step number -> the transcript in its block (fence and caption left out)."""
    lines, blocks = docs_regen.parse(page)
    out = {}
    for b in blocks:
        m = re.fullmatch(r"python scripts/tutorial\.py step (\d)", b.command)
        if m:
            body = docs_regen.current(lines, b).split("\n")
            out[m.group(1)] = "\n".join(x for x in body if not x.startswith(("```", "<sub>")))
    return out


def problems(step: str, text: str) -> list[str]:
    """What the transcript of ``step`` lacks of :data:`WANT` (empty: it shows the step's verdicts)."""
    want = WANT[step]
    exits = re.findall(r"^exit status (\d+)$", text, flags=re.M)
    bad = [] if exits == want["exit"] else [f"step {step}: exit statuses {exits}, want {want['exit']}"]
    return bad + [f"step {step}: no line with {h!r}" for h in want["has"] if h not in text]


def verdict_lines(text: str) -> list[str]:
    """The lines a verdict is read from, without the counts that depend on how the server batched: the
    report's first line, the diagnosis (header without its capture count, evidence, fix) and the exit
    statuses."""
    keep, in_diag = [], False
    for line in text.split("\n"):
        if line.startswith(("CONFORMS: smollm2", "VIOLATIONS: smollm2", "exit status ", "ok ")):
            keep.append(line)
        elif line.startswith("DIAGNOSIS"):
            keep.append(re.sub(r" \(\d+/\d+ captures\)", "", line))
            in_diag = True
        elif in_diag and not line.strip():
            in_diag = False
        elif in_diag:
            keep.append(line)
    return keep


def test_the_page_has_every_step_and_each_shows_its_verdicts():
    steps = page_steps()
    assert sorted(steps) == sorted(WANT), f"docs/tutorial.md's steps: {sorted(steps)}"
    assert [p for s, text in steps.items() for p in problems(s, text)] == []
    assert "VIOLATIONS" not in steps["2"] + steps["4"] and "CONFORMS" not in steps["3"]


def test_the_check_fails_on_a_page_whose_broken_step_was_not_caught():
    """The fault this check exists for: the seed incident's step showing the correct pair's transcript (the
    edit that did not break anything, or a check that let it through), or its fix line gone."""
    steps = page_steps()
    assert problems("3", steps["2"]) != []
    assert problems("3", steps["3"].replace(FIX, "")) == [f"step 3: no line with {FIX!r}"]
    assert problems("5", steps["5"].replace("exit status 2", "exit status 0")) != []


def _edit(tmp_path: Path, ids: list[int]) -> list[int]:
    """Run the page's edit command (as shown) on a copy of the shipped draft's config; the ids it leaves."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(["bash", "-c", tutorial.set_ids_command(ids)], cwd=tmp_path, env=env, check=True)
    cfg = json.loads((tmp_path / "smollm2" / "draft" / "config.json").read_text())
    return cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]


def test_the_page_edit_makes_sglang_capture_the_embedding_and_the_fix_restores_the_contract(tmp_path):
    """The user's action of step 3, through SGLang's own setter rule (the installed llama.py, called on a
    stub): B_0, B_2, B_15 where the contract says B_2, B_15, B_27; the fix line's ids give the contract's."""
    pytest.importorskip("sglang")
    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.engine_ids.base import TranslationError
    from eagle3_conformance.engine_ids.sglang import sglang_rule
    from eagle3_conformance.engine_ids.translate import tool_to_boundaries

    draft = tmp_path / "smollm2" / "draft"
    draft.mkdir(parents=True)
    shutil.copy(REPO / "fixtures" / "drafts" / "smollm2-135m-eagle3" / "config.json", draft / "config.json")
    c = load_contract(REPO / "contracts" / "smollm2-135m.yaml")
    L = c.target.num_hidden_layers
    seed = _edit(tmp_path, tutorial.SEED_IDS)
    # layers_to_capture entry i is the residual stream entering layer i, B_i (B_0: the embedding output)
    served = sglang_rule(c.target.architecture).layers_to_capture(L, seed)
    assert [f"B_{i}" for i in served] == ["B_0", "B_2", "B_15"]
    with pytest.raises(TranslationError, match=r"id -1 reaches B_0"):  # the static reading refuses it too
        tool_to_boundaries("sglang", seed, L, allow_embedding=True)
    fixed = tool_to_boundaries("sglang", _edit(tmp_path, tutorial.TRAINED_IDS), L)
    assert [str(b) for b in fixed] == [str(b) for b in c.capture.boundaries]


@pytest.mark.slow
@pytest.mark.soak
@pytest.mark.parametrize("step", ["2", "3", "4"])
def test_each_server_step_prints_the_verdicts_the_page_shows(step):
    """The recorded blocks rerun: a real SGLang CPU server per step (1.5 to 4 min each, by load), in the soak
    tier (`tox -e soak`, and `tox -e docs -- --expensive` reruns the page), to keep CI within 60 minutes. In
    CI the same catch on a real server is tests/test_own_server_live.py's; the fast tests here keep the
    page's verdicts and the edit's effect on SGLang's own setter."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    p = subprocess.run([sys.executable, "scripts/tutorial.py", "step", step], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, f"step {step}: exit {p.returncode}\n{p.stdout[-4000:]}\n{p.stderr[-2000:]}"
    assert problems(step, p.stdout) == []
    assert verdict_lines(p.stdout) == verdict_lines(page_steps()[step]), \
        f"docs/tutorial.md step {step} differs from what the tool prints now: `tox -e docs -- --expensive`"
