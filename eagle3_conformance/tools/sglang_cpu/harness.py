"""In-process SGLang 0.5.23 harness on CPU: what reaches the EAGLE-3 draft.

Runs SGLang's REAL model classes (built by SGLang's own ``get_model`` loader, weights loaded with
the classes' own ``load_weights``), resolves the capture ids with SGLang's own resolver and
setter, and observes the draft input with forward hooks on the real draft modules. Nothing of
SGLang's capture or fusion logic is re-implemented here. Only two things are stand-ins:

* attention (SGLang's kernels are CUDA-only): :class:`StandInAttention`, a causal
  ``scaled_dot_product_attention`` per request, installed through SGLang's own
  ``forward_context(ForwardContext(attn_backend=...))``
  (``srt/model_executor/forward_context.py:40-96``);
* the worker loop (scheduler, KV pools, sampling kernels): the ``ForwardBatch`` objects are
  built by hand with the fields ``EAGLEWorkerV2`` sets (REFERENCE.md section 4), and the data
  flow between target and draft follows ``srt/speculative/eagle_worker_v2.py`` (cited per step).

SGLang facts this module depends on (paths under ``sglang/`` of the installed 0.5.23 wheel):

* id source: ``srt/model_executor/model_runner_components/spec_aux_hidden_state.py:185-196``
  reads the DRAFT config's nested ``eagle_config["eagle_aux_hidden_state_layer_ids"]``; any
  exception gives ``None`` (defaults). We call SGLang's own
  ``resolve_spec_aux_hidden_state_config`` (``:53-81``, eagle part ``:132-196``) on a published ``ServerArgs`` with
  ``speculative_algorithm="EAGLE3"`` and ``speculative_draft_model_path=draft_dir`` -- it is
  callable standalone, so no key lookup is replicated.
* applying the ids: ``configure_aux_hidden_state_capture``
  (``srt/model_executor/model_runner_components/attention_backend_setup.py:40-61``), called by
  ``ModelRunner.init_attention_backends`` (``srt/model_executor/model_runner.py:1105-1116``),
  calls ``model.set_eagle3_layers_to_capture(ids)``; we call that same function.
* setter: ``srt/models/llama.py:929-941`` (no ids -> ``[2, L//2, L-3]``; ids -> ``v+1``);
  ``srt/models/deepseek_v2.py:3458-3473`` (+1 only if ``ids[0] == 1``).
* capture site: ``LlamaModel.forward`` (``srt/models/llama.py:485-494``) passes the capture
  callback to layer i when ``i in layers_to_capture`` -- so the concat is in layer (ascending)
  order whatever the list order, and duplicates collapse; ``_prepare_attention``
  (``srt/layers/layer_boundary/stage.py:407-460``) captures the embedding on the first layer
  (no residual yet) and otherwise ``stream.residual`` after the fused add, i.e. the residual
  stream ENTERING layer i = B_i. Hence ``layers_to_capture`` entry i -> ``"B_i"``.
* draft fc guard: ``srt/models/llama_eagle3.py:237-247`` (and ``kimi_k25_eagle3.py:285-294``)
  run the pre-fc norms and ``fc`` only if ``spec_info.hidden_states.shape[-1] !=
  embeds.shape[-1]`` (silent skip).
* draft extend after prefill: ``srt/speculative/eagle_worker_v2.py:961-1016`` (ids shifted left
  by one, last slot = sampled token; ``EagleDraftExtendInput(hidden_states=target FULL aux,
  num_tokens_per_req=1)``; LAST capture; forward mode stays EXTEND).
* draft extend after verify: ``eagle_worker_v2.py:1110-1160`` + ``eagle_worker_common.py:112-226``
  (``prepare_for_draft_extend``): ``EagleDraftExtendInput(hidden_states=verify FULL hidden of all
  bs*num_draft_tokens rows, num_correct_drafts=accept-1, num_accept_tokens=accept)``, input ids =
  ``predict`` (the target's per-row greedy token), ``ForwardMode.DRAFT_EXTEND_V2``, FULL capture,
  ``prefix_lens = seq_lens`` so positions continue from the prefix; ``select_index = i*n +
  accept_lens - 1`` is the row that seeds the next draft step.

Process-wide state: SGLang keeps one published ``ServerArgs``/runtime context and one set of
distributed groups per process (``srt/runtime_context.py:1489-1514`` ``publish``:
"last-publish-wins"). :meth:`SGLangCPUHarness.close` tears the groups down and a new harness can
then be built in the same process (verified: several build/close cycles in one pytest process).
Only one harness is alive at a time: building a new one closes the previous one, whose methods
then raise ``RuntimeError``.

The decode path (:meth:`SGLangCPUHarness.verify`) is :mod:`eagle3_conformance.tools.sglang_cpu.verify_path`,
the errors :mod:`eagle3_conformance.tools.sglang_cpu.errors`; their names stay importable from here.
"""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.core.capture import Capture
from eagle3_conformance.environment.torch_env import prepare
from eagle3_conformance.tools.shared.cpu_harness import CPUHarnessLifecycle

