"""What the conformance items of a pytest session came to, and the report's words when they checked
nothing (the plugin, :mod:`eagle3_conformance.suite.plugin`, keeps the record and calls these).

The record: conformance item node id -> ``(label, outcome)``; ``label`` is ``contract::path``, the outcome
None until the item ran, then ``passed``, ``failed`` or ``skipped: REASON``. A session that asked for the
suite and in which every chosen item skipped checked nothing: it is reported as NOTHING CHECKED with the
reasons grouped, and exits with pytest's NO_TESTS_COLLECTED (5), never as a pass.
"""

from __future__ import annotations

from typing import Any, Optional


def note(seen: dict[str, tuple[str, Optional[str]]], rep: Any) -> None:
    """Record one phase's report ``rep`` (a ``pytest.TestReport``) of a conformance item in ``seen``: a
    skip in any phase with its reason, a failure in any phase, a pass of the call phase."""
    if rep.nodeid not in seen:
        return
    label, was = seen[rep.nodeid]
    if rep.skipped:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        seen[rep.nodeid] = (label, "skipped: " + str(reason).removeprefix("Skipped: "))
    elif rep.failed:
        seen[rep.nodeid] = (label, "failed")
    elif rep.when == "call" and was is None:
        seen[rep.nodeid] = (label, "passed")


def nothing_checked(seen: dict[str, tuple[str, Optional[str]]]) -> Optional[dict[str, list[str]]]:
    """When every item of ``seen`` (at least one) skipped: each skip reason with the items it skipped;
    else None (something passed, failed or did not finish)."""
    if not seen or not all(o is not None and o.startswith("skipped: ") for _, o in seen.values()):
        return None
    by: dict[str, list[str]] = {}
    for label, o in seen.values():
        by.setdefault(str(o).removeprefix("skipped: "), []).append(label)
    return by


def nothing_lines(seen: dict[str, tuple[str, Optional[str]]], files_collected: bool) -> list[str]:
    """The conformance report's lines of a session that asked for the suite and checked nothing (no item
    chosen: why, and how to name a contract; every item skipped: the reasons grouped), else none."""
    if not seen:
        if files_collected:
            return ["NOTHING CHECKED: no conformance item was selected (-k, -m or --conformance-paths "
                    "deselected every one)"]
        return ["NOTHING CHECKED: no contract was collected: name one with --contract PATH (a contract YAML; "
                "`eagle3-conformance init` writes one), or run where a contracts/ directory holds contract files"]
    by = nothing_checked(seen)
    if by is None:
        return []
    n = sum(len(v) for v in by.values())
    lines = [f"NOTHING CHECKED: every path skipped ({n} item(s)); exit status 5 (pytest's \"no tests ran\"), "
             "not a pass. Why each skipped:"]
    for reason, labels in by.items():
        lines += [f"  {reason}", f"    {', '.join(labels)}"]
    return lines


def only_the_suite(config: Any) -> bool:
    """The session asks for the suite alone: ``--contract``, or a ``-m`` expression that holds for a
    ``conformance`` item and not for another (``-m conformance``: yes; ``-m 'not slow'`` selects both:
    no, and a run of a project's own tests with it is told nothing about contracts)."""
    if config.getoption("--contract"):
        return True
    try:
        from _pytest.mark.expression import Expression

        compiled = Expression.compile((config.getoption("markexpr", "") or "").strip() or "conformance")
        return bool(compiled.evaluate(is_conformance)) and not compiled.evaluate(lambda name, /, **kw: False)
    except Exception:  # another pytest's private API, or a bad expression (pytest reports it)
        return False


def asked(config: Any) -> bool:
    """The session asks for the suite: ``--contract`` given, or the ``-m`` expression selects an
    item marked ``conformance`` (``-m conformance``: yes; ``-m 'not conformance'``, no ``-m``: no)."""
    if config.getoption("--contract"):
        return True
    expr = (config.getoption("markexpr", "") or "").strip()
    if not expr:
        return False
    try:
        from _pytest.mark.expression import Expression

        compiled = Expression.compile(expr)
    except Exception:  # another pytest's private API, or a bad expression (pytest reports it)
        return "conformance" in expr and "not conformance" not in expr
    return bool(compiled.evaluate(is_conformance))


def is_conformance(name: str, /, **kwargs: str | int | bool | None) -> bool:
    """The ``-m`` matcher: true for the ``conformance`` marker. Keyword arguments (pytest >= 8.2
    passes them for ``marker(arg=...)`` forms) are accepted and ignored; older pytest passes none."""
    return name == "conformance"


def durations_line(seconds: dict[str, float]) -> str:
    """``seconds per path: a 12.3, b 4.0, ...; total 16.3`` (the slowest first); a path that starts its run ahead
    (:data:`~eagle3_conformance.paths.base.Path.warm`: the real engines, run in the background from collection on)
    is marked ``*``: its seconds are the wait for that run only, not the run."""
    from eagle3_conformance import paths as registered

    ahead = {p for p in seconds if p in registered.names() and registered.get(p).warm is not None}
    ordered = sorted(seconds.items(), key=lambda kv: -kv[1])
    return ("seconds per path: " + ", ".join(f"{p} {s:.1f}{'*' if p in ahead else ''}" for p, s in ordered)
            + f"; total {sum(seconds.values()):.1f}"
            + ("; * started ahead, in the background: the wait for its run only" if ahead else ""))


def nothing_meta(lines: list[str], seen: dict[str, tuple[str, Optional[str]]]) -> dict[str, Any]:
    """What ``--conformance-json`` says of a session that checked nothing (``lines``: :func:`nothing_lines`,
    not empty): the terminal's verdict, NOTHING CHECKED, and each item with the reason it skipped, so a CI
    job reading the file sees the same verdict as the terminal, never a verdict of no findings."""
    verdict = lines[0].removesuffix(" Why each skipped:")
    skipped = [{"item": label, "reason": str(o).removeprefix("skipped: ")} for label, o in seen.values()
               if o is not None and o.startswith("skipped: ")]
    return {"verdict": verdict, "skipped": skipped}


def invalid_lines(invalid: dict[str, Any]) -> list[str]:
    """The report's lines for the contracts that did not load: the verdict, then each problem
    (file:line:column: key: message), as ``eagle3-conformance validate`` prints them."""
    lines = []
    for file, e in invalid.items():
        lines.append(f"INPUT ERROR: {file}: the contract does not load or contradicts its local configs "
                     f"({len(e.problems)} problem(s)); no path was run")
        lines += [f"  {p.format(e.file)}" for p in e.problems]
    return lines
