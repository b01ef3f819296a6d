"""Create (once) the pinned CPU environment that tox's environments share (used by tox.ini).

sglang 0.5.23 and speculators 0.9.0 declare CUDA-only dependencies, so nothing is resolved by
pip: torch 2.13.0 (the CPU build) first, then every package of cpu-lock.txt with --no-deps, then
this project (editable) with --no-deps (none of them byte-compiled by pip: a module is compiled at its first
import), then the start-up hook that lets any process of the environment
import torchvision, SGLang and transformers without the project's torch shim (:func:`startup_hook`). The
environment lives at ``.tox/cpu-lock`` so that
``tox`` and ``tox -e conformance`` use one install (tox recreates an environment directory that
two tox environments share, so this one is outside tox's own bookkeeping). A marker records the
hash of the lock file and pyproject.toml; the install is redone only when either changes.

Usage: python requirements/install.py ENV_DIR
"""

import hashlib
import resource
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "cpu-lock.txt"


def install(env: Path, locks: tuple[Path, ...], requirements: Path, after=None) -> None:
    """Build ``env`` (torch 2.13.0 CPU first, then ``requirements`` and this project, all
    ``--no-deps``) unless its marker holds the digest of ``locks`` + pyproject.toml. ``after(py)``
    runs once the packages are in, before the marker is written."""
    marker = env / ".conformance-lock.sha256"
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in (*locks, ROOT / "pyproject.toml"))).hexdigest()
    if marker.is_file() and marker.read_text().strip() == digest:
        startup_hook(env)  # an environment built before the hook existed gets it too
        return
    py = env / "bin" / "python"
    with _timed(f"venv {env}"):
        if not py.exists():
            venv.EnvBuilder(with_pip=True, clear=True).create(env)
    # --no-compile: pip would byte-compile all ~24,000 .py files it installs (torch, SGLang, transformers, ...),
    # about 50 s of CPU on one core before anything runs; the ~7,000 that a main job imports are compiled at
    # their first import instead, once (about 35 s of CPU in the first main job, spread over its processes):
    # docs/timings.md, "The first run on a fresh machine"
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
    for args in (["torch==2.13.0"], ["--no-deps", "-r", str(requirements)],
                 ["--no-deps", "--no-build-isolation", "-e", str(ROOT)]):
        with _timed("pip install " + " ".join(args)):
            subprocess.run(pip + args, check=True)
    if after is not None:
        after(py)
    startup_hook(env)
    marker.write_text(digest + "\n")


class _timed:
    """Print ``install: WHAT S s (CPU C s)`` once the block ends: its wall seconds and the CPU seconds
    (user + system) of the processes it waited for (``RUSAGE_CHILDREN``) and of this one."""

    def __init__(self, what: str) -> None:
        self.what = what

    def _cpu(self) -> float:
        c, s = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
        return c.ru_utime + c.ru_stime + s.ru_utime + s.ru_stime

    def __enter__(self) -> None:
        self.t0, self.c0 = time.perf_counter(), self._cpu()

    def __exit__(self, *exc) -> None:
        print(f"install: {self.what} {time.perf_counter() - self.t0:.0f} s (CPU {self._cpu() - self.c0:.0f} s)",
              flush=True)


def startup_hook(env: Path) -> None:
    """Write the start-up file that lets any process of ``env`` import torchvision (and so SGLang and
    transformers) without the project's torch shim: the one line of
    ``eagle3_conformance/environment/torchvision_hook.py`` (``PTH_NAME``, ``PTH_LINE``; the cause and the
    mechanism are explained there), into each ``lib/python*/site-packages`` of ``env``."""
    sys.path.insert(0, str(ROOT))
    try:
        from eagle3_conformance.environment.torchvision_hook import PTH_LINE, PTH_NAME
    finally:
        sys.path.pop(0)
    for site in sorted(env.glob("lib/python3*/site-packages")):
        f = site / PTH_NAME
        if not f.is_file() or f.read_text() != PTH_LINE:
            f.write_text(PTH_LINE)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    install(Path(argv[0]).resolve(), (LOCK,), LOCK)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
