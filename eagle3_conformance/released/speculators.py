"""One speculators release's own rule for which target tensors its training data holds, run in
isolation on the released source (:mod:`eagle3_conformance.released.isolated`).

speculators generates its training data by running the target in vLLM and keeping the hidden
states of the layer ids it is given (``--layer-ids`` / ``--target-layer-ids``; the contract's
``draft.layer_ids.values``, none: the release's default). Which tensors those are changed at 0.5.0
(vllm-project/speculators#353), and each release's own code says which:

* **0.3 / 0.4** capture in speculators' own code: ``VllmHiddenStatesGenerator.__init__``
  (``data_generation/vllm_hidden_states_generator.py``) chooses and checks the ids,
  ``HiddenStatesWorkerExtension._setup_hidden_states_capture`` (``custom_worker.py``) stores them,
  and the patched vLLM model forward ``_patched_forward`` (``custom_worker.py``) keeps
  ``hidden_states + residual`` after each listed layer. All three run here: ``__init__`` up to the
  point it needs a tokenizer or vLLM engine, the forward on stand-in layers whose outputs are tagged
  with the boundary they are (layer i's output is ``B_{i+1}``, docs/REFERENCE.md section 1).
* **from 0.5** speculators hands the ids to vLLM's ``extract_hidden_states`` (the capture is
  vLLM's): ``models/utils.py`` ``resolve_target_layer_ids`` (its default and, from 0.9, its range
  check) runs here, then the ids go through the target class's ``set_aux_hidden_state_layers`` of
  the vLLM release :data:`DATAGEN_VLLM` (fetched and run like any vLLM column: a stored id k is
  ``B_k``). The releases from 0.5 do not pin vLLM; the one used is named in every rule.

Stand-ins (each only where the release's function reads it): the Hugging Face config loaders
return a config with the contract's L (``AutoConfig.from_pretrained``, speculators'
``get_verifier_config``), the tokenizer loader returns nothing usable, the logger is a plain
logger, vLLM's ``get_pp_group`` / ``get_tp_group`` are those of a single rank.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Optional

from eagle3_conformance.released.isolated import Run, SourceTree, Unavailable, function, stub

#: the vLLM release whose capture code stands for speculators >= 0.5's data generation (the vLLM this
#: project pins, requirements/vllm-lock.txt): those releases name none
DATAGEN_VLLM = "0.33.0"

_GENERATOR = "speculators.data_generation.vllm_hidden_states_generator"
_WORKER = "speculators.data_generation.custom_worker"
_RESOLVE = "speculators.models.utils"
_LOG = logging.getLogger("eagle3_conformance.released.speculators")


@dataclass
class DataCapture:
    """What one speculators release stores for the aux slots: ``entries`` (vLLM ``aux_hidden_state_layers``
    for >= 0.5, i.e. B_k; for 0.3/0.4 the boundaries' indices already), the ids behind them, the
    deepest entry a capture reaches, and the source lines that decided."""

    ids: list[int]
    boundaries: list[int]
    deepest: int
    sites: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _config_loader(L: int):
    cfg = SimpleNamespace(num_hidden_layers=L)
    cfg.text_config = cfg
    return SimpleNamespace(from_pretrained=lambda *a, **k: cfg)


def _until(fn, args: tuple, run: Run, attr: str) -> tuple[Any, str]:
    """Run ``fn`` until it needs what isolation cannot give; the last value it stored in ``attr``
    and where the run stopped ("" when it returned)."""
    stopped = ""
    try:
        fn(*args)
    except Unavailable as e:
        stopped = str(e)
    got = [(v, site) for a, v, site, _ in run.assignments if a == attr]
    if not got:
        raise Unavailable(f"the rule stopped before it stored {attr}: {stopped}")
    return got[-1][0], stopped


def _generator_ids(tree: SourceTree, L: int, ids: Optional[list[int]]) -> tuple[list[int], str]:
    """0.3/0.4: ``VllmHiddenStatesGenerator.__init__``'s own choice and range check of the ids."""
    over = {"AutoConfig": _config_loader(L), "AutoTokenizer": SimpleNamespace(from_pretrained=lambda *a, **k: None),
            "log": _LOG}
    init, site = function(tree, _GENERATOR, "__init__", cls="VllmHiddenStatesGenerator", overrides=over)
    run = Run(L, ("layer_ids",))
    gen = stub(tree, _GENERATOR, "VllmHiddenStatesGenerator", run)
    value, _ = _until(init, (gen, "target", ids), run, "layer_ids")
    return [int(i) for i in value], site


class _Half:
    """One of the two streams a vLLM decoder layer returns (``hidden_states``, ``residual``), tagged
    with the boundary their sum is: adding the two halves of layer i's output gives ``B_{i+1}``."""

    def __init__(self, k: int) -> None:
        self.k = k

    def __add__(self, other: "_Half") -> "_Boundary":
        if not isinstance(other, _Half) or other.k != self.k:
            raise Unavailable("the capture loop adds streams of different layers; not followed in isolation")
        return _Boundary(self.k)

    def __getattr__(self, name: str):
        raise Unavailable(f"the capture loop reads {name!r} of a layer's output; not followed in isolation")


@dataclass(frozen=True)
class _Boundary:
    """The sum of one layer's two output streams: the boundary ``B_k`` (``clone`` is itself)."""

    k: int

    def clone(self) -> "_Boundary":
        return self

    def __getattr__(self, name: str):
        raise Unavailable(f"the capture loop reads {name!r} of a captured state; not followed in isolation")


def _layer(i: int):
    return lambda hidden_states=None, positions=None, residual=None, **_: (_Half(i + 1), _Half(i + 1))


def _worker_capture(tree: SourceTree, L: int, ids: list[int]) -> tuple[list[int], list[str]]:
    """0.3/0.4: the extension's ``_setup_hidden_states_capture`` and the patched forward, on L
    tagged layers; returns the captured boundary indices in order and the two sites."""
    setup, setup_site = function(tree, _WORKER, "_setup_hidden_states_capture", cls="HiddenStatesWorkerExtension")
    run = Run(L, ("_layer_ids",))
    ext = stub(tree, _WORKER, "HiddenStatesWorkerExtension", run)
    layer_ids, _ = _until(setup, (ext, list(ids)), run, "_layer_ids")
    stored: list[Any] = []
    rank = SimpleNamespace(is_first_rank=True, is_last_rank=True, rank_in_group=0, world_size=1)
    fwd, fwd_site = function(tree, _WORKER, "_patched_forward", overrides={
        "get_pp_group": lambda: rank, "get_tp_group": lambda: rank})
    model = SimpleNamespace(layers=[_layer(i) for i in range(L)], start_layer=0, end_layer=L,
                            embed_input_ids=lambda *_: _Half(0), norm=lambda h, r: ("F", None),
                            _extension=SimpleNamespace(_layer_ids=layer_ids, _store_captured_states=stored.extend))
    fwd(model, None, None, None, _Half(0))
    return [b.k for b in stored], [setup_site, fwd_site]


def data_capture(tree: SourceTree, L: int, ids: Optional[list[int]], vllm_tree, architecture: str) -> DataCapture:
    """What ``tree``'s release stores for the aux slots with ``ids`` (None: its default).

    Args:
        vllm_tree: a callable returning the :class:`SourceTree` of :data:`DATAGEN_VLLM` (fetched on
            first use), for releases from 0.5.

    Raises:
        Unavailable: the release has neither rule, or a rule needs what isolation cannot give.
        ValueError, ...: the release's own code refuses the ids (passed on).
    """
    if tree.has(_WORKER) and tree.has(_GENERATOR):
        got, site = _generator_ids(tree, L, ids)
        # the generator's list ends with the verifier's layer (its default: [2, L//2, L-3, L-1]; REFERENCE.md 5.3):
        # with explicit ids the caller passes the aux ids only, so only a default list loses its last entry
        aux = got if ids is not None else got[:-1]
        captured, sites = _worker_capture(tree, L, aux)
        return DataCapture(aux, captured, L, [site] + sites,
                           ["speculators <= 0.4 keeps hidden_states + residual after each listed layer "
                            "(its own patched vLLM forward)"])
    if tree.has(_RESOLVE):
        resolve, site = function(tree, _RESOLVE, "resolve_target_layer_ids",
                                 overrides={"get_verifier_config": _config_loader(L).from_pretrained})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = [int(i) for i in resolve(ids, "target")]
        from eagle3_conformance.released import vllm as vl

        vt = vllm_tree()
        ap = vl.apply_ids(vt, architecture, L, got)
        return DataCapture(got, list(ap.stored), L, [site] + ap.entered + ([ap.assigned_at] if ap.assigned_at else []),
                           [f"speculators >= 0.5 hands the ids to vLLM's extract_hidden_states; vllm=={DATAGEN_VLLM}'s "
                            "own setter stands for the vLLM that generates the data (these releases pin none)"])
    raise Unavailable(f"{tree.label}: neither a data-generation capture loop (<= 0.4) nor resolve_target_layer_ids "
                      "(>= 0.5) is in this release")
