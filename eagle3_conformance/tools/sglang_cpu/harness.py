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

from eagle3_conformance.tools.sglang_cpu.releases import branch as release_branch  # noqa: E402
from eagle3_conformance.tools.sglang_cpu.runtime import (  # noqa: E402
    StandInAttention,
    cuda_sync_noop,
    init_process,
    sglang_version,
    teardown_process,
)

_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}

# The draft classes whose single eagle layer's hidden input is `forward_batch.spec_info.hidden_states`
# and whose fc module sits at `draft.model.fc` (llama_eagle3.py and kimi_k25_eagle3.py).
_DRAFT_INPUT_NOTE = "forward_batch.spec_info.hidden_states at draft.model pre-hook"

_ACTIVE: Optional["SGLangCPUHarness"] = None


class DraftForwardError(RuntimeError):
    """The real draft forward raised (e.g. fc got a K'*d-wide input it was not sized for).

    The failure stays loud, as in SGLang; ``captures`` still holds what ENTERED the draft (recorded
    by the pre-hook before the failure), with ``provenance["draft_error"]`` set.
    """

    def __init__(self, message: str, captures: list[Capture]) -> None:
        super().__init__(message)
        self.captures = captures



class TargetForwardError(RuntimeError):
    """The real target forward raised: SGLang's own code refused the configured capture before
    anything reached the draft (SGLang 0.5.14's ``LlamaModel.forward`` adds ``residual`` at every
    listed layer, ``llama.py:407-409``, and there is none before layer 0, so an id that reaches the
    embedding raises there). The message names the release and the SGLang line that raised."""


