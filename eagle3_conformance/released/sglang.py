"""What a released SGLang version captures for a draft config, asked of that version's own code.

Run in isolation (:mod:`eagle3_conformance.released.isolated`) on the files
:mod:`eagle3_conformance.released.fetch` extracted from the version's wheel:

* **registry**: the target class for ``architectures[0]`` is the one a model module lists in its
  ``EntryClass`` (what ``sglang/srt/models/registry.py`` ``ModelRegistry`` imports);
* **reader**: the ``try:`` block of the model runner that reads the draft config's
  ``eagle_config["eagle_aux_hidden_state_layer_ids"]`` and ``use_aux_hidden_state``
  (``model_executor/model_runner.py`` up to 0.5.22, ``model_runner_components/
  spec_aux_hidden_state.py`` in 0.5.23) is executed on the draft config;
* **setter**: the target class's own ``set_eagle3_layers_to_capture`` (or
  ``set_dflash_layers_to_capture``) runs on a stub of the class; delegation to an inner model
  (``kimi_k25.py`` -> ``DeepseekV3ForCausalLM``, ``qwen2_moe.py`` -> ``Qwen2MoeModel``) follows the
  class's own ``__init__``;
* **capture loop**: ``layers_to_capture`` entry i is the residual stream entering layer i, B_i,
  collected in layer order (ascending, each once); entry L (B_L) is reachable only where the
  model file also captures at the final norm (``end_layer in self.layers_to_capture``: gpt_oss,
  minimax_m3, ...), as :mod:`eagle3_conformance.engine_ids` reads the installed files;
* **CUDA-graph path**: a call of the setter *without arguments* in ``model_executor/`` (e.g.
  0.5.10.post1 ``cuda_graph_runner.py:648``) means the graphs that serve target verify and decode
  were captured with the default ids while extend used the configured ones (sgl-project/sglang#22836).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Optional

from eagle3_conformance.released.isolated import ClassStub, Run, SourceTree, Unavailable, Unsupported, stub

MODELS = "sglang.srt.models"
EXECUTOR = ("sglang.srt.model_executor", "sglang.srt.model_executor.model_runner_components")
_FINAL_CAPTURE_RE = re.compile(r"(end_layer|len\(self\.layers\))\s+in\s+self\.layers_to_capture")
EAGLE_KEY = "eagle_aux_hidden_state_layer_ids"


@dataclass
class SetterRun:
    """One run of a version's setter: ``layers_to_capture`` as stored (None: never set), where it
    was assigned (``"rel:line"``), the setters entered (``"rel:line Class.method"``), and the
    deepest capture index (L when B_L is reachable, else L-1)."""

    layers_to_capture: Optional[list[int]]
    assigned_at: str
    entered: list[str]
    deepest: int


@dataclass
class ReaderRun:
    """What the version's draft-config reader found: ``ids`` (None: none, the setter's default
    applies), ``use_aux`` (False: no aux states, the draft gets F), ``site`` ``"rel:line"``."""

    ids: Optional[list[int]]
    use_aux: bool
    site: str
    notes: list[str] = field(default_factory=list)


def registry(tree: SourceTree) -> dict[str, tuple[str, str]]:
    """``architecture -> (module, class)`` from every model module's ``EntryClass``."""
    cache = tree.__dict__.setdefault("_sglang_registry", None)
    if cache is not None:
        return cache
    out: dict[str, tuple[str, str]] = {}
    for mod in tree.modules_under(MODELS):
        try:
            body = tree.module(mod).tree.body
        except Unavailable:  # SGLang's registry skips a module it cannot import, too
            continue
        for node in body:
            if not (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass"
                                                         for t in node.targets)):
                continue
            names = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            for n in names:
                if isinstance(n, ast.Name):
                    found = tree.lookup(mod, n.id)
                    if found is not None and isinstance(found[1], ast.ClassDef):
                        out[n.id] = (found[0].name, n.id)
    tree.__dict__["_sglang_registry"] = out
    return out


def _deepest(tree: SourceTree, holder: Any, outer: ClassStub, L: int) -> int:
    """L when a capture loop of the holder's class (or the outer class) reaches the final norm."""
    stubs = [holder] if isinstance(holder, ClassStub) else []
    stubs.append(outer)
    seen = tree.__dict__.setdefault("_sglang_final", {})
    for s in stubs:
        for m, _ in tree.mro(s._m, s._cls):
            if m.name not in seen:
                seen[m.name] = bool(_FINAL_CAPTURE_RE.search(m.path.read_text(encoding="utf-8", errors="replace")))
            if seen[m.name]:
                return L
    return L - 1


