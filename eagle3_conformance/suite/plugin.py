"""pytest plugin (entry point ``pytest11``): ``pytest -m conformance``.

Options, markers, collection and the report only; the work is in :mod:`eagle3_conformance.suite.session`
(one path on one contract under hypothesis) and the paths themselves (:mod:`eagle3_conformance.paths`).

- Collects every contract YAML under a ``contracts/`` directory (or each named: ``--contract PATH`` or
  positional) as a test file with one item per registered path (:data:`eagle3_conformance.paths.REGISTRY`:
  ``training``, ``sglang-extend``, ``sglang-decode``, ``cross-path``, ``sglang-engine``). Items are marked
  ``conformance`` (and ``gpu`` for paths that need one); contracts whose pair is not available
  locally are skipped with the reason. A contract passes the contract gate every verb applies
  (:func:`eagle3_conformance.authoring.gate.gated_contract`: ``validate``'s checks, the configs at its
  ``target.path`` / ``draft.path`` included): one it refuses yields a single ``contract`` item that fails
  with ``validate``'s lines (each problem at its line), and the report says INPUT ERROR.
- Inert until asked: loading it imports nothing heavy (no hypothesis, no torch) and a session
  that does not ask for the suite (no ``-m`` expression selecting ``conformance``, no
  ``--contract``) collects nothing from it and keeps its warning filters and hypothesis settings.
  It registers its own markers ``conformance`` and ``gpu``. The suite's hypothesis profile
  (:mod:`eagle3_conformance.suite.profiles`: ``conformance-ci``, fast and derandomized, the default;
  ``conformance-dev``; ``conformance-gpu``) is chosen with ``--conformance-profile`` and applied to
  the suite's own search only; the engines' import-time warnings are silenced around its items only.
- Fixtures for hand-written tests: ``conformance_contracts``, ``conformance_reference``,
  ``conformance_training_captures``.
- Prints the report at the end (verdict and diagnoses first, failing checks one line each, passes
  folded unless ``-v``; 100 columns) and writes ``--conformance-json OUT`` (with ``diagnoses``).
- Nothing checked is never green: every conformance item skipped is NOTHING CHECKED, with the reasons,
  and pytest's NO_TESTS_COLLECTED (5) (:mod:`eagle3_conformance.suite.outcomes`).
- ``--conformance-durations``: after the report, the seconds each path took on the session's clock (its
  items' setup, call and teardown, summed over contracts), the slowest first.
- A failing item's failure text is short (its diagnoses, one line each); ``--junitxml``
  records carry the properties ``contract``, ``contract_file``, ``conformance_path``, ``check``
  (one per failing check) and ``diagnosis``.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

from eagle3_conformance import paths as registered_paths
from eagle3_conformance.suite.fixtures import (  # noqa: F401  (registered as this plugin's fixtures)
    conformance_contracts,
    conformance_reference,
    conformance_training_captures,
)
from eagle3_conformance.suite.outcomes import asked, durations_line, invalid_lines
from eagle3_conformance.suite.profiles import PROFILES

PATHS = registered_paths.names()
"""The registered paths when the plugin was loaded (the default of ``--conformance-paths``)."""


@dataclass
class _Record:
    """What the suite found for one contract: the contract, the findings of its items in the order
    they ran, and per item the finding paths it reported and its path diagnoses (computed once,
    when the item failed: :func:`eagle3_conformance.diagnose.path_diagnoses`)."""

    contract: Any
    findings: list = field(default_factory=list)
    items: list = field(default_factory=list)  # (finding paths, failing finding paths, path diagnoses)
    errors: list = field(default_factory=list)  # "path: why" for each item stopped by bad input

    def diagnoses(self) -> list:
        """The contract's diagnoses: its failing items' path diagnoses merged, when each failing
        path belongs to one item (then they equal a diagnosis of all the findings at once), else
        all the findings diagnosed together."""
        from eagle3_conformance.diagnose import diagnose, merge_diagnoses

        for k, (_, failing, _) in enumerate(self.items):
            if any(failing & paths for j, (paths, _, _) in enumerate(self.items) if j != k):
                return diagnose(self.contract, self.findings)
        return merge_diagnoses([d for _, _, ds in self.items for d in ds])


_RECORDS = pytest.StashKey[dict]()
"""(contract file, contract name) -> its :class:`_Record`, in the order the contracts ran."""
_ASKED = pytest.StashKey[bool]()  # the session asks for the suite (see suite.outcomes.asked)
_OUTCOMES = pytest.StashKey[dict]()  # node id -> (label, outcome): eagle3_conformance.suite.outcomes
_FILES = pytest.StashKey[list]()  # the contract files collected
_SECONDS = pytest.StashKey[dict]()  # path -> seconds its items took (setup + call + teardown)
_INVALID = pytest.StashKey[dict]()
"""contract file -> the ContractError that stopped it (its ``contract`` item fails; the report says INPUT ERROR)."""

ENGINE_WARNINGS = (("ignore", UserWarning, "sglang"), ("ignore", DeprecationWarning, "sglang"),
                   ("ignore", DeprecationWarning, "torch.jit"), ("ignore", Warning, "requests"))
"""Import-time noise of the engines on a CPU machine (their own modules only): (action, category,
module) filters applied around the suite's items, never to the session."""


