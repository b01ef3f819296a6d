"""Create (once) the vLLM environment of ``tox -e vllm`` (``.tox/vllm-lock``).

vLLM 0.33.0 pins torch 2.14.0, compressed-tensors 0.17.0 and CUDA kernels, which conflict with the
main lock (requirements/cpu-lock.txt); its model classes nevertheless run on the CPU with the main
lock's versions (../shared/ECOSYSTEM.md section 3.5). So this environment is the main one plus
vLLM and the extras its import chain needs, all from requirements/vllm-lock.txt (which includes
cpu-lock.txt), installed like requirements/install.py does: torch 2.13.0 (the CPU build) first,
then the lock with --no-deps, then this project (editable) with --no-deps. A marker records the
hash of both lock files and pyproject.toml; the install is redone only when one changes.

One start-up hook is added, ``conformance-vllm-shim.pth`` in site-packages: vLLM's
``ModelConfig`` inspects a model class in a *subprocess* (``vllm/model_executor/models/
registry.py:1123``, ``_run_in_subprocess``), whose import of torchvision fails beside a CPU torch
unless :func:`eagle3_conformance.environment.torch_env.prepare` ran first. The hook runs it only in a process whose
environment has ``CONFORMANCE_TORCH_PREPARE=1`` (the vLLM harness sets it), so no other start-up
of this environment pays for importing torch.

Usage: python requirements/install_vllm.py ENV_DIR
"""

import subprocess
import sys
from pathlib import Path

from install import ROOT, install  # requirements/install.py (this script's directory is on sys.path)

SHIM = ("import os; os.environ.get('CONFORMANCE_TORCH_PREPARE') == '1' and "
        "__import__('eagle3_conformance.environment.torch_env', fromlist=['prepare']).prepare()\n")
LOCKS = (ROOT / "requirements" / "cpu-lock.txt", ROOT / "requirements" / "vllm-lock.txt")


def _shim(py: Path) -> None:
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "conformance-vllm-shim.pth").write_text(SHIM)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    install(Path(argv[0]).resolve(), LOCKS, LOCKS[1], after=_shim)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
