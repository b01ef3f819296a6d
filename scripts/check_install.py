"""The package as users get it (issue 24): build the sdist and the wheel, install the wheel into a
clean virtual environment WITHOUT the project's lock (its declared dependencies resolved by pip),
and run there, outside the checkout:

1. the authoring commands on a user's own model directories (config.json files only): ``init``,
   ``validate`` (the init output, a shipped example, a checkout contract naming an embedded
   fixture, a misspelled fixture), ``translate``;
2. an unrelated tiny project's pytest, with the plugin installed: pytest only (hypothesis absent),
   then with hypothesis: its tests pass and see no hypothesis profile, no warning filter, no torch
   and no collected contract from the plugin;
3. ``pytest -m conformance --contract`` on the user's pair against the engines installed there
   (none: every path says why it skips, the report says NOTHING CHECKED with the reasons, no ``-rs``
   needed, and pytest exits 5, "no tests ran"; nothing crashes).

Usage: python scripts/check_install.py [WORK_DIR]   (default: a temporary directory, removed)
Needs: the running interpreter with setuptools >= 68 (the build backend; the lock has it) and
access to the package index for the core dependencies, pytest and hypothesis. Never installs
torch or an engine. Exit 0 when every step holds; each command and its output are printed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIP_PINS = ("pytest>=8", "hypothesis>=6.100")

TARGET_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16",
}
DRAFT_CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "draft_vocab_size": 32000, "max_position_embeddings": 2048, "rms_norm_eps": 1e-05,
    "torch_dtype": "bfloat16", "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]},
}

UNRELATED_TEST = '''
import sys
import warnings


def test_plain():
    assert 1 + 1 == 2


def test_plugin_left_the_session_alone():
    assert "torch" not in sys.modules
    assert not any(str(getattr(f[3], "pattern", f[3])).startswith(("sglang", "requests")) for f in warnings.filters)


def test_hypothesis_untouched():
    try:
        from hypothesis import given, settings, strategies as st
    except ImportError:
        return
    # hypothesis' own choice, untouched by the plugin: its built-in 'ci' profile where a CI variable is
    # set (hypothesis/_settings.py is_in_ci), else 'default'
    from hypothesis._settings import is_in_ci

    expected = "ci" if is_in_ci() else "default"
    assert settings.get_current_profile_name() == expected, settings.get_current_profile_name()
    assert settings.default.max_examples == 100

    @given(st.integers())
    def prop(x):
        assert isinstance(x, int)

    prop()
'''


CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
"""Every command runs without the caller's PYTHONPATH: the venv must import the installed wheel,
never the checkout."""


class Failed(Exception):
    pass


def run(cmd: list[str], cwd: Path, expect: int = 0, env: dict | None = None, words: tuple[str, ...] = (),
        tail: int = 0) -> str:
    """Run ``cmd`` (printed with its output, the last ``tail`` lines only if ``tail``; pip's notes
    about absent local index folders left out); raise :class:`Failed` unless it exits ``expect``
    and its output holds every one of ``words``."""
    shown = " ".join(str(c) for c in cmd)
    print(f"\n$ (cd {cwd}) {shown}", flush=True)
    t = time.monotonic()
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
                       env={**CLEAN_ENV, **(env or {})}, timeout=900)
    out = (p.stdout + p.stderr).rstrip()
    shown_lines = [x for x in out.splitlines() if not (x.startswith("WARNING: Location") and "is ignored" in x)]
    print("\n".join(shown_lines[-tail:] if tail else shown_lines))
    print(f"[exit {p.returncode}, {time.monotonic() - t:.1f} s]", flush=True)
    if p.returncode != expect:
        raise Failed(f"{shown}: exit {p.returncode}, expected {expect}")
    missing = [w for w in words if w not in out]
    if missing:
        raise Failed(f"{shown}: output lacks {missing}")
    return out


def copy_tree(dst: Path) -> Path:
    """The checkout's tracked files (git ls-files; every file but .tox/build output without git),
    copied so that building writes nothing into the checkout."""
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        names = [n for n in files.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()
                 and not {".tox", ".git", "build", "dist", "__pycache__", "_build"} & set(p.relative_to(ROOT).parts)]
    for n in names:
        if (ROOT / n).is_file():
            (dst / n).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / n, dst / n)
    return dst


def _built(out: str) -> str:
    return [line for line in out.splitlines() if line.startswith("BUILT ")][-1].split(" ", 1)[1]


def build(work: Path) -> Path:
    """sdist from a copy of the checkout, then the wheel from the unpacked sdist (so the sdist is
    shown complete), both with setuptools' PEP 517 backend; the wheel's contents checked."""
    src = copy_tree(work / "src")
    dist = work / "dist"
    dist.mkdir()
    hook = "import sys; from setuptools import build_meta as b; print('BUILT', getattr(b, sys.argv[1])(sys.argv[2]))"
    sdist = dist / _built(run([sys.executable, "-c", hook, "build_sdist", dist], src, tail=1))
    with tarfile.open(sdist) as tf:
        tf.extractall(work / "sdist", filter="data")
    unpacked = next((work / "sdist").iterdir())
    wheel = dist / _built(run([sys.executable, "-c", hook, "build_wheel", dist], unpacked, tail=1))
    names = zipfile.ZipFile(wheel).namelist()
    need = ["eagle3_conformance/_contracts/schema/contract.schema.json",
            "eagle3_conformance/_contracts/llama-3.1-8b-instruct--lmsys-eagle3.yaml",
            "eagle3_conformance/_docs/gates.md", "eagle3_conformance/_docs/REFERENCE.md",
            "eagle3_conformance/suite/plugin.py", "eagle3_conformance/tools/sglang_cpu/harness.py"]
    need += sorted(str(f.relative_to(src)) for f in (src / "eagle3_conformance").rglob("*.py"))  # every module
    lacking = [n for n in need if n not in names]
    fixture_contracts = [n for n in names if "/_contracts/tiny-" in n or "/_contracts/smollm2-" in n]
    print(f"\nwheel {wheel.name}: {len(names)} files; lacking {lacking}; fixture contracts {fixture_contracts}")
    if lacking or fixture_contracts or any(n.startswith("fixtures/") for n in names):
        raise Failed("the wheel's contents are not what an installed user needs")
    return wheel


def make_venv(work: Path, name: str, wheel: Path) -> Path:
    """A clean virtual environment holding the wheel and its declared dependencies only."""
    env = work / name
    run([sys.executable, "-m", "venv", env], work)
    bin_ = env / "bin"
    run([bin_ / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel], work)
    run([bin_ / "python", "-m", "pip", "list", "--disable-pip-version-check"], work)
    return bin_


def user_pair(user: Path) -> None:
    for d, cfg in (("models/target", TARGET_CONFIG), ("models/draft", DRAFT_CONFIG)):
        (user / d).mkdir(parents=True)
        (user / d / "config.json").write_text(json.dumps(cfg, indent=1))


def authoring(bin_: Path, user: Path) -> None:
    """init / validate / translate on the user's own config.json files, outside the checkout."""
    cli = bin_ / "eagle3-conformance"
    user_pair(user)
    run([cli, "init", "--target", "models/target", "--draft", "models/draft", "--engine", "specforge==0.2.0",
         "-o", "my-pair.yaml"], user, words=("wrote my-pair.yaml", "B_2"))
    first = (user / "my-pair.yaml").read_text().splitlines()[0]
    if not first.endswith("eagle3_conformance/_contracts/schema/contract.schema.json"):
        raise Failed(f"init's schema line does not point at the installed schema: {first}")
    if not Path(first.split("$schema=", 1)[1]).is_absolute():  # not ../../venv/lib/...: it breaks when the file moves
        raise Failed(f"init's schema line is not the installed schema's absolute path: {first}")
    run([cli, "init", "--target", "models/target", "--draft", "models/draft", "--engine", "sglang",
         "-o", "other.yaml"], user, expect=2, words=("sglang is not installed",))
    run([cli, "init", "--target", "models/target", "--draft", "models/draft", "--engine", "vllm==0.33.0",
         "-o", "other.yaml"], user, expect=2, words=("vLLM==0.33.0 is not installed",))
    examples = run([bin_ / "python", "-c", "from eagle3_conformance.environment import shipped; "
                    "print('\\n'.join(map(str, shipped.example_contracts())))"], user).splitlines()
    run([cli, "validate", "my-pair.yaml", *examples], user, words=("ok my-pair.yaml",))
    shutil.copy(ROOT / "contracts" / "smollm2-135m.yaml", user / "smollm2-135m.yaml")
    run([cli, "validate", "smollm2-135m.yaml"], user, words=("ok smollm2-135m.yaml", "source-checkout feature"))
    text = (ROOT / "contracts" / "smollm2-135m.yaml").read_text().replace("fixture: smollm2-135m", "fixture: smollm2-153m")
    (user / "misspelled.yaml").write_text(text)
    run([cli, "validate", "misspelled.yaml"], user, expect=2, words=("not a known fixture",))
    run([cli, "translate", "my-pair.yaml", "--to", "specforge"], user, words=("ids:        [1, 15, 28]",))
    run([cli, "translate", "my-pair.yaml", "--to", "speculators"], user, expect=2, words=("cannot store F",))
    lmsys = next(e for e in examples if e.endswith("llama-3.1-8b-instruct--lmsys-eagle3.yaml"))
    for tool in ("speculators", "vllm"):
        run([cli, "translate", lmsys, "--to", tool], user, words=("ids:",))
    run([cli, "translate", "my-pair.yaml", "--to", "sglang"], user, expect=2, words=("sglang is not installed",))
    run([cli, "schema"], user, words=('"$schema"',), tail=3)
    (user / "data").mkdir()
    run([cli, "check-data", "my-pair.yaml", "--data", "data", "--no-reference"], user, expect=2,
        words=("torch is not installed", "eagle3-conformance[reference]"))


