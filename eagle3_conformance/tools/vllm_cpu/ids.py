"""What the installed vLLM captures for a draft config, asked of vLLM's own code (no model built).

For each model runner vLLM has, its own reader is called on the draft config as vLLM's own config
loader parses it, the model's own default and setter are applied, and the stored ids are read
back (paths under ``vllm/`` of the installed 0.33.0 wheel):

* draft config: ``transformers_utils/config.py`` ``get_config`` (speculators-format configs are
  rewritten there: ``transformers_utils/configs/speculators/algos.py:15-50``);
* V1 reader: ``GPUModelRunner._get_eagle3_aux_layers_from_config``
  (``v1/worker/gpu_model_runner.py:5190-5227``; the CPU runner subclasses it), called unbound on a
  stub holding ``speculative_config``; V2 reader: ``get_eagle3_aux_layers_from_config``
  (``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113-150``);
* whether aux states are used: V1 ``SpecDecodeBaseProposer._get_eagle3_use_aux_hidden_state_from_config``
  (``v1/spec_decode/llm_base_proposer.py:1674-1690``), V2 ``requires_aux_hidden_states``
  (``eagle3_utils.py:15-22``);
* no ids: the target class's own ``get_eagle3_default_aux_hidden_state_layers`` (found through
  vLLM's ``ModelRegistry``; ``interfaces.py:1751-1772``), called on a stub with L layers;
* setter: ``EagleModelMixin._set_aux_hidden_state_layers`` (``interfaces.py:1616-1617``) on a
  bare mixin instance: it stores ``tuple(sorted(set(ids)))``;
* meaning of a stored id: in models whose decoder is an ``EagleModelMixin``, id k is B_k, 0..L
  (``models/llama.py:406-457``: before the first layer, then after layer ``idx`` as ``idx + 1``).
  This is checked by fingerprint against the reference forward on real weights in
  ``tests/test_vllm_path.py``; architectures whose decoder is not a mixin (DeepSeek-V2/V3's
  pre-mixin loop, ``deepseek_v2.py:1545-1592``) are refused rather than guessed.
"""

from __future__ import annotations

import inspect
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

from eagle3_conformance.environment.installed import installed_version  # not runtime's: that imports torch

RUNNERS = ("v1", "v2")
READERS = {
    "v1": "GPUModelRunner._get_eagle3_aux_layers_from_config (v1/worker/gpu_model_runner.py:5190-5227)",
    "v2": "get_eagle3_aux_layers_from_config (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113-150)",
}


class VLLMNotAsked(ValueError):
    """vLLM's code could not be asked: not installed, another release, or an architecture whose
    capture is not the mixin's. One line, says why. ``not_installed``: the release asked for is not the
    installed one (or none is): no answer about the ids, only about this machine."""

    def __init__(self, message: str, *, not_installed: bool = False) -> None:
        super().__init__(message)
        self.not_installed = not_installed


@dataclass(frozen=True)
class RunnerReading:
    """What one runner makes of a draft config.

    Attributes:
        runner: ``"v1"`` or ``"v2"``.
        config_ids: the ids the runner's reader found (None: none; the model default applies).
        applied: the ids the setter stored (sorted, distinct).
        uses_aux: whether the runner hands the draft aux states at all (False: the last hidden
            state, F).
        boundaries: what reaches the draft, in concat order (``["B_2", ...]``, or ``["F"]``).
    """

    runner: str
    config_ids: Optional[tuple[int, ...]]
    applied: tuple[int, ...]
    uses_aux: bool
    boundaries: tuple[str, ...]


def _require(version: Optional[str]) -> str:
    inst = installed_version("vllm")
    if inst is None:
        raise VLLMNotAsked(f"vLLM{'==' + version if version else ''} is not installed in this environment; a "
                           "pinned release's id readers are its own code, asked where it is installed (pip install "
                           f"vllm{'==' + version if version else ''}; this project: tox -e vllm); without it, "
                           "name the engine without a version (the recorded rule)", not_installed=True)
    if version is not None and version != inst:
        raise VLLMNotAsked(f"vLLM {version} was asked for but {inst} is installed; only the installed release's "
                           "code can be asked", not_installed=True)
    return inst


