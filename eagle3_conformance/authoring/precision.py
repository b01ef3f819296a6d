"""The precision hidden states are *produced* in, derived as each engine's own ``dtype="auto"`` does.

A float32 checkpoint is not served in float32: both engines downcast it by default, and the data a
training pipeline writes through them carries that precision's noise against the float32 reference.
``eagle3-conformance init`` writes the result into the contract's ``precision`` block (apart from the
checkpoint's ``target.dtype``), and every precision-dependent gate follows it
(:mod:`eagle3_conformance.gates`).

- **SGLang**: the installed SGLang's own rule is called,
  ``sglang.srt.configs.model_config._get_and_verify_dtype(config, "auto")`` (SGLang 0.5.23,
  ``srt/configs/model_config.py:2284-2345``): a float32 checkpoint is served in float16, Gemma
  families in bfloat16; any other dtype as written.
- **vLLM** (0.33.0; not installed in the CPU environment, so its rule stands in here, see
  :func:`vllm_auto_dtype`): ``vllm/config/model.py::_resolve_auto_dtype`` downcasts a float32
  checkpoint to the platform's first supported dtype that the model type allows, which is
  ``platforms/cuda.py::CudaPlatformBase.supported_dtypes[0]``: bfloat16 on an Ampere-or-later GPU
  (compute capability >= 8.0), float16 on Pascal..Turing.
- **speculators** 0.9.0: ``generate-offline-data`` reads hidden states from a vLLM server
  (``speculators/data_generation/vllm_client.py``), so the training data follows vLLM's rule, and a
  speculators-format draft is served by vLLM.
- **SpecForge** 0.2.0: ``scripts/prepare_hidden_states.py`` loads the target in the checkpoint's own
  dtype (``build_target_model``: ``torch_dtype=model_config.dtype``) and stores it so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

#: the vLLM release whose rule :func:`vllm_auto_dtype` stands in for (vllm/config/model.py
#: ``_resolve_auto_dtype``, vllm/platforms/cuda.py ``supported_dtypes``)
VLLM_RULE_VERSION = "0.33.0"
#: vllm/config/model.py ``_FLOAT16_NOT_SUPPORTED_MODELS`` (matters only where float16 would be chosen)
VLLM_FLOAT16_NOT_SUPPORTED = ("gemma2", "gemma3", "gemma3_text", "glm4")  # vLLM 0.33.0 _FLOAT16_NOT_SUPPORTED_MODELS

_NAMES = {"float32", "bfloat16", "float16"}


@dataclass(frozen=True)
class Produced:
    """One path's production precision and the sentence that says where it comes from."""

    dtype: str
    why: str


def _config_dtype(cfg: dict) -> Optional[str]:
    text = cfg.get("text_config") or {}
    d = cfg.get("dtype") or cfg.get("torch_dtype") or text.get("dtype") or text.get("torch_dtype")
    return str(d).replace("torch.", "") if d is not None else None


def vllm_auto_dtype(model_type: str, config_dtype: Optional[str], *, ampere_or_later: bool = True) -> str:
    """vLLM 0.33.0's ``dtype="auto"`` on a CUDA GPU, standing in for ``_resolve_auto_dtype``.

    Why a stand-in: vLLM is not installed in the CPU environment (it is in ``tox -e vllm``; the test
    ``tests/test_precision.py`` compares this with the installed function there). The rule, read in
    vllm-project/vllm ``vllm/config/model.py``: ``supported = [d for d in platform.supported_dtypes if
    _is_valid_dtype(model_type, d)]``; ``preferred = supported[0]``; a float32 checkpoint becomes
    ``preferred``; any other dtype is kept when supported, else ``preferred`` (with a warning). CUDA's ``supported_dtypes`` is ``[bfloat16, float16,
    float32]`` from compute capability 8.0, ``[float16, float32]`` from 6.0.

    Args:
        model_type: config.json ``model_type``; config_dtype: its ``torch_dtype`` (None: float32, as
            vLLM assumes when neither config nor safetensors metadata says).
    """
    supported = ["bfloat16", "float16", "float32"] if ampere_or_later else ["float16", "float32"]
    supported = [d for d in supported if not (d == "float16" and model_type in VLLM_FLOAT16_NOT_SUPPORTED)]
    cd = config_dtype or "float32"
    if cd == "float32":
        return supported[0]
    # a dtype the platform (or this model type) does not support falls back to the preferred one
    return cd if cd in supported else supported[0]