def pytest_addoption(parser):
    g = parser.getgroup("conformance", "EAGLE-3 draft-boundary conformance")
    g.addoption("--contract", action="append", default=[], metavar="PATH",
                help="contract YAML to check (repeatable; default: every contract under contracts/)")
    g.addoption("--conformance-json", metavar="OUT", help="write all findings as JSON")
    g.addoption("--conformance-html", metavar="OUT",
                help="write the report as one self-contained HTML page (docs/html-report.md)")
    g.addoption("--conformance-paths", default=",".join(PATHS),
                help=f"comma-separated paths to run (default: {','.join(PATHS)})")
    g.addoption("--conformance-server", metavar="URL",
                help="also judge a running SGLang / vLLM server's acceptance for each contract (item server-accept: "
                     "the contract's floor; with --conformance-baseline, the recorded baseline rule); eagle3-conformance "
                     "accept --help")
    g.addoption("--conformance-baseline", metavar="FILE", help="baseline for --conformance-server (accept --record)")
    g.addoption("--conformance-profile", choices=tuple(PROFILES), default="ci",
                help="hypothesis profile of the suite's drawn examples: ci (5 per path, derandomized; default), "
                     "dev (60), gpu (4; prepared, never run on a GPU); registered as conformance-<name>, "
                     "applied to the suite only")
    g.addoption("--conformance-reference", choices=("transformers", "engine"), default=None,
                help="what the serving captures are judged against, overriding each contract's `reference`: "
                     "transformers (the project's own forward of the target) or engine (the target's residual "
                     "stream recorded by the engine's own forward_hooks; docs/engine-reference.md)")
    g.addoption("--conformance-durations", action="store_true",
                help="after the report, print the seconds each path took (setup + call + teardown, summed over "
                     "contracts; a run started ahead counts only the wait for it), the slowest first")


def pytest_configure(config):
    config.addinivalue_line("markers", "conformance: the contract conformance suite (pytest -m conformance)")
    config.addinivalue_line("markers", "gpu: needs a GPU and a real SGLang engine; skipped without one (prepared, never run on a GPU)")
    config.stash[_RECORDS] = {}
    config.stash[_INVALID] = {}
    config.stash[_OUTCOMES], config.stash[_FILES] = {}, []
    config.stash[_SECONDS] = {}
    config.stash[_ASKED] = asked(config)
    _check_paths(config.getoption("--conformance-paths"))
    _check_contracts(config.getoption("--contract"))
    for opt in ("--conformance-json", "--conformance-html"):
        out = config.getoption(opt)
        if not out:
            continue
        o = Path(out).resolve()
        contracts = {Path(p).resolve() for p in config.getoption("--contract")}
        if o in contracts or (o.suffix in (".yaml", ".yml") and o.exists()):
            raise pytest.UsageError(f"{opt} {out}: is a contract; refusing to overwrite it")
        if o.is_dir() or not o.parent.is_dir():
            raise pytest.UsageError(f"{opt} {out}: not a writable file path")
    js, html = config.getoption("--conformance-json"), config.getoption("--conformance-html")
    if js and html and Path(js).resolve() == Path(html).resolve():
        raise pytest.UsageError(f"--conformance-html {html}: is also the --conformance-json output; give two files")
    extra = [str(Path(p)) for p in config.getoption("--contract")]
    for p in extra:
        if p not in config.args:
            config.args.append(p)


