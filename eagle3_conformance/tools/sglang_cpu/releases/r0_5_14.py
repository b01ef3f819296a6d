"""SGLang 0.5.14 (the release SpecForge 0.2.0 pins): the harness's release-specific steps, with
0.5.14's own code.

* process config: 0.5.14 has no ``runtime_context.publish``; the scheduler process stores its
  ``ServerArgs`` with ``set_global_server_args_for_scheduler`` (``srt/server_args.py:7183``), as
  ``ModelRunner.__init__`` does (``srt/model_executor/model_runner.py:526``). The parallel
  accessors (``srt/runtime_context.py`` ``get_parallel``) read ``parallel_state`` directly.
* ids: 0.5.14 has no ``spec_aux_hidden_state.py``. Its reader is inline in ``ModelRunner.__init__``
  (``model_runner.py:430-472``): for EAGLE/STANDALONE on a target worker it builds the draft
  ``ModelConfig`` (``self._build_model_config(..., is_draft_model=True)``) and, for EAGLE-3, reads
  ``eagle_config.get("use_aux_hidden_state", True)`` and ``eagle_config["eagle_aux_hidden_state_
  layer_ids"]``, any exception -> None (``:459-472``). Constructing a ``ModelRunner`` would load
  the models on a device, so those statements of ``__init__`` are compiled from the installed
  file, with their own line numbers, and executed in ``model_runner``'s own module namespace on a
  namespace standing for ``self`` (:func:`read_ids`); nothing of the reader is rewritten.
* attention-DP state: ``initialize_dp_attention`` (``srt/layers/dp_attention.py:279``), which
  ``ModelRunner.init_torch_distributed`` calls (``model_runner.py:1237-1240``); 0.5.23 derives it
  from the published runtime context;
* ``forward_context(ctx)`` takes no ``forward_batch`` (``forward_context.py:79``);
* apply: ``ModelRunner.init_aux_hidden_state_capture`` (``model_runner.py:1002-1018``), called
  unbound on the same namespace with ``model`` = the target: it calls
  ``model.set_eagle3_layers_to_capture(ids)`` when ``use_aux_hidden_state``, and
  ``model.set_dflash_layers_to_capture(ids)`` when ``dflash_use_aux_hidden_state``
  (:func:`apply_dflash_ids`; 0.5.14's DFlash reader, ``model_runner.py:474-516``, calls the
  ``parse_dflash_draft_config`` / ``resolve_target_layer_ids`` of ``speculative/dflash_utils.py``
  that the DFlash family calls too).
"""

from __future__ import annotations

import ast
import inspect
from types import SimpleNamespace
from typing import Any, Optional

from eagle3_conformance.tools.sglang_cpu.releases import IdsRead

SERVES = ("0.5.14",)
"""The SGLang releases this branch serves (each checked by :func:`check`)."""

EAGLE_KEY = "eagle_aux_hidden_state_layer_ids"


def check(version: str) -> None:
    """Raise RuntimeError unless ``version`` is one this branch serves and the code it runs is there."""
    if version not in SERVES:
        raise RuntimeError(f"the SGLang 0.5.14 harness branch serves {SERVES}, not {version}")
    import sglang.srt.server_args as sa
    from sglang.srt.model_executor.model_runner import ModelRunner

    if not hasattr(sa, "set_global_server_args_for_scheduler"):
        raise RuntimeError(f"SGLang {version}: server_args lacks set_global_server_args_for_scheduler")
    if not hasattr(ModelRunner, "init_aux_hidden_state_capture"):
        raise RuntimeError(f"SGLang {version}: ModelRunner lacks init_aux_hidden_state_capture")
    _reader_code()


def publish_server_args(server_args: Any) -> None:
    """Store ``server_args`` as the scheduler process's global server args."""
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    set_global_server_args_for_scheduler(server_args)


def after_model_config(server_args: Any, target_config: Any) -> None:
    """What 0.5.14's ``ModelRunner.init_torch_distributed`` does after ``initialize_model_parallel``
    and before loading: ``initialize_dp_attention(server_args=..., model_config=...)``
    (``model_runner.py:1237-1240``; the model layers read the attention-DP size it sets)."""
    from sglang.srt.layers.dp_attention import initialize_dp_attention

    initialize_dp_attention(server_args=server_args, model_config=target_config)


def forward_context(attn_backend: Any, forward_batch: Any):
    """0.5.14's ``forward_context(ForwardContext(attn_backend=...))``
    (``srt/model_executor/forward_context.py:79``; it takes no ``forward_batch``)."""
    from sglang.srt.model_executor.forward_context import ForwardContext
    from sglang.srt.model_executor.forward_context import forward_context as enter

    return enter(ForwardContext(attn_backend=attn_backend))