def _prepare() -> None:
    import logging
    import os

    from eagle3_conformance.environment.torch_env import prepare

    prepare()
    os.environ["CONFORMANCE_TORCH_PREPARE"] = "1"  # vLLM's subprocess model inspection (registry.py:1123)
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    logging.getLogger("vllm").setLevel(logging.ERROR)


def target_class(architecture: str):
    """vLLM's model class registered for ``architecture`` and whether its decoder captures as the
    ``EagleModelMixin`` does.

    Raises:
        VLLMNotAsked: unknown architecture, no EAGLE-3 support, or a decoder that is not a mixin.
    """
    _prepare()
    from vllm.model_executor.models.interfaces import EagleModelMixin, supports_eagle3
    from vllm.model_executor.models.registry import ModelRegistry

    cls = ModelRegistry._try_load_model_cls(architecture)
    if cls is None:
        raise VLLMNotAsked(f"vLLM {installed_version('vllm')} has no model class for {architecture}")
    if not supports_eagle3(cls):
        raise VLLMNotAsked(f"vLLM's {cls.__name__} does not support EAGLE-3 (no SupportsEagle3)")
    mod = inspect.getmodule(cls)
    if mod is None:
        raise VLLMNotAsked(f"vLLM's {cls.__name__} has no module to read its decoder from: not asked")
    mixins = [c for _, c in inspect.getmembers(mod, inspect.isclass)
              if issubclass(c, EagleModelMixin) and c is not EagleModelMixin and c.__module__ == mod.__name__]
    if not mixins:
        raise VLLMNotAsked(f"vLLM's {mod.__name__.rsplit('.', 1)[-1]}.py decoder is not an EagleModelMixin (its own "
                           "capture loop, e.g. deepseek_v2.py:1545-1592): not asked")
    return cls


def read_draft(draft_cfg: dict, num_layers: int, architecture: str, version: Optional[str] = None
               ) -> dict[str, RunnerReading]:
    """Each runner's reading of ``draft_cfg`` (a draft ``config.json`` as a dict) for a target of
    ``num_layers`` layers of ``architecture``.

    Raises:
        VLLMNotAsked: vLLM absent or another release than ``version``, or an architecture it
            cannot be asked about (:func:`target_class`).
        ValueError: vLLM's own config loader rejects ``draft_cfg`` (its message).
    """
    _require(version)
    cls = target_class(architecture)
    from vllm.model_executor.models.interfaces import EagleModelMixin
    from vllm.transformers_utils.config import get_config
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import (
        get_eagle3_aux_layers_from_config,
        requires_aux_hidden_states,
    )
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    d = Path(tempfile.mkdtemp(prefix="vllm_ids_"))
    try:
        (d / "config.json").write_text(json.dumps(draft_cfg))
        hf = get_config(str(d), trust_remote_code=False)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    spec = SimpleNamespace(method="eagle3", draft_model_config=SimpleNamespace(hf_config=hf))
    found = {"v1": GPUModelRunner._get_eagle3_aux_layers_from_config(SimpleNamespace(speculative_config=spec)),
             "v2": get_eagle3_aux_layers_from_config(spec)}
    uses = {"v1": bool(SpecDecodeBaseProposer._get_eagle3_use_aux_hidden_state_from_config(spec)),
            "v2": bool(requires_aux_hidden_states(spec))}
    default = tuple(cls.get_eagle3_default_aux_hidden_state_layers(
        SimpleNamespace(model=SimpleNamespace(layers=[None] * num_layers))))

    class _Holder(EagleModelMixin):
        start_layer = 0

    out = {}
    for r in RUNNERS:
        h = _Holder()
        EagleModelMixin._set_aux_hidden_state_layers(h, tuple(found[r] or default))
        applied = tuple(h.aux_hidden_state_layers)
        bds = tuple(f"B_{i}" for i in applied) if uses[r] else ("F",)
        out[r] = RunnerReading(r, None if found[r] is None else tuple(found[r]), applied, uses[r], bds)
    return out
