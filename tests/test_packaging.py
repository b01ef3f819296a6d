"""The package as users install it (issue 24): declared dependencies and extras agree with the
engine releases the paths are tested with, every package is in the wheel, the embedded fixtures
are named, a path skips an engine that is missing or of another release, and the pytest plugin is
inert in a session that does not ask for the suite. The built wheel in a clean virtual
environment: :func:`test_install_as_users_get_it` (slow; scripts/check_install.py, also a step of
.ci/run)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from eagle3_conformance.environment import engines, shipped
from eagle3_conformance.testbed.fixture_base import known_fixtures

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_extras_pin_the_tested_engine_releases():
    extras = PYPROJECT["project"]["optional-dependencies"]
    for dist, spec in engines.TESTED.items():
        assert f"{dist}{spec}" in extras[dist], (dist, extras[dist])


def test_core_dependencies_hold_no_torch_and_no_engine():
    core = " ".join(PYPROJECT["project"]["dependencies"]).lower()
    for heavy in ("torch", "transformers", "sglang", "vllm", "speculators", "specforge", "hypothesis", "ray"):
        assert heavy not in core


def test_every_package_is_in_the_wheel():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    code = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "eagle3_conformance").rglob("__init__.py")}
    data = {"eagle3_conformance._contracts", "eagle3_conformance._contracts.schema", "eagle3_conformance._docs"}
    assert listed == code | data


def test_embedded_fixtures_named():
    assert list(shipped.EMBEDDED_FIXTURES) == known_fixtures()


def test_example_contracts_are_the_public_pairs(repo):
    names = {p.name for p in shipped.example_contracts()}
    assert "llama-3.1-8b-instruct--lmsys-eagle3.yaml" in names
    assert not {n for n in names if n.startswith(("tiny-", "smollm2-"))}
    assert shipped.SCHEMA_PATH == repo / "contracts" / "schema" / "contract.schema.json"


def test_untested_engine_release_skips_the_path(monkeypatch):
    """The fault: SGLang 0.5.22 installed where the paths run on 0.5.23's internals."""
    from eagle3_conformance.paths import get

    assert engines.problem("sglang") is None  # the lock's release
    monkeypatch.setattr(engines, "installed", lambda dist: "0.5.22" if dist == "sglang" else "9")
    why = engines.problem("sglang")
    assert why and "SGLang 0.5.22 is installed" in why and "sglang==0.5.23" in why
    pair = type("P", (), {"target_dir": None, "draft_dir": None, "data_dir": None})()
    assert get("sglang-engine").needs.unmet(pair) == why  # a path tested on the lock's release only
    assert "sglang==0.5.23 or sglang==0.5.14" in get("sglang-extend").needs.unmet(pair)  # and on 0.5.14
    monkeypatch.setenv(engines.UNTESTED_ENV, "1")
    assert engines.problem("sglang") is None


def test_missing_engine_says_how_to_install(monkeypatch):
    monkeypatch.setattr(engines, "installed", lambda dist: None)
    assert engines.problem("vllm") == ("vLLM is not installed in this environment "
                                       "(pip install 'eagle3-conformance[vllm]')")
    assert "eagle3-conformance[reference]" in engines.problem("torch")


def test_command_missing_an_optional_dependency_names_the_extra(monkeypatch, capsys, repo):
    """The fault: torch absent (a core-only install) under a command that needs it."""
    from eagle3_conformance import cli
    from eagle3_conformance.cli import check_data

    def needs_torch(args):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(check_data, "run", needs_torch)
    rc = cli.main(["check-data", str(repo / "contracts" / "tiny-llama.yaml"), "--data", str(repo), "--no-reference"])
    err = capsys.readouterr().err
    assert rc == 2 and "check-data: torch is not installed" in err and "eagle3-conformance[reference]" in err
    assert engines.missing_dependency(ModuleNotFoundError("x", name="not_ours")) is None


