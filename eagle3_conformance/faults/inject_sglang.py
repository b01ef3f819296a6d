"""Faults injected in the engine wiring, through SGLang's real knobs on the live CPU harness: the
draft config as the installed SGLang release's own reader reads it, applied with its own apply step; the draft checkpoint's ``d2t`` through the real draft's
``load_weights``; the harness's ``feed_draft_states``; a side-path buffer before the real draft;
and harness rebuilds for what SGLang fixes at build time (``target_hidden_size`` -> fc shape,
``ServerArgs.dtype``)."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from typing import TYPE_CHECKING, Callable, Optional

from eagle3_conformance.environment import torch_env
from eagle3_conformance.environment.torch_env import torch_dtype

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.contract import Contract  # noqa: E402
from eagle3_conformance.core.findings import Finding  # noqa: E402
from eagle3_conformance.faults.example import Example, Knobs, apply_capture  # noqa: E402
from eagle3_conformance.faults.scenario import Scenario, draft_config, sglang_ids, write_draft_dir  # noqa: E402
from eagle3_conformance.faults.tokens import GOOD_TEMPLATE, render_ids  # noqa: E402

if TYPE_CHECKING:
    from eagle3_conformance.tools.sglang_cpu import SGLangCPUHarness


class HarnessPool:
    """At most one SGLang CPU harness alive (SGLang keeps one runtime per process); rebuilds only
    when the (scenario, variant) key changes."""

    def __init__(self) -> None:
        self.key: Optional[tuple[str, str]] = None
        self.h: Optional[SGLangCPUHarness] = None
        self.builds = 0
        self.build_s = 0.0

    def get(self, scn: Scenario, variant: Optional[dict] = None):
        from eagle3_conformance.tools.sglang_cpu import SGLangCPUHarness

        key = (str(scn.target_dir), json.dumps(variant or {}, sort_keys=True))
        if self.h is not None and not self.h.closed and self.key == key:
            return self.h
        target_dir, draft_dir = scn.saved_dirs()
        dtype = torch.float32
        if variant:
            cfg = dict(scn.draft_cfg)
            for kk, vv in (variant.get("draft") or {}).items():
                if vv is None:
                    cfg.pop(kk, None)
                else:
                    cfg[kk] = vv
            draft_dir = write_draft_dir(scn.fresh_dir("draft-variant"), cfg)
            dtype = torch_dtype(variant.get("dtype", "float32"))
        t0 = time.perf_counter()
        self.h = SGLangCPUHarness(target_dir, draft_dir, dtype=dtype)
        self.build_s += time.perf_counter() - t0
        self.builds += 1
        self.key = key
        return self.h

    def close(self) -> None:
        if self.h is not None:
            self.h.close()
        self.h = None
        self.key = None


def apply_draft_config(h, scn: Scenario, cfg: dict) -> None:
    """Resolve the capture ids from ``cfg`` with the installed SGLang release's own reader (0.5.23:
    ``resolve_spec_aux_hidden_state_config``; 0.5.14: ``ModelRunner.__init__``'s reader lines; both
    read the nested ``eagle_config`` key only, any exception -> defaults) and apply them with its
    own apply step (``configure_aux_hidden_state_capture`` / ``ModelRunner.
    init_aux_hidden_state_capture``) to the live target, starting from a freshly loaded model's
    state (capture off, no layers), as ModelRunner does (see
    :mod:`eagle3_conformance.tools.sglang_cpu.releases`). Only the target side is re-resolved: the
    draft's fc stays as built."""
    d = write_draft_dir(scn.fresh_dir("draft-config"), cfg)
    try:
        read = h.release.read_ids(h.server_args, h.target_config, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    h.target.capture_aux_hidden_states = False
    h.target.model.layers_to_capture = []
    h.release.apply_ids(h.target, read)
    h._override = None
    h.engine_ids = read.ids
    h._resolved_engine_ids = h.engine_ids
    h.resolved_layers_to_capture = list(h.target.model.layers_to_capture)


def load_engine_d2t(h, scn: Scenario, mode: str) -> Optional[torch.Tensor]:
    """Load the draft checkpoint's ``d2t`` through the real draft's ``load_weights`` (SGLang turns
    it into ``hot_token_id = d2t + arange``, llama_eagle3.py:350-352) and return the offsets the
    engine now holds (``hot_token_id - arange``), or None when the checkpoint had no d2t."""
    h.draft.hot_token_id = None  # a freshly built draft (llama_eagle3.py:323)
    N = scn.spec.draft_vocab
    if mode != "missing":
        d2t = scn.d2t if mode == "good" else scn.d2t + torch.arange(N)
        h.draft.load_weights([("d2t", d2t.clone())])
    hot = h.draft.get_hot_token_id()
    return None if hot is None else (hot - torch.arange(hot.shape[0])).to(torch.int64)


@contextlib.contextmanager
def _handoff(h, fn: Optional[Callable]):
    """Replace the tensor handed to the draft (``spec_info.hidden_states``) with ``fn(tensor)``
    right before the real draft runs (a side-path buffer between verify and draft extend)."""
    if fn is None:
        yield
        return
    orig = h._draft_forward

    def wrapped(fb, segments):
        fb.spec_info.hidden_states = fn(fb.spec_info.hidden_states)
        return orig(fb, segments)

    h._draft_forward = wrapped
    try:
        yield
    finally:
        del h._draft_forward


def _serving_checks(scn, contract, h, caps, k: Knobs, path: str) -> list[Finding]:
    from eagle3_conformance.checks import check_chat_template, check_golden_tokens, check_vocab_mapping, run_checks

    out: list[Finding] = []
    caps = apply_capture(k, scn, caps)
    for cap in caps:
        out += run_checks(contract, cap, scn.ref.capture(cap.token_ids))
    out += check_vocab_mapping(contract, load_engine_d2t(h, scn, k.d2t), scn.t2d, path, "draft hot_token_id")
    if path == "sglang-extend":
        tmpl = k.serving_template or GOOD_TEMPLATE
        out += check_chat_template(contract, tmpl, path)
        out += check_golden_tokens(contract, None, render_ids(tmpl), path)
    return out


def run_sglang(scn: Scenario, contract: Contract, ex: Example, path: str, pool: HarnessPool,
               k: Knobs = Knobs()) -> list[Finding]:
    """One SGLang path run (``sglang-extend`` or ``sglang-decode``) on the live CPU harness."""
    from eagle3_conformance.faults.example import EngineRefuses
    from eagle3_conformance.tools.sglang_cpu import DraftForwardError, TargetForwardError

    h = pool.get(scn, k.variant)
    bnd = ex.boundaries or scn.spec.boundaries
    cfg = k.draft_config if k.draft_config is not None else draft_config(scn.spec, sglang_ids(bnd))
    apply_draft_config(h, scn, cfg)
    try:
        with _handoff(h, k.handoff):
            if path == "sglang-extend":
                caps = h.extend([list(x) for x in ex.extend])
            else:
                caps = h.verify([list(p) for p in ex.prefixes], [list(d) for d in ex.drafts], list(ex.accepted),
                                feed_draft_states=k.feed_draft_states)
    except DraftForwardError as e:  # loud in SGLang; what entered the draft is still checked
        caps = e.captures
    except TargetForwardError as e:  # SGLang's target refused the faulty capture: nothing reached the draft
        raise EngineRefuses(str(e)) from e
    return _serving_checks(scn, contract, h, caps, k, path)
