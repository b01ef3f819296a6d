"""The shape of the package (issue #11; /ARCHITECTURE.md "rules of the house"), read from the
code's own imports with ``ast``: imports point down and never cycle, nothing below the command
line imports it, paths are independent and never judge, checks never import a path, every path
module is in the registry, a new path needs nothing but its module and one registry line, and
nothing that judges imports the project's self-test (tests/layers.py ``SELF_TEST``).

Imports are every ``import`` / ``from ... import`` at any depth (function-level imports are real
dependencies too), except those under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "eagle3_conformance"

JUDGING = ("eagle3_conformance.checks", "eagle3_conformance.suite.assess", "eagle3_conformance.suite.runner",
           "eagle3_conformance.suite.session", "eagle3_conformance.report", "eagle3_conformance.faults")
"""Modules that turn what was observed into findings (or run the matrix): paths and tools stay below them."""


@lru_cache(maxsize=None)
def modules() -> dict[str, Path]:
    """``eagle3_conformance.x.y`` -> its file, for every module of the package."""
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        parts = list(f.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _type_checking_blocks(tree: ast.AST) -> set[int]:
    ids = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            ids |= {id(x) for b in n.body for x in ast.walk(b)}
    return ids


@lru_cache(maxsize=None)
def imports_of(name: str, typing: bool = False) -> frozenset[str]:
    """The package's modules that module ``name`` imports (at any depth; under TYPE_CHECKING too
    when ``typing``)."""
    f = modules()[name]
    return imports_in(name, f.read_text(encoding="utf-8"), f.name == "__init__.py", typing)


def imports_in(name: str, source: str, is_package: bool = False, typing: bool = False) -> frozenset[str]:
    """:func:`imports_of` for module ``name`` holding ``source`` (a package's ``__init__`` when
    ``is_package``): relative imports resolved from ``name``, every depth, function bodies too."""
    tree = ast.parse(source)
    skip = set() if typing else _type_checking_blocks(tree)
    pkg = name if is_package else name.rpartition(".")[0]
    out = set()
    for n in ast.walk(tree):
        if id(n) in skip:
            continue
        if isinstance(n, ast.Import):
            targets = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                up = pkg.split(".")[: len(pkg.split(".")) - (n.level - 1)]
                base = ".".join(up + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in n.names]
        else:
            continue
        out |= {t for t in targets if t in modules()}
    out.discard(name)
    return frozenset(out)


def _sccs(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_no_import_cycles():
    """Not even through ``if TYPE_CHECKING:`` imports (a type import that runs upward is a wrong
    arrow as well: issue 36's contract <-> families)."""
    graph = {m: imports_of(m) for m in modules()}
    assert _sccs(graph) == []
    graph = {m: imports_of(m, typing=True) for m in modules()}
    assert _sccs(graph) == []


def test_the_package_root_holds_no_module():
    """Every module lives in a package that names its concept (issue 36, docs/architecture.md): the
    package root holds ``__init__.py`` and nothing else, so the tree reads as the architecture."""
    assert sorted(f.name for f in PKG.glob("*.py")) == ["__init__.py"]
    init = ast.parse((PKG / "__init__.py").read_text(encoding="utf-8"))
    # the public API's lazy table (docs/api.md): importlib and PEP 562's __getattr__/__dir__, and the deprecated
    # aliases of the moved module paths (docs/compatibility.md); it names modules as strings, so the root imports
    # nothing else of the package (its types: __init__.pyi)
    imports = [ast.unparse(n) for n in init.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert set(imports) <= {"import importlib", "from __future__ import annotations",
                            "from eagle3_conformance.core import moved as _moved"}
    calls = [ast.unparse(n) for n in init.body if isinstance(n, ast.Expr) and not isinstance(n.value, ast.Constant)]
    assert calls == ["_moved.install()"]
    assert not [n for n in init.body if isinstance(n, ast.ClassDef)]
    assert {n.name for n in init.body if isinstance(n, ast.FunctionDef)} <= {"__getattr__", "__dir__"}


def test_every_module_has_a_layer():
    from layers import LAYERS, layer_of

    assert {m for m in modules() if layer_of(m) < 0} == set(), "add the module's prefix to tests/layers.py"
    names = [n for n, _ in LAYERS]
    assert len(names) == len(set(names))


def _layer_violations(graph: dict) -> dict[str, list[str]]:
    from layers import LAYERS, layer_of

    out = {}
    for m, targets in graph.items():
        up = sorted(f"{i} ({LAYERS[layer_of(i)][0]})" for i in targets if layer_of(i) > layer_of(m))
        if up:
            out[f"{m} ({LAYERS[layer_of(m)][0]})"] = up
    return out


def test_imports_never_point_to_a_higher_layer():
    """docs/architecture.md's layering (tests/layers.py): a module imports its own layer or lower
    ones, counting imports inside functions and under TYPE_CHECKING."""
    assert _layer_violations({m: imports_of(m, typing=True) for m in modules()}) == {}


def test_the_layer_rule_sees_an_upward_import():
    """The rule above can fail: the reference importing authoring (issue 36's second wrong arrow)
    and the contract importing the testbed are both found."""
    bad = _layer_violations({"eagle3_conformance.reference": frozenset({"eagle3_conformance.authoring.configs"}),
                             "eagle3_conformance.contract.validation": frozenset({"eagle3_conformance.testbed.trained_draft"}),
                             "eagle3_conformance.checks.shape": frozenset({"eagle3_conformance.core.findings"})})
    assert set(bad) == {"eagle3_conformance.reference (reference)", "eagle3_conformance.contract.validation (contract)"}


# --- the self-test wall (issue 43 item 5; docs/architecture.md "The self-test wall") ----------------

def _self_test_reached(graph: dict[str, frozenset[str]], transitive: bool) -> dict[str, list[str]]:
    """judging module -> the self-test modules (tests/layers.py ``SELF_TEST``) it imports, directly or,
    when ``transitive``, through any chain of the package's modules (``graph`` gives each module's
    imports; a module missing from it imports nothing)."""
    from layers import JUDGING_LAYERS, SELF_TEST

    out = {}
    for m in graph:
        if not any(_under(m, j) for j in JUDGING_LAYERS):
            continue
        seen, todo = set(), list(graph[m])
        while todo:
            i = todo.pop()
            if i not in seen:
                seen.add(i)
                todo += list(graph.get(i, ())) if transitive else []
        bad = sorted(i for i in seen if any(_under(i, t) for t in SELF_TEST))
        if bad:
            out[m] = bad
    return out


def test_judging_never_imports_the_self_test():
    """contract, core, checks, diagnose, report, reference, scan and engine_ids import neither the test
    bed, nor fault injection, nor a CPU stand-in: not directly (imports inside functions and under
    TYPE_CHECKING count), and not through another module (a verdict never depends on them)."""
    graph = {m: imports_of(m, typing=True) for m in modules()}
    assert _self_test_reached(graph, transitive=False) == {}
    assert _self_test_reached(graph, transitive=True) == {}


_WALL_BREAKER = """
from __future__ import annotations
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eagle3_conformance.tools.sglang_cpu.harness import SGLangCPUHarness


def fixture_problems(c):
    from ..testbed.fixture_base import fixture_spec  # lazy and relative: still an import
    import eagle3_conformance.faults.matrix
    from eagle3_conformance.tools.vllm_cpu import ids  # vLLM's own readers: not the self-test
    return fixture_spec(c.fixture)
"""


def test_the_wall_sees_an_injected_import():
    """The rule fails on a judging module that imports the self-test the ways code does (a lazy
    relative import, a plain import, a TYPE_CHECKING import), passes vLLM's own id readers, and sees
    an import that reaches the test bed through a module of another layer."""
    name = "eagle3_conformance.contract.validation"
    injected = imports_in(name, _WALL_BREAKER, typing=True)
    graph = {m: imports_of(m, typing=True) for m in modules()} | {name: injected}
    assert _self_test_reached(graph, transitive=False) == {name: [
        "eagle3_conformance.faults.matrix", "eagle3_conformance.testbed.fixture_base",
        "eagle3_conformance.tools.sglang_cpu.harness"]}
    chain = {"eagle3_conformance.scan.sources": frozenset({"eagle3_conformance.suite.pairs"}),
             "eagle3_conformance.suite.pairs": frozenset({"eagle3_conformance.testbed.fixtures"})}
    assert _self_test_reached(chain, transitive=False) == {}
    assert _self_test_reached(chain, transitive=True) == {"eagle3_conformance.scan.sources": [
        "eagle3_conformance.testbed.fixtures"]}


def test_the_self_test_says_it_is_internal():
    """Every self-test prefix names modules of the package, and each says "Internal:" first: the
    package's ``__init__`` docstring, or each module's where the prefix is not a module."""
    from layers import SELF_TEST

    unmarked, empty = [], []
    for p in SELF_TEST:
        mods = [p] if p in modules() else [m for m in modules() if _under(m, p)]
        if not mods:
            empty.append(p)
        for m in mods:
            doc = ast.get_docstring(ast.parse(modules()[m].read_text(encoding="utf-8"))) or ""
            if not doc.startswith("Internal:"):
                unmarked.append(m)
    assert (empty, unmarked) == ([], [])


def test_nothing_outside_the_cli_imports_it():
    bad = {m: sorted(i for i in imports_of(m) if _under(i, "eagle3_conformance.cli"))
           for m in modules() if not _under(m, "eagle3_conformance.cli")}
    assert {m: v for m, v in bad.items() if v} == {}


def test_paths_import_no_other_path_and_no_check():
    """A path module imports only the protocol from paths/, and nothing that judges."""
    offenders = {}
    for m in modules():
        if not _under(m, "eagle3_conformance.paths") or m in ("eagle3_conformance.paths", "eagle3_conformance.paths.base"):
            continue
        bad = [i for i in imports_of(m) if (_under(i, "eagle3_conformance.paths") and i != "eagle3_conformance.paths.base")
               or any(_under(i, j) for j in JUDGING) or _under(i, "eagle3_conformance.cli")]
        if bad:
            offenders[m] = sorted(bad)
    assert offenders == {}


def test_tools_never_judge_and_know_no_path():
    """A tool (one module or package under tools/) imports no other tool, no path, nothing that judges;
    ``tools/shared/`` is what the tools share (the CPU harnesses' lifecycle, the FP8 payload): any
    tool may import it, and it imports no tool."""
    offenders = {}
    shared = "eagle3_conformance.tools.shared"
    for m in modules():
        if _under(m, "eagle3_conformance.tools") and m != "eagle3_conformance.tools":
            own = ".".join(m.split(".")[:3])
            bad = [i for i in imports_of(m) if any(_under(i, j) for j in JUDGING + ("eagle3_conformance.paths",))
                   or (_under(i, "eagle3_conformance.tools") and i != "eagle3_conformance.tools" and not _under(i, own)
                       and not _under(i, shared))]
            if bad:
                offenders[m] = sorted(bad)
    assert offenders == {}


def test_checks_never_import_a_path_or_a_tool():
    for m in [m for m in modules() if _under(m, "eagle3_conformance.checks")] + ["eagle3_conformance.suite.assess"]:
        assert not [i for i in imports_of(m) if _under(i, "eagle3_conformance.paths") or _under(i, "eagle3_conformance.tools")], m


def test_registry_lists_every_path_module():
    from eagle3_conformance import paths
    from eagle3_conformance.paths.base import Path as PathSpec

    files = sorted(f.stem for f in (PKG / "paths").glob("*.py") if f.stem not in ("__init__", "base"))
    assert sorted(paths._MODULES) == files
    assert len(paths.REGISTRY) == len(files)
    for name, p in paths.REGISTRY.items():
        assert isinstance(p, PathSpec) and p.name == name
        assert p.first is not None or p.observe is not None, name


def test_cli_and_registry_stay_light():
    """``eagle3-conformance validate`` and loading the registry import no engine (torch, SGLang, ...)."""
    code = ("import sys; from eagle3_conformance.cli import main; import eagle3_conformance.paths; "
            "rc = main(['validate', 'contracts/tiny-llama.yaml']); "
            "print(rc, sorted(m for m in ('torch', 'sglang', 'speculators', 'transformers', 'hypothesis') "
            "if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert r.stdout.strip().splitlines()[-1] == "0 []", r.stdout + r.stderr


# --- a new path: one module and one registry line --------------------------------------------------

_TOY_PATH = '''
from eagle3_conformance import paths
from eagle3_conformance.paths.base import Needs, Observation, Path


def _first(state):
    # an acceptance-rate loop returns a metric, not captures
    return Observation(facts={"avg_accept_length": 2.5})


def _observe(state, draw):
    from eagle3_conformance.suite import strategies

    draw(strategies.sample_batches(4), label="batch")
    return Observation()


paths.REGISTRY["toy-accept"] = Path("toy-accept", "a metric-only path", Needs(), prepare=lambda c, pair: None,
                                    first=_first, observe=_observe)
'''


def test_a_new_path_needs_only_its_registry_entry(pytester, tmp_path):
    """A path registered from outside (here a metric-only one) is collected for every contract,
    run under hypothesis and reported, with no edit to the plugin, the session or the report."""
    from eagle3_conformance import paths

    pytester.makeconftest(_TOY_PATH)
    tiny = REPO / "contracts" / "tiny-llama.yaml"
    try:
        res = pytester.runpytest("-m", "conformance", "--contract", str(tiny), "-p", "no:cacheprovider",
                                 "--conformance-paths", "toy-accept", "--conformance-json", str(tmp_path / "f.json"))
    finally:
        paths.REGISTRY.pop("toy-accept", None)
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*conformance report*", "skipped (-v says why): accept_length 1"])


pytest_plugins = ["pytester"]


# --- issue 27: short functions, one registry of checks ----------------------------------------------

MAX_FUNCTION_LINES = 80
"""No function or method of the package is longer than this (its ``def`` line to its last line,
decorators and docstring included)."""


def long_functions(limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``module.qualname`` -> lines, for every function of the package longer than ``limit``."""
    out = {}
    for name, f in modules().items():
        tree = ast.parse(f.read_text(encoding="utf-8"))

        def visit(node, prefix, name=name):
            for n in ast.iter_child_nodes(node):
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = n.end_lineno - n.lineno + 1
                    if lines > limit:
                        out[f"{name}.{prefix}{n.name}"] = lines
                    visit(n, f"{prefix}{n.name}.")
                elif isinstance(n, ast.ClassDef):
                    visit(n, f"{prefix}{n.name}.")

        visit(tree, "")
    return out


def test_no_function_over_80_lines():
    assert long_functions() == {}


def _decorated_checks() -> dict[str, str]:
    """``check_*`` function name -> module, for every function of the package decorated with
    ``@check(...)`` (read from the source, not from the registry)."""
    out = {}
    for name, f in modules().items():
        for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(n, ast.FunctionDef) and any(
                    isinstance(d, ast.Call) and getattr(d.func, "id", None) == "check" for d in n.decorator_list):
                assert n.name not in out, f"{n.name} is declared in {out[n.name]} and {name}"
                out[n.name] = name
    return out


def test_every_check_is_declared_once_in_the_registry():
    """Every ``check_*`` function of ``checks/`` is registered by its decorator, once, and nothing
    else in the package keeps a list of checks: runners read the registry."""
    from eagle3_conformance.checks.registry import REGISTRY

    declared = _decorated_checks()
    defined = {n.name: m for m, f in modules().items() if _under(m, "eagle3_conformance.checks")
               for n in ast.parse(f.read_text(encoding="utf-8")).body
               if isinstance(n, ast.FunctionDef) and n.name.startswith("check_")}
    assert set(defined) == set(declared), sorted(set(defined) ^ set(declared))
    assert {"check_" + s.name: s.fn.__module__ for s in REGISTRY.values()} == declared
    # no other list of checks: no module outside checks/ names three or more check functions in one
    # tuple, list, set or dict display
    lists = []
    for m, f in modules().items():
        if _under(m, "eagle3_conformance.checks"):
            continue
        for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            elts = (n.elts if isinstance(n, (ast.List, ast.Tuple, ast.Set)) else
                    n.values if isinstance(n, ast.Dict) else [])
            names = [ast.unparse(e) for e in elts if "check_" in ast.unparse(e)]
            if len(names) >= 3:
                lists.append((m, n.lineno, names))
    assert lists == []


def test_a_capture_says_what_it_is():
    """Checks and the all-rows pass tell stored data from served captures by ``Capture.stored``,
    never by the name of the path; what sees only findings asks ``findings.stored_path``, the one
    place that reads a path's name as its kind."""
    bad = []
    for m, f in modules().items():
        text = f.read_text(encoding="utf-8")
        if (_under(m, "eagle3_conformance.checks") or _under(m, "eagle3_conformance.scan")) and ".path.startswith(" in text:
            bad.append(m)
        if m != "eagle3_conformance.core.findings" and 'startswith("training' in text:
            bad.append(m)
    assert bad == []


def _docstring_ids(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for st in body:  # module/class/function docstrings and attribute docstrings
                if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
                    out.add(id(st.value))
    return out


def test_user_facing_strings_cite_the_projects_docs_not_the_build_machines_notes():
    """Messages cited /work/shared/ECOSYSTEM.md, a file users do not have; they cite docs/ instead."""
    bad = []
    for f in sorted(PKG.rglob("*.py")):
        tree = ast.parse(f.read_text())
        docs = _docstring_ids(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                    and any(k in node.value for k in ("/work/shared", "shared/ECOSYSTEM", "shared/SGLANG_CPU"))):
                bad.append(f"{f.relative_to(REPO)}:{node.lineno}: {node.value[:80]!r}")
    assert not bad, bad
    for doc in ("README.md", *(p.relative_to(REPO) for p in (REPO / "docs").glob("*.md"))):
        text = (REPO / doc).read_text()
        assert "../shared/" not in text and "/work/shared" not in text, doc


#: notes of the build machine (/work/shared) that users do not have; docs/ has its own fault-kinds.md and REFERENCE.md
_MACHINE_NOTES = ("../shared/", "/work/shared", "ECOSYSTEM.md", "SGLANG_CPU_ENGINE.md", "VERSION_DRIFT.md",
                  "ARCHITECTURE.md")


def test_docstrings_cite_the_projects_docs_or_upstream_not_the_build_machines_notes():
    """Docstrings (what `help()` and the API docs show) cited ../shared/SGLANG_CPU_ENGINE.md and
    ECOSYSTEM.md, files a user does not have; they cite docs/ or an upstream repository path instead."""
    bad = []
    for f in sorted(PKG.rglob("*.py")):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for st in node.body:
                if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
                    hits = [k for k in _MACHINE_NOTES if k in st.value.value]
                    if hits:
                        bad.append(f"{f.relative_to(REPO)}:{st.lineno}: {hits}")
    assert not bad, bad


# --- issue 25: the id rules live in one package ----------------------------------------------------

_ID_RULE_CALLS = ("set_eagle3_layers_to_capture", "set_dflash_layers_to_capture", "resolve_eagle_capture_layers",
                  "extract_context_feature", "resolve_target_layer_ids", "build_target_layer_ids",
                  "set_aux_hidden_state_layers", "get_eagle3_default_aux_hidden_state_layers")
"""The tools' own functions that turn layer ids into captured layers."""

_MAY_CALL_ID_RULES = ("eagle3_conformance.engine_ids", "eagle3_conformance.released", "eagle3_conformance.tools",
                      "eagle3_conformance.faults")
"""engine_ids/ translates (the installed tools' code), released/ runs other releases' code, tools/ run the
live engines, faults/ turns the real knob of a live engine."""


def _is_default_ids(n: ast.AST) -> bool:
    """``[2, x // 2, x - 3]`` (a list or tuple display): the engines' default aux ids."""
    if not isinstance(n, (ast.List, ast.Tuple)) or len(n.elts) != 3:
        return False
    a, b, c = n.elts
    return (isinstance(a, ast.Constant) and a.value == 2
            and isinstance(b, ast.BinOp) and isinstance(b.op, ast.FloorDiv) and getattr(b.right, "value", None) == 2
            and isinstance(c, ast.BinOp) and isinstance(c.op, ast.Sub) and getattr(c.right, "value", None) == 3)


def _id_translations(name: str, source: str) -> tuple[list[str], list[str]]:
    """``(default-id lists, id-resolver calls not allowed in module name)``, as ``name:line``."""
    defaults, calls = [], []
    for n in ast.walk(ast.parse(source)):
        if _is_default_ids(n):
            defaults.append(f"{name}:{n.lineno}")
        if (isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", None)) in _ID_RULE_CALLS
                and not any(_under(name, p) for p in _MAY_CALL_ID_RULES)):
            calls.append(f"{name}:{n.lineno}")
    return defaults, calls


def test_no_module_outside_engine_ids_translates_engine_ids():
    """The engines' default ids are written once (``engine_ids/base.py``), and the tools' id resolvers
    are called only where ids are translated or a live engine is driven: nothing else in the package
    turns an engine's id into a layer by itself."""
    defaults, calls = [], []
    for m, f in modules().items():
        d, c = _id_translations(m, f.read_text(encoding="utf-8"))
        defaults += d
        calls += c
    assert [d.split(":")[0] for d in defaults] == ["eagle3_conformance.engine_ids.base"]
    assert calls == []


def test_the_rule_above_sees_a_translation_outside_engine_ids():
    """The detector fires on the two shapes it exists for, outside engine_ids/, and not inside."""
    src = "def f(m, L):\n    m.set_eagle3_layers_to_capture([2, L // 2, L - 3])\n"
    assert _id_translations("eagle3_conformance.diagnose", src) == (["eagle3_conformance.diagnose:2"],
                                                                     ["eagle3_conformance.diagnose:2"])
    assert _id_translations("eagle3_conformance.engine_ids.sglang", src)[1] == []


def _case_collisions(paths) -> list[list[str]]:
    """Groups of paths that differ only by letter case (one file on macOS / Windows file systems)."""
    groups: dict[str, list[str]] = {}
    for p in paths:
        groups.setdefault(str(p).casefold(), []).append(str(p))
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)


def _repo_files() -> list[str]:
    """Every file of the checkout that git tracks or would add (ignored build outputs left out); the
    folders count too (``docs/X`` and ``Docs/Y`` collide as folders)."""
    r = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        pytest.skip(f"not a git checkout: {r.stderr.strip()[:200]}")
    files = [line for line in r.stdout.splitlines() if line and os.path.lexists(REPO / line)]  # not deleted ones
    dirs = {str(Path(f).parent) for f in files} - {"."}
    return files + sorted(dirs)


def test_no_two_files_differ_only_by_case():
    """docs/FAULTS.md and docs/faults.md were both shipped (and in the wheel's eagle3_conformance/_docs):
    on a case-insensitive file system one overwrote the other. No two paths may differ only by case."""
    assert _case_collisions(_repo_files()) == []


def test_the_case_rule_sees_a_collision():
    assert _case_collisions(["docs/FAULTS.md", "docs/faults.md", "docs/gates.md"]) == [["docs/FAULTS.md",
                                                                                         "docs/faults.md"]]
    assert _case_collisions(["Docs/a.md", "docs/b.md"]) == []  # only the folders collide: dirs are listed too
    assert _case_collisions(["Docs", "docs"]) == [["Docs", "docs"]]


def test_no_module_over_500_lines():
    """A module has one job: none is over 500 lines (contract.py was 1,049 and diagnose.py 1,241
    before they became packages; authoring/init.py, released/isolated.py and tools/sglang_cpu/harness.py
    were the last ones split, issue 43 item 7)."""
    long = {m for m, f in modules().items() if len(f.read_text(encoding="utf-8").splitlines()) > 500}
    assert long == set(), "split these modules into modules with one job each"
