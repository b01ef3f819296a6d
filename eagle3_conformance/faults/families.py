"""The kill matrix of the draft methods beyond EAGLE-3 (issue 14): DFlash and MTP fault kinds,
each injected where it lives and judged like the EAGLE-3 matrix (:func:`eagle3_conformance.faults.matrix.judge`:
caught only if the unmutated run passes the catching check and the mutated run fails it).

Scenarios: the shipped fixture contracts ``contracts/tiny-llama-dflash.yaml`` (taps B_1, B_4, B_7
of the tiny-llama target, ids [0, 3, 6]) and ``contracts/tiny-llama-mtp-sglang.yaml`` (an MTP head
served F by SGLang 0.5.23 and 0.5.14). Columns:

- ``contract``: the contract as ``validate`` loads it (:func:`eagle3_conformance.contract.parse_contract`);
  the fault is written into the contract the way a user would carry it over from a draft config;
- ``sglang-dflash``: SGLang's real DFlash resolver, setter and ``DFlashDraftModel``
  (:class:`eagle3_conformance.tools.sglang_cpu.families.DFlashCPU`), extend and target verify;
- ``sglang-mtp``: the tensor SGLang hands an MTP head
  (:func:`eagle3_conformance.tools.sglang_cpu.families.mtp_source_extend`).

Fault kinds (issue 14): D1 DFlash ids read with the EAGLE boundary rule (every tap one layer
early); D2 formula fallback (no ``target_layer_ids``: SGLang derives taps, the load succeeds);
D3 a tap beyond the target's depth; M1 the wrong side of the final norm handed to an MTP head; M2
an MTP contract that does not state that side (fault-kinds.md R49: engines differ, none may be defaulted).
NextN vs chained MTP sources is expressible in the contract (``mtp.layer_sources``) but no path
runs a multi-layer MTP head here, so it has no cell.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

from eagle3_conformance.core.findings import Finding

REPO = Path(__file__).resolve().parent.parent.parent
DFLASH_CONTRACT = REPO / "contracts" / "tiny-llama-dflash.yaml"
MTP_CONTRACT = REPO / "contracts" / "tiny-llama-mtp-sglang.yaml"
PATHS = ("contract", "sglang-dflash", "sglang-mtp")
KIND_NAMES = {
    "D1": "DFlash ids read with the EAGLE rule",
    "D2": "DFlash formula fallback (no ids)",
    "D3": "DFlash tap beyond the target's depth",
    "M1": "MTP head fed the other side of the final norm",
    "M2": "MTP input (B_L or F) not stated (R49)",
}
EXTEND = [[1, 5, 17, 99, 3, 250, 41, 77, 8, 130, 64, 12], [1, 9, 400, 23, 7, 88, 150, 6, 211, 19]]
PREFIX = [[1, 5, 17, 99, 3, 250], [1, 9, 400, 23, 7]]
DRAFTS = [[41, 77, 8], [88, 150, 6]]


@dataclass
class World:
    dflash_doc: dict
    mtp_doc: dict
    harness: Any = None
    ref: Any = None
    draft_cfg: Optional[dict] = None


def _load_doc(p: Path) -> dict:
    return yaml.safe_load(p.read_text())


def contract_findings(doc: dict, where: str) -> list[Finding]:
    """``validate`` on a contract document: one pass finding, or one fail finding per problem."""
    from eagle3_conformance.contract import ContractError, parse_contract

    try:
        parse_contract(yaml.safe_dump(doc), where)
    except ContractError as e:
        return [Finding("contract_method", "fail", "contract", None, "a consistent contract",
                        ".".join(map(str, p.loc)), where, p.message, "issue 14") for p in e.problems]
    return [Finding("contract_method", "pass", "contract", None, "a consistent contract", "consistent", where,
                    "the contract loads", "issue 14")]


def _identity(c, caps, ref) -> list[Finding]:
    from eagle3_conformance.checks import check_slot_identity

    out = []
    for cap in caps:
        out += check_slot_identity(c, cap, ref.capture(cap.token_ids))
    return out


def dflash_findings(w: World, c, cfg: dict, apply_rule: str = "sglang") -> list[Finding]:
    """SGLang's DFlash on the fixture target with draft config ``cfg``: slot identity of every tap
    on extend and verify; SGLang refusing the config at load is a ``dflash_load`` failure."""
    from eagle3_conformance.tools.sglang_cpu.families import DFlashConfigError, DFlashCPU

    try:
        d = DFlashCPU(w.harness, cfg, apply_rule=apply_rule)
    except DFlashConfigError as e:
        return [Finding("dflash_load", "fail", "sglang-dflash", None, "SGLang loads the draft config",
                        "refused", "draft config", f"SGLang refuses the DFlash config: {e}", "D3")]
    try:
        caps = list(d.extend(EXTEND)) + list(d.verify(PREFIX, DRAFTS))
    finally:
        d.close()
    return [Finding("dflash_load", "pass", "sglang-dflash", None, "SGLang loads the draft config", "loaded",
                    "draft config", f"SGLang taps {d.captured_boundaries}", "D3")] + _identity(c, caps, w.ref)


def mtp_findings(w: World, c, feed_pre_norm: bool = False) -> list[Finding]:
    """What SGLang hands an MTP head, fingerprinted; ``feed_pre_norm`` (FAULT) hands it the input
    of SGLang's real final norm instead (recorded by a forward pre-hook on ``target.model.norm``)."""
    from eagle3_conformance.tools.sglang_cpu.families import mtp_source_extend

    caps = mtp_source_extend(w.harness, EXTEND)
    if feed_pre_norm:
        seen = []

        def record(_mod, args) -> None:
            # SGLang's RMSNorm(x, residual) fuses the residual add: the pre-norm state B_L is x + residual
            x = args[0].detach().clone()
            if len(args) > 1 and args[1] is not None:
                x = x + args[1].detach()
            seen.append(x)

        hook = w.harness.target.model.norm.register_forward_pre_hook(record)
        try:
            mtp_source_extend(w.harness, EXTEND)
        finally:
            hook.remove()
        pre = seen[-1]
        start = 0
        for cap in caps:
            n = cap.feature.shape[0]
            cap.feature = pre[start:start + n]
            start += n
    return _identity(c, caps, w.ref)