def _sglang_site(exc: BaseException) -> str:
    """``"sglang/...py:line"`` of the innermost traceback frame inside the SGLang package."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/sglang/" in f.filename.replace("\\", "/")]
    if not frames:
        return "outside sglang"
    f = frames[-1]
    return "sglang/" + f.filename.replace("\\", "/").rsplit("/sglang/", 1)[1] + f":{f.lineno}"


# --------------------------------------------------------------------------------------------
# The harness
# --------------------------------------------------------------------------------------------


def greedy_accepted(predict: list[int], drafts: list[int], wanted: int) -> int:
    """Accepted tokens (bonus included) of one request under greedy verification, at most
    ``wanted``: draft token j+1 is accepted while it equals the target's argmax at verify row j
    (SGLang 0.5.23 ``speculative/eagle_utils.py`` -> ``verify_tree_greedy_func``, on a topk-1
    chain). Stood in: that function dispatches to CUDA/JIT, ``sgl_kernel`` CPU or Triton kernels,
    none of which runs in this CPU environment; on a chain the rule is this loop."""
    k = 1
    while k < wanted and drafts[k] == predict[k - 1]:
        k += 1
    return k


class SGLangCPUHarness(CPUHarnessLifecycle):
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

    # ---------------------------------------------------------------- decode path

    def verify(
        self,
        prefix: list[list[int]],
        draft_tokens: list[list[int]],
        accepted: list[int],
        *,
        feed_final_hidden: bool = False,
        feed_draft_states: bool = False,
    ) -> list[Capture]:
        """Target verify (TARGET_VERIFY, FULL) then the draft extend after verify (DRAFT_EXTEND_V2).

        Token layout (what the rows are): request i first runs a target EXTEND over
        ``prefix[i]`` whose K/V the stand-in attention caches. The verify forward then runs
        ``n = len(draft_tokens[i])`` rows (the same n for every request; SGLang's
        ``num_draft_tokens``). Row j is token ``draft_tokens[i][j]`` at position
        ``len(prefix[i]) + j``, attending to the whole prefix and causally to rows < j (a topk-1
        chain: SGLang's tree mask is causal). As in SGLang, ``draft_tokens[i][0]`` plays the
        verified/bonus token and the rest are the speculated tokens. So the reference must be
        run on ``token_ids = prefix[i] + draft_tokens[i]`` and row j of ``feature`` is reference
        row ``rows[j] = len(prefix[i]) + j``.

        Draft extend after verify (``eagle_worker_v2.py:1110-1160``, ``eagle_worker_common.py:
        112-226``): the draft is handed ALL ``bs*n`` verify rows (the V2 worker passes the whole
        verify window; only the first ``accepted[i]`` rows are accepted and row
        ``accepted[i]-1`` seeds the next draft step), input ids = ``predict`` = the target's
        greedy token per verify row, positions ``len(prefix[i]) + arange(n)``.
        ``accepted[i]`` counts accepted tokens including the bonus (``accept_lens``),
        ``1 <= accepted[i] <= n``. It is the count the caller made the draft tokens consistent
        with; the target's own greedy verification (SGLang's ``verify_tree_greedy`` accepts draft
        token j+1 while it equals the target's argmax at row j) may accept fewer: a bf16 target
        at a near-tie of the float32 reference's greedy choice. The smaller count is used and
        recorded in each capture's ``provenance["accepted"]``.

        Fault injection (explicit, off by default):
            feed_final_hidden: run the verify forward with aux capture off so the
                LogitsProcessor stores the d-wide post-norm F (the no-aux fallback) and hand that
                to the draft. With draft width == target width the draft's real guard skips fc
                silently (fc_ran False); with unequal widths fc raises a shape error.
            feed_draft_states: K9. First run the correct draft extend, then hand the draft its own
                output states (``[bs*n, draft_hidden]``, FULL capture) as if they were the target
                features; fc is skipped by the same guard.

        Returns one Capture per request with ``feature`` [n, W] (the tensor entering the draft
        for that request), ``rows`` [n], ``draft_input_ids`` [n], ``position_ids`` [n].
        """
        self._check_open()
        t0 = time.perf_counter()
        bs = len(prefix)
        assert bs == len(draft_tokens) == len(accepted)
        n = len(draft_tokens[0])
        assert n >= 1 and all(len(d) == n for d in draft_tokens), "equal num_draft_tokens"
        assert all(1 <= a <= n for a in accepted), "1 <= accepted <= num_draft_tokens"
        assert all(len(p) >= 1 for p in prefix)
        hidden, predict, accepted = self._target_verify(prefix, draft_tokens, accepted, feed_final_hidden)
        accept_lens = torch.tensor(accepted, dtype=torch.int32)
        select_index = torch.arange(0, bs * n, n) + accept_lens - 1
        dout, probe, fc_calls, err = self._draft_extend_after_verify(hidden, predict, accept_lens, prefix, n)
        fed = "target FULL aux concat"
        if feed_final_hidden:
            fed = "target post-norm F (no-aux fallback)"
        if feed_draft_states and err is None:
            dout, probe, fc_calls, err = self._draft_extend_after_verify(dout.hidden_states, predict, accept_lens,
                                                                         prefix, n)
            fed = "draft's own output states (K9)"
        self.target_attn.cache.clear()
        self.target_attn.latent.clear()
        self.timings["verify"] = time.perf_counter() - t0
        caps = self._verify_captures(prefix, draft_tokens, accepted, probe, fc_calls, fed, hidden, predict,
                                     select_index, err)
        if err is not None:
            raise DraftForwardError(f"SGLang draft forward failed on verify: {err!r}", caps) from err
        return caps

    def _target_verify(self, prefix: list[list[int]], draft_tokens: list[list[int]], accepted: list[int],
                       feed_final_hidden: bool):
        """The target's side of :meth:`verify`: a prefill over ``prefix`` (EXTEND, FULL) caching
        K/V per request, then the verify forward over the n draft rows per request (TARGET_VERIFY,
        FULL). Returns (hidden [bs*n, K*d] (or [bs*n, d] = F when ``feed_final_hidden``),
        predict [bs*n] int64 (the target's greedy token per row), accepted per request (the
        target's own greedy count, at most the caller's))."""
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode

        bs, n = len(prefix), len(draft_tokens[0])
        plens = [len(p) for p in prefix]
        self.target_attn.cache.clear()
        self.target_attn.latent.clear()
        keys = [("dec", i) for i in range(bs)]
        fb = self._extend_batch(prefix, [0] * bs, ForwardMode.EXTEND, CaptureHiddenMode.FULL)
        self._target_forward(fb, list(zip(keys, plens)), store=True)
        vfb = self._verify_batch(prefix, draft_tokens)
        vout = self._target_forward(vfb, [(k, n) for k in keys], attend_cache=True,
                                    aux=not feed_final_hidden)
        predict = vout.next_token_logits.argmax(-1).to(torch.int64)  # [bs*n]
        accepted = [greedy_accepted(predict[i * n:(i + 1) * n].tolist(), draft_tokens[i], a)
                    for i, a in enumerate(accepted)]
        return vout.hidden_states, predict, accepted

    def _draft_extend_after_verify(self, h: torch.Tensor, predict: torch.Tensor, accept_lens: torch.Tensor,
                                   prefix: list[list[int]], n: int):
        """The draft extend after verify (DRAFT_EXTEND_V2, FULL) on the ``bs*n`` rows ``h``:
        input ids ``predict``, positions ``len(prefix[i]) + arange(n)``. Returns
        :meth:`_draft_forward`'s (output, probe, fc calls, error)."""
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
        from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

        bs = len(prefix)
        spec = EagleDraftExtendInput(
            hidden_states=h,
            num_correct_drafts=accept_lens - 1,
            num_accept_tokens=accept_lens,
            num_tokens_per_req=n,
            num_tokens_for_logprob_per_req=n,
        )
        ids = [predict[i * n:(i + 1) * n].tolist() for i in range(bs)]
        dfb = self._extend_batch(ids, [len(p) for p in prefix], ForwardMode.DRAFT_EXTEND_V2,
                                 CaptureHiddenMode.FULL, spec_info=spec)
        return self._draft_forward(dfb, [(("dec", i), n) for i in range(bs)])

    def _draft_side(self, probe: dict, sl: slice, fc_calls: int) -> dict:
        """The Capture fields read off the draft probe for one request's rows ``sl``: input ids and
        positions the draft received, whether its fc ran and on what, and the engine's id mapping."""
        return dict(
            draft_input_ids=probe["input_ids"][sl].to(torch.int64),
            position_ids=probe["positions"][sl].to(torch.int64),
            fc_ran=fc_calls > 0,
            fc_input=probe["fc_input"][sl] if "fc_input" in probe else None,
            fc_source=probe["hidden"][sl] if "fc_input" in probe else None,
            draft_input_width=int(probe["hidden"].shape[-1]),
            engine_ids=None if self.engine_ids is None else list(self.engine_ids),
            engine_boundaries=self.captured_boundaries,
        )

    def _verify_captures(self, prefix, draft_tokens, accepted, probe, fc_calls, fed, hidden, predict,
                         select_index, err) -> list[Capture]:
        """One Capture per request of a verify step: the draft-extend input rows of that request."""
        bs, n = len(prefix), len(draft_tokens[0])
        plens = [len(p) for p in prefix]
        caps = []
        for i in range(bs):
            sl = slice(i * n, (i + 1) * n)
            caps.append(Capture(
                path="sglang-decode",
                where=f"verify batch of {bs}, request {i}",
                token_ids=torch.tensor(list(prefix[i]) + list(draft_tokens[i]), dtype=torch.int64),
                feature=probe["hidden"][sl],
                rows=torch.arange(plens[i], plens[i] + n, dtype=torch.int64),
                **self._draft_side(probe, sl, fc_calls),
                provenance=self._provenance(
                    "TARGET_VERIFY", draft_mode=probe["mode"], draft_capture_hidden_mode="FULL",
                    num_draft_tokens=n, accepted=int(accepted[i]),
                    select_row=int(select_index[i]) - i * n, fc_calls=fc_calls,
                    draft_fed=fed, target_output_width=int(hidden.shape[-1]),
                    verify_predict=predict[sl].tolist(),
                    **({"draft_error": repr(err)} if err is not None else {}),
                ),
            ))
        return caps

    def _verify_batch(self, prefix, draft_tokens):
        """TARGET_VERIFY ``ForwardBatch`` with an ``EagleVerifyInput`` (topk 1 chain)."""
        from sglang.srt.model_executor.forward_batch_info import (
            CaptureHiddenMode,
            ForwardBatch,
            ForwardMode,
        )
        from sglang.srt.speculative.eagle_info import EagleVerifyInput
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        bs, n = len(prefix), len(draft_tokens[0])
        plens = torch.tensor([len(p) for p in prefix], dtype=torch.int64)
        flat = torch.tensor([t for d in draft_tokens for t in d], dtype=torch.int64)
        positions = (plens[:, None] + torch.arange(n)[None, :]).reshape(-1)
        seq = plens  # verify runs with seq_lens = committed length (eagle_utils.py:305-414)
        retrieve = torch.arange(bs * n).reshape(bs, n)
        nxt = torch.full((bs, n), -1, dtype=torch.long)
        nxt[:, :-1] = torch.arange(1, n)
        spec = EagleVerifyInput(
            draft_token=flat,
            custom_mask=None,
            positions=positions,
            retrieve_index=retrieve,
            retrieve_next_token=nxt,
            retrieve_next_sibling=torch.full((bs, n), -1, dtype=torch.long),
            retrieve_cum_len=None,
            spec_steps=n - 1,
            topk=1,
            draft_token_num=n,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            seq_lens_sum=int(seq.sum()),
            seq_lens_cpu=seq.clone(),
        )
        return ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY,
            batch_size=bs,
            input_ids=flat,
            req_pool_indices=torch.arange(bs, dtype=torch.int64),
            seq_lens=seq.clone(),
            out_cache_loc=torch.arange(bs * n, dtype=torch.int64),
            seq_lens_sum=int(seq.sum()),
            seq_lens_cpu=seq.clone(),
            positions=positions,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_logprob=False,
            spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"),
            spec_info=spec,
        )

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
