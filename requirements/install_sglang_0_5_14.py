"""Create (once) the SGLang 0.5.14 environment of ``tox -e sglang-0.5.14`` (``.tox/sglang-0.5.14-lock``).

SGLang 0.5.14 is the release SpecForge 0.2.0 pins; the in-process CPU harness has a branch for it
(``eagle3_conformance/tools/sglang_cpu/releases/r0_5_14.py``). This environment is the main one
(requirements/cpu-lock.txt) with the pins of requirements/sglang-0.5.14-lock.txt replacing that
file's pins of the same packages (sglang, and the transformers/tokenizers its import chain needs),
installed like requirements/install.py does: torch 2.13.0 (the CPU build) first, then the merged
list with --no-deps, then this project (editable) with --no-deps. The merged list is written beside
the environment (``ENV_DIR-requirements.txt``: creating the venv clears ENV_DIR); a marker records the hash of both lock files and
pyproject.toml, and the install is redone only when one changes.

Usage: python requirements/install_sglang_0_5_14.py ENV_DIR
"""

import re
import sys
from pathlib import Path

from install import ROOT, install  # requirements/install.py (this script's directory is on sys.path)

LOCKS = (ROOT / "requirements" / "cpu-lock.txt", ROOT / "requirements" / "sglang-0.5.14-lock.txt")
_PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==")


def _name(line: str):
    m = _PIN.match(line.strip())
    return None if m is None else re.sub(r"[-_.]+", "-", m.group(1).split("[")[0]).lower()


def merged(base: str, override: str) -> str:
    """``base``'s lines with every pin whose package ``override`` pins dropped, then ``override``'s pins."""
    pins = [ln.strip() for ln in override.splitlines() if _name(ln)]
    replaced = {_name(p) for p in pins}
    kept = [ln for ln in base.splitlines() if _name(ln) not in replaced or _name(ln) is None]
    return "\n".join(kept + pins) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    env = Path(argv[0]).resolve()
    env.parent.mkdir(parents=True, exist_ok=True)
    req = env.with_name(env.name + "-requirements.txt")
    req.write_text(merged(LOCKS[0].read_text(), LOCKS[1].read_text()))
    install(env, LOCKS, req)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