@dataclass(frozen=True)
class FamilyOperator:
    name: str
    kind: str
    checks: tuple[str, ...]
    paths: dict[str, Any]  # path -> callable(world) -> (baseline findings, mutated findings), or a reason str


def _contract_op(doc_key: str, mutate: Callable[[dict], None]):
    def run(w: World):
        good = getattr(w, doc_key)
        bad = copy.deepcopy(good)
        mutate(bad)
        return contract_findings(good, "baseline"), contract_findings(bad, "mutated")
    return run


def _d1_contract(doc):
    doc["dflash"]["target_layer_ids"] = [int(b.split("_")[1]) for b in doc["capture"]["boundaries"]]


def _d2_contract(doc):
    doc["dflash"]["target_layer_ids"] = None
    doc["dflash"]["location"] = "absent"


def _d3_contract(doc):
    L = doc["target"]["num_hidden_layers"]
    doc["dflash"]["target_layer_ids"][-1] = L
    doc["capture"]["boundaries"][-1] = f"B_{L + 1}"


def _m2_contract(doc):
    """R49: the contract leaves out which tensor the MTP head reads (a default would pick a side)."""
    doc.pop("verifier_last", None)
    doc["capture"].pop("boundaries", None)


def _dflash_op(make_cfg: Callable[[dict, int], dict], rule: str = "sglang"):
    def run(w: World):
        from eagle3_conformance.contract import parse_contract

        if w.draft_cfg is None:  # read with the SGLang fixture (run_families_matrix)
            raise ValueError("the DFlash engine operators need the fixture's draft config: SGLang is not installed")
        c = parse_contract(yaml.safe_dump(w.dflash_doc), str(DFLASH_CONTRACT))
        base = dflash_findings(w, c, w.draft_cfg)
        mut = dflash_findings(w, c, make_cfg(copy.deepcopy(w.draft_cfg), c.L), rule)
        return base, mut
    return run


def _no_ids(cfg: dict, L: int) -> dict:
    cfg["dflash_config"].pop("target_layer_ids", None)
    cfg["dflash_config"]["num_target_layers"] = L  # without it SGLang's draft sizes fc from its own depth
    return cfg


def _beyond(cfg: dict, L: int) -> dict:
    cfg["dflash_config"]["target_layer_ids"] = list(cfg["dflash_config"]["target_layer_ids"][:-1]) + [L]
    return cfg