def run_setter(tree: SourceTree, architecture: str, L: int, ids: Optional[list[int]],
               method: str = "set_eagle3_layers_to_capture") -> SetterRun:
    """Call the version's ``method`` for ``architecture``'s class on a stub with ``ids``.

    Raises:
        Unavailable: the architecture is not registered, the class has no such method, or the
            setter needs what isolation cannot provide.
        ValueError, TypeError, IndexError, ...: the version's own setter raises on these ids
            (its own exception, passed on).
    """
    reg = registry(tree)
    if architecture not in reg:
        raise Unsupported(f"{tree.label} registers no model class for {architecture} (EntryClass of "
                          f"sglang/srt/models/*.py)")
    mod, cls = reg[architecture]
    run = Run(L, ("layers_to_capture",))
    outer = stub(tree, mod, cls, run)
    try:
        setter = getattr(outer, method)
    except AttributeError:
        raise Unsupported(f"{tree.label}: {cls} has no {method}") from None
    setter(None if ids is None else list(ids))
    if not run.assignments:
        return SetterRun(None, "", run.entered, L - 1)
    _, value, site, holder = run.assignments[-1]
    return SetterRun([int(v) for v in value], site, run.entered, _deepest(tree, holder, outer, L))


def _reader_try(tree: SourceTree) -> tuple[Any, ast.Try, list[ast.stmt]]:
    """The ``try:`` block that reads ``eagle_config["eagle_aux_hidden_state_layer_ids"]`` and the
    statements before it in the same block (``use_aux_hidden_state = True``)."""
    if "_sglang_reader" not in tree.__dict__:
        tree.__dict__["_sglang_reader"] = _find_reader_try(tree)
    return tree.__dict__["_sglang_reader"]


def _find_reader_try(tree: SourceTree) -> tuple[Any, ast.Try, list[ast.stmt]]:
    for pkg in EXECUTOR:
        for mod in tree.modules_under(pkg):
            m = tree.module(mod)
            for parent in ast.walk(m.tree):
                body = getattr(parent, "body", None)
                if not isinstance(body, list):
                    continue
                for i, node in enumerate(body):
                    if isinstance(node, ast.Try) and any(
                            isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)
                            and n.slice.value == EAGLE_KEY for n in ast.walk(node)):
                        return m, node, body[:i]
    raise Unavailable(f"{tree.label}: no model-runner code reads eagle_config[{EAGLE_KEY!r}]")


def read_draft(tree: SourceTree, draft_cfg: dict) -> ReaderRun:
    """Execute the version's own reader block on ``draft_cfg`` (a draft ``config.json`` as a dict;
    its top-level keys become attributes, as transformers' ``PretrainedConfig`` holds them).

    Raises:
        Unavailable: no reader found, or it needs what isolation cannot provide.
    """
    from eagle3_conformance.released.isolated import Recorder, _globals

    m, node, before = _reader_try(tree)
    hf = SimpleNamespace(**draft_cfg)
    names = {n.value.id for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr == "hf_config"
             and isinstance(n.value, ast.Name)}
    targets = {n.value.id for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
               and isinstance(n.value, ast.Name)}
    rec = Recorder()
    local = {**{n: SimpleNamespace(hf_config=hf) for n in names}, **{t: rec for t in targets}}
    pre = [s for s in before if isinstance(s, ast.Assign) and "use_aux_hidden_state" in ast.unparse(s.targets[0])]
    code = compile(ast.Module(body=pre + [node], type_ignores=[]), str(m.path), "exec")
    exec(code, _globals(tree, m.name), local)  # noqa: S102 - the version's own reader block
    d = rec.__dict__
    ids = next((v for k, v in d.items() if k.endswith(EAGLE_KEY)), None)
    use = next((v for k, v in d.items() if k.endswith("use_aux_hidden_state")), True)
    return ReaderRun(None if ids is None else [int(i) for i in ids], bool(use), f"{m.rel}:{node.lineno}")


def graph_default_calls(tree: SourceTree) -> list[str]:
    """``"rel:line"`` of every call of ``set_eagle3_layers_to_capture()`` without arguments in the
    model executor: there, CUDA graphs (target verify, decode) capture the defaults."""
    if "_sglang_graph_calls" in tree.__dict__:
        return tree.__dict__["_sglang_graph_calls"]
    out: list[str] = []
    tree.__dict__["_sglang_graph_calls"] = out
    for pkg in EXECUTOR:
        for mod in tree.modules_under(pkg):
            m = tree.module(mod)
            for n in ast.walk(m.tree):
                if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                        and n.func.attr == "set_eagle3_layers_to_capture" and not n.args and not n.keywords):
                    out.append(f"{m.rel}:{n.lineno}")
    return out
