"""The path protocol: what every path implements, and what it hands back.

A *path* is one way hidden states reach a draft: speculators' training loader, SGLang's extend
or decode, the same tokens on two paths, a real engine (on CPU; on a GPU prepared, never run on one), later SpecForge, vLLM, an
acceptance loop. A path runs the tool's real code (:mod:`eagle3_conformance.tools`) on inputs
hypothesis draws (:mod:`eagle3_conformance.suite.strategies`, called by name) and returns an
:class:`Observation`: what reached the draft. It never judges: :mod:`eagle3_conformance.suite.assess` turns
observations into findings, and :mod:`eagle3_conformance.suite.session` runs a path under hypothesis.

Running one path on one contract (``eagle3_conformance.suite.session.run_path``)::

    skipped = path.needs.unmet(pair)              # None, or why it cannot run here
    (path.warm(contract, pair))                   # the pytest plugin, once the items are chosen: what
                                                  # another process does for prepare starts ahead
    state = path.prepare(contract, pair)          # load the tool once; or Skipped(reason)
    first = path.first(state)                     # inputs not drawn (None: nothing)
    for each example hypothesis draws:            # unless first failed with stop_on_failure
        obs = path.observe(state, draw)           # draw(strategy, label) -> value

A path is registered with one line in :mod:`eagle3_conformance.paths` (the registry); the pytest
plugin, the kill matrix and the reports iterate the registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Protocol, Sequence, TypeVar

if TYPE_CHECKING:  # annotations only: the registry must import without torch
    from hypothesis.strategies import SearchStrategy

    from eagle3_conformance.contract import Contract
    from eagle3_conformance.core.capture import Capture
    from eagle3_conformance.suite.pairs import LocalPair

T = TypeVar("T")


class Draw(Protocol):
    """Hypothesis' ``data.draw``: ``draw(strategy, label=...)`` returns one drawn value."""

    def __call__(self, strategy: "SearchStrategy[T]", label: Optional[str] = None) -> T: ...


@dataclass(frozen=True)
class Skipped:
    """The path cannot run here; ``reason`` says why in words (shown by ``pytest -rs``)."""

    reason: str


@dataclass(frozen=True)
class Needs:
    """What a path needs to run. Every path needs the contract's local pair (a fixture, or
    ``target.path``: the reference model); a contract without one is skipped before any path.

    Attributes:
        modules: importable modules the path runs (``("sglang",)``); missing, or a release other
            than the tested one (:data:`eagle3_conformance.environment.engines.TESTED`) -> skipped. Every path
            also needs :data:`eagle3_conformance.environment.engines.BASE` (torch, transformers, hypothesis).
        draft: the draft's ``config.json`` in ``pair.draft_dir``.
        data: a stored dataset in ``pair.data_dir`` (the embedded fixtures have one).
        gpu: a CUDA device. The plugin marks the path ``gpu``; the path probes the device in
            ``prepare`` (the probe needs its tool) and returns :class:`Skipped` without one.
        methods: the draft methods (``contract.method``) the path runs for; another method's
            contract is skipped with the reason (an EAGLE-3 path says nothing about a DFlash or
            MTP draft, and the reverse).
        also_on: module -> further releases the path is tested on besides
            :data:`~eagle3_conformance.environment.engines.TESTED` (the SGLang extend/decode paths:
            :data:`~eagle3_conformance.environment.engines.HARNESS_RELEASES`).
    """

    modules: tuple[str, ...] = ()
    draft: bool = False
    data: bool = False
    gpu: bool = False
    methods: tuple[str, ...] = ("eagle3", "eagle1", "eagle2")
    also_on: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def _module_problem(self, modules: Iterable[str]) -> Optional[str]:
        """The first of ``modules`` that is missing or not a tested release here (with :attr:`also_on`)."""
        from eagle3_conformance.environment import engines

        for m in modules:
            why = engines.problem(m, tuple(self.also_on.get(m, ())))
            if why:
                return why
        return None

    def unmet(self, pair: "LocalPair", contract: Optional["Contract"] = None) -> Optional[str]:
        """Why the path cannot run with ``pair`` (for ``contract``) here (the first unmet need), or None."""
        if contract is not None and contract.method not in self.methods:
            return f"this path runs {'/'.join(self.methods)} drafts; the contract's method is {contract.method}"
        from eagle3_conformance.environment import engines

        why = self._module_problem(engines.BASE)
        if why:
            return why
        from eagle3_conformance.reference import missing_weights  # needs torch: after BASE

        why = (pair.target_dir is not None and missing_weights(pair.target_dir)  # the reference's and engines'
               or self._module_problem(self.modules))
        if why:
            return why
        if self.draft and (pair.draft_dir is None or not (pair.draft_dir / "config.json").is_file()):
            return "no local draft config for this pair"
        if self.data and pair.data_dir is None:
            return ("no training data for this pair under pytest (embedded fixtures only): check a "
                    "dataset with `eagle3-conformance check-data CONTRACT --data DIR`")
        return None


