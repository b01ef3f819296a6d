"""Internal: a CPU stand-in, no stable API (docs/architecture.md, "The self-test wall").

In-process vLLM 0.33.0 harness on CPU: what reaches the EAGLE-3 draft on each model runner.

Runs vLLM's REAL config, model and draft classes, resolves the aux-layer ids with each model
runner's own reader, applies them with the model's own setter, and observes what the draft's
``fc`` receives with a forward hook on the real module. Nothing of vLLM's id lookup, capture or
fusion is re-implemented. Stand-ins: the attention kernel (:mod:`.runtime`), and the worker loop
(scheduler, KV cache, sampling): the forward calls below are the ones the runners make, cited
per step.

vLLM facts this module depends on (paths under ``vllm/`` of the installed 0.33.0 wheel):

* configs: ``config/model.py`` ``ModelConfig`` for target and draft, ``config/speculative.py``
  ``SpeculativeConfig(method="eagle3", model=draft_dir)`` (which loads the draft's hf_config
  through vLLM's own config loaders, speculators-format rewrite included:
  ``transformers_utils/configs/speculators/algos.py:15-50``), ``config/vllm.py`` ``VllmConfig``.
* which runner: ``VllmConfig.use_v2_model_runner`` (``config/vllm.py:731-767``): the env var
  ``VLLM_USE_V2_MODEL_RUNNER``, else V1 without Triton on a known platform or with a feature V2
  lacks, else V2. Reported as ``default_runner`` for the config built here (platform
  "unspecified"; on a CUDA build the same property decides).
* id readers, one per runner, each called on the real ``SpeculativeConfig``:
  V1 ``GPUModelRunner._get_eagle3_aux_layers_from_config`` (``v1/worker/gpu_model_runner.py:
  5190-5227``; the CPU runner ``v1/worker/cpu_model_runner.py`` subclasses it), called unbound on
  a stub holding ``speculative_config``; V2 ``get_eagle3_aux_layers_from_config``
  (``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113-150``). V1 reads the top-level
  ``eagle_aux_hidden_state_layer_ids``, then ``dflash_config``, then the nested
  ``eagle_config["eagle_aux_hidden_state_layer_ids"]``; V2 never reads that nested key. No ids:
  ``get_eagle3_default_aux_hidden_state_layers()`` (``model_executor/models/interfaces.py:
  1760-1772``, ``(2, L//2, L-3)``), logged at info level only (``gpu_model_runner.py:5180-5188``).
* applying them: ``set_aux_hidden_state_layers`` -> ``EagleModelMixin._set_aux_hidden_state_layers``
  stores ``tuple(sorted(set(ids)))`` (``interfaces.py:1616-1617``); ``LlamaModel.forward``
  (``models/llama.py:406-457``) appends ``hidden + residual`` before the first layer (id 0) and
  after layer ``idx`` (id ``idx + 1``): id k is B_k, in ascending order, B_L reachable.
* concatenation: V1 ``torch.cat([h[:num_scheduled_tokens] for h in aux], -1)``
  (``gpu_model_runner.py:4891-4932``), V2 ``torch.cat(aux, -1)``
  (``v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py:210-216``); then the draft's
  ``combine_hidden_states`` (``models/llama_eagle3.py:397-418``: optional ``input_norm``, optional
  per-chunk ``fc_norm``, ``fc``; a pass-through when ``use_aux_hidden_state`` is False) and the
  draft ``LlamaModel.forward`` (``llama_eagle3.py:261-287``), which asserts that the combined width
  equals the embedding width.
* draft ``fc`` width: ``num_aux_hidden_states``, else the length of the NESTED ids, else 3
  (``llama_eagle3.py:209-221``): a top-level list is not counted.

Draft weights: the checkpoint's through the class's own ``load_weights`` when the draft directory
has safetensors; otherwise vLLM's own dummy loader (``model_loader/dummy_loader.py``
``DummyModelLoader.load_weights``, deterministic): the suite observes what reaches the draft, not its output.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

from eagle3_conformance.core.capture import Capture
from eagle3_conformance.environment.torch_env import prepare
from eagle3_conformance.tools.shared.cpu_harness import CPUHarnessLifecycle

prepare()
# vLLM inspects model classes in a subprocess (model_executor/models/registry.py:1123); the
# environment's start-up hook (requirements/install_vllm.py) prepares torch there when this is set
os.environ["CONFORMANCE_TORCH_PREPARE"] = "1"

import torch  # noqa: E402

from eagle3_conformance.tools.vllm_cpu.runtime import Segments, init_process, vllm_version  # noqa: E402

RUNNERS = ("v1", "v2")
_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


class VLLMCPUHarness(CPUHarnessLifecycle):
    """vLLM 0.33.0's target and EAGLE-3 draft classes in-process on CPU.

    Args:
        target_dir: HF-format target directory (config.json + safetensors).
        draft_dir: the draft's directory (config.json, optional safetensors).
        dtype: the serving dtype (float32, bfloat16 or float16).
        draft_ids_key: FAULT INJECTION. ``"nested"`` (the ids moved under ``eagle_config``, the key
            SGLang and vLLM's V1 reader read and V2 does not), ``"top_level"`` (moved to the
            top-level key both runners read first) or ``"absent"`` (removed: the runner's default
            applies); the rewritten config is a private temp copy that vLLM reads through its own
            ``SpeculativeConfig``. ``None`` leaves the draft untouched.

    Attributes:
        vllm_version: installed vLLM version.
        default_runner: ``"v1"`` or ``"v2"``, from ``VllmConfig.use_v2_model_runner``.
        config_ids: runner -> the ids that runner's reader found in the draft config (``None``:
            none found, the model default applies).
        applied: runner -> ``model.aux_hidden_state_layers`` after the setter (sorted, distinct).
        fc_in_features: the width the draft's ``fc`` was built for (None: the draft has no fc).
        timings: wall seconds of ``build`` and the last ``extend``.
    """

    def __init__(self, target_dir: str | Path, draft_dir: str | Path, *, dtype: torch.dtype = torch.float32,
                 draft_ids_key: Optional[str] = None) -> None:
        self._start(target_dir, draft_dir, dtype, draft_ids_key)
        self.vllm_version = vllm_version()
        self._finish_build()

    # ---------------------------------------------------------------- construction

    DRAFT_IDS_PREFER = "top_level"  # eagle_aux_hidden_state_layer_ids at the config's top level
    DRAFT_COPY_PREFIX = "vllm_cpu_draft_"

    def _build(self) -> None:
        from vllm.config import (
            CompilationConfig,
            DeviceConfig,
            LoadConfig,
            ModelConfig,
            ParallelConfig,
            SpeculativeConfig,
            VllmConfig,
            set_current_vllm_config,
        )
        from vllm.model_executor.model_loader.dummy_loader import DummyModelLoader
        from vllm.model_executor.model_loader.weight_utils import safetensors_weights_iterator
        from vllm.model_executor.models.llama import LlamaForCausalLM
        from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM

        dt = _DTYPE_NAMES[self.dtype]
        with contextlib.redirect_stdout(io.StringIO()):
            mc = ModelConfig(model=str(self.target_dir), skip_tokenizer_init=True, dtype=dt)
            self.spec_config = SpeculativeConfig(model=str(self.draft_dir), method="eagle3", num_speculative_tokens=1,
                                                 target_model_config=mc, target_parallel_config=ParallelConfig())
            # DeviceConfig("cpu"): current_platform is UnspecifiedPlatform without a vLLM CPU/CUDA build;
            # mode 0 + custom_ops none: RMSNorm and rotary embedding run forward_native.
            self.vllm_config = VllmConfig(model_config=mc, device_config=DeviceConfig(device="cpu"),
                                          load_config=LoadConfig(),
                                          compilation_config=CompilationConfig(mode=0, custom_ops=["none"]),
                                          speculative_config=self.spec_config)
        init_process(self.vllm_config)
        self.default_runner = "v2" if self.vllm_config.use_v2_model_runner else "v1"
        self.num_layers = int(mc.hf_config.num_hidden_layers)
        with set_current_vllm_config(self.vllm_config), torch.no_grad():
            self.target = LlamaForCausalLM(vllm_config=self.vllm_config).to(self.dtype).eval()
            files = sorted(str(p) for p in self.target_dir.glob("*.safetensors"))
            self.target.load_weights(safetensors_weights_iterator(files, False))
            self.draft = Eagle3LlamaForCausalLM(vllm_config=self.vllm_config).to(self.dtype).eval()
            dfiles = sorted(str(p) for p in self.draft_dir.glob("*.safetensors"))
            if dfiles:
                self.draft.load_weights(safetensors_weights_iterator(dfiles, False))
                self.draft_weights = "checkpoint"
            else:
                DummyModelLoader(LoadConfig(load_format="dummy")).load_weights(self.draft, mc)
                self.draft_weights = "dummy (vLLM DummyModelLoader, seed 1234)"
        self.default_ids = tuple(self.target.get_eagle3_default_aux_hidden_state_layers())
        self._resolve()
        # a draft built with use_aux_hidden_state false has no fc (llama_eagle3.py:205-230)
        fc = getattr(self.draft.model, "fc", None)
        self.fc_in_features = int(fc.weight.shape[1]) if fc is not None else None
        self.fc_out_features = int(fc.weight.shape[0]) if fc is not None else None
        self.use_aux_hidden_state = bool(self.draft.model.use_aux_hidden_state)
        self._probe: dict[str, Any] = {}
        if fc is not None:
            fc.register_forward_hook(self._fc_hook)

    def _resolve(self) -> None:
        """Each runner's own reading of ``self.spec_config``: the aux ids (V1 / V2 readers, module
        docstring), whether aux states are used at all (V1: the EAGLE proposer's
        ``_get_eagle3_use_aux_hidden_state_from_config``, ``v1/spec_decode/llm_base_proposer.py:
        1674-1690``, which sets ``use_aux_hidden_state_outputs``, ``gpu_model_runner.py:650-655``;
        V2: ``requires_aux_hidden_states``, ``eagle3_utils.py:15-22``), and what the setter stores."""
        from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
        from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import (
            get_eagle3_aux_layers_from_config,
            requires_aux_hidden_states,
        )
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        sc = self.spec_config
        self.config_ids: dict[str, Optional[tuple[int, ...]]] = {
            "v1": GPUModelRunner._get_eagle3_aux_layers_from_config(SimpleNamespace(speculative_config=sc)),
            "v2": get_eagle3_aux_layers_from_config(sc),
        }
        self.use_aux: dict[str, bool] = {
            "v1": bool(SpecDecodeBaseProposer._get_eagle3_use_aux_hidden_state_from_config(
                SimpleNamespace(method=sc.method, draft_model_config=sc.draft_model_config))),
            "v2": bool(requires_aux_hidden_states(sc)),
        }
        self.applied: dict[str, tuple[int, ...]] = {}
        for r in RUNNERS:
            self.target.set_aux_hidden_state_layers(self.config_ids[r] or self.default_ids)
            self.applied[r] = tuple(self.target.model.aux_hidden_state_layers)

    def apply_draft_config(self, cfg: dict) -> None:
        """FAULT INJECTION / re-resolution: the draft ``config.json`` ``cfg`` read by vLLM's own
        ``SpeculativeConfig`` (a private temp copy of the draft directory), then each runner's
        readers and the setter again (:meth:`_resolve`). The draft model stays as built (its ``fc``
        was sized at build, as in a running server)."""
        from vllm.config import ParallelConfig, SpeculativeConfig

        d = Path(tempfile.mkdtemp(prefix="vllm_cpu_cfg_"))
        try:
            (d / "config.json").write_text(json.dumps(cfg, indent=1))
            with contextlib.redirect_stdout(io.StringIO()):
                self.spec_config = SpeculativeConfig(
                    model=str(d), method="eagle3", num_speculative_tokens=1,
                    target_model_config=self.vllm_config.model_config, target_parallel_config=ParallelConfig())
            self._resolve()
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def load_d2t(self, d2t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """Load a draft checkpoint's ``d2t`` [draft_vocab] int64 through the real draft's
        ``load_weights`` (renamed to ``draft_id_to_target_id``, ``llama_eagle3.py:428-429``) into a
        freshly zeroed mapping (``:339-343``: built as zeros), ``None``: a checkpoint without one.
        Returns the offsets the engine then applies (``target = i + draft_id_to_target_id[i]``,
        ``:386``), or None when the draft has no mapping (draft vocab = target vocab)."""
        m = self.draft.draft_id_to_target_id
        if m is None:
            return None
        with torch.no_grad():
            m.zero_()
            if d2t is not None:
                self.draft.load_weights([("d2t", d2t.clone())])
        return m.detach().clone().to(torch.int64)

    def _fc_hook(self, mod, args, out) -> None:
        self._probe["calls"] = self._probe.get("calls", 0) + 1
        if args and "fc_input" not in self._probe:
            self._probe["fc_input"] = args[0].detach().clone()

    # ---------------------------------------------------------------- extend

    def boundaries(self, runner: str) -> list[str]:
        """What ``runner``'s capture yields, in concat order: id k -> ``"B_k"`` (module docstring)."""
        return [f"B_{i}" for i in self.applied[runner]]

    def extend(self, batch: list[list[int]], runners: tuple[str, ...] = RUNNERS) -> list[Capture]:
        """Prefill ``batch`` on the target with each runner's ids applied, and hand the aux concat to
        the draft as that runner does (module docstring: concatenation, ``combine_hidden_states``,
        the draft model forward on the ids shifted left by one, last slot the target's greedy token).

        Args:
            batch: requests, each a list of >= 1 token ids.
            runners: which runners' id resolution to run (``"v1"``, ``"v2"``).

        Returns:
            One :class:`Capture` per runner per request (runner-major): ``token_ids`` [T] int64,
            ``feature`` [T, W] (the concat handed to ``combine_hidden_states``, W = K*d, model
            dtype), ``rows`` arange(T), ``draft_input_ids`` / ``position_ids`` [T] int64,
            ``fc_ran``, ``fc_input`` [T, W] or None, ``engine_ids`` (the ids the runner read, or
            the model default), ``engine_boundaries``. A draft forward that raises (the width
            assert) is recorded in ``provenance["draft_error"]`` with ``fc_ran`` as observed.

        Raises:
            ValueError: an empty request or an unknown runner.
        """
        if not batch or any(len(x) < 1 for x in batch):
            raise ValueError("every request needs >= 1 token")
        bad = [r for r in runners if r not in RUNNERS]
        if bad:
            raise ValueError(f"unknown runner(s) {bad}; vLLM 0.33.0 has {list(RUNNERS)}")
        t0 = time.perf_counter()
        lens = [len(x) for x in batch]
        ids = torch.tensor([t for x in batch for t in x], dtype=torch.long)
        pos = torch.cat([torch.arange(n) for n in lens])
        caps: list[Capture] = []
        for r in runners:
            hidden, sampled, shifted, err = self._runner_forward(r, batch, ids, pos, lens)
            caps += self._runner_captures(r, batch, hidden, sampled, shifted, pos, self._probe, err)
        self.timings["extend"] = time.perf_counter() - t0
        return caps

    def _runner_forward(self, r: str, batch: list[list[int]], ids: torch.Tensor, pos: torch.Tensor,
                        lens: list[int]):
        """Target prefill with runner ``r``'s ids applied, then the draft on what that runner hands
        it. Returns (hidden [T, W], sampled [bs], shifted input ids [T], the draft's error or None);
        the draft's fc probe is left in ``self._probe``."""
        from vllm.config import set_current_vllm_config

        self.target.set_aux_hidden_state_layers(self.config_ids[r] or self.default_ids)
        Segments.lens = lens
        with set_current_vllm_config(self.vllm_config), torch.no_grad():
            final, aux = self.target.model(ids, pos, None)
            logits = self.target.compute_logits(final)
            # gpu_model_runner.py:4891-4932 / speculator.py:210-216; without aux the runner hands
            # the draft the target's last hidden states (F)
            hidden = torch.cat(aux, -1) if self.use_aux[r] else final
            ends = torch.tensor(lens).cumsum(0) - 1
            sampled = logits[ends].argmax(-1)
            shifted = torch.cat([torch.cat([torch.tensor(x[1:], dtype=torch.long), sampled[i:i + 1]])
                                 for i, x in enumerate(batch)])
            self._probe = {}
            err = None
            try:
                combined = self.draft.combine_hidden_states(hidden)
                self.draft.model(shifted, pos, combined)
            except (RuntimeError, AssertionError) as e:
                err = e
        return hidden, sampled, shifted, err

    def _runner_captures(self, r: str, batch: list[list[int]], hidden: torch.Tensor, sampled: torch.Tensor,
                         shifted: torch.Tensor, pos: torch.Tensor, probe: dict, err) -> list[Capture]:
        """One :class:`Capture` per request of runner ``r``'s forward (see :meth:`extend`)."""
        caps = []
        start = 0
        for i, x in enumerate(batch):
            n = len(x)
            sl = slice(start, start + n)
            start += n
            fc_input = probe["fc_input"][sl] if "fc_input" in probe else None
            cfg_ids = self.config_ids[r]
            prov = {
                "vllm": self.vllm_version, "runner": r, "default_runner": self.default_runner,
                "config_ids": None if cfg_ids is None else list(cfg_ids),
                "engine_ids_source": "draft config" if cfg_ids else
                "model default get_eagle3_default_aux_hidden_state_layers()",
                "aux_hidden_state_layers": list(self.target.model.aux_hidden_state_layers),
                "target_class": type(self.target).__name__, "draft_class": type(self.draft).__name__,
                "draft_weights": self.draft_weights, "fc_in_features": self.fc_in_features,
                "fc_out_features": self.fc_out_features,
                "use_aux_hidden_state": self.use_aux_hidden_state, "runner_uses_aux": self.use_aux[r],
                "sampled_token": int(sampled[i]), "fc_calls": probe.get("calls", 0),
                "attention": "stand-in causal SDPA (eagle3_conformance.tools.vllm_cpu.runtime.StandInAttention)",
            }
            if err is not None:
                prov["draft_error"] = repr(err)
            caps.append(Capture(
                path="vllm-extend",
                where=f"vLLM {self.vllm_version} {r} runner, batch of {len(batch)}, request {i}",
                token_ids=torch.tensor(batch[i], dtype=torch.int64),
                feature=hidden[sl],
                rows=torch.arange(n, dtype=torch.int64),
                draft_input_ids=shifted[sl].to(torch.int64),
                position_ids=pos[sl].to(torch.int64),
                fc_ran=probe.get("calls", 0) > 0,
                fc_input=fc_input,
                fc_source=hidden[sl] if fc_input is not None else None,
                draft_input_width=int(hidden.shape[-1]),
                engine_ids=list(self.applied[r]),
                engine_boundaries=self.boundaries(r) if self.use_aux[r] else ["F"],
                provenance=prov,
            ))
        return caps

    def close(self) -> None:
        """Remove the rewritten draft copy (if any). vLLM's process groups stay (one per process)."""
        super().close()


_SHARED: dict = {}


def shared_harness(target_dir: str | Path, draft_dir: str | Path, dtype: torch.dtype = torch.float32,
                   draft_ids_key: Optional[str] = None) -> VLLMCPUHarness:
    """The process-wide harness for this pair, dtype and draft rewrite, built on first use (about
    15 s on a busy 2-core machine once vLLM's model-info cache is warm; 45-75 s cold)."""
    key = (str(target_dir), str(draft_dir), str(dtype), draft_ids_key)
    if key not in _SHARED:
        _SHARED[key] = VLLMCPUHarness(target_dir, draft_dir, dtype=dtype, draft_ids_key=draft_ids_key)
    return _SHARED[key]
