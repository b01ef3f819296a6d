"""The main job (``tox -e conformance``, README quick start): its three commands in two lanes.

- lane 1: the conformance suite on every contract under ``contracts/`` (``pytest -m conformance``, with
  the arguments given after TOXWORKDIR), writing ``conformance-report.html``;
- lane 2: the real pair's SpecForge contract on the specforge path (``conformance-report-specforge.html``),
  then the kill matrices on the synthetic scenarios and the real pair (``kill-matrix.html``).

These are the commands tox ran one after the other before (issue 42: 141 s warm on the 2-core VM then; 78-80 s
warm now, docs/timings.md). Lane 2 runs at niceness :data:`LANE2_NICE`: it needs about a third of the CPU seconds
of the suite's lane (the suite and the engine runs it starts ahead, whose paths the suite runs last), so the
suite's lane gets the cores first and, warm, both lanes end together. Each runs torch on one thread (``CONFORMANCE_TORCH_THREADS``, default 1), so on two
cores lane 2 runs beside lane 1 instead of after it. They share only the caches of the real pair, which
both read: this script builds them first (``build_fixture("smollm2-135m")``: the target converted from its
pinned wheel, its data; a marker check once built, about 1 s), so a first run converts once, not once per
lane. ``CONFORMANCE_MAIN_JOB_LANES=1`` runs the three one after the other; ``CONFORMANCE_MAIN_JOB_PROFILE=1``
also prints the CPU seconds of each kind of process (the suite's pytest, each engine process, the kill
matrices: scripts/process_cpu.py).

Lane 1's output is shown as it comes; lane 2's is kept and shown whole once each of its commands ends
(after lane 1's), so the two never interleave. Each command's seconds and CPU seconds are printed at the
end (where the time goes: the suite's seconds per path, ``--conformance-durations``, and the kill matrices'
seconds per column are in their own output). Wall time on two cores is at least the CPU seconds / 2. Exit
status: the first failing command's in the order above (0 when all three pass); Ctrl-C reaches every
command (one process group), which stop as they do on their own.

Usage: python scripts/main_job.py TOXWORKDIR [pytest arguments for the suite ...]
"""

from __future__ import annotations

import os
import resource
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: lane 2's niceness: lane 2 needs about a third of the suite lane's CPU seconds, so it takes the cores' spare time
#: (issue 42 item 4)
LANE2_NICE = 10