def _m1(w: World):
    from eagle3_conformance.contract import parse_contract

    c = parse_contract(yaml.safe_dump(w.mtp_doc), str(MTP_CONTRACT))
    return mtp_findings(w, c), mtp_findings(w, c, feed_pre_norm=True)


OPERATORS = [
    FamilyOperator("dflash-boundary-rule", "D1", ("contract_method", "slot_identity"), {
        "contract": _contract_op("dflash_doc", _d1_contract),
        "sglang-dflash": _dflash_op(lambda cfg, L: cfg, rule="boundary"),
        "sglang-mtp": "a DFlash fault: an MTP head has no layer ids"}),
    FamilyOperator("dflash-formula-fallback", "D2", ("contract_method", "slot_identity"), {
        "contract": _contract_op("dflash_doc", _d2_contract),
        "sglang-dflash": _dflash_op(_no_ids),
        "sglang-mtp": "a DFlash fault: an MTP head has no layer ids"}),
    FamilyOperator("dflash-tap-beyond-depth", "D3", ("contract_method", "dflash_load"), {
        "contract": _contract_op("dflash_doc", _d3_contract),
        "sglang-dflash": _dflash_op(_beyond),
        "sglang-mtp": "a DFlash fault: an MTP head has no layer ids"}),
    FamilyOperator("mtp-other-side-of-norm", "M1", ("slot_identity",), {
        "contract": "which side of the norm a runtime feeds is not visible in a contract alone",
        "sglang-dflash": "an MTP fault: DFlash taps are B_k boundaries",
        "sglang-mtp": _m1}),
    FamilyOperator("mtp-input-unstated", "M2", ("contract_method",), {
        "contract": _contract_op("mtp_doc", _m2_contract),
        "sglang-dflash": "an MTP fault: a DFlash draft reads its declared taps",
        "sglang-mtp": "a contract that does not state the input is refused before any path runs (the contract "
                      "column); a stated but wrong side is M1"}),
]


def run_families_matrix(log: Callable[[str], None] = lambda s: None,
                        paths: Optional[tuple[str, ...]] = None) -> dict[str, Any]:
    """Every operator on every path (``paths``: only these columns of :data:`PATHS`); returns
    ``{"paths", "cells": [{kind, name, path, status, check, detail}], "false_positives": [...],
    "timings": {...}, "sglang": version or None}``. SGLang columns are ``not run`` when SGLang is
    not installed; they run on whichever release the harness serves (``sglang`` says which)."""
    import importlib.util
    import json

    from eagle3_conformance.faults.matrix import judge
    from eagle3_conformance.tools.sglang_cpu.harness import TargetForwardError

    t0 = time.perf_counter()
    columns = PATHS if paths is None else tuple(p for p in PATHS if p in paths)
    w = World(_load_doc(DFLASH_CONTRACT), _load_doc(MTP_CONTRACT))
    sglang = importlib.util.find_spec("sglang") is not None and any(p != "contract" for p in columns)
    if sglang:
        from eagle3_conformance.reference import load_reference_model
        from eagle3_conformance.testbed.fixtures import build_fixture
        from eagle3_conformance.tools.sglang_cpu.families import runtime_harness

        b = build_fixture(w.dflash_doc["fixture"])
        w.draft_cfg = json.loads((b.draft_dir / "config.json").read_text())
        w.harness = runtime_harness(b.target_dir)
        w.ref = load_reference_model(b.target_dir)
    cells, fps = [], []
    for op in OPERATORS:
        for path in columns:
            a = op.paths[path]
            if isinstance(a, str):
                cells.append(_cell(op, path, "n/a", None, a))
                continue
            if path != "contract" and not sglang:
                cells.append(_cell(op, path, "not run", None, "SGLang is not installed"))
                continue
            try:
                base, mut = a(w)
            except TargetForwardError as e:  # like the EAGLE-3 matrix's EngineRefuses: loud, not silent
                cells.append(_cell(op, path, "n/a", None, f"the engine refuses it loudly: {e}"))
                log(f"{op.kind:>3} {op.name:<26} {path:<14} n/a (engine refuses: {e})")
                continue
            v = judge(op.checks, base, mut)
            fps += [{"operator": op.name, **f.to_json()} for f in v.baseline_failures]
            cells.append(_cell(op, path, v.status, v.check, v.detail))
            log(f"{op.kind:>3} {op.name:<26} {path:<14} {v.status} {v.check or ''}")
    return {"paths": columns, "cells": cells, "false_positives": fps, "timings": {"total": time.perf_counter() - t0},
            "sglang": w.harness.sglang_version if w.harness is not None else None}


