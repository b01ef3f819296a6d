"""Behaviour identity across restructurings (issue #11): what a user sees must not change.

Snapshots in ``tests/data/identity/`` were taken on the code *before* the CLI, the paths, the
fault operators and authoring were restructured, and are compared here after it:

- ``cli_help.json``: ``conformance --help`` and ``conformance VERB --help`` of every verb;
- ``invocations.json``: exit code, stdout/stderr where deterministic, and the JSON documents'
  keys and findings (counted by path/check/slot/status, plus a digest of every finding) of
  representative invocations of every verb, good and bad input;
- ``plugin.json``: the pytest plugin's options (``pytest --help``), and the conformance suite
  (``pytest -m conformance`` on the fixture contracts): outcomes, and its findings counted and
  digested;
- ``kill_matrix.json`` (compared in ``test_kill_matrix.py``): the kill-matrix grid.

Paths, temporary directories and timings are normalised away (and, in written contract files,
where long lines fold). The suite's draws do not depend on the package's source
(``profiles.source_independent_draws``: before it, hypothesis' literals-from-local-source pool
moved ``plugin.json``'s sglang-decode counts on any edit that added a constant). When a change of behaviour is
intended, regenerate the snapshots and review their diff::

    PYTHONPATH=. python tests/test_identity.py --write
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import pytest

REPO = Path(__file__).resolve().parent.parent
SNAP = REPO / "tests" / "data" / "identity"
TINY = REPO / "contracts" / "tiny-llama.yaml"
VERBS = ("validate", "check-data", "schema", "init", "calibrate", "translate", "faults", "merge-reports",
         "check-offline")
COLUMNS = "120"


# --- normalisation ---------------------------------------------------------------------------


class Norm:
    """Replaces machine-specific strings (the repository, temporary directories) by tokens."""

    def __init__(self, tmp: Optional[Path] = None):
        self.subs = []
        if tmp is not None:
            self.subs += [(str(tmp.resolve()), "<TMP>"), (str(tmp), "<TMP>")]
        self.subs += [(str(REPO.resolve()), "<REPO>"), (str(REPO), "<REPO>")]

    def __call__(self, v: Any) -> Any:
        if isinstance(v, str):
            for a, b in self.subs:
                v = v.replace(a, b)
            v = re.sub(r"fixtures/_build/([a-z-]+)-[0-9a-f]{12}", r"fixtures/_build/\1-<HASH>", v)
            return v
        if isinstance(v, list):
            return [self(x) for x in v]
        if isinstance(v, dict):
            return {k: self(x) for k, x in v.items()}
        return v


def _digest(items: list) -> str:
    text = "\n".join(sorted(json.dumps(x, sort_keys=True) for x in items))
    return hashlib.sha256(text.encode()).hexdigest()


_FLOAT_IN_TEXT = re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?:[eE][-+]?\d+)?")


def mask_floats(v: Any) -> Any:
    """Every float, and every decimal number written in a string, replaced by ``<float>``.

    Measured values (cosines, RMS, norms) differ in their last bits between CPUs (torch picks
    AVX2 or AVX-512 kernels, which sum in different orders): the snapshots written on one 2-core
    VM did not match another's. The digest keeps everything else: which findings, their paths,
    checks, slots, statuses, samples, integer counts and the words of every message."""
    if isinstance(v, float):
        return "<float>"
    if isinstance(v, str):
        return _FLOAT_IN_TEXT.sub("<float>", v)
    if isinstance(v, list):
        return [mask_floats(x) for x in v]
    if isinstance(v, dict):
        return {k: mask_floats(x) for k, x in v.items()}
    return v


def findings_summary(findings: list[dict], norm: Norm) -> dict[str, Any]:
    """Findings counted per (path, check, slot, status), and a digest of all of them (normalised,
    floats masked: :func:`mask_floats`)."""
    counts = Counter(f"{f['path']} | {f['check']} | {f['slot']} | {f['status']}" for f in findings)
    return {"n": len(findings), "counts": dict(sorted(counts.items())),
            "sha256": _digest(mask_floats(norm(findings)))}


_VOLATILE_META = {"seconds", "seconds_max", "seconds_sum", "peak_rss_mb",  # machine-dependent
                  "threads_per_worker", "threads_per_part"}


def report_summary(path: Path, norm: Norm) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    meta = doc.get("meta", {})
    return {"keys": sorted(doc), "contract": norm(doc["contract"]),
            "finding_keys": sorted({k for f in doc["findings"] for k in f}),
            "meta_keys": sorted(meta),
            "meta": norm({k: v for k, v in meta.items() if k not in _VOLATILE_META}),
            "findings": findings_summary(doc["findings"], norm)}


# --- running the CLI in-process ----------------------------------------------------------------


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    from eagle3_conformance.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = COLUMNS
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 2
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return int(rc), out.getvalue(), err.getvalue()


def snapshot_help() -> dict[str, Any]:
    out = {}
    for argv in [[]] + [[v] for v in VERBS]:
        rc, so, se = run_cli(argv + ["--help"])
        out[" ".join(["eagle3-conformance"] + argv + ["--help"])] = {"rc": rc, "stdout": so, "stderr": se}
    return out


def _last_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return lines[-1] if lines else ""


def snapshot_invocations() -> dict[str, Any]:
    """Representative invocations of every verb (fixture tiny-llama), normalised."""
    import torch

    from eagle3_conformance.reference import load_reference_model
    from eagle3_conformance.testbed.datagen import write_speculators_dataset
    from eagle3_conformance.testbed.fixtures import build_fixture, sample_token_ids

    tiny = build_fixture("tiny-llama")
    tmp = Path(tempfile.mkdtemp(prefix="conformance-identity-"))
    norm = Norm(tmp)
    res: dict[str, Any] = {}

    def record(name: str, argv: list, *, stdout: str = "full", json_out: Optional[Path] = None,
               files: tuple = ()) -> None:
        rc, so, se = run_cli([str(a) for a in argv])
        entry: dict[str, Any] = {"argv": norm([str(a) for a in argv]), "rc": rc, "stderr": norm(se)}
        if stdout == "full":
            entry["stdout"] = norm(so)
        elif stdout == "last":
            entry["stdout_last_line"] = norm(_last_line(so))
        if json_out is not None:
            entry["json"] = report_summary(json_out, norm) if json_out.exists() else None
        for f in files:
            entry[f"file {norm(str(f))}"] = norm(Path(f).read_text()) if Path(f).exists() else None
        res[name] = entry

    try:
        # validate
        record("validate all", ["validate", *sorted((REPO / "contracts").glob("*.yaml"))])
        bad = tmp / "bad.yaml"
        bad.write_text(TINY.read_text().replace("feature_width: 192", "feature_width: 100"))
        record("validate bad", ["validate", bad])
        # schema
        rc, so, se = run_cli(["schema"])
        res["schema"] = {"rc": rc, "stdout_sha256": hashlib.sha256(so.encode()).hexdigest(), "stderr": se}
        # translate
        for tool in ("sglang", "vllm", "speculators", "specforge"):
            record(f"translate {tool} --json", ["translate", TINY, "--to", tool, "--json"])
        record("translate sglang", ["translate", TINY, "--to", "sglang"])
        record("translate bad contract", ["translate", tmp / "missing.yaml", "--to", "sglang"])
        # check-data
        j = tmp / "good.json"
        record("check-data conforming", ["check-data", TINY, "--data", tiny.data_dir, "--reference", tiny.target_dir,
                                         "--json", j], stdout="last", json_out=j)
        ref = load_reference_model(tiny.target_dir)
        seed = write_speculators_dataset(tmp / "seed", ref, sample_token_ids(tiny.spec, 4, 3, 16, seed=11),
                                         slots=["B_0", "B_2", "B_4", "B_5"])
        j = tmp / "seed.json"
        record("check-data seed incident", ["check-data", TINY, "--data", seed, "--reference", tiny.target_dir,
                                            "--json", j], stdout="last", json_out=j)
        j = tmp / "noref.json"
        record("check-data no reference", ["check-data", TINY, "--data", seed, "--no-reference", "--json", j,
                                           "--quiet"], json_out=j)
        j = tmp / "counts.json"
        record("check-data counts", ["check-data", TINY, "--data", tiny.data_dir, "--json", j, "--json-passes",
                                     "counts", "--sample", "2", "--quiet"], json_out=j)
        record("check-data missing dir", ["check-data", TINY, "--data", tmp / "nope"])
        record("check-data not a dataset", ["check-data", TINY, "--data", tmp])
        record("check-data bad shard", ["check-data", TINY, "--data", tiny.data_dir, "--shard", "3/2"])
        record("check-data json over input", ["check-data", TINY, "--data", tiny.data_dir, "--json", TINY])
        record("check-data usage", ["check-data"])
        # merge-reports
        parts = []
        for i in range(2):
            p = tmp / f"shard{i}.json"
            record(f"check-data shard {i}/2", ["check-data", TINY, "--data", tiny.data_dir, "--shard", f"{i}/2",
                                               "--json", p, "--quiet"], json_out=p)
            parts.append(p)
        m = tmp / "merged.json"
        record("merge-reports", ["merge-reports", m, *parts], json_out=m)
        m1 = tmp / "merged-missing.json"
        record("merge-reports missing shard", ["merge-reports", m1, parts[0]], json_out=m1)
        record("merge-reports out is input", ["merge-reports", parts[0], parts[0], parts[1]])
        # init
        for role, d in (("tiny-target", tiny.target_dir), ("tiny-draft", tiny.draft_dir)):
            (tmp / role).mkdir()
            shutil.copy(Path(d) / "config.json", tmp / role / "config.json")
        out = tmp / "init" / "derived.yaml"
        out.parent.mkdir()  # init creates no directory (tests/test_authoring_seams.py)
        record("init", ["init", "--target", tmp / "tiny-target", "--draft", tmp / "tiny-draft", "-o", out],
               files=(out,))
        record("init exists", ["init", "--target", tmp / "tiny-target", "--draft", tmp / "tiny-draft", "-o", out])
        record("init bad engine", ["init", "--target", tmp / "tiny-target", "--draft", tmp / "tiny-draft",
                                   "--engine", "trt", "-o", tmp / "x.yaml"])
        # calibrate
        cal = tmp / "calibrated.yaml"
        record("calibrate", ["calibrate", TINY, "--data", tiny.data_dir, "--reference", tiny.target_dir, "-o", cal],
               files=(cal,))
        record("calibrate seed incident", ["calibrate", TINY, "--data", seed, "--reference", tiny.target_dir,
                                           "-o", tmp / "refused.yaml"])
        record("calibrate nothing", ["calibrate", TINY, "--no-reference"])
        # check-offline
        off = tmp / "legacy"
        off.mkdir()
        for i, ids in enumerate(sample_token_ids(tiny.spec, 2, 6, 12, seed=5)):
            r = ref.capture(ids)
            torch.save({"input_ids": torch.tensor(ids), "loss_mask": torch.ones(len(ids), dtype=torch.long),
                        "hidden_states": [r.boundary(s).bfloat16() for s in ("B_2", "B_4", "B_5", "B_8")]},
                       off / f"sample_{i}.pt")
        j = tmp / "offline.json"
        record("check-offline", ["check-offline", TINY, "--files", off, "--reference", tiny.target_dir, "--json", j],
               stdout="last", json_out=j)
        record("check-offline nothing", ["check-offline", TINY, "--files", tmp / "none-*.pt"])
        # faults (argument errors only: the matrix itself is compared in test_kill_matrix.py)
        record("faults bad option", ["faults", "--nope"])
        record("no verb", [])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def _pytest(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "COLUMNS": COLUMNS}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def _options_section(help_text: str) -> str:
    lines = help_text.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("EAGLE-3 draft-boundary conformance"))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return "\n".join(lines[start:end])


def snapshot_plugin() -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="conformance-identity-plugin-"))
    norm = Norm(tmp)
    try:
        h = _pytest(["--help"], REPO)
        out = tmp / "suite.json"
        # the contracts the snapshot was taken on: the synthetic fixtures and the public pairs (the
        # real-model pairs are judged by tests/test_real_model.py and `tox -e conformance`)
        picked = [a for p in sorted((REPO / "contracts").glob("*.yaml")) if not p.name.startswith("smollm2")
                  for a in ("--contract", str(p))]
        r = _pytest(["-m", "conformance", "-q", "-rs", "--conformance-json", str(out), *picked], REPO)
        # deselected: the project's own tests, whose number is no behaviour of the suite
        outcomes = dict(sorted((k, int(n)) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)",
                                                                   _last_line(r.stdout))))
        # "SKIPPED [8] eagle3_conformance/suite/plugin.py:157: reason": the count and the reason, not the line
        skips = sorted(norm(re.sub(r"^SKIPPED (\[\d+\]) \S+:\d+: ", r"\1 ", x)) for x in r.stdout.splitlines()
                       if x.startswith("SKIPPED"))
        doc = json.loads(out.read_text()) if out.exists() else {"contract": None, "findings": []}
        return {"options": _options_section(h.stdout),
                "suite": {"rc": r.returncode, "outcomes": outcomes, "skipped": skips,
                          "contract": doc["contract"], "findings": findings_summary(doc["findings"], norm)}}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def kill_matrix_grid(doc: dict[str, Any]) -> dict[str, Any]:
    """The parts of ``eagle3-conformance faults --json`` that must not change (no timings)."""
    return {"paths": doc["paths"], "cells": doc["cells"], "operators": doc["operators"],
            "false_positives": doc["false_positives"]}


# --- the tests ---------------------------------------------------------------------------------


def _load(name: str) -> Any:
    return json.loads((SNAP / name).read_text())


def _canon(entry: Any) -> Any:
    """Written contract files compared with whitespace runs collapsed and the schema line's
    relative path hidden: where the YAML writer folds a long line, and the path from the output
    to the repository's schema, depend on where the checkout and the temporary directory are."""
    if not isinstance(entry, dict):
        return entry
    out = dict(entry)
    for k, v in entry.items():
        if k.startswith("file ") and isinstance(v, str):
            v = re.sub(r"\$schema=\S*contracts/schema/contract\.schema\.json", "$schema=<SCHEMA>", v)
            out[k] = re.sub(r"\s+", " ", v)
    return out


