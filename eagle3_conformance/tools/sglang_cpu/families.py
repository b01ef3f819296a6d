"""SGLang 0.5.23's real DFlash capture and DFlash draft class, and the tensor it hands an MTP /
NextN head, in-process on CPU, on the target of a running :class:`SGLangCPUHarness` (issue 14).

DFlash (extend and decode):

* ids: SGLang's own ``parse_dflash_draft_config(draft_hf_config=...).resolve_target_layer_ids``
  (``srt/speculative/dflash_utils.py:556-586``: a missing key falls back to
  ``build_target_layer_ids``, an id outside 0..L-1 raises);
* applied with SGLang's own ``configure_aux_hidden_state_capture(dflash_use_aux_hidden_state=True,
  ...)`` (``attention_backend_setup.py:40-72``), which calls the target class's
  ``set_dflash_layers_to_capture`` (``llama.py:943-953``: ``val + 1``);
* the draft: SGLang's real ``DFlashDraftModel`` (``srt/models/dflash.py:671-845``), built from the
  DFlash draft config, its ``project_target_hidden`` (``fc`` then ``hidden_norm``) run on the
  target's FULL capture; a forward hook on ``fc`` records what it read.
* extend = target EXTEND (FULL); decode = target TARGET_VERIFY (FULL) over a cached prefix, the
  rows the DFlash worker projects into the draft's context after verify.

MTP / NextN: :meth:`MTPSourceCPU.extend` returns what SGLang stores as ``spec_info.hidden_states``
for an MTP head: the target run without aux capture, whose logits processor stores the LM head's
input (``layers/logits_processor.py:853-872``). Only that tensor is observed; SGLang's MTP draft
classes themselves (``deepseek_nextn.py``, ``qwen3_5_mtp.py``) are not run here.

Stand-ins: the attention and the hand-built ``ForwardBatch`` of the harness (see its docstring).
The harness's target is restored on :meth:`DFlashCPU.close`.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import torch

from eagle3_conformance.capture import Capture


class DFlashConfigError(ValueError):
    """SGLang refused the DFlash draft config (ids out of range, no ids and no draft depth)."""


def _hf_config(cfg: dict, target_cfg) -> Any:
    from transformers import LlamaConfig

    base = {k: getattr(target_cfg, k) for k in ("num_attention_heads", "num_key_value_heads", "intermediate_size",
                                                "vocab_size", "rms_norm_eps", "rope_theta", "max_position_embeddings")
            if hasattr(target_cfg, k)}
    base.update(cfg)
    return LlamaConfig(**base)


class DFlashCPU:
    """DFlash on SGLang's real target of ``harness`` and SGLang's real ``DFlashDraftModel``.

    Args:
        harness: a built :class:`SGLangCPUHarness` (its target is used; its EAGLE draft is not).
        draft_config: the DFlash draft ``config.json`` as a dict (``architectures``,
            ``num_hidden_layers``, ``hidden_size``, ``dflash_config``...). Missing model fields
            are taken from the target's config.
        apply_rule: ``"sglang"`` (SGLang's own setter) or FAULT INJECTION ``"boundary"``: the
            resolved ids written into ``layers_to_capture`` unchanged (id i = ``B_i``, the EAGLE
            boundary rule a runtime applying the wrong one of the two rules uses: every tap one
            layer early).

    Raises:
        DFlashConfigError: SGLang's resolver refuses the config (the message is SGLang's).
    """

    def __init__(self, harness, draft_config: dict, *, apply_rule: str = "sglang") -> None:
        from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
            configure_aux_hidden_state_capture,
        )
        from sglang.srt.models.dflash import DFlashDraftModel
        from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

        if apply_rule not in ("sglang", "boundary"):
            raise ValueError(f"apply_rule must be sglang or boundary, got {apply_rule!r}")
        t0 = time.perf_counter()
        self.h = harness
        self.apply_rule = apply_rule
        L = harness.num_layers
        self._saved = (harness.target.capture_aux_hidden_states, list(harness.target.model.layers_to_capture))
        hf = _hf_config(draft_config, harness.target_config.hf_config)
        try:
            dc = parse_dflash_draft_config(draft_hf_config=hf)
            self.ids = list(dc.resolve_target_layer_ids(target_num_layers=L, draft_num_layers=dc.require_num_layers()))
        except ValueError as e:
            raise DFlashConfigError(str(e)) from None
        self.ids_source = "dflash_config.target_layer_ids" if dc.target_layer_ids is not None else \
            "build_target_layer_ids (formula fallback: no target_layer_ids)"
        if apply_rule == "sglang":
            configure_aux_hidden_state_capture(
                model=harness.target, eagle_use_aux_hidden_state=False, eagle_aux_hidden_state_layer_ids=None,
                dflash_use_aux_hidden_state=True, dflash_target_layer_ids=list(self.ids), is_dspark=False)
        else:
            harness.target.capture_aux_hidden_states = True
            harness.target.model.layers_to_capture = list(self.ids)
        self.layers_to_capture = list(harness.target.model.layers_to_capture)
        torch.manual_seed(0)
        # dflash.py:764-775 sizes fc from len(target_layer_ids) when num_target_layers is absent
        self.draft = DFlashDraftModel(hf).to(harness.dtype).eval()
        self.fc_in = int(self.draft.fc.in_features)
        self.closed = False
        self.timings = {"build": time.perf_counter() - t0}

    @property
    def captured_boundaries(self) -> list[str]:
        return [f"B_{i}" for i in sorted({i for i in self.layers_to_capture if 0 <= i < self.h.num_layers})]

    def _project(self, hidden: torch.Tensor) -> tuple[Optional[torch.Tensor], Optional[Exception]]:
        seen: dict[str, torch.Tensor] = {}

        def record(_mod, args, _out) -> None:  # returns None: a forward hook's return value replaces the output
            seen.setdefault("fc_input", args[0].detach().clone())

        hook = self.draft.fc.register_forward_hook(record)
        try:
            with torch.no_grad():
                self.draft.project_target_hidden(hidden)
        except ValueError as e:  # dflash.py:833-841: feature dim mismatch
            return None, e
        finally:
            hook.remove()
        return seen.get("fc_input"), None

    def _captures(self, path, where, hidden, token_ids, rows, fc_input, err, mode) -> list[Capture]:
        caps = []
        for i, (toks, r) in enumerate(zip(token_ids, rows)):
            sl = slice(sum(len(x) for x in rows[:i]), sum(len(x) for x in rows[:i + 1]))
            caps.append(Capture(
                path=path, where=f"{where}, request {i}",
                token_ids=torch.tensor(toks, dtype=torch.int64), feature=hidden[sl], rows=r,
                fc_ran=fc_input is not None, fc_input=None if fc_input is None else fc_input[sl],
                fc_source=None if fc_input is None else hidden[sl],
                draft_input_width=int(hidden.shape[-1]), engine_ids=list(self.ids),
                engine_boundaries=self.captured_boundaries,
                provenance={"sglang": self.h.sglang_version, "method": "dflash", "mode": mode,
                            "capture_hidden_mode": "FULL", "layers_to_capture": self.layers_to_capture,
                            "ids_source": self.ids_source, "apply_rule": self.apply_rule,
                            "target_class": type(self.h.target).__name__, "draft_class": type(self.draft).__name__,
                            "fc_in_features": self.fc_in, "fc_out_features": int(self.draft.fc.out_features),
                            **({"draft_error": str(err)} if err is not None else {})},
            ))
        return caps

    def extend(self, batch: list[list[int]]) -> list[Capture]:
        """Target EXTEND (FULL) -> ``DFlashDraftModel.project_target_hidden``. One Capture per
        request: ``feature`` [T, K*d] (the taps the draft's fc reads), ``rows`` arange(T)."""
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode

        self._check_open()
        h = self.h
        fb = h._extend_batch(batch, [0] * len(batch), ForwardMode.EXTEND, CaptureHiddenMode.FULL)
        out = h._target_forward(fb, [(("dfx", i), len(x)) for i, x in enumerate(batch)])
        hidden = out.hidden_states
        fc_input, err = self._project(hidden)
        rows = [torch.arange(len(x), dtype=torch.int64) for x in batch]
        return self._captures("sglang-extend", f"dflash extend batch of {len(batch)}", hidden, batch, rows,
                              fc_input, err, "EXTEND")

    def verify(self, prefix: list[list[int]], draft_tokens: list[list[int]]) -> list[Capture]:
        """Target prefill over ``prefix`` (cached), then TARGET_VERIFY (FULL) over ``draft_tokens``
        -> ``project_target_hidden``. Row j of request i is reference row ``len(prefix[i]) + j``."""
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode

        self._check_open()
        h = self.h
        bs, n = len(prefix), len(draft_tokens[0])
        h.target_attn.cache.clear()
        h.target_attn.latent.clear()
        keys = [("dfd", i) for i in range(bs)]
        fb = h._extend_batch(prefix, [0] * bs, ForwardMode.EXTEND, CaptureHiddenMode.FULL)
        h._target_forward(fb, list(zip(keys, [len(p) for p in prefix])), store=True)
        vout = h._target_forward(h._verify_batch(prefix, draft_tokens), [(k, n) for k in keys], attend_cache=True)
        hidden = vout.hidden_states
        fc_input, err = self._project(hidden)
        toks = [list(p) + list(d) for p, d in zip(prefix, draft_tokens)]
        rows = [torch.arange(len(p), len(p) + n, dtype=torch.int64) for p in prefix]
        return self._captures("sglang-decode", f"dflash verify batch of {bs}", hidden, toks, rows, fc_input, err,
                              "TARGET_VERIFY")

    def _check_open(self) -> None:
        if self.closed or self.h.closed:
            raise RuntimeError("DFlashCPU is closed (or its harness is)")

    def close(self) -> None:
        """Restore the harness target's EAGLE-3 capture."""
        if not self.closed and not self.h.closed:
            self.h.target.capture_aux_hidden_states, self.h.target.model.layers_to_capture = self._saved
        self.closed = True


def mtp_source_extend(harness, batch: list[list[int]]) -> list[Capture]:
    """What SGLang 0.5.23 stores as ``spec_info.hidden_states`` for an MTP / NextN head on
    extend: the target's FULL hidden states with no aux capture (``logits_processor.py:866-872``:
    ``hidden_states_to_store = hidden_states``, the LM head's input). One Capture per request,
    ``feature`` [T, d]."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode

    fb = harness._extend_batch(batch, [0] * len(batch), ForwardMode.EXTEND, CaptureHiddenMode.FULL)
    out = harness._target_forward(fb, [(("mtp", i), len(x)) for i, x in enumerate(batch)], aux=False)
    hidden = out.hidden_states
    caps, start = [], 0
    for i, x in enumerate(batch):
        sl = slice(start, start + len(x))
        start += len(x)
        caps.append(Capture(
            path="sglang-extend", where=f"mtp source extend batch of {len(batch)}, request {i}",
            token_ids=torch.tensor(x, dtype=torch.int64), feature=hidden[sl],
            rows=torch.arange(len(x), dtype=torch.int64), draft_input_width=int(hidden.shape[-1]),
            provenance={"sglang": harness.sglang_version, "method": "mtp", "mode": "EXTEND",
                        "source": "logits_processor.py:866-872 hidden_states_to_store (no aux capture)",
                        "target_class": type(harness.target).__name__},
        ))
    return caps


def runtime_harness(target_dir, dtype=torch.float32):
    """A harness on ``target_dir`` to bring SGLang's runtime and real target up for a draft method
    the harness does not build itself (DFlash, MTP): the harness needs an EAGLE-3 draft config,
    so a minimal one is written to a temp directory keyed by the target (SGLang's defaults apply;
    that draft is never run by :class:`DFlashCPU` or :func:`mtp_source_extend`)."""
    import hashlib
    import json
    import tempfile
    from pathlib import Path

    from eagle3_conformance.tools.sglang_cpu.harness import shared_harness

    tdir = Path(target_dir).resolve()
    t = json.loads((tdir / "config.json").read_text())
    t = t.get("text_config", t) if "num_hidden_layers" not in t else t
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
           "hidden_size": t["hidden_size"], "target_hidden_size": t["hidden_size"],
           "num_attention_heads": t.get("num_attention_heads", 4),
           "num_key_value_heads": t.get("num_key_value_heads", t.get("num_attention_heads", 4)),
           "intermediate_size": t.get("intermediate_size", 4 * t["hidden_size"]), "vocab_size": t["vocab_size"],
           "draft_vocab_size": t["vocab_size"], "max_position_embeddings": t.get("max_position_embeddings", 2048),
           "rms_norm_eps": t.get("rms_norm_eps", 1e-6), "tie_word_embeddings": False,
           "eagle_config": {"use_aux_hidden_state": True}}
    key = hashlib.sha256((str(tdir) + json.dumps(cfg, sort_keys=True)).encode()).hexdigest()[:12]
    d = Path(tempfile.gettempdir()) / f"conformance-sglang-runtime-draft-{key}"
    d.mkdir(exist_ok=True)
    if not (d / "config.json").is_file():
        (d / "config.json").write_text(json.dumps(cfg))
    return shared_harness(tdir, d, dtype)
