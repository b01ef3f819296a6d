"""The ``forward_hooks`` factory for a user's own SGLang server (``eagle3-conformance serve-hooks``).

It runs inside the server's scheduler process(es). It wraps the recorder of :mod:`.hooks` (the same
records the project's own engine runs write) and adds what a directory of a server's records needs
to be judged without the prompts or the server's flags:

* ``factory-<pid>-<n>.json`` when SGLang calls the factory (``hook_manager.py``
  ``register_forward_hooks``: once per spec per model runner, the target's and the draft's, *before*
  it matches ``target_modules``): ``pid``, ``sglang_version``, ``torch_version``, ``time``. A
  directory without one: the server never loaded these hooks.
* ``model-<pid>-<role>.json`` on the first forward of each hooked model (``role`` "target", or
  "draft" for a model with ``fc``): its ``config`` (``architectures``, ``model_type``,
  ``num_hidden_layers``, ``hidden_size``, ``vocab_size``), the directory it was loaded from
  (``name_or_path``) and the target's ``layers_to_capture``. A
  directory with factory markers but no model file: SGLang matched no module (its warning
  ``No modules matched hook spec '<name>' patterns=[...]``) or the server served nothing.

Both are small JSON files written once; the per-forward cost is the recorder's.
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

FACTORY = "eagle3_conformance.tools.sglang_engine.server_hooks:server_recorder"
_CALLS = itertools.count()
CONFIG_KEYS = ("architectures", "model_type", "num_hidden_layers", "hidden_size", "vocab_size")


def specs(out_dir: str | Path, reference: dict | None = None) -> list[dict[str, Any]]:
    """The ``forward_hooks`` entries for a user's server recording into ``out_dir``: the recorder's
    own (:func:`.hooks.specs`: its name, ``target_modules``, config; with ``reference`` also the
    boundary hooks of the engine-as-reference), the first with this module's factory, which calls
    the recorder's (``config["record_factory"]``)."""
    from eagle3_conformance.tools.sglang_engine.hooks import specs as recorder_specs

    entries = recorder_specs(out_dir, reference)
    entry = entries[0]
    entry["config"] = {**entry["config"], "record_factory": entry["hook_factory"]}
    entry["hook_factory"] = FACTORY
    return entries


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)  # a reader never sees half a file


def _resolve(path: str):
    mod, _, name = path.partition(":")
    return getattr(importlib.import_module(mod), name)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("sglang", "torch"):
        try:
            out[f"{dist}_version"] = version(dist)
        except PackageNotFoundError:
            out[f"{dist}_version"] = ""
    return out


def model_facts(module) -> dict[str, Any]:
    """What a hooked model says about itself (its HF config's :data:`CONFIG_KEYS`, the target's
    ``layers_to_capture``)."""
    cfg = getattr(module, "config", None)
    facts = {k: getattr(cfg, k, None) for k in CONFIG_KEYS}
    if isinstance(facts["architectures"], tuple):
        facts["architectures"] = list(facts["architectures"])
    facts["role"] = "draft" if hasattr(module, "fc") else "target"
    # the directory the server loaded the model from (transformers' PretrainedConfig.name_or_path): lets
    # check-captures read the served draft's checkpoint (d2t/t2d, lm_head) where it is on the same machine
    facts["name_or_path"] = str(getattr(cfg, "name_or_path", "") or getattr(cfg, "_name_or_path", "") or "") or None
    facts["layers_to_capture"] = [int(i) for i in getattr(module, "layers_to_capture", []) or []]
    return facts


def caller_req_to_token(max_depth: int = 4):
    """The ``req_to_token`` table of the model runner whose model the hooks are being registered on,
    read (never changed) from the caller's frame: SGLang 0.5.23 calls the factory from
    ``hook_manager.py`` ``register_forward_hooks(model_runner.model, ...)``, called by
    ``finalize_cuda_graph_capture(model_runner)`` (``cuda_graph_setup.py:452-459``), whose local
    ``model_runner`` holds ``req_to_token_pool`` (``ForwardBatch`` does not). None when not found
    (then cached prefixes cannot be attributed, and rows after them are named, not judged)."""
    import inspect

    frame = inspect.currentframe()
    try:
        for _ in range(max_depth + 1):
            frame = frame.f_back if frame is not None else None
            runner = frame.f_locals.get("model_runner") if frame is not None else None
            pool = getattr(getattr(runner, "req_to_token_pool", None), "req_to_token", None)
            if pool is not None:
                return pool
        return None
    finally:
        del frame


def server_recorder(config: dict):
    """``forward_hooks`` factory (see the module docstring): the marker, then the recorder's hook
    wrapped to write each model's facts once."""
    pool = caller_req_to_token()
    out = Path(config["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    _write_json(out / f"factory-{pid}-{next(_CALLS)}.json",
                {"pid": pid, "time": time.time(), "record_factory": config.get("record_factory"),
                 "req_to_token_found": pool is not None, **_versions()})
    inner_config = {**{k: v for k, v in config.items() if k != "record_factory"}, "req_to_token": pool}
    inner = _resolve(config.get("record_factory") or "eagle3_conformance.tools.sglang_engine.hooks:"
                     "draft_input_recorder")(inner_config)
    seen: set[int] = set()

    def hook(module, args, output):
        if id(module) not in seen and hasattr(module, "embed_tokens"):
            seen.add(id(module))
            facts = model_facts(module)
            _write_json(out / f"model-{pid}-{facts['role']}.json", {"pid": pid, **facts})
        return inner(module, args, output)

    return hook