def _compare(got: dict, want: dict, what: str) -> None:
    assert set(got) == set(want), f"{what}: entries differ: {sorted(set(got) ^ set(want))}"
    for k in want:
        assert _canon(got[k]) == _canon(want[k]), f"{what}: {k!r} changed"


def test_cli_help_identical():
    """``--help`` of the command and of every verb is what it was before the restructuring."""
    _compare(snapshot_help(), _load("cli_help.json"), "CLI help")


def test_cli_invocations_identical():
    """Exit codes, messages, written files and JSON reports of representative invocations."""
    _compare(snapshot_invocations(), _load("invocations.json"), "CLI invocations")


@pytest.mark.slow
def test_plugin_options_and_suite_identical():
    """The plugin's options and the conformance suite's outcomes and findings."""
    pytest.importorskip("sglang")
    got, want = snapshot_plugin(), _load("plugin.json")
    assert got["options"] == want["options"]
    assert got["suite"]["outcomes"] == want["suite"]["outcomes"]
    assert got["suite"]["skipped"] == want["suite"]["skipped"]
    assert got["suite"]["findings"]["counts"] == want["suite"]["findings"]["counts"]
    assert got["suite"] == want["suite"]


def write_snapshots(which: set[str]) -> None:
    SNAP.mkdir(parents=True, exist_ok=True)

    def dump(name: str, obj: Any) -> None:
        (SNAP / name).write_text(json.dumps(obj, indent=1, sort_keys=False) + "\n")
        print(f"wrote {SNAP / name}")

    if "help" in which:
        dump("cli_help.json", snapshot_help())
    if "invocations" in which:
        dump("invocations.json", snapshot_invocations())
    if "plugin" in which:
        dump("plugin.json", snapshot_plugin())
    if "faults" in which:
        with tempfile.TemporaryDirectory() as t:
            out = Path(t) / "m.json"
            rc, _, _ = run_cli(["faults", "--json", str(out)])
            assert rc == 0
            dump("kill_matrix.json", kill_matrix_grid(json.loads(out.read_text())))


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit("usage: PYTHONPATH=. python tests/test_identity.py --write [help|invocations|plugin|faults ...]")
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    chosen = {a for a in sys.argv[1:] if not a.startswith("-")} or {"help", "invocations", "plugin", "faults"}
    write_snapshots(chosen)