@dataclass
class Observation:
    """What reached the draft on one run of a path (one drawn example, or the fixed inputs).

    Attributes:
        captures: what entered the draft, one :class:`~eagle3_conformance.core.capture.Capture` per
            sequence (``feature`` [N, K*d], ``rows`` [N] token indices, ...); each is judged by
            every capture check against the reference forward on its own ``token_ids``.
        stored: the captures were read from stored data (a dataset on disk): a bad sample (no
            tokens, ids outside the vocabulary, NaN rows) is a finding, never an error.
        shapes_only: captures without per-token reference rows (an engine's decode rows):
            judged on slot count, widths and norm bands only.
        pairs: ``(a, b)`` captures of the same token ids on two paths, compared row by row
            (per-slot cosine against ``gates.cross_path_min_cosine``).
        variants: ``(plain, variant)`` captures of one prompt on one engine, the variant made under
            one variation (chunked prefill, input logprobs, a prefix-cache hit, a batch, TP 2:
            ``variant.provenance["variation"]``), compared row by row by the ``variant`` checks
            (:func:`eagle3_conformance.checks.invariance.check_engine_invariance`).
        facts: named measurements of the run as a whole, each judged by one check
            (the check registered with ``fact=`` that name, :func:`eagle3_conformance.checks.registry.fact_checks`): ``{"sglang_version": "0.5.23"}``,
            ``{"avg_accept_length": 2.7}``. A path that measures a metric rather than captures
            (an acceptance-rate loop) returns only facts.
        stop_on_failure: for the fixed inputs (:attr:`Path.first`): if a finding of this
            observation fails, no examples are drawn (they would repeat the failure).
        reference: a reference the path observed itself, used for ``captures`` instead of the
            transformers forward (the engine as its own reference:
            :class:`eagle3_conformance.reference.engine.EngineReference`); None: the transformers one.
    """

    captures: Sequence["Capture"] = ()
    stored: bool = False
    shapes_only: Sequence["Capture"] = ()
    pairs: Sequence[tuple["Capture", "Capture"]] = ()
    variants: Sequence[tuple["Capture", "Capture"]] = ()
    facts: Mapping[str, Any] = field(default_factory=dict)
    stop_on_failure: bool = False
    reference: Any = None


Prepare = Callable[["Contract", "LocalPair"], Any]
"""``prepare(contract, pair) -> state | Skipped``: load what the path runs (a loader, a harness,
the reference model) once per contract; the state is handed to ``first`` and ``observe``."""

First = Callable[[Any], Optional[Observation]]
"""``first(state) -> Observation | None``: the inputs that are not drawn (every stored sample
once, the engine version), run before any drawn example."""

Observe = Callable[[Any, Draw], Observation]
"""``observe(state, draw) -> Observation``: one example; inputs drawn with ``draw(strategy,
label)`` from :mod:`eagle3_conformance.suite.strategies`."""

Warm = Callable[["Contract", "LocalPair"], Optional[Callable[[], None]]]
"""``warm(contract, pair) -> discard | None``: start now, in the background, the part of ``prepare`` that
another process does (an engine's start and batch), so that it overlaps the paths run before this one;
``prepare`` later takes it (same arguments, same run). Returns a callable that stops it and frees what it
holds if ``prepare`` never comes (None: nothing was started). Judges nothing; a problem is left for
``prepare`` to report."""


@dataclass(frozen=True)
class Path:
    """One path: its name, what it needs, and how it turns inputs into an :class:`Observation`.

    Attributes:
        name: the path's name in reports, options and the registry (``"sglang-extend"``).
        summary: one line: what runs and what reaches the draft.
        needs: what it needs to run (:class:`Needs`).
        prepare: see :data:`Prepare`.
        first: see :data:`First`; None: no fixed inputs.
        observe: see :data:`Observe`; None: nothing is drawn (the path runs ``first`` only).
        warm: see :data:`Warm`; None: nothing to start ahead.
    """

    name: str
    summary: str
    needs: Needs
    prepare: Prepare
    first: Optional[First] = None
    observe: Optional[Observe] = None
    warm: Optional[Warm] = None


def start_token(contract: "Contract") -> Optional[int]:
    """The token drawn prompts begin with: the embedded fixtures' BOS (1), none otherwise."""
    return 1 if contract.fixture else None


