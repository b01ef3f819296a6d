"""SGLang's real DFlash capture and DFlash draft class, and the tensor it hands an MTP / NextN
head, in-process on CPU, on the target of a running :class:`SGLangCPUHarness` (issue 14), on every
release the harness serves (0.5.23, and 0.5.14 in ``tox -e sglang-0.5.14``). Line numbers below
are 0.5.23's, then 0.5.14's; what a capture records (``provenance``) is read from the installed
release (:func:`eagle3_conformance.tools.sglang_cpu.releases.site`).

DFlash (extend and decode):

* ids: SGLang's own ``parse_dflash_draft_config(draft_hf_config=...).resolve_target_layer_ids``
  (``srt/speculative/dflash_utils.py:556-586`` / ``:438-468``: a missing key falls back to
  ``build_target_layer_ids``, an id outside 0..L-1 raises), the calls ``ModelRunner`` makes;
* applied with the release's own apply step (the harness branch's ``apply_dflash_ids``: 0.5.23
  ``configure_aux_hidden_state_capture(dflash_use_aux_hidden_state=True, ...)``,
  ``attention_backend_setup.py:40-72``; 0.5.14 ``ModelRunner.init_aux_hidden_state_capture``,
  ``model_runner.py:1002-1018``), which calls the target class's ``set_dflash_layers_to_capture``
  (``llama.py:943-953`` / ``:826-836``: ``val + 1``);
* the draft: SGLang's real ``DFlashDraftModel`` (``srt/models/dflash.py:671-845`` / ``:308-367``),
  built from the DFlash draft config, its ``project_target_hidden`` (``fc`` then ``hidden_norm``)
  run on the target's FULL capture; a forward hook on ``fc`` records what it read.
* extend = target EXTEND (FULL); decode = target TARGET_VERIFY (FULL) over a cached prefix, the
  rows the DFlash worker projects into the draft's context after verify.

MTP / NextN: :func:`mtp_source_extend` returns what SGLang stores as ``spec_info.hidden_states``
for an MTP head: the target run without aux capture, whose logits processor stores the LM head's
input (``layers/logits_processor.py`` ``_get_hidden_states_to_store``, ``:866-872`` / ``:596-603``;
a pre-norm copy, when the target class hands one over, wins at ``:902`` / ``:632``). Only that
tensor is observed; SGLang's MTP draft classes themselves (``deepseek_nextn.py``,
``qwen3_5_mtp.py``) are not run here.

Stand-ins: the attention and the hand-built ``ForwardBatch`` of the harness (see its docstring).
The harness's target is restored on :meth:`DFlashCPU.close`.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import torch

from eagle3_conformance.core.capture import Capture


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
        DFlashConfigError: SGLang's resolver, or its ``DFlashDraftModel`` at load, refuses the config
            (the message is SGLang's).
    """

    def __init__(self, harness, draft_config: dict, *, apply_rule: str = "sglang") -> None:
        from sglang.srt.models.dflash import DFlashDraftModel
        from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

        if apply_rule not in ("sglang", "boundary"):
            raise ValueError(f"apply_rule must be sglang or boundary, got {apply_rule!r}")
        t0 = time.perf_counter()
        self.h = harness
        self.apply_rule = apply_rule
        L = harness.num_layers
        self._saved = (harness.target.capture_aux_hidden_states, list(harness.target.model.layers_to_capture))
        self.closed = False
        hf = _hf_config(draft_config, harness.target_config.hf_config)
        try:
            dc = parse_dflash_draft_config(draft_hf_config=hf)
            self.ids = list(dc.resolve_target_layer_ids(target_num_layers=L, draft_num_layers=dc.require_num_layers()))
        except ValueError as e:
            raise DFlashConfigError(str(e)) from None
        self.ids_source = "dflash_config.target_layer_ids" if dc.target_layer_ids is not None else \
            "build_target_layer_ids (formula fallback: no target_layer_ids)"
        if apply_rule == "sglang":
            self.apply_site = harness.release.apply_dflash_ids(harness.target, self.ids)
        else:
            harness.target.capture_aux_hidden_states = True
            harness.target.model.layers_to_capture = list(self.ids)
            self.apply_site = "FAULT INJECTION: ids written into layers_to_capture unchanged"
        self.layers_to_capture = list(harness.target.model.layers_to_capture)
        torch.manual_seed(0)
        # the draft class resolves the ids again to size fc (dflash.py:750-759 / :333-342): without
        # num_target_layers, 0.5.23 checks them against max(id) + 1, 0.5.14 against the draft's own depth
        try:
            self.draft = DFlashDraftModel(hf).to(harness.dtype).eval()
        except ValueError as e:  # SGLang's draft class refuses the config at load: a finding, like the resolver's
            self.close()
            raise DFlashConfigError(f"{type(e).__name__} in DFlashDraftModel.__init__: {e}") from None
        self.fc_in = int(self.draft.fc.in_features)
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
        except ValueError as e:  # project_target_hidden: feature dim mismatch (dflash.py:833-841 / :357-366)
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
                            "apply_site": self.apply_site,
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
    """What the installed SGLang stores as ``spec_info.hidden_states`` for an MTP / NextN head on
    extend: the target's FULL hidden states with no aux capture (the logits processor's
    ``hidden_states_to_store = hidden_states``, the LM head's input; the line is recorded in
    ``provenance["source"]`` as the installed release has it). One Capture per request,
    ``feature`` [T, d]."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode

    fb = harness._extend_batch(batch, [0] * len(batch), ForwardMode.EXTEND, CaptureHiddenMode.FULL)
    out = harness._target_forward(fb, [(("mtp", i), len(x)) for i, x in enumerate(batch)], aux=False)
    hidden = out.hidden_states
    source = mtp_source_site()
    caps, start = [], 0
    for i, x in enumerate(batch):
        sl = slice(start, start + len(x))
        start += len(x)
        caps.append(Capture(
            path="sglang-extend", where=f"mtp source extend batch of {len(batch)}, request {i}",
            token_ids=torch.tensor(x, dtype=torch.int64), feature=hidden[sl],
            rows=torch.arange(len(x), dtype=torch.int64), draft_input_width=int(hidden.shape[-1]),
            provenance={"sglang": harness.sglang_version, "method": "mtp", "mode": "EXTEND", "source": source,
                        "target_class": type(harness.target).__name__},
        ))
    return caps


def mtp_source_site() -> str:
    """Where the installed SGLang's logits processor picks the tensor an MTP head is handed:
    ``"sglang/srt/layers/logits_processor.py:N hidden_states_to_store = hidden_states (...); a
    pre-norm copy wins at :M"``, both lines read from the installed file."""
    from sglang.srt.layers.logits_processor import LogitsProcessor

    from eagle3_conformance.tools.sglang_cpu.releases import site

    fn = LogitsProcessor._get_hidden_states_to_store
    stored = site(fn, "hidden_states_to_store = hidden_states")
    wins = site(fn, "hidden_states_to_store = hidden_states_to_store_before_norm").rsplit(":", 1)[1]
    return (f"{stored} hidden_states_to_store = hidden_states (FULL, no aux capture); "
            f"a pre-norm copy, when handed over, wins at :{wins}")


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