def _cell(op, path: str, status: str, check: Optional[str], detail: str) -> dict[str, Any]:
    """One cell of the DFlash / MTP matrix: operator ``op`` on column ``path``."""
    return {"kind": op.kind, "name": KIND_NAMES[op.kind], "operator": op.name, "path": path,
            "status": status, "check": check, "detail": detail}


def render_families(m: dict[str, Any], console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    style = {"caught": "green", "n/a": "dim", "missed": "bold red", "not run": "yellow"}
    cols = m.get("paths", PATHS)
    on = f", SGLang {m['sglang']}" if m.get("sglang") else ""
    t = Table(title=f"DFlash / MTP kill matrix: fault kinds x paths (docs/families.md{on})")
    t.add_column("kind")
    t.add_column("fault")
    for p in cols:
        t.add_column(p)
    rank = {"caught": 0, "n/a": 1, "not run": 2, "missed": 3}  # several operators of one kind: the worst shows
    by = {(c["kind"], c["path"]): c for c in sorted(m["cells"], key=lambda c: rank.get(c["status"], 0))}
    for kind, name in KIND_NAMES.items():
        row = [kind, name]
        for p in cols:
            c = by[(kind, p)]
            txt = c["status"] + (f" ({c['check']})" if c["status"] == "caught" else "")
            row.append(f"[{style.get(c['status'], '')}]{txt}[/]")
        t.add_row(*row)
    console.print(t)
    if m["false_positives"]:
        console.print(f"[bold red]{len(m['false_positives'])} baseline failures (false positives)[/]: "
                      + "; ".join(f"{f['operator']} {f['check']}: {f['message']}" for f in m["false_positives"]))
    console.print(f"{sum(c['status'] == 'caught' for c in m['cells'])} caught, "
                  f"{sum(c['status'] == 'n/a' for c in m['cells'])} not applicable, "
                  f"{sum(c['status'] == 'missed' for c in m['cells'])} missed, "
                  f"{sum(c['status'] == 'not run' for c in m['cells'])} not run; total {m['timings']['total']:.1f} s")


# --- issue 37: the DFlash index reports R58-R63, R82 --------------------------------------------------
# R58 is D2 (formula fallback). R59 / R60 / R62 are one-layer shifts between tools, D6 (D1 is the EAGLE
# rule, one early): an engine applying -1 to z-lab ids (R62) taps one early (id 0 becomes -1, refused);
# a builder adding +1 once too often (R59's vLLM, R60's fix applied twice) one late. R63 (D4) and R82 (D5).

KIND_NAMES.update({
    "D4": "DFlash layer count appended as an id (R63)",
    "D5": "DFlash taps from a hard-coded draft depth (R82)",
    "D6": "DFlash ids one layer off between tools (R59, R60, R62)",
})


def _shift_contract(k: int):
    def mutate(doc):
        doc["dflash"]["target_layer_ids"] = [int(i) + k for i in doc["dflash"]["target_layer_ids"]]
    return mutate


def _shift_cfg(k: int):
    def make(cfg: dict, L: int) -> dict:
        cfg["dflash_config"]["target_layer_ids"] = [int(i) + k for i in cfg["dflash_config"]["target_layer_ids"]]
        return cfg
    return make


def _d4_contract(doc):
    """R63 (speculators#705): the writer appended the layer count L as one more id."""
    doc["dflash"]["target_layer_ids"] = list(doc["dflash"]["target_layer_ids"]) + [doc["target"]["num_hidden_layers"]]


def _d4_cfg(cfg: dict, L: int) -> dict:
    cfg["dflash_config"]["target_layer_ids"] = list(cfg["dflash_config"]["target_layer_ids"]) + [L]
    return cfg


def _hardcoded(L: int, k: int) -> list[int]:
    """R82 (NVIDIA/Model-Optimizer#2201): the dump tool's taps for a draft depth hard-coded to 5, asked of
    SGLang's own ``build_target_layer_ids``; the first ``k`` of them reach a k-tap draft."""
    from eagle3_conformance.engine_ids.dflash import dflash_formula

    return list(dflash_formula("sglang", L, 5))[:k]


def _d5_contract(doc):
    ids = doc["dflash"]["target_layer_ids"]
    doc["dflash"]["target_layer_ids"] = _hardcoded(doc["target"]["num_hidden_layers"], len(ids))


def _d5_cfg(cfg: dict, L: int) -> dict:
    ids = cfg["dflash_config"]["target_layer_ids"]
    cfg["dflash_config"]["target_layer_ids"] = _hardcoded(L, len(ids))
    return cfg


_NO_MTP_IDS = "a DFlash fault: an MTP head has no layer ids"

OPERATORS += [
    FamilyOperator("dflash-ids-minus-one", "D6", ("contract_method", "slot_identity", "dflash_load"), {
        "contract": _contract_op("dflash_doc", _shift_contract(-1)),
        "sglang-dflash": _dflash_op(_shift_cfg(-1)),
        "sglang-mtp": _NO_MTP_IDS}),
    FamilyOperator("dflash-ids-plus-one", "D6", ("contract_method", "slot_identity"), {
        "contract": _contract_op("dflash_doc", _shift_contract(1)),
        "sglang-dflash": _dflash_op(_shift_cfg(1)),
        "sglang-mtp": _NO_MTP_IDS}),
    FamilyOperator("dflash-layer-count-appended", "D4", ("contract_method", "dflash_load"), {
        "contract": _contract_op("dflash_doc", _d4_contract),
        "sglang-dflash": _dflash_op(_d4_cfg),
        "sglang-mtp": _NO_MTP_IDS}),
    FamilyOperator("dflash-hardcoded-depth", "D5", ("contract_method", "slot_identity"), {
        "contract": _contract_op("dflash_doc", _d5_contract),
        "sglang-dflash": _dflash_op(_d5_cfg),
        "sglang-mtp": _NO_MTP_IDS}),
]


# --- issue 45: which row of a DFlash block predicts (R91), an MTP head's input streams (R93) ----------------

KIND_NAMES.update({
    "D7": "DFlash block alignment: an anchor-predicting draft on an engine that samples row 1 (R91)",
    "M3": "MTP input streams of a hyper-connection target not stated (R93)",
})


def _anchor_op(w: World):
    """R91: the contract of a draft trained to predict from the anchor row (DeepSpec), naming SGLang, whose
    0.5.23 DFlash worker samples row 1 and reads no key; its baseline is the same contract, row 1 first."""
    good = copy.deepcopy(w.dflash_doc)
    good.setdefault("engines", {})["sglang_model_file"] = "llama"
    good["dflash"]["sample_from_anchor"] = False
    bad = copy.deepcopy(good)
    bad["dflash"]["sample_from_anchor"] = True
    return contract_findings(good, "baseline"), contract_findings(bad, "mutated")


def _m3_contract(doc):
    """R93: the contract of an MTP head on a 4-stream (hc_mult 4) target that does not say how many streams
    the head reads."""
    doc["target"]["residual_streams"] = 4
    doc.get("mtp", {}).pop("input_streams", None)


_NOT_RUN_HC = ("no hyper-connection target runs here (SGLang 0.5.23's DeepSeek-V4 / GLM-5 models need their mHC "
               "kernels; the tiny MTP target has one stream); a GPU run checks the width SGLang hands the head "
               "(scripts/gpu-check.sh)")

OPERATORS += [
    FamilyOperator("dflash-anchor-on-row1-engine", "D7", ("contract_method",), {
        "contract": _anchor_op,
        "sglang-dflash": "the DFlash harness runs SGLang's capture and the draft's fc projection, not the worker's "
                         "block sampling; which row SGLang 0.5.23 samples is read from its code "
                         "(dflash_worker_v2.py:183, 301; draft_config/dflash_block.py) by validate (contract column)",
        "sglang-mtp": "a DFlash fault: an MTP head has no draft block"}),
    FamilyOperator("mtp-streams-unstated", "M3", ("contract_method",), {
        "contract": _contract_op("mtp_doc", _m3_contract),
        "sglang-dflash": "an MTP fault: a DFlash draft reads its declared taps",
        "sglang-mtp": _NOT_RUN_HC}),
]