def sglang_auto_dtype(cfg: dict) -> str:
    """The installed SGLang's own ``_get_and_verify_dtype(config, "auto")`` as a dtype name.

    Raises:
        ImportError: SGLang is not installed or cannot be imported.
    """
    from eagle3_conformance import torch_env

    torch_env.prepare()
    from sglang.srt.configs.model_config import _get_and_verify_dtype

    flat: dict[str, Any] = {"model_type": cfg.get("model_type") or (cfg.get("text_config") or {}).get("model_type", ""),
                            "dtype": _config_dtype(cfg)}
    return str(_get_and_verify_dtype(flat, "auto")).replace("torch.", "")


def _vllm(cfg: dict, who: str) -> Produced:
    mt = str(cfg.get("model_type") or (cfg.get("text_config") or {}).get("model_type") or "")
    cd = _config_dtype(cfg)
    d = vllm_auto_dtype(mt, cd)
    if cd in (None, "float32"):
        why = (f"{who}: vLLM {VLLM_RULE_VERSION} dtype=auto serves a {cd or 'float32 (none written)'} checkpoint in "
               f"{d} on an Ampere-or-later GPU (float16 before; vllm/config/model.py _resolve_auto_dtype)")
    else:
        why = f"{who}: vLLM dtype=auto keeps the checkpoint's {cd}"
    return Produced(d, why)


def _sglang(cfg: dict, version: Optional[str]) -> Produced:
    from eagle3_conformance.engine_ids import installed_sglang_version

    inst = installed_sglang_version()
    cd = _config_dtype(cfg)
    if inst is None or (version and version != inst):
        # not the release asked for: its rule cannot be asked; say so rather than guess
        d = cd if cd in _NAMES and cd != "float32" else "float16"
        what = (f"SGLang {version} is not the installed release ({inst})" if inst and version else
                f"SGLang {version + ' ' if version else ''}is not installed")
        return Produced(d, f"{what}, so its dtype=auto rule cannot be asked; the 0.5.23 rule is assumed "
                           "(float32 -> float16, Gemma bfloat16): check it")
    d = sglang_auto_dtype(cfg)
    if cd in (None, "float32"):
        return Produced(d, f"SGLang {inst} dtype=auto serves a {cd or 'float32 (none written)'} checkpoint in {d} "
                           "(srt/configs/model_config.py _get_and_verify_dtype)")
    return Produced(d, f"SGLang {inst} dtype=auto keeps the checkpoint's {cd}")


def derive(tool: str, version: Optional[str], cfg: dict) -> tuple[Produced, Produced]:
    """``(training, serving)`` production precision for a pair served by ``tool`` (``init --engine``).

    Training data is assumed to come from the tool's own data generation: speculators' reads a vLLM
    server, SpecForge's capture runs its configured dtype; for a contract named by serving engine
    (sglang, vllm) the data is assumed to be generated by that engine, which the comment says.
    """
    if tool == "sglang":
        s = _sglang(cfg, version)
        return Produced(s.dtype, s.why + "; training data assumed generated by the same engine: change "
                                          "precision.training if not"), s
    if tool == "specforge":
        cd = _config_dtype(cfg)
        t = Produced(cd if cd in _NAMES else "bfloat16",
                     "SpecForge 0.2.0 prepare_hidden_states.py captures in the checkpoint's dtype (build_target_model: "
                     "torch_dtype=model_config.dtype)" + ("" if cd in _NAMES else "; none written: bfloat16 assumed"))
        return t, _sglang(cfg, None)
    if tool == "speculators":
        v = _vllm(cfg, "speculators 0.9.0 generate-offline-data reads a vLLM server")
        return v, _vllm(cfg, "a speculators-format draft is served by vLLM")
    v = _vllm(cfg, "vLLM serving")
    return Produced(v.dtype, v.why + "; training data assumed generated by the same engine: change "
                                     "precision.training if not"), v
