"""Install the pinned CPU environment into the running interpreter (used by tox.ini).

sglang 0.5.23 and speculators 0.9.0 declare CUDA-only dependencies, so nothing is resolved by
pip: torch 2.13.0 (the CPU build) first, then every package of cpu-lock.txt with --no-deps, then
this project (editable) with --no-deps. A marker in the environment records the hash of the lock
file and pyproject.toml, so later runs skip the (slow) pip checks until either changes.
"""

import hashlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "cpu-lock.txt"
MARKER = Path(sys.prefix) / ".conformance-lock.sha256"


def main() -> int:
    digest = hashlib.sha256(LOCK.read_bytes() + (ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if MARKER.is_file() and MARKER.read_text().strip() == digest:
        return 0
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    for args in (["torch==2.13.0"], ["--no-deps", "-r", str(LOCK)],
                 ["--no-deps", "--no-build-isolation", "-e", str(ROOT)]):
        subprocess.run(pip + args, check=True)
    MARKER.write_text(digest + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