prepare()

import torch  # noqa: E402

from eagle3_conformance.tools.sglang_cpu.errors import (  # noqa: E402,F401 (re-exported: faults.families)
    DraftForwardError,
    TargetForwardError,
    _sglang_site,
)
from eagle3_conformance.tools.sglang_cpu.releases import branch as release_branch  # noqa: E402
from eagle3_conformance.tools.sglang_cpu.runtime import (  # noqa: E402
    StandInAttention,
    cuda_sync_noop,
    init_process,
    sglang_version,
    teardown_process,
)
from eagle3_conformance.tools.sglang_cpu.verify_path import VerifyPath, greedy_accepted  # noqa: E402,F401

_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}

# The draft classes whose single eagle layer's hidden input is `forward_batch.spec_info.hidden_states`
# and whose fc module sits at `draft.model.fc` (llama_eagle3.py and kimi_k25_eagle3.py).
_DRAFT_INPUT_NOTE = "forward_batch.spec_info.hidden_states at draft.model pre-hook"

_ACTIVE: Optional["SGLangCPUHarness"] = None


class SGLangCPUHarness(VerifyPath, CPUHarnessLifecycle):
    """SGLang target + EAGLE-3 draft on CPU; :meth:`extend` / :meth:`verify` return
    :class:`~eagle3_conformance.core.capture.Capture` objects describing what entered the draft.

    Args:
        target_dir: HF-format dir (``config.json`` + ``model.safetensors``) of the target
            (``LlamaForCausalLM`` or ``DeepseekV3ForCausalLM``).
        draft_dir: dir with the SGLang-style draft ``config.json`` (``LlamaForCausalLMEagle3`` or
            ``Eagle3DeepseekV2ForCausalLM``) and optionally ``model.safetensors``. Without a weights
            file the draft is built with SGLang's ``load_format="dummy"`` initialiser after
            ``torch.manual_seed(0)`` (deterministic).
        dtype: model dtype (``ServerArgs.dtype``); float32 by default.
        capture_layers_override: FAULT INJECTION. After SGLang resolved and applied the ids, call
            the real ``target.set_eagle3_layers_to_capture(override)`` again with these
            engine-native ids (Llama: ``v+1`` is applied, so ``-1`` reaches the embedding;
            DeepSeek >= 0.5.13: raw unless ``ids[0] == 1``).
        draft_ids_key: FAULT INJECTION. ``"nested"`` (ids under ``eagle_config``, the key SGLang
            reads), ``"top_level"`` (moved to a top-level ``eagle_aux_hidden_state_layer_ids``,
            which ``spec_aux_hidden_state.py:185-196`` ignores) or ``"absent"`` (removed). The
            rewritten config is written to a private temp copy of ``draft_dir`` that SGLang
            then reads through its own ``ModelConfig``; ``None`` leaves the draft untouched.

    Attributes:
        sglang_version: installed SGLang version string.
        layers_to_capture: ``target.model.layers_to_capture`` as the real model holds it.
        engine_ids: the ids SGLang read from the draft config (``None``: it found none and the
            setter used its defaults); with ``capture_layers_override`` the override.
        captured_boundaries: canonical names of what the capture yields, in concat order:
            ``"B_i"`` for each distinct ``i`` in ``layers_to_capture`` with ``0 <= i < L``,
            ascending (see the module docstring for why).
        timings: wall seconds of the last ``build`` / ``extend`` / ``verify``.
    """

    def __init__(
        self,
        target_dir: str | Path,
        draft_dir: str | Path,
        *,
        dtype: torch.dtype = torch.float32,
        capture_layers_override: Optional[list[int]] = None,
        draft_ids_key: Optional[str] = None,
    ) -> None:
        global _ACTIVE
        if _ACTIVE is not None:
            # SGLang keeps one runtime context and one set of process groups per process
            # (runtime_context.publish is last-publish-wins): the previous harness is closed.
            _ACTIVE.close()
        self._start(target_dir, draft_dir, dtype, draft_ids_key)
        self._override = list(capture_layers_override) if capture_layers_override is not None else None
        self.sglang_version = sglang_version()
        self.release = release_branch(self.sglang_version)

        self.server_args = init_process(
            dict(
                model_path=str(self.target_dir),
                device="cpu",
                dtype=_DTYPE_NAMES[dtype],
                tp_size=1,
                pp_size=1,
                ep_size=1,
                speculative_algorithm="EAGLE3",
                speculative_draft_model_path=str(self.draft_dir),
                skip_tokenizer_init=True,
            ),
            self.release,
        )
        _ACTIVE = self
        self._finish_build()

    # ---------------------------------------------------------------- construction

    def _build(self) -> None:
        from sglang.srt.configs.device_config import DeviceConfig
        from sglang.srt.configs.load_config import LoadConfig
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.model_loader import get_model

        sa = self.server_args
        self.target_config = ModelConfig.from_server_args(sa)
        self.draft_config = ModelConfig.from_server_args(
            sa, model_path=str(self.draft_dir), is_draft_model=True
        )
        self.release.after_model_config(sa, self.target_config)
        dev = DeviceConfig("cpu")
        # SGLang's loader draws a tqdm bar on rank 0 (model_loader/weight_utils.py:1369); it
        # would interleave with the report
        with contextlib.redirect_stderr(io.StringIO()):
            self.target = get_model(
                model_config=self.target_config, load_config=LoadConfig(load_format="auto"),
                device_config=dev,
            ).eval()
        has_weights = any(self.draft_dir.glob("*.safetensors")) or any(self.draft_dir.glob("*.bin"))
        torch.manual_seed(0)
        self.draft = get_model(
            model_config=self.draft_config,
            load_config=LoadConfig(load_format="auto" if has_weights else "dummy"),
            device_config=dev,
        ).eval()
        self.draft_weights = "checkpoint" if has_weights else "dummy(seed 0)"
        # eagle_worker_v2.py:353-363 (init_lm_head): EAGLE3 drafts share the target embedding via
        # set_embed (a no-op when target_hidden_size != hidden_size, llama.py:910-916).
        embed, _head = self.target.get_embed_and_head()
        with cuda_sync_noop():
            self.draft.set_embed(embed)

        # Ids: the installed release's own reader (of the draft config) and its own apply step.
        self.ids_read = self.release.read_ids(sa, self.target_config)
        self.engine_ids: Optional[list[int]] = self.ids_read.ids
        self.release.apply_ids(self.target, self.ids_read)
        self.resolved_layers_to_capture = list(self.target.model.layers_to_capture)
        self._resolved_engine_ids = self.engine_ids
        if self._override is not None:
            self.set_capture_layers_override(self._override)
        self.num_layers = int(self.target_config.hf_config.num_hidden_layers)
        self.target_hidden = int(self.target_config.hf_config.hidden_size)
        self.draft_hidden = int(self.draft_config.hf_config.hidden_size)

        self.target_attn = StandInAttention()
        self.draft_attn = StandInAttention()
        self._install_probes()

    _override: Optional[list[int]] = None

    def set_capture_layers_override(self, ids: Optional[list[int]]) -> list[int]:
        """FAULT INJECTION: re-run the real ``target.set_eagle3_layers_to_capture(ids)``.

        ``ids`` are engine-native (the setter's own mapping applies: Llama ``v+1``, so ``-1``
        reaches the embedding B_0; deepseek_v2 raw unless ``ids[0] == 1``). ``None`` restores
        what SGLang resolved from the draft config. Returns the model's new ``layers_to_capture``.
        Order and duplicates are kept in the list the setter writes, but the capture loop
        (``llama.py:485-494``) visits layers ascending and tests membership, so the concat is
        ascending and duplicates collapse -- :attr:`captured_boundaries` reports that.
        """
        self._check_open()
        if ids is None:
            self._override = None
            self.target.model.layers_to_capture = list(self.resolved_layers_to_capture)
            self.engine_ids = self._resolved_engine_ids
        else:
            self._override = list(ids)
            self.target.set_eagle3_layers_to_capture(list(ids))
            self.engine_ids = list(ids)
        return self.layers_to_capture

    # ---------------------------------------------------------------- probes

    def _install_probes(self) -> None:
        """Forward hooks on the real draft modules.

        * pre-hook on ``draft.model`` (the eagle ``LlamaModel`` / MLA model): records
          ``forward_batch.spec_info.hidden_states`` (the tensor the draft is handed), the
          ``input_ids`` and ``positions`` it got;
        * forward hook on ``draft.model.fc``: counts calls (``fc_ran``) and records the tensor
          ``fc`` received on its first call (``fc_input``: after any pre-fc norm the draft applies,
          ``llama_eagle3.py:237-247``).
        """
        self._probe: dict[str, Any] = {}
        self._fc_calls = 0

        def pre(mod, args, kwargs):
            names = ("input_ids", "positions", "forward_batch")
            got = dict(zip(names, args))
            got.update({k: v for k, v in kwargs.items() if k in names})
            fb = got["forward_batch"]
            self._probe = dict(
                hidden=fb.spec_info.hidden_states.detach().clone(),
                input_ids=got["input_ids"].detach().clone(),
                positions=got["positions"].detach().clone(),
                mode=fb.forward_mode.name,
            )

        def fc_hook(mod, args, out):
            self._fc_calls += 1
            if args and "fc_input" not in self._probe:
                self._probe["fc_input"] = args[0].detach().clone()

        self._hooks = [
            self.draft.model.register_forward_pre_hook(pre, with_kwargs=True),
            self.draft.model.fc.register_forward_hook(fc_hook),
        ]

    # ---------------------------------------------------------------- properties

    @property
    def layers_to_capture(self) -> list[int]:
        return list(self.target.model.layers_to_capture)

    @property
    def captured_boundaries(self) -> list[str]:
        idx = sorted({i for i in self.layers_to_capture if 0 <= i < self.num_layers})
        return [f"B_{i}" for i in idx]

    # ---------------------------------------------------------------- forward batches

    def _extend_batch(self, ids: list[list[int]], prefix_lens: list[int], mode, capture_mode,
                      spec_info=None):
        """Hand-built EXTEND-like ``ForwardBatch`` (fields as ``ForwardBatch.init_new`` sets them).

        ``ids[i]`` are the NEW tokens of request i; ``prefix_lens[i]`` tokens are already cached,
        so positions continue from there. ``seq_lens = prefix + new``.
        """
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        bs = len(ids)
        ext = [len(x) for x in ids]
        seq = [p + e for p, e in zip(prefix_lens, ext)]
        flat = torch.tensor([t for x in ids for t in x], dtype=torch.int64)
        positions = torch.cat([torch.arange(p, p + e) for p, e in zip(prefix_lens, ext)])
        starts = torch.tensor([0] + list(torch.tensor(ext).cumsum(0)[:-1].tolist()), dtype=torch.int32)
        fb = ForwardBatch(
            forward_mode=mode,
            batch_size=bs,
            input_ids=flat,
            req_pool_indices=torch.arange(bs, dtype=torch.int64),
            seq_lens=torch.tensor(seq, dtype=torch.int64),
            out_cache_loc=torch.arange(flat.numel(), dtype=torch.int64),
            seq_lens_sum=sum(seq),
            seq_lens_cpu=torch.tensor(seq, dtype=torch.int64),
            positions=positions.to(torch.int64),
            extend_num_tokens=flat.numel(),
            extend_seq_lens=torch.tensor(ext, dtype=torch.int32),
            extend_prefix_lens=torch.tensor(prefix_lens, dtype=torch.int32),
            extend_start_loc=starts,
            extend_prefix_lens_cpu=list(prefix_lens),
            extend_seq_lens_cpu=list(ext),
            extend_logprob_start_lens_cpu=[e for e in ext],
            capture_hidden_mode=capture_mode,
            return_logprob=False,
            spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"),
            spec_info=spec_info,
        )
        return fb

    def _run(self, model, attn: StandInAttention, fb, segments, *, store=False, attend_cache=False):
        attn.segments, attn.store, attn.attend_cache = segments, store, attend_cache
        with torch.no_grad(), self.release.forward_context(attn, fb):
            out = model.forward(fb.input_ids, fb.positions, fb)
        attn.segments, attn.store, attn.attend_cache = [], False, False
        return out

    # ---------------------------------------------------------------- common pieces

    def _target_forward(self, fb, segments, *, store=False, attend_cache=False, aux=True):
        """Target forward; returns SGLang's ``LogitsProcessorOutput``.

        ``aux=False`` runs the same model with ``capture_aux_hidden_states`` off and an empty
        ``layers_to_capture`` (what a model without aux returns, e.g. a wrapper without a
        delegating setter): the LogitsProcessor then stores the post-norm F, width d
        (``srt/layers/logits_processor.py:866-872``).
        """
        if aux:
            try:
                return self._run(self.target, self.target_attn, fb, segments, store=store,
                                 attend_cache=attend_cache)
            except Exception as exc:  # noqa: BLE001 - re-raised, named
                raise TargetForwardError(
                    f"SGLang {self.sglang_version}'s target forward raised {exc!r} at {_sglang_site(exc)} "
                    f"(layers_to_capture {self.layers_to_capture})") from exc
        saved = (self.target.capture_aux_hidden_states, self.target.model.layers_to_capture)
        self.target.capture_aux_hidden_states, self.target.model.layers_to_capture = False, []
        try:
            return self._run(self.target, self.target_attn, fb, segments, store=store,
                             attend_cache=attend_cache)
        finally:
            self.target.capture_aux_hidden_states, self.target.model.layers_to_capture = saved

    def _draft_forward(self, fb, segments):
        """Draft forward with the probes armed.

        Returns ``(logits output or None, probe dict, fc calls, exception or None)``. An exception
        raised inside the draft after the pre-hook fired is returned (the caller re-raises it as
        :class:`DraftForwardError` after building the captures); one raised before it propagates.
        """
        self._probe, self._fc_calls = {}, 0
        try:
            out = self._run(self.draft, self.draft_attn, fb, segments)
        except Exception as exc:  # noqa: BLE001 - re-raised by the caller
            if not self._probe:
                raise
            return None, dict(self._probe), self._fc_calls, exc
        return out, dict(self._probe), self._fc_calls, None

    def _provenance(self, mode: str, **extra) -> dict:
        prov = {
            "sglang": self.sglang_version,
            "mode": mode,
            "capture_hidden_mode": "FULL",
            "layers_to_capture": self.layers_to_capture,
            "resolved_layers_to_capture": self.resolved_layers_to_capture,
            "engine_ids_source": "capture_layers_override" if self._override is not None
            else ("draft eagle_config" if self.engine_ids is not None else "setter default"),
            "ids_reader": self.ids_read.site,
            "target_class": type(self.target).__name__,
            "draft_class": type(self.draft).__name__,
            "draft_weights": self.draft_weights,
            "fc_in_features": int(self.draft.model.fc.weight.shape[1]),
            "fc_out_features": int(self.draft.model.fc.weight.shape[0]),
            "draft_input_probe": _DRAFT_INPUT_NOTE,
            "attention": "stand-in causal SDPA (eagle3_conformance.tools.sglang_cpu.runtime.StandInAttention)",
        }
        prov.update(extra)
        return prov

    # ---------------------------------------------------------------- extend path

    def extend(self, batch: list[list[int]]) -> list[Capture]:
        """Target prefill (EXTEND, FULL capture) then the draft extend after prefill.

        Follows ``eagle_worker_v2.py:1548-1602`` (target prefill, FULL) and ``:961-1016``
        (draft extend: ids shifted left by one per request, last slot = the target's sampled
        token, here greedy ``argmax`` of the target's last-row logits; hidden states = the
        target's stored ``[T_total, K*d]`` aux concat; forward mode EXTEND, LAST capture).

        Returns one Capture per request: ``token_ids`` [T] int64 (the request), ``feature``
        [T, W] (the tensor handed to the draft for that request, W = K*d, model dtype),
        ``rows`` = arange(T), ``draft_input_ids`` [T] (shifted ids), ``position_ids`` [T].
        """
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
        from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

        self._check_open()
        t0 = time.perf_counter()
        assert batch and all(len(x) >= 1 for x in batch), "every request needs >= 1 token"
        bs, lens = len(batch), [len(x) for x in batch]
        segs = [(("ext", i), n) for i, n in enumerate(lens)]
        fb = self._extend_batch(batch, [0] * bs, ForwardMode.EXTEND, CaptureHiddenMode.FULL)
        out = self._target_forward(fb, segs)
        target_hidden = out.hidden_states  # [T_total, K*d]
        # EXTEND prunes logits to the last token of each request (logits_processor.py:667-851).
        sampled = out.next_token_logits.argmax(-1)  # [bs]

        shifted = [list(x[1:]) + [int(sampled[i])] for i, x in enumerate(batch)]
        dfb = self._extend_batch(
            shifted, [0] * bs, ForwardMode.EXTEND, CaptureHiddenMode.LAST,
            spec_info=EagleDraftExtendInput(
                hidden_states=target_hidden, num_tokens_per_req=1,
                num_tokens_for_logprob_per_req=1,
            ),
        )
        _dout, probe, fc_calls, err = self._draft_forward(dfb, segs)
        self.timings["extend"] = time.perf_counter() - t0

        caps, start = [], 0
        for i, n in enumerate(lens):
            sl = slice(start, start + n)
            start += n
            caps.append(Capture(
                path="sglang-extend",
                where=f"extend batch of {bs}, request {i}",
                token_ids=torch.tensor(batch[i], dtype=torch.int64),
                feature=probe["hidden"][sl],
                rows=torch.arange(n, dtype=torch.int64),
                **self._draft_side(probe, sl, fc_calls),
                provenance=self._provenance(
                    "EXTEND", draft_mode=probe["mode"], draft_capture_hidden_mode="LAST",
                    sampled_token=int(sampled[i]), fc_calls=fc_calls,
                    target_output_width=int(target_hidden.shape[-1]),
                    **({"draft_error": repr(err)} if err is not None else {}),
                ),
            ))
        if err is not None:
            raise DraftForwardError(f"SGLang draft forward failed on extend: {err!r}", caps) from err
        return caps


    # ---------------------------------------------------------------- teardown

    DRAFT_IDS_PREFER = "nested"  # eagle_config.eagle_aux_hidden_state_layer_ids
    DRAFT_COPY_PREFIX = "sglang_cpu_draft_"

    def close(self) -> None:
        """Remove hooks, tear down SGLang's process groups and runtime context (idempotent)."""
        global _ACTIVE
        for h in getattr(self, "_hooks", []):
            h.remove()
        self._hooks = []
        if _ACTIVE is self:
            _ACTIVE = None
            teardown_process(self.release)
        super().close()


# --------------------------------------------------------------------------------------------
# One harness per process
# --------------------------------------------------------------------------------------------

_SHARED: dict = {}


def shared_harness(target_dir: str | Path, draft_dir: str | Path, dtype: torch.dtype = torch.float32) -> SGLangCPUHarness:
    """The process-wide harness for this pair and dtype, built on first use. SGLang keeps one
    runtime per process, so asking for another pair closes the previous harness and builds the
    new one; paths of the same pair (extend, decode, cross-path) share it."""
    key = (str(target_dir), str(draft_dir), str(dtype))
    h = _SHARED.get("h")
    if h is None or h.closed or _SHARED.get("key") != key:
        h = SGLangCPUHarness(target_dir, draft_dir, dtype=dtype)
        _SHARED.update(h=h, key=key)
    return h
