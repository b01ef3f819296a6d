"""Internal: the project's fault injection, no stable API (docs/architecture.md, "The self-test wall").

Fault operators and the kill matrix: every fault-kinds.md kind (K1-K14), injected on every path.

An operator (:mod:`eagle3_conformance.faults.operators`, one module per fault family) turns a good
input (training data, engine wiring, draft config, or a capture after the engine) into the
faulty one for one fault kind, and names the check(s) meant to catch it. For each path of the
matrix it either says how it applies or why it is not applicable.

Where the fault lives determines where it is injected:

* in the data generator (:mod:`~eagle3_conformance.faults.inject_training`): faulty files are written in
  the speculators 0.9.0 format and read back by the REAL speculators loader (``ArrowDataset`` +
  ``CollateFn(shift_batch)``, through :class:`eagle3_conformance.tools.speculators_loader.TrainingLoader`);
  vocab mappings are written as ``d2t-{N}.npy`` / ``t2d-{N}.npy`` (speculators
  ``train/cli.py:387-393``) and read with speculators' own ``_load_mappings``;
* in the engine wiring (:mod:`~eagle3_conformance.faults.inject_sglang`): through SGLang's real knobs on
  the live CPU harness: the draft config as SGLang's own resolver reads it
  (``resolve_spec_aux_hidden_state_config``) applied with SGLang's own
  ``configure_aux_hidden_state_capture`` (layer ids, nested/top-level key,
  ``use_aux_hidden_state``), the draft checkpoint's ``d2t`` through the real draft's
  ``load_weights``, the harness's ``feed_draft_states``, and harness rebuilds for what SGLang
  fixes at build time (``target_hidden_size`` -> fc shape, ``ServerArgs.dtype``);
* after the engine (a connector, a side buffer, the worker stand-in): the capture or the tensor
  handed to the draft is changed in memory; the real draft still runs on it where it matters.

The package, by job: :mod:`~eagle3_conformance.faults.scenario` and :mod:`~eagle3_conformance.faults.tokens`
(the scenarios), :mod:`~eagle3_conformance.faults.example` (inputs and knobs), the injectors and
:mod:`~eagle3_conformance.faults.runs` (one path run with a fault), :mod:`~eagle3_conformance.faults.operators`
(the faults), :mod:`~eagle3_conformance.faults.matrix` (the matrix runner and verdicts) and
:mod:`~eagle3_conformance.faults.render` (table and JSON). ``eagle3-conformance faults`` prints the matrix and
exits 1 on any ``missed`` cell.
"""

from __future__ import annotations

from eagle3_conformance.faults.example import Example, Knobs, NoOp, default_example  # noqa: F401 (Knobs: re-exported)
from eagle3_conformance.faults.inject_sglang import HarnessPool
from eagle3_conformance.faults.matrix import MATRIX_SCENARIOS, PATHS, Cell, Verdict, evaluate, judge, run_matrix
from eagle3_conformance.faults.operators import (
                                       KIND_NAMES,
                                       KINDS,
                                       OPERATORS,
                                       OPERATORS_BY_NAME,
                                       Apply,
                                       NotApplicable,
                                       Operator,
)
from eagle3_conformance.faults.render import matrix_json, render_matrix
from eagle3_conformance.faults.runs import run_path
from eagle3_conformance.faults.scenario import Scenario, ScenarioSpec, build_scenario, make_contract
from eagle3_conformance.faults.tokens import GOLDEN_MESSAGES, GOOD_TEMPLATE, NO_BOS_TEMPLATE, THINK_TEMPLATE, render_ids

__all__ = [
    "Apply", "Cell", "Example", "GOLDEN_MESSAGES", "GOOD_TEMPLATE", "HarnessPool", "KINDS", "KIND_NAMES",
    "MATRIX_SCENARIOS", "NO_BOS_TEMPLATE", "NoOp", "NotApplicable", "OPERATORS", "OPERATORS_BY_NAME", "Operator",
    "PATHS", "Scenario", "ScenarioSpec", "THINK_TEMPLATE", "Verdict", "build_scenario", "default_example", "evaluate",
    "judge", "make_contract", "matrix_json", "render_ids", "render_matrix", "run_matrix", "run_path",
]
