"""The project's own tests are honest (issue 43 item 6): every test asserts something, and CI sees skips.

- :func:`asserting_tests` scans every test module's AST: a test asserts when its body holds an ``assert``,
  a ``pytest.raises`` / ``warns`` / ``fail`` / ``deprecated_call``, a pytester result's asserting method
  (``assert_outcomes``, ``fnmatch_lines``, ...) or any ``assert_*`` method (mocks), or calls a function of
  its own module or of the tests' helper modules that does (transitively).
- ``tests/expected_skips.txt`` and its plugin (:mod:`expected_skips`): a skip that is not listed, with its
  reason, for the tox environment fails the run.
"""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

import expected_skips
import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PYTEST_ASSERTS = {"raises", "warns", "fail", "deprecated_call"}
RESULT_ASSERTS = {"assert_outcomes", "fnmatch_lines", "re_match_lines", "no_fnmatch_line", "no_re_match_line"}
HELPER_MODULES = ("conftest.py", "html_docs.py", "layers.py", "expected_skips.py")
pytest_plugins = ["pytester"]


def _asserts_directly(fn: ast.AST) -> bool:
    for n in ast.walk(fn):
        if isinstance(n, ast.Assert):
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            name, owner = n.func.attr, n.func.value
            if name in PYTEST_ASSERTS and isinstance(owner, ast.Name) and owner.id == "pytest":
                return True
            if name in RESULT_ASSERTS or name.startswith("assert_"):
                return True
    return False


