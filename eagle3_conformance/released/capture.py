"""One contract under one released tool version: the :class:`eagle3_conformance.upgrade.Capture`
its own code gives (reader, setter, capture loop; per step), from the fetched source.

``cannot run`` when the rule needs what isolation cannot provide (:class:`Unavailable`);
``refused`` when the version's own code raises on the contract (the engine would refuse it);
``not compared`` for an MTP head (it reads no layer ids: which hidden state it gets is decided by
the worker and the logits processor, which are not run here).
"""

from __future__ import annotations

from typing import Optional

from eagle3_conformance.released import sglang as sg
from eagle3_conformance.released import specforge as sf
from eagle3_conformance.released import speculators as sp
from eagle3_conformance.released import vllm as vl
from eagle3_conformance.released.fetch import Fetched, FetchError, fetch
from eagle3_conformance.released.isolated import SourceTree, Unavailable, Unsupported, function
from eagle3_conformance.released.result import (
    CANNOT,
    NOT_COMPARED,
    STEPS,
    TRAINING_TOOLS,
    Capture,
    Source,
    Spec,
    StepCapture,
    draft_config,
    effective,
)


def load_sources(specs: list[Spec]) -> tuple[list[Source], dict[Spec, SourceTree]]:
    """Fetch each ``tool==version`` once; a failure is recorded on its :class:`Source`."""
    sources, trees = [], {}
    by_version: dict[tuple[str, str], tuple[Optional[SourceTree], Optional[Fetched], str]] = {}
    for s in specs:
        key = (s.tool, s.version)
        if key not in by_version:
            try:
                got = fetch(s.tool, s.version)
                by_version[key] = (SourceTree(got.root, f"{s.tool} {s.version}"), got, "")
            except FetchError as e:
                by_version[key] = (None, None, str(e))
        tree, f, err = by_version[key]
        sources.append(Source(s.label, f.wheel if f else "", f.sha256 if f else "", f.files if f else 0,
                              round(f.seconds, 2) if f else 0.0, err))
        if tree is not None:
            trees[s] = tree
    return sources, trees


_COMPANIONS: dict[tuple[str, str], SourceTree | Unavailable] = {}


def companion_tree(tool: str, version: str) -> SourceTree:
    """Another tool's release whose code a training tool's data goes through (SpecForge's pinned
    SGLang, the vLLM that stands for speculators' data generation), fetched once per process.

    Raises:
        Unavailable: it cannot be fetched (the reason).
    """
    key = (tool, version)
    if key not in _COMPANIONS:
        try:
            f = fetch(tool, version)
            _COMPANIONS[key] = SourceTree(f.root, f"{tool} {version}")
        except FetchError as e:
            _COMPANIONS[key] = Unavailable(f"{tool}=={version}, which this rule runs through, cannot be fetched: {e}")
    got = _COMPANIONS[key]
    if isinstance(got, Unavailable):
        raise got
    return got


def _all_steps(step: StepCapture) -> dict[str, StepCapture]:
    return {k: step for k in STEPS}


def capture(c, spec: Spec, tree: Optional[SourceTree], why: str = "") -> Capture:
    """What ``spec``'s own code captures for contract ``c`` (never raises for the contract's sake);
    ``why``: the fetch error when ``tree`` is None (its :class:`Source`'s)."""
    if tree is None:
        return Capture(spec.label, CANNOT, error=f"{spec.label} could not be fetched" + (f": {why}" if why else ""))
    if c.method == "mtp":
        return Capture(spec.label, NOT_COMPARED, error="an MTP head reads no layer ids; the hidden state it reads "
                       "is chosen by the worker and logits processor, which upgrade-check does not run")
    if c.method == "dflash" and spec.tool in TRAINING_TOOLS:
        return Capture(spec.label, NOT_COMPARED, error=f"{spec.tool}'s DFlash data generation is not run across "
                       "versions by upgrade-check (its EAGLE-3 rule is)")
    try:
        return {"sglang": _sglang, "vllm": _vllm, "speculators": _speculators, "specforge": _specforge}[spec.tool](
            c, spec, tree)
    except Unavailable as e:
        return Capture(spec.label, CANNOT, error=str(e))
    except Unsupported as e:
        return Capture(spec.label, "refused", error=str(e))
    except Exception as e:  # the version's own code raised on this contract
        return Capture(spec.label, "refused", error=f"{type(e).__name__}: {' '.join(str(e).split())}")


def _rule(spec: Spec, entered: list[str], assigned_at: str) -> str:
    return f"{spec.label}: " + " -> ".join(entered) + (f" (stores at {assigned_at})" if assigned_at else "")