@pytest.mark.parametrize("expr, asked", [
    ("", False), ("conformance", True), ("not conformance and not gpu", False),
    ("not conformance and not gpu and not slow", False), ("conformance and not gpu", True),
    ("slow or conformance", True), ("slow", False),
])
def test_the_suite_is_asked_for_by_the_mark_expression(expr, asked):
    from eagle3_conformance.suite.outcomes import asked as _asked

    opts = {"--contract": [], "markexpr": expr}
    config = type("C", (), {"getoption": lambda self, name, default=None: opts.get(name, default)})()
    assert _asked(config) is asked


UNRELATED = '''
import sys
import warnings


def test_session_untouched():
    from hypothesis import settings
    from hypothesis._settings import is_in_ci

    # hypothesis' own choice, untouched by the plugin: its built-in 'ci' profile where a CI variable
    # is set (CI=true in .ci/run), else 'default'
    assert settings.get_current_profile_name() == ("ci" if is_in_ci() else "default")
    assert not any("sglang" in str(getattr(f[3], "pattern", f[3])) for f in warnings.filters)
    assert "torch" not in sys.modules
'''


def test_plugin_inert_in_an_unrelated_project(pytester, repo):
    """A project with its own tests and a contract under contracts/: plain pytest runs its test
    only, with hypothesis' default profile and no engine warning filter (the plugin used to load
    its ci profile and add filters into every session)."""
    pytester.makepyfile(test_unrelated=UNRELATED)
    pytester.mkdir("contracts")
    (pytester.path / "contracts" / "tiny-llama.yaml").write_text((repo / "contracts" / "tiny-llama.yaml").read_text())
    pytester.makeini("[pytest]\n")
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-v")
    res.assert_outcomes(passed=1)
    assert "tiny-llama" not in res.stdout.str()


@pytest.mark.slow
def test_install_as_users_get_it(tmp_path):
    """Build the sdist and wheel, install the wheel into a clean venv (no lock), and run the
    authoring commands, an unrelated project's pytest (hypothesis absent / present) and the suite
    there. Needs the package index (core dependencies, pytest, hypothesis); about 1 minute."""
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "check_install.py"), str(tmp_path / "work")],
                       capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, (p.stdout + p.stderr)[-6000:]
    assert "install check passed" in p.stdout


#: a core-only install (``pip install eagle3-conformance``, no ``[reference]``, no engine) inside this
#: environment: torch, numpy, transformers and the engines unimportable and their distributions absent
#: from the package metadata (what the engine probes read); then the CLI's own entry point
_NO_TORCH = '''
import importlib.metadata as md
import sys
import os
HEAVY = ("torch", "numpy", "transformers", "safetensors", "sglang", "vllm", "speculators", "specforge",
         *filter(None, os.environ.get("HIDE_ALSO", "").split(",")))
for heavy in HEAVY:
    sys.modules[heavy] = None
_version = md.version
def version(dist):
    if dist.lower() in HEAVY:
        raise md.PackageNotFoundError(dist)
    return _version(dist)
md.version = version
from eagle3_conformance.cli import main
sys.argv = ["eagle3-conformance", *sys.argv[1:]]
sys.exit(main())
'''


README = (REPO / "README.md").read_text()


def _core_only(args, cwd, hide_also: str = ""):
    return subprocess.run([sys.executable, "-c", _NO_TORCH, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "HIDE_ALSO": hide_also})