def commands(toxworkdir: Path, suite_args: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    """(lane 1, lane 2): the main job's commands, as tox.ini ran them."""
    py = str(toxworkdir / "cpu-lock" / "bin" / "python")
    spec = "contracts/specforge/smollm2-135m.yaml"
    suite = [py, "-m", "pytest", "-m", "conformance", "-p", "no:randomly", "-rs", "--conformance-durations",
             "--conformance-html", str(toxworkdir / "conformance-report.html"), "contracts", *suite_args]
    specforge = [py, "-m", "pytest", "-m", "conformance", "-p", "no:randomly", "-rs", "-q", "--conformance-durations",
                 "--contract", spec, "--conformance-paths", "specforge", "--conformance-html",
                 str(toxworkdir / "conformance-report-specforge.html"), spec]
    faults = [str(toxworkdir / "cpu-lock" / "bin" / "eagle3-conformance"), "faults", "--pair", "synthetic",
              "--pair", "smollm2-135m", "--html", str(toxworkdir / "kill-matrix.html")]
    return [suite], [specforge, faults]


def call(cmd: list[str], nice: int = 0, **kw) -> tuple[int, float]:
    """``subprocess.call(cmd, **kw)``, and the CPU seconds (user + system) the command and the processes it
    waited for used (``os.wait4``'s rusage of that one child: the two lanes' figures do not mix). ``nice``: the
    command's niceness (its children inherit it), set right after it starts."""
    with subprocess.Popen(cmd, **kw) as proc:
        if nice:
            try:
                os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
            except OSError:  # gone already, or not allowed: it runs at the default priority
                pass
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:  # Ctrl-C: the command gets it too (one process group); wait as call() does
            proc.wait()
            raise
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


def _run_kept(cmd: list[str], results: dict) -> None:
    """Run ``cmd`` with its output in a temporary file; record (exit status, seconds, output, CPU seconds)."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        code, cpu = call(cmd, nice=LANE2_NICE, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        out.seek(0)
        results[id(cmd)] = (code, time.perf_counter() - t0, out.read().decode(errors="replace"), cpu)


def _lane(cmds: list[list[str]], results: dict) -> None:
    for cmd in cmds:
        _run_kept(cmd, results)
        if results[id(cmd)][0] != 0:
            return  # as tox stops at a failing command


#: builds the real pair's bf16 variant (``contracts/smollm2-135m-bf16.yaml``: its own conversion from the GGUF and
#: its own data) in a second process; only the suite reads it
_BF16 = ("from eagle3_conformance.testbed.fixtures import build_fixture\n"
         "from eagle3_conformance.testbed.fixture_base import FixtureError\n"
         "try:\n    build_fixture('smollm2-135m-bf16')\n"
         "except FixtureError as e:\n    raise SystemExit(str(e))\n")


def shared_caches() -> None:
    """The real pair's caches, built before the lanes start: ``smollm2-135m`` (the target converted from its
    pinned wheel, its data), which both lanes read (the suite's SmolLM2 contracts, the SpecForge contract, the
    kill matrix's real pair), here; at the same time, on the other core, ``smollm2-135m-bf16`` (the suite's
    bf16 contract), which the suite would otherwise build itself on its own lane (the first run only: about
    27 s of CPU on the lane that ends last). Each build runs torch on one thread. A failed bf16 build is not
    this script's to report: its one line is shown, and the suite builds it again and reports it as it does
    for any fixture. Once built, both are marker checks (about 1.5 s of CPU each, side by side)."""
    from eagle3_conformance.testbed.fixtures import build_fixture

    with subprocess.Popen([sys.executable, "-c", _BF16], cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True) as bf16:
        try:
            build_fixture("smollm2-135m")
        finally:
            err = bf16.communicate()[1].strip()
    if bf16.returncode:
        print(f"main job: building smollm2-135m-bf16 ahead failed (exit {bf16.returncode}): "
              f"{(err.splitlines() or [''])[-1]}; the suite builds it again", flush=True)


def _cpu() -> float:
    """CPU seconds (user + system) of this process and of the children it waited for."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run(toxworkdir: Path, suite_args: list[str], lanes: int = 2, profile: bool = False) -> int:
    lane1, lane2 = commands(toxworkdir, suite_args)
    t0, c0 = time.perf_counter(), _cpu()
    print("main job: the real pair's caches (smollm2-135m, smollm2-135m-bf16 beside it): built the first time "
          "(each target converted from its pinned GGUF wheel, then its data), a check after", flush=True)
    shared_caches()
    caches = (time.perf_counter() - t0, _cpu() - c0)
    print(f"main job: the real pair's caches {caches[0]:.0f} s (CPU {caches[1]:.0f} s)", flush=True)
    sampler = _sampler(profile)
    results: dict = {}
    second = threading.Thread(target=_lane, args=(lane2, results), daemon=True)
    if lanes > 1:
        second.start()
    print(f"main job [lane 1] {shlex.join(lane1[0])}", flush=True)
    t1 = time.perf_counter()
    code1, cpu1 = call(lane1[0], cwd=ROOT)
    times = [("suite", time.perf_counter() - t1, code1, cpu1)]
    if lanes == 1 and code1 == 0:
        _lane(lane2, results)
    if lanes > 1:
        second.join()
    code = code1
    for name, cmd in zip(("specforge contract", "kill matrices"), lane2):
        if id(cmd) not in results:
            continue
        c, sec, out, cpu = results[id(cmd)]
        print(f"\nmain job [lane 2] {shlex.join(cmd)}\n{out}", end="", flush=True)
        times.append((name, sec, c, cpu))
        code = code or c
    print("\nmain job: " + ", ".join(f"{n} {s:.0f} s (CPU {u:.0f} s){'' if c == 0 else f' (exit {c})'}"
                                     for n, s, c, u in times)
          + f"; wall {time.perf_counter() - t0:.0f} s (the caches {caches[0]:.0f} s, then {lanes} lane"
          + f"{'s' if lanes > 1 else ''}), CPU {sum(t[3] for t in times) + caches[1]:.0f} s on {os.cpu_count()} cores",
          flush=True)
    if sampler is not None:
        sampler.stop()
        print("main job: " + sampler.report(), flush=True)
    return code


def _sampler(profile: bool):
    """With ``profile``: a started :class:`process_cpu.TreeSampler` of this process's descendants (the CPU
    of each kind of process: the suite's pytest, each engine process, the kill matrices; scripts/process_cpu.py)."""
    if not profile:
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from process_cpu import TreeSampler

    return TreeSampler().start()


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    lanes = 1 if os.environ.get("CONFORMANCE_MAIN_JOB_LANES") == "1" else 2
    return run(Path(argv[0]), argv[1:], lanes, os.environ.get("CONFORMANCE_MAIN_JOB_PROFILE") == "1")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