def _check_contracts(paths: list[str]) -> None:
    """Each ``--contract`` must be a contract file: a directory (or a missing path) would collect
    nothing from it, deselect every test and end with no word about why."""
    for p in paths:
        q = Path(p)
        if q.is_dir():
            raise pytest.UsageError(f"--contract {p}: is a directory; give a contract YAML file (repeat --contract "
                                    "for several, or leave it out to run every contract under contracts/)")
        if not q.is_file():
            raise pytest.UsageError(f"--contract {p}: " + ("not a regular file" if q.exists() else "no such file"))


def _check_paths(value: str) -> None:
    """``--conformance-paths``: every name must be a registered path (as ``faults --paths``), so a
    typo is a usage error naming it and the valid names, not a silently smaller (or empty) run."""
    names = registered_paths.names()
    wanted = [p.strip() for p in value.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in names]
    if unknown or not wanted:
        raise pytest.UsageError(f"--conformance-paths {value!r}: unknown path "
                                f"{', '.join(unknown) or '(none given)'}; valid: {', '.join(names)}")


def pytest_collect_file(file_path: Path, parent):
    if file_path.suffix not in (".yaml", ".yml") or not parent.config.stash.get(_ASKED, False):
        return None
    named = (x.split("::")[0] for x in parent.config.args)  # --contract PATHs are added to the args
    explicit = {Path(a).resolve() for a in named if a.endswith((".yaml", ".yml"))}
    if explicit:
        if file_path.resolve() not in explicit:
            return None
    elif file_path.parent.name != "contracts" or not _looks_like_contract(file_path):
        return None
    parent.config.stash[_FILES].append(file_path)
    return ContractFile.from_parent(parent, path=file_path)


def _looks_like_contract(path: Path) -> bool:
    """A YAML file under contracts/ is collected only if it says it is a contract (its schema
    header or a ``schema_version`` key), so unrelated YAML in a user's project is left alone."""
    try:
        head = path.read_text(encoding="utf-8", errors="replace")[:4096]
    except OSError:
        return False
    return "contract.schema.json" in head or "\nschema_version:" in "\n" + head


class ConformanceSetupError(Exception):
    """The contract names a fixture or target.path that cannot be found or built, or its pair
    contradicts it (a target whose config is not the contract's: the reference refuses it)."""


def _input_errors() -> tuple:
    """The library's bad-input errors: an item stopped by one reports its one-line message
    (the contract file, the path, what is wrong), never a traceback through pytest and hypothesis."""
    from eagle3_conformance.core.errors import InputError
    from eagle3_conformance.reference import ReferenceError
    from eagle3_conformance.testbed.corpus import CorpusError
    from eagle3_conformance.testbed.fixture_base import FixtureError

    return InputError, ReferenceError, FixtureError, CorpusError


class ConformanceFailure(Exception):
    def __init__(self, findings):
        self.findings = findings
        super().__init__(f"{len(findings)} conformance violations")