def reset() -> None:
    """Clear what :func:`publish_server_args` stored (``get_global_server_args`` raises again)."""
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    set_global_server_args_for_scheduler(None)


_CODE: dict = {}


def _reader_code() -> tuple[Any, int]:
    """The statements of ``ModelRunner.__init__`` that read the draft config's capture ids, compiled
    from the installed ``model_runner.py`` with its line numbers: the ``self.eagle_*`` /
    ``self.dflash_*`` defaults, then the ``if`` whose body holds the ``eagle_config[...]`` lookup.
    Returns (code, line of that lookup).

    Raises:
        RuntimeError: the installed file has no such statements.
    """
    if "code" in _CODE:
        return _CODE["code"], _CODE["line"]
    from sglang.srt.model_executor import model_runner

    path = inspect.getsourcefile(model_runner)
    if path is None:
        raise RuntimeError("the installed sglang.srt.model_executor.model_runner has no source file")
    tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelRunner")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    picked: list[ast.stmt] = []
    line: Optional[int] = None
    for node in init.body:
        text = ast.unparse(node)
        if isinstance(node, ast.Assign) and text.startswith(("self.eagle_", "self.dflash_")):
            picked.append(node)
        elif isinstance(node, ast.If) and any(isinstance(n, ast.Constant) and n.value == EAGLE_KEY
                                              for n in ast.walk(node)):
            picked.append(node)
            line = next(n.lineno for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value == EAGLE_KEY)
            break
    if line is None:
        raise RuntimeError(f"{path}: ModelRunner.__init__ has no statement reading eagle_config[{EAGLE_KEY!r}]")
    _CODE.update(code=compile(ast.Module(body=picked, type_ignores=[]), path, "exec"), line=line)
    return _CODE["code"], line


def _runner_self(server_args: Any) -> SimpleNamespace:
    """What the reader statements read from ``self`` on a target worker running EAGLE-3."""
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    me = SimpleNamespace(spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"), is_draft_worker=False,
                         server_args=server_args)
    me._build_model_config = lambda *a, **k: ModelRunner._build_model_config(me, *a, **k)
    return me


def read_ids(server_args: Any, target_config: Any, draft_dir: Optional[str] = None) -> IdsRead:
    """0.5.14's own reader statements on ``server_args`` (``speculative_draft_model_path`` = the
    draft dir; ``draft_dir``: read that one instead, on a copy of ``server_args``).
    ``target_config`` is unused: 0.5.14 reads only the draft config."""
    import copy

    from sglang.srt.model_executor import model_runner

    code, line = _reader_code()
    if draft_dir is not None:
        server_args = copy.copy(server_args)
        server_args.speculative_draft_model_path = str(draft_dir)
    me = _runner_self(server_args)
    scope = dict(vars(model_runner), self=me, server_args=server_args)
    exec(code, scope)  # noqa: S102 - 0.5.14's own lines, in its own module's namespace
    ids = me.eagle_aux_hidden_state_layer_ids
    return IdsRead(None if ids is None else list(ids), bool(me.eagle_use_aux_hidden_state),
                   f"sglang/srt/model_executor/model_runner.py:{line}")


def apply_ids(target: Any, read: IdsRead) -> None:
    """0.5.14's ``ModelRunner.init_aux_hidden_state_capture`` on the target."""
    from sglang.srt.model_executor.model_runner import ModelRunner

    me = SimpleNamespace(model=target, eagle_use_aux_hidden_state=read.use_aux,
                         eagle_aux_hidden_state_layer_ids=read.ids, dflash_use_aux_hidden_state=False,
                         dflash_target_layer_ids=None)
    ModelRunner.init_aux_hidden_state_capture(me)


def apply_dflash_ids(target: Any, ids: list[int]) -> str:
    """0.5.14's ``ModelRunner.init_aux_hidden_state_capture`` on the target with DFlash ids
    (``dflash_use_aux_hidden_state``: it calls ``target.set_dflash_layers_to_capture(ids)``, or
    raises ValueError for a target without one). Returns where that method is in the installed release."""
    from sglang.srt.model_executor.model_runner import ModelRunner

    from eagle3_conformance.tools.sglang_cpu.releases import site

    me = SimpleNamespace(model=target, eagle_use_aux_hidden_state=False, eagle_aux_hidden_state_layer_ids=None,
                         dflash_use_aux_hidden_state=True, dflash_target_layer_ids=list(ids))
    ModelRunner.init_aux_hidden_state_capture(me)
    return site(ModelRunner.init_aux_hidden_state_capture)