def test_authoring_verbs_run_without_torch(tmp_path):
    """The fault (CI of stop 47): ``init`` wrote the contract, then a note it prints imported
    ``eagle3_conformance.checks`` (torch) and a core-only install exited 2 with "torch is not
    installed". init, validate and translate read config.json files only and must run there; the
    built wheel in a clean venv checks the same (scripts/check_install.py, slow), this catches it in
    the fast tier. Shown failing on that import: with ``MAX_EXP`` read from checks.runtime again, init
    exits 2."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import check_install
    finally:
        sys.path.remove(str(REPO / "scripts"))
    check_install.user_pair(tmp_path)
    p = _core_only(["init", "--target", "models/target", "--draft", "models/draft", "--engine", "specforge==0.2.0",
                    "-o", "my-pair.yaml"], tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "wrote my-pair.yaml" in p.stdout and "not installed" not in p.stderr
    p = _core_only(["validate", "my-pair.yaml"], tmp_path)
    assert p.returncode == 0 and "ok my-pair.yaml" in p.stdout, p.stdout + p.stderr
    p = _core_only(["translate", "my-pair.yaml", "--to", "specforge"], tmp_path)
    assert p.returncode == 0 and "ids:" in p.stdout, p.stdout + p.stderr
    # newuser finding 10: "sglang cannot capture [...]: sglang is not installed" read as a refusal of the ids
    p = _core_only(["translate", "my-pair.yaml", "--to", "sglang"], tmp_path)
    assert p.returncode == 2 and "cannot capture" not in p.stderr, p.stderr
    assert "cannot translate to sglang here: sglang is not installed" in p.stderr
    assert "pip install 'eagle3-conformance[sglang]'" in p.stderr, p.stderr
    # the README's --engine spelling: plain vllm applies the recorded rule anywhere; a pin asks that release's
    # code, so without vLLM it is refused and says how to go on
    p = _core_only(["init", "--target", "models/target", "--draft", "models/draft", "--engine", "vllm", "-o",
                    "v.yaml"], tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    p = _core_only(["init", "--target", "models/target", "--draft", "models/draft", "--engine", "vllm==0.33.0",
                    "-o", "v2.yaml"], tmp_path)
    assert p.returncode == 2 and "vLLM==0.33.0 is not installed" in p.stderr, p.stderr
    assert "without a version" in p.stderr and "tox -e vllm" in p.stderr and not (tmp_path / "v2.yaml").exists()
    assert "`vllm` (`vllm==X.Y.Z` asks that release's model runners, so only where it is" in README
    # the same blocker does stop a verb that needs torch: the test can fail
    (tmp_path / "data").mkdir()
    p = _core_only(["check-data", "my-pair.yaml", "--data", "data", "--no-reference"], tmp_path)
    assert p.returncode == 2 and "torch is not installed" in p.stderr, p.stdout + p.stderr


def test_accept_monitor_and_merge_reports_run_without_torch(tmp_path, tiny):
    """newuser findings 3 and 7 on a core-only install: ``accept`` sent its 64 requests, then died with
    "torch is not installed" (exit 2, no baseline written: the checks package imported torch for helpers
    accept does not use); ``merge-reports`` (JSON only) needed torch; ``monitor`` without
    prometheus_client said "internal error ... ModuleNotFoundError". Now accept and merge-reports run
    there, and monitor names the extra to install. Shown failing on the old ``import torch`` in
    checks/common.py (accept and merge-reports exit 2)."""
    sys.path.insert(0, str(REPO / "tests"))
    try:
        from test_server_accept import CONTRACT, sglang
    finally:
        sys.path.remove(str(REPO / "tests"))
    f = sglang()
    try:
        p = _core_only(["accept", "--server", f.url, "--contract", CONTRACT, "--prompts", "8", "--record",
                        "b.json"], tmp_path)
        assert p.returncode == 0 and (tmp_path / "b.json").exists(), p.stdout + p.stderr
        assert "ACCEPTANCE" in p.stdout and "torch" not in p.stderr, p.stdout + p.stderr
        p = _core_only(["monitor", "--server", f.url, "--baseline", "b.json", "--duration", "1"], tmp_path,
                       hide_also="prometheus_client")
        assert p.returncode == 2 and "eagle3-conformance[monitor]" in p.stderr, p.stdout + p.stderr
        assert "internal error" not in p.stderr and "Traceback" not in p.stderr, p.stderr
    finally:
        f.close()
    from eagle3_conformance.cli import main

    base = ["check-data", str(REPO / "contracts" / "tiny-llama.yaml"), "--data", str(tiny.data_dir),
            "--no-reference", "--quiet"]
    assert main([*base, "--shard", "0/2", "--json", str(tmp_path / "s0.json")]) == 0
    assert main([*base, "--shard", "1/2", "--json", str(tmp_path / "s1.json")]) == 0
    p = _core_only(["merge-reports", "m.json", "s0.json", "s1.json"], tmp_path)
    assert p.returncode == 0 and "merged 2 reports into m.json" in p.stdout, p.stdout + p.stderr