class ContractFile(pytest.File):
    def collect(self):
        from eagle3_conformance.authoring.gate import gated_contract
        from eagle3_conformance.contract import ContractError

        try:  # the contract gate of every verb: `eagle3-conformance validate`'s checks
            contract = gated_contract(self.path)
        except ContractError as e:
            self.config.stash[_INVALID][str(self.path)] = e
            yield ContractErrorItem.from_parent(self, name="contract", error=e)
            return
        wanted = [p.strip() for p in self.config.getoption("--conformance-paths").split(",")]
        for p in registered_paths.names():
            if p in wanted:
                item = PathItem.from_parent(self, name=p, contract=contract, conformance_path=p)
                item.add_marker(pytest.mark.conformance)
                if registered_paths.get(p).needs.gpu:
                    item.add_marker(pytest.mark.gpu)
                yield item
        if self.config.getoption("--conformance-server"):
            item = ServerAcceptItem.from_parent(self, name="server-accept", contract=contract, conformance_path="server")
            item.add_marker(pytest.mark.conformance)
            yield item


class ContractErrorItem(pytest.Item):
    def __init__(self, *, error, **kw):
        super().__init__(**kw)
        self.error = error
        self.add_marker(pytest.mark.conformance)

    def runtest(self):
        raise self.error

    def repr_failure(self, excinfo):
        from eagle3_conformance.authoring.gate import refusal_lines

        return "\n".join(refusal_lines(self.error, self.path))

    def reportinfo(self):
        return self.path, None, f"{self.path.name}::contract"


class PathItem(pytest.Item):
    """One contract on one path, driven by hypothesis."""

    def __init__(self, *, contract, conformance_path: str, **kw):
        super().__init__(**kw)
        self.contract = contract
        self.conformance_path = conformance_path

    def _record(self, findings):
        key = (str(self.path), self.contract.name)
        rec = self.config.stash[_RECORDS].setdefault(key, _Record(self.contract))
        rec.contract = self.contract
        rec.findings.extend(findings)
        rec.items.append(({f.path for f in findings}, {f.path for f in findings if f.status == "fail"},
                          self._path_diagnoses))
        # --junitxml: each record names the contract, the path and the failing checks
        self.user_properties += [("contract", self.contract.name), ("contract_file", str(self.path)),
                                 ("conformance_path", self.conformance_path)]
        self.user_properties += [("check", c) for c in dict.fromkeys(f.check for f in findings if f.status == "fail")]

    def _stopped(self, why: str) -> None:
        """Record that this path could not judge the contract: its report must not say CONFORMS."""
        key = (str(self.path), self.contract.name)
        rec = self.config.stash[_RECORDS].setdefault(key, _Record(self.contract))
        rec.errors.append(f"{self.conformance_path}: {why}")

    def _judged_contract(self):
        """The contract, with ``reference`` set by ``--conformance-reference`` when given."""
        ref = self.config.getoption("conformance_reference", None)
        if ref is None or ref == self.contract.reference:
            return self.contract
        return self.contract.model_copy(update={"reference": ref})

    def runtest(self):
        from eagle3_conformance.suite import session
        from eagle3_conformance.suite.pairs import PairUnavailable, resolve_pair

        try:
            pair = resolve_pair(self.contract)
        except PairUnavailable as e:
            if self.contract.fixture or self.contract.target.path:
                # the contract names where its pair lives: not finding it is an error, not a skip
                self._stopped(str(e))
                raise ConformanceSetupError(f"{self.path}: {e}") from None
            pytest.skip(f"pair not available locally: {e}; norm bands {self.contract.norm_bands.status}")
        try:
            findings = session.run_path(registered_paths.get(self.conformance_path), self._judged_contract(), pair,
                                        profile=self.config.getoption("conformance_profile"))
        except _input_errors() as e:
            self._stopped(str(e))
            raise ConformanceSetupError(f"{self.path}: {self.conformance_path}: {e}") from None
        if isinstance(findings, registered_paths.Skipped):
            pytest.skip(findings.reason)
        bad = [f for f in findings if f.status == "fail"]
        self._path_diagnoses = []
        if bad:  # diagnosed once: the contract's report reuses these (_Record.diagnoses)
            from eagle3_conformance.diagnose import merge_diagnoses, path_diagnoses

            self._path_diagnoses = path_diagnoses(self.contract, findings)
            self._diagnoses = merge_diagnoses(self._path_diagnoses)
        self._record(findings)
        if bad:
            self.user_properties += [("diagnosis", f"{d.label}: {d.title}") for d in self._diagnoses]
            raise ConformanceFailure(bad)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, ConformanceFailure):
            from eagle3_conformance.report import WIDTH, failure_text

            width = min(self.config.get_terminal_writer().fullwidth, WIDTH)
            return failure_text(self.contract.name, self.conformance_path, excinfo.value.findings,
                                getattr(self, "_diagnoses", None), width)
        if isinstance(excinfo.value, ConformanceSetupError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.contract.name}::{self.conformance_path}"