def _functions(tree: ast.AST) -> dict[str, ast.AST]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _called_names(fn: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            out.add(n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", ""))
        elif isinstance(n, ast.Name):  # a helper handed on (``map(check, ...)``, a decorator)
            out.add(n.id)
    return out


def asserting(funcs: dict[str, ast.AST], known: set[str] = frozenset()) -> set[str]:
    """The names among ``funcs`` that assert, directly or through a function that does (``known``:
    helpers of other modules that assert)."""
    good = {k for k, v in funcs.items() if _asserts_directly(v)} | set(known)
    grew = True
    while grew:
        grew = False
        for k, v in funcs.items():
            if k not in good and _called_names(v) & good:
                good.add(k)
                grew = True
    return good


def helpers_that_assert() -> set[str]:
    funcs: dict[str, ast.AST] = {}
    for name in HELPER_MODULES:
        funcs.update(_functions(ast.parse((TESTS / name).read_text())))
    return asserting(funcs)


def unasserting_tests(source: str, known: set[str]) -> list[str]:
    """``name:line`` of every ``test_*`` function of ``source`` that asserts nothing."""
    funcs = _functions(ast.parse(source))
    good = asserting(funcs, known)
    return [f"{k}:{v.lineno}" for k, v in funcs.items() if k.startswith("test_") and k not in good]


def test_every_test_asserts_something():
    known = helpers_that_assert()
    bad = [f"{p.name}::{t}" for p in sorted(TESTS.glob("test_*.py"))
           for t in unasserting_tests(p.read_text(), known)]
    assert bad == [], "tests that assert nothing (a test that cannot fail is a defect): " + ", ".join(bad)


def test_the_scan_flags_a_test_that_only_prints():
    """The fault the scan exists for (test_counts_report printed a dict and asserted nothing)."""
    src = '''
import pytest

COUNTS = {}

def _check(x):
    assert x

def test_prints():
    print(COUNTS)

def test_calls_a_helper_that_asserts():
    _check(1)

def test_raises():
    with pytest.raises(ValueError):
        int("x")

def test_pytester(pytester):
    pytester.runpytest().assert_outcomes(passed=1)
'''
    assert unasserting_tests(src, set()) == ["test_prints:9"]


# --- expected skips -------------------------------------------------------------------------------------

def _tox_sections() -> dict[str, str]:
    """tox environment -> the expected-skips section its setenv names."""
    cp = configparser.ConfigParser(interpolation=None)
    cp.read(REPO / "tox.ini")
    out = {}
    for sec in cp.sections():
        for line in cp[sec].get("setenv", "").splitlines():
            key, _, val = line.partition("=")
            if key.strip() == expected_skips.ENV:
                out[sec.removeprefix("testenv:")] = val.strip()
    return out


def test_every_tox_environment_ci_runs_names_its_expected_skips():
    sections = _tox_sections()
    for env in ("tests", "all", "conformance", "vllm", "sglang-0.5.14", "vllm-cpu"):  # every tox env .ci/run runs
        assert env in sections, f"tox -e {env} sets no {expected_skips.ENV}"
        entries = expected_skips.load(sections[env])  # raises on a missing section or a bad line
        for e in entries:
            file = e.pattern.split("::", 1)[0]
            assert any(expected_skips.node_matches(file, str(p.relative_to(REPO)))
                       for p in [*TESTS.glob("test_*.py"), *(REPO / "contracts").rglob("*.yaml")]), (env, e)


def test_a_malformed_line_is_named_with_its_line(tmp_path):
    f = tmp_path / "skips.txt"
    f.write_text("[all]\ntests/test_a.py::test_b  no separator here\n")
    with pytest.raises(ValueError, match=r"skips.txt:2: expected 'NODEID :: REASON'"):
        expected_skips.load("all", f)
    f.write_text("[all]\ntests/test_a.py::test_b :: SGLang is not installed\n")
    with pytest.raises(ValueError, match=r"no section \[vllm\] \(sections: all\)"):
        expected_skips.load("vllm", f)


_SKIPPING = '''
import pytest

def test_engine():
    pytest.skip("SGLang is not installed")

def test_runs():
    assert True
'''


def _with_list(pytester, listed: str) -> None:
    """A conftest registering the real plugin with ``[all]`` = ``listed``."""
    lst = pytester.path / "skips.txt"
    lst.write_text(f"[all]\n{listed}\n")
    pytester.makeconftest(f'''
import sys
sys.path.insert(0, {str(TESTS)!r})
import expected_skips

def pytest_configure(config):
    config.pluginmanager.register(
        expected_skips.ExpectedSkips("all", expected_skips.load("all", expected_skips.Path({str(lst)!r}))))
''')


def _run_with_list(pytester, listed: str):
    _with_list(pytester, listed)
    pytester.makepyfile(test_mod=_SKIPPING)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider")


def test_an_unlisted_skip_fails_the_run(pytester):
    res = _run_with_list(pytester, "# nothing expected")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(["*unexpected skips*", "test_mod.py::test_engine :: SGLang is not installed"])


def test_a_listed_skip_with_its_reason_passes(pytester):
    res = _run_with_list(pytester, "test_mod.py::test_engine :: SGLang is not installed")
    assert res.ret == pytest.ExitCode.OK
    res.stdout.fnmatch_lines(["*skips: 1, all expected*"])


def test_a_module_that_skips_while_collected_is_seen(pytester):
    """``pytest.importorskip`` at a module's top skips the module at collection, before any test runs."""
    _with_list(pytester, "")
    pytester.makepyfile(test_gone="import pytest\npytest.importorskip('no_such_engine_module')\n\n"
                                  "def test_x():\n    assert True\n")
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(["*unexpected skips*", "test_gone.py :: *no_such_engine_module*"])


def test_a_section_includes_the_lines_several_environments_share(tmp_path):
    f = tmp_path / "skips.txt"
    f.write_text("[all]\n@include shared\ntests/test_a.py::test_b :: no GPU here\n\n"
                 "[shared]\ncontracts/x.yaml::* :: pair not available locally\n")
    assert [e.pattern for e in expected_skips.load("all", f)] == ["contracts/x.yaml::*", "tests/test_a.py::test_b"]
    f.write_text("[all]\n@include nowhere\n")
    with pytest.raises(ValueError, match=r"no section \[nowhere\] \(included by \[all\]\)"):
        expected_skips.load("all", f)
    f.write_text("[all]\n@include other\n[other]\n@include all\n")
    with pytest.raises(ValueError, match=r"\[all\] includes itself \(all -> other -> all\)"):
        expected_skips.load("all", f)


def test_a_node_id_is_literal_but_for_its_stars():
    """A parametrized id's brackets are literal (fnmatch would read ``[pair0-K6]`` as one character)."""
    e = expected_skips.Expected("tests/test_k.py::test_kill[pair0-K6-x]", "masked", 1)
    assert e.matches("tests/test_k.py::test_kill[pair0-K6-x]", "K6 is masked")
    assert not e.matches("tests/test_k.py::test_kill[pair1-K6-x]", "K6 is masked")
    assert not e.matches("tests/test_k.py::test_killp", "K6 is masked")
    star = expected_skips.Expected("contracts/*.yaml::*", "drafts; the contract's method is", 2)
    assert star.matches("contracts/heldout/g.yaml::sglang-mtp", "this path runs mtp drafts; the contract's method is eagle3")
    assert not star.matches("tests/test_a.py::test_b", "this path runs mtp drafts; the contract's method is eagle3")


def test_a_listed_test_skipping_for_another_reason_fails(pytester):
    res = _run_with_list(pytester, "test_mod.py::test_* :: no GPU here")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(["*unexpected skips*"])
