"""SGLang 0.5.23: the harness's release-specific steps, with 0.5.23's own functions.

* process config: ``srt/runtime_context.py:1489-1514`` ``publish(server_args, role=..., ranks=
  SpawnRanks(...))`` ("last-publish-wins"), ``reset_context`` (``:1751``) on teardown, and the
  gloo world group installed with ``get_parallel().override_permanently``;
* ids: ``resolve_spec_aux_hidden_state_config`` (``srt/model_executor/model_runner_components/
  spec_aux_hidden_state.py:53-81``; the EAGLE-3 part reads the draft config's nested
  ``eagle_config["eagle_aux_hidden_state_layer_ids"]`` at ``:185-196``, any exception -> None);
* apply: ``configure_aux_hidden_state_capture`` (``model_runner_components/
  attention_backend_setup.py:40-72``), which calls ``model.set_eagle3_layers_to_capture(ids)``,
  and for DFlash ids ``model.set_dflash_layers_to_capture(ids)``.
"""

from __future__ import annotations

from typing import Any, Optional

from eagle3_conformance.tools.sglang_cpu.releases import IdsRead

SERVES = ("0.5.23",)
"""The SGLang releases this branch serves (each checked by :func:`check`)."""

READER_SITE = "sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py:185"


def check(version: str) -> None:
    """Raise RuntimeError unless ``version`` is one this branch serves and the functions it calls exist."""
    if version not in SERVES:
        raise RuntimeError(f"the SGLang 0.5.23 harness branch serves {SERVES}, not {version}")
    import sglang.srt.runtime_context as rc

    missing = [n for n in ("publish", "SpawnRanks", "reset_context") if not hasattr(rc, n)]
    if missing:
        raise RuntimeError(f"SGLang {version}: sglang.srt.runtime_context lacks {missing}")


def publish_server_args(server_args: Any) -> None:
    """Publish ``server_args`` process-wide and install the world group (after
    ``init_distributed_environment``, before ``initialize_model_parallel``)."""
    from sglang.srt.distributed import parallel_state
    from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish, reset_context

    reset_context()
    publish(server_args, role="test", ranks=SpawnRanks(world_rank=0))
    if parallel_state._WORLD is not None:
        get_parallel().override_permanently(world_group=parallel_state._WORLD)


def after_model_config(server_args: Any, target_config: Any) -> None:
    """Nothing: 0.5.23's attention-DP accessors read the context :func:`publish_server_args` published."""
    return None


def forward_context(attn_backend: Any, forward_batch: Any):
    """0.5.23's ``forward_context(ForwardContext(attn_backend=...), forward_batch=...)``
    (``srt/model_executor/forward_context.py:86-99``: it carries the batch's
    ``moe_num_token_non_padded``)."""
    from sglang.srt.model_executor.forward_context import ForwardContext
    from sglang.srt.model_executor.forward_context import forward_context as enter

    return enter(ForwardContext(attn_backend=attn_backend), forward_batch=forward_batch)


def reset() -> None:
    """Clear what :func:`publish_server_args` published."""
    from sglang.srt.runtime_context import reset_context

    reset_context()


def read_ids(server_args: Any, target_config: Any, draft_dir: Optional[str] = None) -> IdsRead:
    """0.5.23's own resolver on the published ``server_args`` (``speculative_draft_model_path`` =
    the draft dir, ``speculative_algorithm="EAGLE3"``) for the target's ``ModelConfig``.
    ``draft_dir``: read that draft dir instead (the resolver reads the path from the published
    runtime spec, ``get_spec()``, which is pointed there for the call and restored)."""
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    spec = get_spec()
    old = spec.speculative_draft_model_path
    if draft_dir is not None:
        object.__setattr__(spec, "speculative_draft_model_path", str(draft_dir))
    try:
        conf = resolve_spec_aux_hidden_state_config(
            server_args=server_args,
            model_config=target_config,
            spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"),
            is_draft_worker=False,
        )
    finally:
        object.__setattr__(spec, "speculative_draft_model_path", old)
    ids = conf.eagle_aux_hidden_state_layer_ids
    return IdsRead(None if ids is None else list(ids), bool(conf.eagle_use_aux_hidden_state), READER_SITE)


def apply_ids(target: Any, read: IdsRead) -> None:
    """0.5.23's own apply step on the target model."""
    from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
        configure_aux_hidden_state_capture,
    )

    configure_aux_hidden_state_capture(
        model=target,
        eagle_use_aux_hidden_state=read.use_aux,
        eagle_aux_hidden_state_layer_ids=read.ids,
        dflash_use_aux_hidden_state=False,
        dflash_target_layer_ids=None,
        is_dspark=False,
    )


def apply_dflash_ids(target: Any, ids: list[int]) -> str:
    """0.5.23's own apply step for DFlash ids on the target: ``configure_aux_hidden_state_capture(
    dflash_use_aux_hidden_state=True, ...)``, which calls ``target.set_dflash_layers_to_capture(ids)``.
    Returns where that function is in the installed release."""
    from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
        configure_aux_hidden_state_capture,
    )

    from eagle3_conformance.tools.sglang_cpu.releases import site

    configure_aux_hidden_state_capture(
        model=target, eagle_use_aux_hidden_state=False, eagle_aux_hidden_state_layer_ids=None,
        dflash_use_aux_hidden_state=True, dflash_target_layer_ids=list(ids), is_dspark=False)
    return site(configure_aux_hidden_state_capture)