class ServerAcceptItem(PathItem):
    """One contract's acceptance on the running server of ``--conformance-server``
    (:func:`eagle3_conformance.server_accept.session.measure`): its floor, and the baseline rule with
    ``--conformance-baseline``. Bad input (an unreachable server, one without speculative decoding, a
    baseline of another prompt set) stops the item with its one-line reason, as a path's does; a baseline
    comparison that cannot decide (``accept``'s exit 3) skips it with the INCONCLUSIVE line."""

    def runtest(self):
        from eagle3_conformance.core.errors import InputError
        from eagle3_conformance.server_accept.session import Options, measure

        opts = Options(server=self.config.getoption("--conformance-server"),
                       baseline=self.config.getoption("--conformance-baseline"))
        try:
            findings = measure(opts, self.contract).findings
        except InputError as e:
            self._stopped(str(e))
            raise ConformanceSetupError(f"{self.path}: server-accept: {e}") from None
        self._path_diagnoses = []
        self._record(findings)
        bad = [f for f in findings if f.status == "fail"]
        if bad:
            raise ConformanceFailure(bad)
        from eagle3_conformance.report import inconclusive

        undecided = inconclusive(findings)
        if undecided:  # neither a pass nor a failure (the verb exits 3): a skip that says so, never a green item
            pytest.skip(f"INCONCLUSIVE: {undecided}")


def pytest_collection_finish(session):
    """The chosen items' paths start what they start ahead (session.warm_items) and run last; not with --collect-only."""
    if session.config.option.collectonly or not session.config.stash.get(_ASKED, False):
        return
    session.config.stash[_OUTCOMES] = {i.nodeid: (i.reportinfo()[2], None) for i in session.items
                                       if isinstance(i, (PathItem, ContractErrorItem))}
    from eagle3_conformance.suite.session import started_ahead_last, warm_items
    session.items[:] = started_ahead_last(session.items)
    for discard in warm_items([(i.conformance_path, i._judged_contract()) for i in session.items
                               if isinstance(i, PathItem)]):  # the real engine's run; stopped at the end if not taken
        session.config.add_cleanup(discard)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """The seconds of each path's items (``--conformance-durations``)."""
    t0 = time.perf_counter()
    yield
    if isinstance(item, PathItem):
        seconds = item.config.stash[_SECONDS]
        seconds[item.conformance_path] = seconds.get(item.conformance_path, 0.0) + time.perf_counter() - t0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """The suite's items run with the engines' import-time warnings silenced (:data:`ENGINE_WARNINGS`);
    every other item, and the session, keep their own filters."""
    if not isinstance(item, (PathItem, ContractErrorItem)):
        yield
        return
    with warnings.catch_warnings():
        for action, category, module in ENGINE_WARNINGS:
            warnings.filterwarnings(action, category=category, module=module)
        warnings.filterwarnings("ignore", message="MultiPlatformOp is deprecated", category=DeprecationWarning)
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Note each conformance item's outcome (:data:`_OUTCOMES`): a skip in any phase with its reason."""
    outcome = yield
    from eagle3_conformance.suite.outcomes import note

    note(item.config.stash.get(_OUTCOMES, {}), outcome.get_result())