def unrelated_project(bin_: Path, proj: Path, hypothesis: bool) -> None:
    """An unrelated project's pytest with the plugin installed: passes, plugin loaded and inert; a
    contract YAML under its contracts/ is not collected unless the suite is asked for."""
    if not proj.exists():
        (proj / "contracts").mkdir(parents=True)
        (proj / "test_unrelated.py").write_text(UNRELATED_TEST)
        shutil.copy(ROOT / "contracts" / "tiny-llama.yaml", proj / "contracts" / "tiny-llama.yaml")
    out = run([bin_ / "python", "-m", "pytest", "-v", "-p", "no:cacheprovider"], proj,
              words=("3 passed", "eagle3-conformance"))
    if "tiny-llama" in out:
        raise Failed("a plain pytest collected the contract under contracts/")
    print(f"[hypothesis {'present' if hypothesis else 'absent'}: unrelated project passes, plugin inert]")


def conformance_suite(bin_: Path, user: Path) -> None:
    """``pytest -m conformance --contract`` on the user's pair: every path says why it cannot run
    with the engines installed here (none), nothing errors, and a run that checked nothing is not green:
    NOTHING CHECKED with the reasons grouped (without -rs), pytest's exit 5 ("no tests ran")."""
    run([bin_ / "python", "-m", "pytest", "-m", "conformance", "--contract", "my-pair.yaml",
         "-p", "no:cacheprovider"], user, expect=5,
        words=("skipped", "NOTHING CHECKED: every path skipped", "torch is not installed"))


def main(argv: list[str]) -> int:
    work = Path(argv[0]).resolve() if argv else Path(tempfile.mkdtemp(prefix="eagle3-install-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        wheel = build(work)
        bin_ = make_venv(work, "venv", wheel)
        authoring(bin_, work / "user")
        run([bin_ / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", PIP_PINS[0]], work)
        unrelated_project(bin_, work / "unrelated", hypothesis=False)
        run([bin_ / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", PIP_PINS[1]], work)
        run([bin_ / "python", "-c", "import sys, time; t = time.perf_counter(); import eagle3_conformance.suite.plugin; "
             "ms = (time.perf_counter() - t) * 1000; "
             "heavy = sorted({'torch', 'hypothesis', 'sglang', 'vllm', 'transformers', 'numpy'} & set(sys.modules)); "
             "print(f'plugin module loaded in {ms:.0f} ms (pytest included); heavy modules imported: {heavy}'); "
             "sys.exit(bool(heavy))"], work, words=("heavy modules imported: []",))
        unrelated_project(bin_, work / "unrelated", hypothesis=True)
        conformance_suite(bin_, work / "user")
    except Failed as e:
        print(f"\nINSTALL CHECK FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if not argv:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\ninstall check passed in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