def min_prompt_len(contract: "Contract") -> int:
    """The shortest prompt a path draws: long enough to hold two positions the contract does not
    exclude (``norm_bands.exclude_positions``; position 0 by default), so the fingerprint checks
    (slot_identity, slot_order, row_fingerprint: one kept row) and the shift checks (feature_alignment:
    two rows) judge every drawn example. A shorter one (newuser finding 9: a 1-token prompt) left them
    all skipped ("every row is at an excluded position"), so a failing example had no diagnosis and no
    fix. With the default ``[0]``: 3 tokens."""
    excluded = set(contract.norm_bands.exclude_positions)
    kept = [p for p in range(len(excluded) + 2) if p not in excluded][:2]
    return kept[-1] + 1


@dataclass
class StoredData:
    """The state of a path that reads stored training data through a tool's own loader (the
    ``training`` and ``specforge`` paths): ``loader.batch([sample index, ...])`` returns one
    :class:`~eagle3_conformance.core.capture.Capture` per sample, ``n`` samples in all."""

    loader: Any
    n: int


def stored_first(s: StoredData) -> Observation:
    """Every sample once, in consecutive batches of 4; a failure here ends the run."""
    from eagle3_conformance.core.batches import every_sample

    caps = [cap for batch in every_sample(s.n) for cap in s.loader.batch(batch)]
    return Observation(captures=caps, stored=True, stop_on_failure=True)


def stored_observe(s: StoredData, draw: Draw) -> Observation:
    """One drawn batch: ``[sample index, ...]`` (repeats allowed, any order)."""
    from eagle3_conformance.suite import strategies

    batch = draw(strategies.sample_batches(s.n), label="batch")
    return Observation(captures=s.loader.batch(list(batch)), stored=True)


def engine_pair(c: "Contract", pair: Optional["LocalPair"], path: str) -> "tuple[Any, Any] | Skipped":
    """``(target dir, draft dir)`` a real-engine path serves, or why not (a :class:`Skipped` naming
    ``path``): the project's fixture pair with a trained draft
    (:data:`eagle3_conformance.testbed.trained_draft.TRAINED`), or a user's pair (a contract naming no
    fixture whose ``draft.path`` is a local directory with safetensors weights; the draft is the user's
    to judge). An untrained draft accepts nothing and its weights may not exist."""
    from pathlib import Path as _FsPath

    from eagle3_conformance.testbed.trained_draft import TRAINED, ensure_trained_draft

    if c.fixture in TRAINED:
        t = ensure_trained_draft(TRAINED[c.fixture])
        return _FsPath(t.target_dir), _FsPath(t.draft_dir)
    if c.fixture or pair is None or pair.draft_dir is None or pair.target_dir is None:
        return Skipped(f"{path}: no trained draft for this pair (fixtures with one: {', '.join(TRAINED)}; "
                       "your own pair: a contract with target.path and draft.path); an untrained draft accepts "
                       "nothing and its weights may not exist")
    if not any(_FsPath(pair.draft_dir).glob("*.safetensors")):
        return Skipped(f"{path}: {pair.draft_dir}: no *.safetensors weights for the draft")
    return _FsPath(pair.target_dir), _FsPath(pair.draft_dir)


def engine_device() -> str:
    """The device a real-engine path runs on: ``CONFORMANCE_ENGINE_DEVICE``, else CUDA when torch
    sees a GPU, else CPU."""
    import os

    if os.environ.get("CONFORMANCE_ENGINE_DEVICE"):
        return os.environ["CONFORMANCE_ENGINE_DEVICE"]
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_dtype(c: "Contract", device: str) -> tuple[str, str]:
    """(dtype the engine runs the target in, a note saying why when the path chose another than the contract's).

    ``CONFORMANCE_ENGINE_DTYPE`` (float32, bfloat16, float16) serves the dtype you deploy: a dtype other than
    the contract's then fails ``dtype`` with the ``serving-dtype`` diagnosis, as ``check-captures`` on your
    server would (no note: you chose it). Otherwise on CPU a float16/bfloat16 contract runs at float32:
    SGLang's ``dtype=auto`` serves a float32 checkpoint at float16 on GPU (``init`` writes that), but on CPU
    only float32 keeps the losslessness oracle (half-precision greedy decodes flip at near-ties); ``dtype``
    then says the contract's dtype was not served (skip), in the same words. Never a skip of the path.

    Raises:
        UsageError: ``CONFORMANCE_ENGINE_DTYPE`` names another dtype.
    """
    import os

    want = c.serving_dtype
    asked = os.environ.get("CONFORMANCE_ENGINE_DTYPE")
    if asked:
        if asked not in ("float32", "bfloat16", "float16"):
            from eagle3_conformance.core.errors import UsageError

            raise UsageError(f"CONFORMANCE_ENGINE_DTYPE={asked}: give float32, bfloat16 or float16")
        return asked, ""
    if device != "cpu" or want == "float32":
        return want, ""
    return "float32", (f"served at float32 on CPU: the contract serves {want} (SGLang's dtype=auto on GPU); "
                       f"float32 keeps the losslessness oracle, and the capture gates are {want}'s")