def pytest_sessionfinish(session, exitstatus):
    """A session that asked for the suite and checked nothing exits 5 (pytest's NO_TESTS_COLLECTED), not 0."""
    from eagle3_conformance.suite.outcomes import nothing_checked

    if (exitstatus == pytest.ExitCode.OK and session.config.stash.get(_ASKED, False)
            and nothing_checked(session.config.stash.get(_OUTCOMES, {}))):
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


def _sglang_version() -> Optional[str]:
    from eagle3_conformance.environment.installed import installed_version

    return installed_version("sglang")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    _write_report(terminalreporter, config)
    if config.getoption("--conformance-durations") and config.stash.get(_SECONDS, None):
        terminalreporter.write_line(durations_line(config.stash[_SECONDS]))


def _write_report(terminalreporter, config) -> None:
    store = config.stash.get(_RECORDS, {})
    invalid = config.stash.get(_INVALID, {})
    from eagle3_conformance.suite.outcomes import nothing_lines, only_the_suite

    suite = config.stash.get(_ASKED, False) and not config.option.collectonly and not invalid
    seen = config.stash.get(_OUTCOMES, {})
    nothing = nothing_lines(seen, bool(config.stash.get(_FILES, []))) if suite and (seen or only_the_suite(config)) else []
    if not store and not invalid and not nothing:
        return
    from eagle3_conformance.report import WIDTH, render_text

    width = min(terminalreporter._tw.fullwidth, WIDTH)
    terminalreporter.write_sep("=", "conformance report")
    for line in nothing:
        terminalreporter.write_line(line)
    for line in invalid_lines(invalid):
        terminalreporter.write_line(line)
    if invalid:
        terminalreporter.write_line("")
    all_findings, all_diagnoses = [], []
    for (path, name), rec in store.items():
        findings = rec.findings
        diagnoses = rec.diagnoses()
        terminalreporter.write_line(render_text(
            findings, diagnoses, title=f"{name} ({path})", extra={"sglang": _sglang_version() or "not installed"},
            verbose=config.getoption("verbose") > 0, width=width, errors=rec.errors))
        terminalreporter.write_line("")
        all_findings += findings
        all_diagnoses += diagnoses
    out, html = config.getoption("--conformance-json"), config.getoption("--conformance-html")
    if out or html:
        from eagle3_conformance.environment.validated import record, tool_versions
        from eagle3_conformance.report import report_doc, write_document

        meta: dict[str, Any] = {"validated_on": [record(rec.contract, rec.findings, errors=rec.errors) for rec in store.values()],
                "tool_versions": tool_versions()}
        errors = [{"contract": n, "path": e.split(": ", 1)[0], "error": e.split(": ", 1)[1]}
                  for (_, n), rec in store.items() for e in rec.errors]
        errors += [{"contract": f, "path": "contract", "error": p.format(e.file)}
                   for f, e in invalid.items() for p in e.problems]
        if errors:
            meta["errors"] = errors
        if out:
            doc = report_doc(",".join([n for _, n in store] + list(invalid)), all_findings, meta=meta,
                             diagnoses=all_diagnoses)
            if invalid:  # as `validate`: a contract that does not load is bad input, whatever else ran
                doc["meta"]["verdict"] = f"INPUT ERROR: {len(invalid)} contract(s) do not load: {', '.join(invalid)}"
            elif nothing:  # the terminal's NOTHING CHECKED, not the verdict of no findings
                from eagle3_conformance.suite.outcomes import nothing_meta

                doc["meta"].update(nothing_meta(nothing, seen))
                doc["contract"] = doc["contract"] or ",".join(dict.fromkeys(lb.split("::")[0] for lb, _ in seen.values()))
            write_document(out, doc)
        if html:
            from eagle3_conformance.htmlreport import render_suite

            render_suite(html, [(file, name, rec.contract, rec.findings, rec.errors, rec.diagnoses())
                                for (file, name), rec in store.items()], meta["tool_versions"])
            terminalreporter.write_line(f"conformance HTML report: {html}")
