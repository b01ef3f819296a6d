"""The CPU of the main job's two SGLang engine paths (issue 42 item 4), side by side.

``python scripts/engine_paths_cpu.py [--rounds N] [CHECKOUT ...]`` runs, in each checkout (default: this
one), with that checkout first on ``PYTHONPATH`` and this interpreter::

    pytest -m conformance -p no:randomly -q -rs --conformance-durations --contract contracts/smollm2-135m.yaml
        --conformance-paths sglang-engine,sglang-engine-invariance contracts/smollm2-135m.yaml

one checkout after the other (``--rounds N``: N times, alternating, so the runs before and after a change
share the same minutes of a shared machine), and prints for each run: the wall and CPU seconds (user +
system, ``os.wait4`` of pytest and every process it waited for, the engines included), the suite's verdict
line and ``seconds per path``, and the CPU per kind of process (``scripts/process_cpu.py``, a lower bound;
the number of engine starts is the count of scheduler processes). Exit status: 0, or the first run's
non-zero pytest status.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from process_cpu import TreeSampler  # noqa: E402 - the script's own directory

CONTRACT = "contracts/smollm2-135m.yaml"
PATHS = "sglang-engine,sglang-engine-invariance"


def run(checkout: Path) -> tuple[int, str]:
    """One suite run in ``checkout``: (pytest's exit status, the lines to print)."""
    cmd = [sys.executable, "-m", "pytest", "-m", "conformance", "-p", "no:randomly", "-q", "-rs",
           "--conformance-durations", "--contract", CONTRACT, "--conformance-paths", PATHS, CONTRACT]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(checkout)] + (
        [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    sampler = TreeSampler().start()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    sampler.stop()
    code = os.waitstatus_to_exitcode(status)
    keep = [line for line in out.splitlines() if line.startswith(("CONFORMS", "VIOLATIONS", "INCONCLUSIVE",
                                                                 "seconds per path"))]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    head = (f"{checkout}: wall {wall:.1f} s, CPU {usage.ru_utime + usage.ru_stime:.1f} s, exit {code} "
            f"(load average {load:.1f} at the end)")
    return code, "\n".join([head, *("  " + line for line in keep), "  " + sampler.report()])


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkouts", nargs="*", type=Path, default=[Path(__file__).resolve().parent.parent])
    p.add_argument("--rounds", type=int, default=1, help="runs per checkout, alternating (default 1)")
    a = p.parse_args(argv)
    missing = [c for c in a.checkouts if not (c / CONTRACT).is_file()]
    if missing or a.rounds < 1:
        print(f"engine_paths_cpu: {missing[0] / CONTRACT if missing else '--rounds'}: "
              f"{'no such file' if missing else 'must be 1 or more'}", file=sys.stderr)
        return 2
    first = 0
    for _ in range(a.rounds):
        for checkout in a.checkouts:
            code, text = run(checkout.resolve())
            print(text, flush=True)
            first = first or code
    return first


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