def _sglang(c, spec: Spec, tree: SourceTree) -> Capture:
    L, arch = c.L, c.target.architecture
    if c.method == "dflash":
        return _sglang_dflash(c, spec, tree)
    rd = sg.read_draft(tree, draft_config(c))
    cap = Capture(spec.label, "ok", reader=rd.site, ids_read=rd.ids)
    if not rd.use_aux:
        cap.steps = _all_steps(StepCapture(["F"], [None], f"{spec.label}: {rd.site} use_aux_hidden_state false"))
        return cap
    run = sg.run_setter(tree, arch, L, rd.ids)
    if run.layers_to_capture is None:
        raise Unavailable(f"{spec.label}: the setter of {arch} stored no layers_to_capture (pipeline rank stub?)")
    b, ids, dropped = effective(run.layers_to_capture, rd.ids, run.deepest)
    extend = StepCapture(b, ids, _rule(spec, run.entered, run.assigned_at), dropped)
    cap.steps = {"extend": extend, "verify/decode": extend}
    from eagle3_conformance.released.final_id import sglang_final_id_notes

    cap.notes += sglang_final_id_notes(c, spec, tree)  # issue 37: what this release does with an id = L
    graph = sg.graph_default_calls(tree)
    if graph and rd.ids is not None:
        d = sg.run_setter(tree, arch, L, None)
        db, _, dd = effective(d.layers_to_capture or [], None, d.deepest)
        cap.steps["verify/decode"] = StepCapture(db, [None] * len(db), _rule(spec, d.entered, d.assigned_at)
                                                 + f"; CUDA graphs captured after set_eagle3_layers_to_capture() "
                                                 f"without ids at {', '.join(graph)}", dd)
        cap.notes.append(f"target verify / decode run in CUDA graphs captured with the default ids ({', '.join(graph)})"
                         "; eager extend uses the configured ids (sgl-project/sglang#22836)")
    return cap


def _sglang_dflash(c, spec: Spec, tree: SourceTree) -> Capture:
    ids = c.dflash.target_layer_ids
    where = "dflash_config.target_layer_ids as written"
    if ids is None:
        build, site = function(tree, "sglang.srt.speculative.dflash_utils", "build_target_layer_ids")
        ids, where = [int(i) for i in build(c.L, c.dflash.num_draft_layers)], f"{site} build_target_layer_ids"
    run = sg.run_setter(tree, c.target.architecture, c.L, list(ids), method="set_dflash_layers_to_capture")
    b, sids, dropped = effective(run.layers_to_capture or [], list(ids), run.deepest)
    step = StepCapture(b, sids, _rule(spec, run.entered, run.assigned_at), dropped)
    return Capture(spec.label, "ok", reader=where, ids_read=list(ids), steps=_all_steps(step))


def _vllm(c, spec: Spec, tree: SourceTree) -> Capture:
    if spec.runner is None:
        raise Unavailable(f"{spec.label}: a vLLM column names its model runner ({' or '.join(vl.RUNNERS)})")
    rd = vl.read_draft(tree, spec.runner, draft_config(c))
    cap = Capture(spec.label, "ok", reader=rd.site, ids_read=rd.ids)
    if c.method == "dflash":
        cap.notes.append("DFlash reads aux states whatever use_aux_hidden_state says; the reader's own DFlash "
                         "branch converts dflash_config.target_layer_ids")
    elif not rd.use_aux:
        cap.steps = _all_steps(StepCapture(["F"], [None], f"{spec.label}: {rd.site} use_aux_hidden_state false"))
        return cap
    ap = vl.apply_ids(tree, c.target.architecture, c.L, rd.ids)
    b, ids, dropped = effective(ap.stored, rd.ids, c.L)
    rule = _rule(spec, [f"{rd.site} reader"] + ap.entered, ap.assigned_at)
    cap.steps = _all_steps(StepCapture(b, ids, rule, dropped))
    return cap


def _training(spec: Spec, ids_read, entries: list[int], ids: list[int], sites: list[str], notes: list[str],
              deepest: int) -> Capture:
    b, sids, dropped = effective(entries, ids, deepest)
    step = StepCapture(b, sids, f"{spec.label}: " + " -> ".join(sites), dropped)
    return Capture(spec.label, "ok", reader=sites[0], ids_read=ids_read, steps=_all_steps(step),
                   notes=notes + ["training data: one capture serves every position (no extend / decode split)"])


def _speculators(c, spec: Spec, tree: SourceTree) -> Capture:
    li = c.draft.layer_ids
    ids = None if li.location == "absent" or li.values is None else [int(v) for v in li.values]
    got = sp.data_capture(tree, c.L, ids, lambda: companion_tree("vllm", sp.DATAGEN_VLLM), c.target.architecture)
    return _training(spec, ids, got.boundaries, got.ids, got.sites, got.notes, got.deepest)


def _specforge(c, spec: Spec, tree: SourceTree) -> Capture:
    cfg = draft_config(c)
    res = sf.resolve(tree, c.L, cfg)
    sgt = companion_tree("sglang", res.sglang)
    run = sg.run_setter(sgt, c.target.architecture, c.L, res.ids)
    if run.layers_to_capture is None:
        raise Unavailable(f"{spec.label}: sglang {res.sglang}'s setter of {c.target.architecture} stored no "
                          "layers_to_capture")
    sites = res.sites + run.entered + ([run.assigned_at] if run.assigned_at else [])
    ids_read = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    return _training(spec, ids_read, run.layers_to_capture, res.ids, sites,
                     [f"SpecForge captures through its pinned sglang=={res.sglang}"], run.deepest)
