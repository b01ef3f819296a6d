"""What a released vLLM version captures for a draft config, per model runner, asked of that
version's own code run in isolation (:mod:`eagle3_conformance.released.isolated`).

The same functions :mod:`eagle3_conformance.tools.vllm_cpu.ids` calls on the installed vLLM, here
compiled from the fetched wheel's files (paths of vLLM 0.33.0):

* V1 reader ``GPUModelRunner._get_eagle3_aux_layers_from_config`` (``v1/worker/gpu_model_runner.py``),
  use of aux states ``SpecDecodeBaseProposer._get_eagle3_use_aux_hidden_state_from_config``
  (``v1/spec_decode/llm_base_proposer.py``);
* V2 reader ``get_eagle3_aux_layers_from_config`` and ``requires_aux_hidden_states``
  (``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py``);
* no ids: the target class's ``get_eagle3_default_aux_hidden_state_layers`` (its own or
  ``SupportsEagle3``'s, ``model_executor/models/interfaces.py``); then its
  ``set_aux_hidden_state_layers`` on a stub of the class (found through
  ``model_executor/models/registry.py``), which stores ``aux_hidden_state_layers``.

A stored id k is B_k (0..L): the mixin's capture calls the hook before the first layer and with
``idx + 1`` after each (``models/llama.py:406-457``), and the pre-mixin DeepSeek loop captures
``hidden_states + residual`` before layer k (docs/REFERENCE.md section 2.1, the vLLM row: vllm-project/vllm#46788, #46973); the concat is ascending.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional

from eagle3_conformance.released.isolated import Run, SourceTree, Unavailable, Unsupported, function, stub

RUNNERS = ("v1", "v2")
_READERS = {
    "v1": ("vllm.v1.worker.gpu_model_runner", "_get_eagle3_aux_layers_from_config", "GPUModelRunner"),
    "v2": ("vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils", "get_eagle3_aux_layers_from_config", None),
}
_USES_AUX = {
    "v1": ("vllm.v1.spec_decode.llm_base_proposer", "_get_eagle3_use_aux_hidden_state_from_config",
           "SpecDecodeBaseProposer"),
    "v2": ("vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils", "requires_aux_hidden_states", None),
}


@dataclass
class RunnerRead:
    """One runner's reading: ``ids`` found (None: the model default applies), ``use_aux``,
    ``site`` of the reader (``"rel:line"``)."""

    ids: Optional[list[int]]
    use_aux: bool
    site: str


@dataclass
class Applied:
    """What the target class stored: ``stored`` ids, the default used (None when ids were given),
    ``entered`` (``"rel:line Class.method"``), ``assigned_at``."""

    stored: list[int]
    default: Optional[list[int]]
    entered: list[str]
    assigned_at: str


def registry(tree: SourceTree) -> dict[str, tuple[str, str]]:
    """``architecture -> (module, class)`` from the dict literals of ``models/registry.py``."""
    if "_vllm_registry" in tree.__dict__:
        return tree.__dict__["_vllm_registry"]
    m = tree.module("vllm.model_executor.models.registry")
    out: dict[str, tuple[str, str]] = {}
    tree.__dict__["_vllm_registry"] = out
    for node in ast.walk(m.tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if not (isinstance(k, ast.Constant) and isinstance(k.value, str) and isinstance(v, ast.Tuple)
                        and len(v.elts) == 2):
                    continue
                mod, cls = (e.value if isinstance(e, ast.Constant) else None for e in v.elts)
                if isinstance(mod, str) and isinstance(cls, str):
                    out[k.value] = (f"vllm.model_executor.models.{mod}", cls)
    return out


def read_draft(tree: SourceTree, runner: str, draft_cfg: dict) -> RunnerRead:
    """Run ``runner``'s own reader and aux switch on ``draft_cfg`` (a draft config.json as a dict).

    Raises:
        Unavailable: the reader is not in this release or needs what isolation cannot provide.
    """
    hf = SimpleNamespace(**draft_cfg)
    spec = SimpleNamespace(method="eagle3", draft_model_config=SimpleNamespace(hf_config=hf))
    mod, name, cls = _READERS[runner]
    reader, site = function(tree, mod, name, cls)
    ids = reader(SimpleNamespace(speculative_config=spec)) if cls else reader(spec)
    mod, name, cls = _USES_AUX[runner]
    uses, _ = function(tree, mod, name, cls)
    use = uses(SimpleNamespace(method="eagle3", draft_model_config=spec.draft_model_config)) if cls else uses(spec)
    return RunnerRead(None if not ids else [int(i) for i in ids], bool(use), site)


def apply_ids(tree: SourceTree, architecture: str, L: int, ids: Optional[list[int]]) -> Applied:
    """The target class's default (when ``ids`` is empty) and setter, run on a stub.

    Raises:
        Unavailable: the architecture is not registered or does not support EAGLE-3.
        AssertionError, ...: the version's own code refuses (passed on).
    """
    reg = registry(tree)
    if architecture not in reg:
        raise Unsupported(f"{tree.label} registers no model class for {architecture} (models/registry.py)")
    mod, cls = reg[architecture]
    run = Run(L, ("aux_hidden_state_layers",))
    target = stub(tree, mod, cls, run)
    if "SupportsEagle3" not in target._names:
        raise Unsupported(f"{tree.label}: {cls} does not support EAGLE-3 (no SupportsEagle3 among its bases)")
    default: Optional[list[int]] = None
    chosen = ids
    if not chosen:
        default = chosen = [int(i) for i in target.get_eagle3_default_aux_hidden_state_layers()]
    target.set_aux_hidden_state_layers(tuple(chosen))
    if not run.assignments:
        raise Unavailable(f"{tree.label}: {cls}.set_aux_hidden_state_layers stored no aux_hidden_state_layers")
    _, value, site, _ = run.assignments[-1]
    return Applied([int(i) for i in value], default, run.entered, site)
