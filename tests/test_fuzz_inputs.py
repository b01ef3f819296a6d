"""Fuzzing the CLI with bad input: random YAML documents and mutated contracts at `validate`,
random bytes and truncated files at `check-data`. No traceback may escape; validate exits 0 or
2, check-data on a damaged dataset 1 or 2. A few runs go through a real subprocess to prove the
process exit code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eagle3_conformance.cli import main

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "contracts" / "tiny-llama.yaml"
TEXT = TINY.read_text()
LINES = TEXT.splitlines(keepends=True)

FUZZ = settings(max_examples=40, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["B_2", "B_99", "F", "nested", "bfloat16", "calibrated"]))
keys = st.one_of(st.sampled_from(["schema_version", "name", "target", "draft", "capture", "boundaries",
                                  "verifier_last", "alignment", "norm_bands", "gates", "hidden_size", "bands"]),
                 st.text(min_size=1, max_size=8))
documents = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(keys, inner, max_size=5)), max_leaves=25)


def _validate(p: Path, capsys) -> int:
    rc = main(["validate", str(p)])
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err and "internal error" not in out.err
    assert rc in (0, 2), rc
    if rc == 2:
        assert str(p) in out.out + out.err
    return rc


@FUZZ
@given(doc=documents)
def test_random_yaml_documents(doc, tmp_path_factory, capsys):
    p = tmp_path_factory.mktemp("fz") / "c.yaml"
    p.write_text(yaml.safe_dump(doc, allow_unicode=True))
    assert _validate(p, capsys) == 2  # nothing random is a valid contract


mutations = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, len(LINES) - 1), st.integers(1, 4)),
    st.tuples(st.just("swap"), st.integers(0, len(LINES) - 1), st.integers(0, len(LINES) - 1)),
    st.tuples(st.just("splice"), st.integers(0, len(TEXT.encode())), st.binary(min_size=1, max_size=12)),
    st.tuples(st.just("value"), st.integers(0, len(LINES) - 1), scalars),
)


def _mutate(m) -> bytes:
    kind, a, b = m
    lines = list(LINES)
    if kind == "delete":
        del lines[a:a + b]
    elif kind == "swap":  # swap the values of two lines
        la, lb = lines[a], lines[b]
        if ":" in la and ":" in lb:
            ka, va = la.split(":", 1)
            kb, vb = lb.split(":", 1)
            lines[a], lines[b] = f"{ka}:{vb}", f"{kb}:{va}"
    elif kind == "splice":
        raw = TEXT.encode()
        return raw[:a] + b + raw[a:]
    elif kind == "value" and ":" in lines[a]:
        k = lines[a].split(":", 1)[0]
        lines[a] = f"{k}: {yaml.safe_dump(b, default_flow_style=True).splitlines()[0]}\n"
    return "".join(lines).encode()


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(m=mutations)
def test_mutated_contracts(m, tmp_path_factory, capsys):
    p = tmp_path_factory.mktemp("fz") / "c.yaml"
    p.write_bytes(_mutate(m))
    _validate(p, capsys)


# --- check-data -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pristine(tiny, tmp_path_factory):
    d = tmp_path_factory.mktemp("pristine") / "data"
    shutil.copytree(tiny.data_dir, d)
    return d


def _files(d: Path) -> list[Path]:
    return sorted([d / "data-00000-of-00001.arrow", d / "state.json", d / "dataset_info.json"]
                  + list((d / "hidden_states").glob("*.safetensors")))


damage = st.tuples(st.integers(0, 14), st.sampled_from(["truncate", "random", "splice"]),
                   st.floats(0, 0.99), st.binary(min_size=1, max_size=64))


def _damage(d: Path, spec) -> Path:
    idx, how, frac, junk = spec
    files = _files(d)
    f = files[idx % len(files)]
    raw = f.read_bytes()
    cut = int(len(raw) * frac)
    if how == "truncate":
        new = raw[:cut]
    elif how == "random":
        new = junk * (1 + len(raw) // len(junk))
        new = new[: max(1, len(raw) - 1)]
    else:  # splice junk in: shifts every byte after it
        new = raw[:cut] + junk + raw[cut:]
    f.write_bytes(new)
    return f


@settings(max_examples=12, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=damage)
def test_damaged_dataset(spec, pristine, tmp_path_factory, capsys):
    d = tmp_path_factory.mktemp("dmg") / "data"
    shutil.copytree(pristine, d)
    f = _damage(d, spec)
    rc = main(["check-data", str(TINY), "--data", str(d), "--no-reference", "--quiet"])
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err and "internal error" not in out.err, out.err
    if f.name in ("dataset_info.json",):
        assert rc in (0, 1, 2)  # informational metadata: the loader may not read it at all
    else:
        assert rc in (1, 2), (f.name, spec, out.err)
    if rc == 2:
        assert out.err.startswith("eagle3-conformance: error:") and len(out.err.strip().splitlines()) == 1


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "eagle3_conformance.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=REPO)


def test_real_exit_codes_through_a_subprocess(pristine, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(TEXT.encode().replace(b"target:\n", b"target:\n\xff\xfe\n", 1))
    r = _cli("validate", str(bad))
    assert r.returncode == 2 and "Traceback" not in r.stderr + r.stdout and "not UTF-8" in r.stdout
    d = tmp_path / "data"
    shutil.copytree(pristine, d)
    (d / "data-00000-of-00001.arrow").write_bytes(b"\x00" * 10)
    r = _cli("check-data", str(TINY), "--data", str(d), "--no-reference", "--quiet")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "not a speculators Arrow dataset" in r.stderr
