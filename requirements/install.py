"""Create (once) the pinned CPU environment that tox's environments share (used by tox.ini).

sglang 0.5.23 and speculators 0.9.0 declare CUDA-only dependencies, so nothing is resolved by
pip: torch 2.13.0 (the CPU build) first, then every package of cpu-lock.txt with --no-deps, then
this project (editable) with --no-deps. The environment lives at ``.tox/cpu-lock`` so that
``tox`` and ``tox -e conformance`` use one install (tox recreates an environment directory that
two tox environments share, so this one is outside tox's own bookkeeping). A marker records the
hash of the lock file and pyproject.toml; the install is redone only when either changes.

Usage: python requirements/install.py ENV_DIR
"""

import hashlib
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "cpu-lock.txt"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    env = Path(argv[0]).resolve()
    marker = env / ".conformance-lock.sha256"
    digest = hashlib.sha256(LOCK.read_bytes() + (ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if marker.is_file() and marker.read_text().strip() == digest:
        return 0
    py = env / "bin" / "python"
    if not py.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(env)
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    for args in (["torch==2.13.0"], ["--no-deps", "-r", str(LOCK)],
                 ["--no-deps", "--no-build-isolation", "-e", str(ROOT)]):
        subprocess.run(pip + args, check=True)
    marker.write_text(digest + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
