"""Fetch a released tool version's source once into a cache: only the files that say which ids
and which boundaries.

``pip download <dist>==<version> --no-deps`` of the wheel (the package index pip is configured
for), its sha256 recorded, then only the files of :data:`FILES` extracted (a few MB, no
environment, nothing installed), the wheel deleted. The cache is
``<model cache root>/engine-code/<dist>-<version>/`` (:func:`eagle3_conformance.environment.cache.model_cache_root`,
outside the repository) with ``manifest.json`` (wheel name, wheel sha256, sha256 of every
extracted file); a later call reuses it after checking the files against the manifest. The
directory is built under a temporary name and renamed into place, so a concurrent fetch never
sees half of one.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from eagle3_conformance.core.errors import DataError, UsageError

#: tool -> (distribution on the index, wheel paths to extract)
FILES: dict[str, tuple[str, tuple[str, ...]]] = {
    "sglang": ("sglang", (
        "sglang/srt/models/*.py",  # set_eagle3_layers_to_capture / set_dflash_layers_to_capture, EntryClass
        "sglang/srt/model_executor/*.py",  # the draft-config reader (<= 0.5.22), cuda_graph_runner's setter call
        "sglang/srt/model_executor/model_runner_components/*.py",  # the reader (0.5.23)
        "sglang/srt/speculative/dflash_utils.py",  # DFlash target_layer_ids resolution
    )),
    "vllm": ("vllm", (
        "vllm/model_executor/models/*.py",  # registry, SupportsEagle3 / EagleModelMixin, per-model defaults
        "vllm/v1/worker/gpu_model_runner.py",  # V1 reader
        "vllm/v1/worker/gpu/spec_decode/eagle/*.py",  # V2 reader
        "vllm/v1/spec_decode/llm_base_proposer.py",  # V1 use_aux_hidden_state
        "vllm/distributed/parallel_state.py",  # read by the setter (pipeline-parallel layout)
        "vllm/config/vllm.py",  # which runner is the default
    )),
    "speculators": ("speculators", (
        "speculators/data_generation/*.py",  # <= 0.4: the generator's id defaults and the patched capture loop
        "speculators/models/utils.py",  # >= 0.5: resolve_target_layer_ids (the ids handed to vLLM)
        "speculators/utils/*.py",  # imported by the generator module
    )),
    "specforge": ("specforge", (
        "specforge/algorithms/model_providers.py",  # resolve_eagle_capture_layers
        "specforge/offline_capture/sglang_backend/*.py",  # where the ids reach SGLang's setter
        "specforge-*.dist-info/METADATA",  # the SGLang release it pins (Requires-Dist)
    )),
}

CACHE_DIR = "engine-code"


class FetchError(DataError):
    """The version could not be fetched (no such release, no wheel, index unreachable)."""


@dataclass(frozen=True)
class Fetched:
    """One released version's extracted source.

    Attributes:
        tool / version: as asked, e.g. ``"sglang"``, ``"0.5.12"``.
        root: directory holding the top package (``root/sglang/srt/...``).
        wheel: the wheel's file name; ``sha256``: the wheel's sha256 (hex).
        files: number of extracted files.
        seconds: time spent fetching now (0.0 when the cache answered).
    """

    tool: str
    version: str
    root: Path
    wheel: str
    sha256: str
    files: int
    seconds: float


def cache_root() -> Path:
    from eagle3_conformance.environment.cache import model_cache_root

    return model_cache_root() / CACHE_DIR


def _check_version(tool: str, version: str) -> None:
    from packaging.version import InvalidVersion, Version

    if tool not in FILES:
        raise UsageError(f"unknown tool {tool!r}: the released code of {', '.join(FILES)} can be fetched")
    try:
        Version(version)
    except InvalidVersion:
        raise UsageError(f"{tool}=={version}: not a version number") from None


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _from_cache(tool: str, version: str, d: Path) -> Fetched | None:
    mf = d / "manifest.json"
    if not mf.is_file():
        return None
    man = json.loads(mf.read_text())
    for rel, digest in man["files"].items():
        p = d / rel
        if not p.is_file() or _sha256(p) != digest:
            raise FetchError(f"{d}: cached file {rel} differs from its manifest; delete {d} to fetch again")
    return Fetched(tool, version, d, man["wheel"], man["sha256"], len(man["files"]), 0.0)


def _nearest(version: str, pip_error: str, n: int = 4) -> str:
    """``"; nearest releases: a, b, c"`` from pip's ``(from versions: ...)`` list (which names every
    release, ~150 for SGLang), or ``""`` when pip listed none or the version does not parse."""
    import re

    from packaging.version import InvalidVersion, Version

    m = re.search(r"\(from versions: ([^)]*)\)", pip_error)
    if not m or m.group(1).strip() in ("", "none"):
        return ""
    try:
        want = Version(version)
        known = sorted({Version(v.strip()) for v in m.group(1).split(",") if v.strip()})
    except InvalidVersion:
        return ""
    below = [v for v in known if v < want]
    above = [v for v in known if v > want]
    k = min(len(below), max(n // 2, n - len(above)))  # half each side, the rest from the side that has them
    near = below[len(below) - k:] + above[:n - k]
    return f"; nearest releases with a wheel: {', '.join(map(str, near))} (of {len(known)})" if near else ""


def _download(dist: str, version: str, tmp: Path) -> Path:
    # wheels only: an sdist would run the release's own build code here (and some cannot build at all)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "-q", "-d", str(tmp), f"{dist}=={version}"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        raise FetchError(f"{dist}=={version}: pip download took over 15 minutes") from None
    wheels = sorted(tmp.glob("*.whl"))
    if r.returncode != 0 or not wheels:
        lines = (r.stderr or "").strip().splitlines()
        why = ([ln for ln in lines if ln.startswith("ERROR")] or lines[-1:] or ["no wheel"])[0]
        if "No matching distribution" in why or "Could not find a version" in why:
            why = (f"no wheel of {dist} {version} on the package index (a release published only as an sdist is "
                   "not fetched: building it would run its own code)" + _nearest(version, why))
        raise FetchError(f"{dist}=={version} cannot be fetched: {why}")
    return wheels[0]


def _extract(wheel: Path, patterns: tuple[str, ...], dest: Path) -> dict[str, str]:
    files = {}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if any(fnmatch.fnmatchcase(name, p) and name.count("/") == p.count("/") for p in patterns):
                out = dest / name
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(name))
                files[name] = _sha256(out)
    return files


def fetch(tool: str, version: str) -> Fetched:
    """``tool==version``'s source files of :data:`FILES`, from the cache or the package index.

    Raises:
        UsageError: an unknown tool or a malformed version.
        FetchError: no such release, no wheel, the index unreachable, or a tampered cache.
    """
    _check_version(tool, version)
    dist, patterns = FILES[tool]
    d = cache_root() / f"{dist}-{version}"
    cached = _from_cache(tool, version, d)
    if cached is not None:
        return cached
    t0 = time.perf_counter()
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dist}-{version}.", dir=d.parent))
    try:
        wheel = _download(dist, version, tmp / "dl")
        digest = _sha256(wheel)
        files = _extract(wheel, patterns, tmp / "src")
        if not files:
            raise FetchError(f"{wheel.name}: none of {', '.join(patterns)} in the wheel")
        (tmp / "src" / "manifest.json").write_text(json.dumps(
            {"tool": tool, "version": version, "wheel": wheel.name, "sha256": digest, "files": files}, indent=1))
        try:
            os.rename(tmp / "src", d)
        except OSError:  # another process put it in place first
            if _from_cache(tool, version, d) is None:
                raise
        return Fetched(tool, version, d, wheel.name, digest, len(files), time.perf_counter() - t0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
