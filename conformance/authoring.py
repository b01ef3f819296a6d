"""Contract authoring: ``conformance init``, ``calibrate`` and ``translate``.

- ``init`` reads the target and draft ``config.json`` (no weights), derives L, widths, vocab
  sizes, K and the draft's ids, and translates the ids into canonical boundaries with the rule of
  the named engine (for SGLang: the installed SGLang's own setter, see
  :mod:`conformance.engine_ids`). Ambiguous mappings are refused (exit 2) with the reason.
- ``calibrate`` measures per-slot per-token RMS (``sqrt(mean(x**2))`` over the hidden dim, in the
  units of the stored tensor) and writes norm bands ``[p0.1/kappa, p99.9*kappa]``
  (docs/REFERENCE.md section 7.3) into a copy of the contract, keeping its comments and key
  order (ruamel.yaml round trip). It never writes the input unless ``--in-place`` is given.
- ``translate`` prints the integers and the config key each tool needs to capture the contract's
  boundaries, with the release the rule holds for.

Heavy imports (torch, SGLang, speculators, matplotlib) happen inside the functions.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Optional

from conformance.cli import EXIT_OK, EXIT_VIOLATIONS, UsageError, register

SCHEMA_HEADER = "yaml-language-server: $schema="


# --- small helpers ---------------------------------------------------------------------------


def _read_config(arg: str, role: str) -> tuple[dict[str, Any], Path, Optional[Path]]:
    """Read a config.json given a directory or the file itself.

    Returns (config dict, the config file, the model directory or None when a file was given).

    Raises:
        UsageError: missing file, invalid JSON (with line:column), or not a JSON object.
    """
    p = Path(arg)
    if p.is_dir():
        f, d = p / "config.json", p
    else:
        # a config.json next to its weights names the model directory too (target.path / draft.path)
        f = p
        d = p.parent if p.name == "config.json" and any(p.parent.glob("*.safetensors")) else None
    if not f.is_file():
        raise UsageError(f"{f}: no such {role} config.json")
    try:
        cfg = json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UsageError(f"{f}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{f}: cannot read: {e}") from None
    if not isinstance(cfg, dict):
        raise UsageError(f"{f}: a config.json must hold a JSON object")
    return cfg, f, d


def _int_field(cfg: dict, key: str, f: Path, *, sub: Optional[str] = None) -> tuple[int, str]:
    """An int field, falling back to ``sub`` (e.g. ``text_config``). Returns (value, key path)."""
    if isinstance(cfg.get(key), int) and not isinstance(cfg.get(key), bool):
        return int(cfg[key]), key
    if sub and isinstance(cfg.get(sub), dict) and isinstance(cfg[sub].get(key), int):
        return int(cfg[sub][key]), f"{sub}.{key}"
    raise UsageError(f"{f}: no integer {key!r}" + (f" (nor {sub}.{key})" if sub else ""))


def schema_ref(out_file: Path) -> str:
    """The schema path relative to ``out_file``'s directory (for the yaml-language-server line)."""
    from conformance.contract import SCHEMA_PATH

    return Path(os.path.relpath(SCHEMA_PATH, Path(out_file).resolve().parent)).as_posix()


_COL = 36  # comment column in derived contracts


def _eol(m, text: str, key: str) -> None:
    """Attach an end-of-line comment to ``key`` of ruamel map ``m`` at a fixed column."""
    m.yaml_add_eol_comment(text, key, column=_COL)


def _dir_name(p: Path) -> str:
    """A model's name from its directory: ``parent/name`` when the name alone says nothing."""
    p = p.resolve()
    return f"{p.parent.name}/{p.name}" if p.name in ("target", "draft", "model", ".") else p.name


def _one_plus(model_type: str) -> bool:
    # x*(1+w) final norms: Gemma family, Qwen3.5 / Qwen3-Next (REFERENCE.md 5.3)
    return model_type.startswith("gemma") or model_type.startswith("qwen3_5") or model_type == "qwen3_next"


_DTYPES = {"float32", "bfloat16", "float16"}


# --- init: derivation ------------------------------------------------------------------------


def _draft_ids(cfg: dict) -> tuple[Optional[list[int]], Optional[list[int]]]:
    """(nested ids, top-level ids) as written, each None when absent."""
    eagle = cfg.get("eagle_config")
    nested = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, dict) else None
    top = cfg.get("eagle_aux_hidden_state_layer_ids")
    return (list(nested) if nested is not None else None), (list(top) if top is not None else None)


def _is_speculators(cfg: dict) -> bool:
    return ("speculators_config" in cfg or "transformer_layer_config" in cfg
            or (cfg.get("architectures") or [None])[0] == "Eagle3Speculator")


def derive_contract(target_arg: str, draft_arg: str, *, engine: Optional[str] = None,
                    verifier: str = "B_L", name: Optional[str] = None,
                    allow_embedding: bool = False, out_file: Optional[Path] = None):
    """Derive a contract document from two config.json files.

    Args:
        target_arg / draft_arg: a model directory or a config.json path.
        engine: ``"sglang"``, ``"sglang==X.Y.Z"``, ``"vllm"``, ``"speculators"``,
            ``"specforge"`` or None (inferred; refused when ambiguous).
        verifier: ``"B_L"`` (pre-norm, speculators convention) or ``"F"``.
        out_file: where the contract will be written (relative paths are computed from it).

    Returns:
        A ruamel ``CommentedMap`` (comments attached), ready to dump.

    Raises:
        UsageError: unreadable configs, or an ambiguous / unexpressible id mapping (the message
            says why).
    """
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    from conformance.engine_ids import (
        SGLANG_KEY, TOP_KEY, TranslationError, installed_sglang_version, sglang_rule, tool_to_boundaries,
    )

    tcfg, tfile, tdir = _read_config(target_arg, "target")
    dcfg, dfile, ddir = _read_config(draft_arg, "draft")
    out_dir = Path(out_file).resolve().parent if out_file else Path.cwd()

    # -- target
    archs = tcfg.get("architectures") or (tcfg.get("text_config") or {}).get("architectures")
    if not archs or not isinstance(archs, list):
        raise UsageError(f"{tfile}: no 'architectures' list")
    t_arch = str(archs[0])
    L, L_key = _int_field(tcfg, "num_hidden_layers", tfile, sub="text_config")
    d, d_key = _int_field(tcfg, "hidden_size", tfile, sub="text_config")
    V, V_key = _int_field(tcfg, "vocab_size", tfile, sub="text_config")
    model_type = str(tcfg.get("model_type") or (tcfg.get("text_config") or {}).get("model_type") or "")
    tdt = tcfg.get("torch_dtype") or tcfg.get("dtype") or (tcfg.get("text_config") or {}).get("torch_dtype")
    t_dtype = tdt if tdt in _DTYPES else "bfloat16"
    t_name = str(tcfg.get("_name_or_path") or _dir_name(tdir or tfile.parent))

    # -- draft
    spec_fmt = _is_speculators(dcfg)
    d_archs = dcfg.get("architectures")
    if not d_archs or not isinstance(d_archs, list):
        raise UsageError(f"{dfile}: no 'architectures' list")
    d_arch = str(d_archs[0])
    d_name = str(dcfg.get("_name_or_path") or _dir_name(ddir or dfile.parent))
    if spec_fmt:
        tl = dcfg.get("transformer_layer_config") or {}
        if not isinstance(tl.get("hidden_size"), int):
            raise UsageError(f"{dfile}: speculators config without transformer_layer_config.hidden_size")
        dh, dh_key = int(tl["hidden_size"]), "transformer_layer_config.hidden_size"
        th = dcfg.get("target_hidden_size")
        th_key = "target_hidden_size" if th is not None else None
        if th is None:  # speculators never sets it; fc is Linear(num_aux*H, H), H = verifier width
            th = d
    else:
        dh, dh_key = _int_field(dcfg, "hidden_size", dfile)
        th = dcfg.get("target_hidden_size")
        th_key = "target_hidden_size" if th is not None else None
        if th is None:  # llama_eagle3.py:151-154: in_w = target_hidden_size if present else hidden_size
            th = dh
    if int(th) != d:
        raise UsageError(
            f"{dfile}: the draft's aux slot width is {th} ({th_key or 'hidden_size, no target_hidden_size'}) "
            f"but the target hidden_size is {d}: fc would be sized for the wrong width (FAULTS.md K6)")
    dv = dcfg.get("draft_vocab_size")
    dv_note = "draft_vocab_size"
    if dv is None:
        dv = dcfg.get("vocab_size") or (dcfg.get("transformer_layer_config") or {}).get("vocab_size") or V
        dv_note = "draft_vocab_size null: the draft shares the target vocab (REFERENCE.md 2.2)"
    eagle = dcfg.get("eagle_config") if isinstance(dcfg.get("eagle_config"), dict) else {}
    if dcfg.get("norm_before_fc") or eagle.get("norm_before_fc"):
        pre_fc = "norm_before_fc"
    elif dcfg.get("fc_norm") or dcfg.get("use_aux_norm"):
        pre_fc = "fc_norm"
    else:
        pre_fc = "none"
    nested, top = _draft_ids(dcfg)

    # -- engine
    inferred = ""
    if engine is None:
        if spec_fmt:
            engine, inferred = "speculators", "speculators-format draft (Eagle3Speculator)"
        elif nested is not None:
            engine = "sglang"
            inferred = (f"not named; the installed SGLang {installed_sglang_version()} was assumed because "
                        "the ids are nested (the key SGLang reads)")
        elif top is not None:
            raise UsageError(f"{dfile}: ids only at the top level and no --engine: SGLang ignores that key "
                             "(captures its defaults) while vLLM/speculators read it as boundary ids; name the engine")
        else:
            raise UsageError(f"{dfile}: the draft config has no eagle_aux_hidden_state_layer_ids and no --engine "
                             "was named: which default applies depends on the engine (FAULTS.md K1)")
    tool, _, version = engine.partition("==")
    tool = tool.strip().lower()
    version = version.strip() or None
    if tool not in ("sglang", "vllm", "speculators", "specforge"):
        raise UsageError(f"--engine {engine!r}: expected sglang[==X.Y.Z], vllm, speculators or specforge")

    comments: dict[str, str] = {}
    prov: dict[str, str] = {}
    model_file = None
    try:
        if tool == "sglang":
            rule = sglang_rule(t_arch, version)
            version = rule.version
            model_file = rule.model_file
            if eagle.get("use_aux_hidden_state") is False:
                raise UsageError(f"{dfile}: eagle_config.use_aux_hidden_state is false: SGLang captures no aux "
                                 "states and hands the draft F (width d) (FAULTS.md K5)")
            if nested is not None:
                ids, loc = nested, "nested"
                bds = rule.boundaries(L, nested, allow_embedding=allow_embedding)
                src = f"{dfile.name}: {SGLANG_KEY} = {nested}, read by SGLang (spec_aux_hidden_state.py:185-196)"
            elif top is not None:
                ids, loc = top, "top_level"
                bds = rule.defaults(L)
                src = (f"{dfile.name}: top-level {TOP_KEY} = {top} only; SGLang IGNORES a top-level key and "
                       f"captures its defaults {[str(b) for b in bds]} (REFERENCE.md 3.2 'Id source'; FAULTS.md K1)")
                if len(top) != len(bds):
                    raise UsageError(f"{dfile}: top-level ids {top} ({len(top)}) are ignored by SGLang, which "
                                     f"captures {len(bds)} default slots: the draft's fc width cannot match")
            else:
                ids, loc = None, "absent"
                bds = rule.defaults(L)
                src = f"{dfile.name}: no ids; SGLang defaults [2, L//2, L-3] with no +1 (REFERENCE.md 3.2)"
            rule_txt = f"sglang=={rule.version} {rule.model_file}.py ({rule.source})"
        else:
            key_order = {"vllm": (top, nested), "speculators": (top, nested), "specforge": (nested, top)}[tool]
            ids = key_order[0] if key_order[0] is not None else None
            loc = None
            if tool == "specforge":
                if nested is not None:
                    loc = "nested"
                elif top is not None:
                    raise UsageError(f"{dfile}: SpecForge reads the nested key only; the top-level ids {top} "
                                     "would be ignored for the default [1, L//2-1, L-4]")
            else:
                if top is not None:
                    loc = "top_level"
                elif nested is not None and tool == "vllm":
                    ids, loc = nested, "nested"
                elif nested is not None:
                    raise UsageError(f"{dfile}: speculators reads the top-level key only; nested ids {nested} "
                                     "would be ignored")
            if loc is None:
                loc = "absent"
            bds = tool_to_boundaries(tool, ids, L, architecture=t_arch, version=version,
                                     allow_embedding=allow_embedding)
            where = {"nested": SGLANG_KEY, "top_level": f"top-level {TOP_KEY}", "absent": "no key"}[loc]
            src = f"{dfile.name}: {where} = {ids}" if ids is not None else f"{dfile.name}: no ids; {tool} default"
            rule_txt = {"vllm": "vLLM boundary ids (REFERENCE.md 2.1)",
                        "speculators": f"speculators{'==' + version if version else '>=0.5'} boundary ids "
                                       "(REFERENCE.md 5.3)",
                        "specforge": "SpecForge output-of ids (REFERENCE.md 6)"}[tool]
    except TranslationError as e:
        raise UsageError(f"{dfile}: {e}") from None

    K = len(bds)
    nah = dcfg.get("num_aux_hidden_states")
    if nah is not None and int(nah) != K:
        raise UsageError(f"{dfile}: num_aux_hidden_states = {nah} but {engine} captures {K} slots "
                         f"{[str(b) for b in bds]}: fc width mismatch")
    if any(b.index == 0 for b in bds) and not allow_embedding:
        raise UsageError(f"{dfile}: the ids capture B_0 (the embedding output); pass --allow-embedding if intended")

    if verifier not in ("B_L", "F", f"B_{L}"):
        raise UsageError(f"--verifier {verifier!r}: expected B_L or F")
    v_final = verifier == "F"

    # -- document
    def seq(items, flow=True):
        s = CommentedSeq(items)
        if flow:
            s.fa.set_flow_style()
        return s

    doc = CommentedMap()
    doc["schema_version"] = 1
    nm = name or f"{t_name.replace('/', '-')}--{d_name.replace('/', '-')}".lower()
    doc["name"] = nm
    doc["description"] = (f"Derived by `conformance init` from {tfile} and {dfile}; engine {engine}.")
    provenance = CommentedMap()
    provenance["target"] = f"{tfile}: architectures[0], {L_key}, {d_key}, {V_key}"
    provenance["draft"] = (f"{dfile}: architectures[0], {dh_key}, {th_key or 'no target_hidden_size (slot width = '}"
                           + ("" if th_key else f"{'target hidden_size' if spec_fmt else 'hidden_size'})")
                           + f", {dv_note}")
    provenance["layer_ids_source"] = src
    provenance["capture"] = f"{rule_txt}; engine {inferred or engine}"
    provenance["verifier_last"] = ("F: post-final-norm (--verifier F)" if v_final else
                                   "B_L pre-norm: speculators stores the last layer before the final norm and "
                                   "applies verifier_norm in training (REFERENCE.md 5.3)")
    provenance["norm_bands"] = "uncalibrated: run `conformance calibrate` on real data (REFERENCE.md 7.3)"
    doc["provenance"] = provenance

    target = CommentedMap()
    target["name"] = t_name
    if tdir is not None:
        target["path"] = Path(os.path.relpath(tdir.resolve(), out_dir)).as_posix()
        _eol(target, "relative to this file; used as the reference model", "path")
    target["architecture"] = t_arch
    _eol(target, f"{tfile.name}: architectures[0]", "architecture")
    target["num_hidden_layers"] = L
    _eol(target, f"L, {tfile.name}: {L_key}", "num_hidden_layers")
    target["hidden_size"] = d
    _eol(target, f"d, {tfile.name}: {d_key}", "hidden_size")
    target["vocab_size"] = V
    _eol(target, f"{tfile.name}: {V_key}", "vocab_size")
    target["dtype"] = t_dtype
    _eol(target, "torch_dtype" if tdt in _DTYPES else "no torch_dtype: bfloat16 assumed", "dtype")
    target["final_norm"] = "rmsnorm_one_plus" if _one_plus(model_type) else "rmsnorm"
    _eol(target, f"model_type {model_type!r}: "
                                + ("x*(1+w)" if _one_plus(model_type) else "x*w"), "final_norm")
    doc["target"] = target

    draft = CommentedMap()
    draft["name"] = d_name
    if ddir is not None:
        draft["path"] = Path(os.path.relpath(ddir.resolve(), out_dir)).as_posix()
    draft["architecture"] = d_arch
    _eol(draft, f"{dfile.name}: architectures[0]", "architecture")
    draft["hidden_size"] = dh
    _eol(draft, f"{dfile.name}: {dh_key} (fc output width)", "hidden_size")
    draft["target_hidden_size"] = int(th)
    _eol(draft, 
        f"{dfile.name}: {th_key}" if th_key else
        ("speculators never sets it: fc input is num_aux x verifier width" if spec_fmt
         else "absent: SGLang uses hidden_size (llama_eagle3.py:151-154)"), "target_hidden_size")
    draft["draft_vocab_size"] = int(dv)
    _eol(draft, dv_note if dv_note != "draft_vocab_size" else f"{dfile.name}: draft_vocab_size",
                               "draft_vocab_size")
    draft["pre_fc_norm"] = pre_fc
    _eol(draft, "from norm_before_fc / fc_norm / use_aux_norm", "pre_fc_norm")
    li = CommentedMap()
    li["values"] = seq(ids) if ids is not None else None
    _eol(li, "as written in the draft config", "values")
    li["location"] = loc
    _eol(li, {"nested": SGLANG_KEY, "top_level": f"top-level {TOP_KEY}",
                             "absent": "no key: the engine default applies"}[loc]
                            + ("; IGNORED by SGLang, which captures its defaults" if tool == "sglang" and loc == "top_level"
                               else ""), "location")
    draft["layer_ids"] = li
    doc["draft"] = draft

    cap = CommentedMap()
    cap["boundaries"] = seq([str(b) for b in bds])
    _eol(cap, f"what {engine} captures: {rule_txt}", "boundaries")
    cap["allow_embedding"] = bool(allow_embedding)
    cap["feature_width"] = K * d
    _eol(cap, f"K x target_hidden_size = {K} x {d}", "feature_width")
    doc["capture"] = cap

    vl = CommentedMap()
    vl["tensor"] = "F" if v_final else f"B_{L}"
    _eol(vl, "post-final-norm" if v_final else
                            "B_L pre-norm (speculators stores it; trainer applies verifier_norm)", "tensor")
    vl["norm"] = "post" if v_final else "pre"
    doc["verifier_last"] = vl

    al = CommentedMap([("feature", 0), ("input_token", 1), ("target", 1), ("loss_mask", 1), ("position", 1)])
    doc["alignment"] = al
    _eol(doc, "speculators 0.9.0 shift_batch: (g_t, x_t+1, y_t+1, mask_t+1) at position t+1",
                             "alignment")
    nb = CommentedMap()
    nb["status"] = "uncalibrated"
    _eol(nb, "run `conformance calibrate` to measure bands", "status")
    nb["exclude_positions"] = seq([0])
    _eol(nb, "position 0 carries massive activations (REFERENCE.md 7.3)", "exclude_positions")
    doc["norm_bands"] = nb
    eng = CommentedMap()
    eng["sglang_validated"] = seq([])
    _eol(eng, "filled in once a run on these versions passed", "sglang_validated")
    if model_file:
        eng["sglang_model_file"] = model_file
        _eol(eng, "SGLang model file whose setter rule translated the ids", "sglang_model_file")
    doc["engines"] = eng
    doc["data_dtype"] = "bfloat16"
    _eol(doc, "speculators 0.9.0 stores bf16 hidden states", "data_dtype")
    return doc


def _contract_yaml():
    """The ruamel round-trip writer both init and calibrate use (same indent and width)."""
    from ruamel.yaml import YAML

    y = YAML()
    y.preserve_quotes = True
    y.indent(mapping=2, sequence=4, offset=2)
    y.width = 110
    return y


def _render(y, doc, out_file: Path, what: str) -> str:
    """Dump ``doc`` with the schema line (relative to ``out_file``) on top and validate it.

    Raises:
        UsageError: the text does not validate; ``what`` names whose contract it was.
    """
    import io

    from conformance.contract import ContractError, parse_contract

    buf = io.StringIO()
    y.dump(doc, buf)
    text = f"# {SCHEMA_HEADER}{schema_ref(out_file)}\n" + _strip_schema_line(buf.getvalue())
    try:
        parse_contract(text, str(out_file))
    except ContractError as e:
        raise UsageError(f"{what} contract does not validate: {e}") from None
    return text


def dump_contract(doc, out_file: Path) -> str:
    """YAML text of ``doc`` with the schema line (relative to ``out_file``) on top; validated.

    Raises:
        UsageError: the text does not validate (a bug in the derivation; the problems are listed).
    """
    return _render(_contract_yaml(), doc, out_file, "derived")


def _strip_schema_line(text: str) -> str:
    lines = text.splitlines(keepends=True)
    if lines and lines[0].startswith("#") and SCHEMA_HEADER in lines[0]:
        lines = lines[1:]
    return "".join(lines)


def _write_new(out: Path, text: str, force: bool) -> None:
    if out.exists() and not force:
        raise UsageError(f"{out}: exists; refusing to overwrite (pass --force)")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")


def cmd_init(args) -> int:
    from conformance.cli import check_output

    inputs = [Path(a) / "config.json" if Path(a).is_dir() else Path(a) for a in (args.target, args.draft)]
    dirs = [Path(a) if Path(a).is_dir() else Path(a).parent for a in (args.target, args.draft)]
    out = check_output(args.output, "-o", inputs=tuple(inputs), input_dirs=tuple(dirs), need_parent=False)
    doc = derive_contract(args.target, args.draft, engine=args.engine, verifier=args.verifier,
                          name=args.name, allow_embedding=args.allow_embedding, out_file=out)
    text = dump_contract(doc, out)
    _write_new(out, text, args.force)
    c = doc["capture"]
    print(f"wrote {out}: aux {list(c['boundaries'])} + verifier {doc['verifier_last']['tensor']}, "
          f"width {c['feature_width']}, bands uncalibrated")
    return EXIT_OK


# --- calibrate -------------------------------------------------------------------------------


def band_from(values, kappa: float) -> tuple[float, float]:
    """``[p0.1 / kappa, p99.9 * kappa]`` of per-token RMS values (REFERENCE.md 7.3 band recipe),
    rounded outward to 4 significant digits so rounding never narrows the band.

    Raises:
        ValueError: no values.
    """
    import torch

    r = torch.as_tensor(values, dtype=torch.float64).flatten()
    if r.numel() == 0:
        raise ValueError("no RMS values to calibrate from")
    lo = float(torch.quantile(r, 0.001)) / kappa
    hi = float(torch.quantile(r, 0.999)) * kappa
    return _round_out(lo, down=True), _round_out(hi, down=False)


def _round_out(x: float, down: bool) -> float:
    if x <= 0:
        return 0.0
    e = math.floor(math.log10(x)) - 3
    q = 10.0 ** e
    v = (math.floor if down else math.ceil)(x / q) * q
    return float(f"{v:.4g}")


def _quantiles(r):
    import torch

    r = r.double().flatten()
    return (float(torch.quantile(r, 0.001)), float(r.median()), float(torch.quantile(r, 0.999)))


def collect_data_rms(c, data_dir: Path) -> tuple[dict, list[list[int]], int]:
    """Per-slot per-token RMS over every sample of a speculators 0.9.0 dataset, read through the
    real loader (:class:`conformance.paths.training.TrainingLoader`), excluding the contract's
    ``exclude_positions`` and massive activations (:func:`conformance.checks.band_rows`, the
    exact rows the ``norm_band`` check bands).

    Returns:
        ({Boundary: float32 [N] tensor}, the samples' token ids, number of samples).

    Raises:
        UsageError: not a dataset, or no sample could be read.
    """
    import torch

    from conformance.checks import band_rows
    from conformance.paths.training import TrainingDataError, TrainingLoader
    from conformance.reference import rms
    from conformance.runner import _dtype, default_batches

    try:
        loader = TrainingLoader(data_dir, c.draft.target_hidden_size, c.num_slots, _dtype(c.data_dtype))
    except TrainingDataError as e:
        raise UsageError(str(e)) from None
    n = len(loader)
    if n == 0:
        raise UsageError(f"{data_dir}: the dataset holds no samples")
    d = c.draft.target_hidden_size
    acc: dict = {b: [] for b in c.aux + [c.verifier_last.parsed]}
    token_ids = []
    for batch in default_batches(n, 4):
        for cap in loader.batch(batch):
            if cap.unavailable or cap.feature.shape[0] == 0:
                continue
            token_ids.append(cap.token_ids.tolist())
            if cap.feature.shape[-1] != c.num_slots * d:
                raise UsageError(f"{data_dir}: {cap.where}: feature width {cap.feature.shape[-1]} != "
                                 f"{c.num_slots} x {d}; calibrate needs data that matches the contract's shape")
            for i, s in enumerate(cap.slots(d)):
                keep = band_rows(c, cap.rows, s)
                acc[c.aux[i]].append(rms(s[keep]))
            if cap.verifier_last is not None:
                rows = cap.rows + c.alignment.target
                keep = band_rows(c, rows, cap.verifier_last)
                acc[c.verifier_last.parsed].append(rms(cap.verifier_last[keep]))
    if not token_ids:
        raise UsageError(f"{data_dir}: no sample could be read")
    return {b: torch.cat(v) if v else torch.zeros(0) for b, v in acc.items()}, token_ids, n


def default_prompts(vocab_size: int, bos: int = 1, n: int = 8, length: int = 48, seed: int = 0) -> list[list[int]]:
    """``n`` deterministic prompts of ``length`` tokens: ``bos`` then ids drawn from [3, vocab)
    with a seeded torch generator (the fixture builder's own sampler)."""
    from conformance.fixtures import sample_token_ids

    spec = {"target": {"vocab_size": vocab_size, "bos_token_id": bos}}
    return sample_token_ids(spec, n, length, length, seed)


def reference_profile(c, ref_model, prompts: list[list[int]]) -> dict:
    """Per-token RMS of every boundary B_0..B_L and F over ``prompts`` (float32 reference
    forward), excluding the contract's positions and massive activations per boundary.

    Returns:
        {Boundary: float32 [N] tensor}, ordered B_0..B_L, F.
    """
    import torch

    from conformance.checks import band_rows
    from conformance.notation import all_boundaries
    from conformance.reference import rms

    L = ref_model.num_layers
    out = {b: [] for b in all_boundaries(L)}
    for ids in prompts:
        ref = ref_model.capture(ids)
        rows = torch.arange(len(ids))
        for b in out:
            x = ref.boundary(b)
            keep = band_rows(c, rows, x)
            out[b].append(rms(x[keep]))
    return {b: torch.cat(v) for b, v in out.items()}


def render_profile(c, profile: dict, bands: dict, console) -> None:
    """Rich table of the norm profile across all boundaries with the contract's slots marked."""
    from rich.table import Table

    roles = {b: f"aux slot {i}" for i, b in enumerate(c.aux)}
    v = c.verifier_last.parsed
    roles[v] = (roles.get(v, "") + ", " if v in roles else "") + "verifier"
    t = Table(title=f"{c.name}: per-token RMS per boundary (positions {c.norm_bands.exclude_positions} excluded)")
    for col in ("boundary", "role", "p0.1", "median", "p99.9", "n", "band"):
        t.add_column(col, justify="right" if col in ("p0.1", "median", "p99.9", "n") else "left")
    for b, r in profile.items():
        lo, med, hi = _quantiles(r) if r.numel() else (float("nan"),) * 3
        role = roles.get(b, "")
        style = "bold cyan" if role else ""
        band = bands.get(b)
        bt = f"[{band[0]:.4g}, {band[1]:.4g}]" if band else ""
        t.add_row(b.describe(c.L), role, f"{lo:.4g}", f"{med:.4g}", f"{hi:.4g}", str(r.numel()), bt, style=style)
    console.print(t)


def plot_profile(c, profile: dict, bands: dict, out_png: Path, source: str) -> None:
    """Save the norm profile as a PNG: log-scale RMS per boundary (median line, p0.1-p99.9 shaded),
    the contract's slots highlighted with their bands as error bars. matplotlib, Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(profile)
    xs = list(range(len(names)))
    q = [_quantiles(profile[b]) for b in names]
    fig, ax = plt.subplots(figsize=(max(7.0, 0.45 * len(names) + 3), 4.8), dpi=120)
    ax.fill_between(xs, [a[0] for a in q], [a[2] for a in q], color="tab:blue", alpha=0.18,
                    label="p0.1 - p99.9 per token")
    ax.plot(xs, [a[1] for a in q], "-o", color="tab:blue", ms=3.5, lw=1.4, label="median per-token RMS")
    slot_of = {b: f"slot {i}" for i, b in enumerate(c.aux)}
    v = c.verifier_last.parsed
    marked = band_labelled = False
    for i, b in enumerate(names):
        if b in slot_of or b == v:
            label = slot_of.get(b, "")
            if b == v:
                label = (label + " + " if label else "") + "verifier"
            ax.axvspan(i - 0.4, i + 0.4, color="tab:orange", alpha=0.22, lw=0,
                       label=None if marked else "contract slots")
            marked = True
            band = bands.get(b)
            top = max(q[i][2], band[1] if band else 0.0)
            ax.annotate(label, (i, top), xytext=(0, 5), textcoords="offset points", ha="center", va="bottom",
                        fontsize=8, color="darkred",
                        bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8))
            if band:
                ax.plot([i, i], band, color="tab:red", lw=3, alpha=0.8, solid_capstyle="butt",
                        label=None if band_labelled else "calibrated band")
                band_labelled = True
    ax.set_yscale("log")
    ax.set_xticks(xs)
    ax.set_xticklabels([str(b) for b in names], rotation=60 if len(names) > 14 else 0, fontsize=8)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_xlabel("boundary (B_k enters layer k; F = final-norm output)")
    ax.set_ylabel("per-token RMS  sqrt(mean(x^2))  [log]")
    import textwrap

    sub = "\n".join(textwrap.wrap(source, 100))
    ax.set_title(f"{c.name}: norm profile, positions {c.norm_bands.exclude_positions} excluded\n{sub}",
                 fontsize=8.5)
    ymin, ymax = ax.get_ylim()
    ax.set_ylim(ymin, ymax * 2.5)  # room for the slot labels
    ax.grid(True, which="both", axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png)
    plt.close(fig)


def write_bands(contract_text: str, bands: dict, kappa: float, source: str, out_file: Path) -> str:
    """The contract text with ``norm_bands`` calibrated, comments and key order kept (ruamel
    round trip); the schema line is recomputed for ``out_file``. Validated before returning.

    Raises:
        UsageError: the result does not validate.
    """
    from ruamel.yaml.comments import CommentedMap

    y = _contract_yaml()
    doc = y.load(contract_text)
    nb = doc.get("norm_bands")
    if nb is None:
        nb = CommentedMap()
        doc["norm_bands"] = nb
    order = ["status", "exclude_positions", "massive_activation_ratio", "bands", "safety_factor", "source"]

    def put(key, value):
        if key in nb:
            nb[key] = value
            return
        # insert after the last existing key that precedes it in the model's order
        pos = 0
        for i, k in enumerate(list(nb.keys())):
            if k in order and order.index(k) < order.index(key):
                pos = i + 1
        nb.insert(pos, key, value)

    put("status", "calibrated")
    if "status" in nb.ca.items:
        nb.ca.items.pop("status", None)
    blist = []
    for b, (lo, hi) in bands.items():
        m = CommentedMap([("slot", str(b)), ("lo", lo), ("hi", hi)])
        m.fa.set_flow_style()
        blist.append(m)
    put("bands", blist)
    put("safety_factor", kappa)
    put("source", source)
    return _render(y, doc, out_file, "calibrated")


IDENTITY_SAMPLE = 32
"""Samples (seeded, like check-data's fingerprint sample) whose slots calibrate verifies first."""


def identity_problems(c, data_dir: Path, ref_model, sample: int = IDENTITY_SAMPLE) -> list[str]:
    """Slot-identity and verifier-identity failures of a seeded sample of ``data_dir`` against
    ``ref_model`` (the checks of :func:`conformance.runner.training_findings`), one line per wrong
    slot: ``"DATA: sample 0: slot 0 is B_0 (embedding output); contract says B_2 (...) (wrong in
    12 of 12 samples checked)"``. Empty when every slot is what the contract declares.

    Raises:
        UsageError: not a dataset.
    """
    from conformance.paths.training import TrainingDataError, TrainingLoader
    from conformance.runner import _dtype, default_batches, training_findings
    from conformance.scan import fingerprint_sample

    try:
        loader = TrainingLoader(data_dir, c.draft.target_hidden_size, c.num_slots, _dtype(c.data_dtype))
    except TrainingDataError as e:
        raise UsageError(str(e)) from None
    n = len(loader)
    idx = fingerprint_sample(n, sample, 0)
    batches = [idx[k:k + 4] for k in range(0, len(idx), 4)] if idx else default_batches(0)
    fs = training_findings(c, data_dir, None, batches, loader=loader, ref_model=ref_model)
    judged: dict = {}
    wrong: dict = {}
    for f in fs:
        if f.check not in ("slot_identity", "verifier_identity") or f.status == "skip":
            continue
        judged[f.slot] = judged.get(f.slot, 0) + 1
        if f.status == "fail":
            wrong.setdefault(f.slot, []).append(f)
    out = []
    for slot, bad in wrong.items():
        first = bad[0]
        out.append(f"{data_dir}: {first.where.split(' (')[0]}: {first.message} "
                   f"(wrong in {len(bad)} of {judged[slot]} samples checked)")
    return out


def cmd_calibrate(args) -> int:
    from conformance.cli import _console, _load

    src_path = Path(args.contract)
    c = _load(args.contract)
    if args.safety_factor < 1:
        raise UsageError(f"--safety-factor {args.safety_factor}: must be >= 1 (REFERENCE.md 7.3: 1.5-2)")
    if not args.data and not args.reference:
        raise UsageError("calibrate needs --data DIR or --reference MODEL_DIR")
    out: Optional[Path] = None
    if args.in_place and args.output:
        raise UsageError("give either -o OUT or --in-place, not both")
    if args.in_place:
        out = src_path
    elif args.output:
        out = Path(args.output)
        if out.exists() and out.resolve() == src_path.resolve():
            raise UsageError(f"{out} is the input contract; pass --in-place to overwrite it")
        if out.exists() and not args.force:
            raise UsageError(f"{out}: exists; refusing to overwrite (pass --force)")
    console = _console()

    from conformance.reference import ReferenceError, load_reference_model

    from conformance.cli import check_data_dir, check_output, resolve_reference

    data = check_data_dir(args.data) if args.data else None
    ref_model = None
    ref_origin = None
    ref_dir = resolve_reference(c, args)
    if ref_dir is not None:
        ref_origin = str(ref_dir) if args.reference else f"{ref_dir} (from {args.contract})"
    if out is not None:
        check_output(out, "-o" if args.output else "--in-place", input_dirs=(data, ref_dir), need_parent=False)
    if args.plot:
        if Path(args.plot).suffix.lower() not in (".png", ".svg", ".pdf"):
            raise UsageError(f"--plot {args.plot}: give a .png (or .svg / .pdf) file name")
        check_output(args.plot, "--plot", inputs=(args.contract,), input_dirs=(data, ref_dir))
    if ref_dir is not None:
        try:
            ref_model = load_reference_model(ref_dir, c.target)
        except ReferenceError as e:
            raise UsageError(str(e)) from None
        if ref_model.num_layers != c.L or ref_model.hidden_size != c.target.hidden_size:
            raise UsageError(f"{ref_dir}: reference has L={ref_model.num_layers}, d={ref_model.hidden_size}; "
                             f"the contract says L={c.L}, d={c.target.hidden_size}")
    if data is not None:
        if ref_model is not None:
            wrong = identity_problems(c, data, ref_model)
            if wrong:
                for line in wrong:
                    print(f"conformance: error: {line}", file=sys.stderr)
                print(f"conformance: calibrate refused: the slots of {data} are not the boundaries "
                      f"{args.contract} declares, so their norms would calibrate the wrong layers; no file written",
                      file=sys.stderr)
                return EXIT_VIOLATIONS
        else:
            console.print(f"[yellow]warning: slot identity not verified: no reference model (give --reference "
                          f"MODEL_DIR); the bands describe whatever {data} holds in each slot, which may not be "
                          f"the boundaries the contract declares[/yellow]")

    kappa = float(args.safety_factor)
    prompts = None
    if data is not None:
        per_slot, prompts, n = collect_data_rms(c, data)
        source = f"speculators 0.9.0 data {data} ({n} samples, real loader)"
    else:
        prompts = default_prompts(c.target.vocab_size, bos=_bos(ref_dir))
        profile_for_bands = reference_profile(c, ref_model, prompts)
        per_slot = {b: profile_for_bands[b] for b in c.aux + [c.verifier_last.parsed]}
        source = f"reference forward of {ref_dir} on {len(prompts)} deterministic prompts (seed 0)"
    source += f"; positions {list(c.norm_bands.exclude_positions)} excluded"
    if c.norm_bands.massive_activation_ratio:
        source += f", tokens above {c.norm_bands.massive_activation_ratio}x the median excluded"
    bands = {}
    for b, r in per_slot.items():
        if r.numel() == 0:
            raise UsageError(f"no rows left to calibrate {b} after exclusions")
        bands[b] = band_from(r, kappa)

    if ref_model is not None:
        profile = reference_profile(c, ref_model, prompts)
        render_profile(c, profile, bands, console)
        if args.plot:
            plot_profile(c, profile, bands, Path(args.plot),
                         f"profile: reference {ref_origin}, {len(prompts)} prompts. Bands: {source.split(';')[0]}")
            console.print(f"plot: {args.plot}")
    else:
        console.print("[yellow]norm profile across all boundaries needs --reference or a contract fixture / "
                      "target.path; showing the slots only[/yellow]")
        if args.plot:
            raise UsageError("--plot needs a reference model (--reference MODEL_DIR, or a contract fixture)")
    for b, (lo, hi) in bands.items():
        q = _quantiles(per_slot[b])
        console.print(f"band {b}: [{lo:.4g}, {hi:.4g}]  (p0.1 {q[0]:.4g}, median {q[1]:.4g}, p99.9 {q[2]:.4g}, "
                      f"n {per_slot[b].numel()}, kappa {kappa})")
    if out is None:
        console.print("no file written (give -o OUT, or --in-place to update the contract)")
        return EXIT_OK
    text = write_bands(src_path.read_text(encoding="utf-8"), bands, kappa, source, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    console.print(f"wrote {out}: norm bands calibrated (kappa {kappa})")
    return EXIT_OK


def _bos(ref_dir: Optional[Path]) -> int:
    try:
        cfg = json.loads((Path(ref_dir) / "config.json").read_text())
        b = cfg.get("bos_token_id")
        return int(b) if isinstance(b, int) else 1
    except (OSError, ValueError, TypeError):
        return 1


# --- translate -------------------------------------------------------------------------------


def cmd_translate(args) -> int:
    from conformance.cli import _load
    from conformance.engine_ids import TranslationError, boundaries_to_tool

    c = _load(args.contract)
    try:
        t = boundaries_to_tool(args.to, c.aux, c.L, architecture=c.target.architecture,
                               version=args.engine_version, verifier=c.verifier_last.parsed,
                               allow_embedding=c.capture.allow_embedding)
    except TranslationError as e:
        raise UsageError(f"{args.contract}: {args.to} cannot capture {c.capture.boundaries}: {e}") from None
    if args.json:
        out = {"contract": args.contract, "boundaries": c.capture.boundaries, "num_hidden_layers": c.L,
               **t.to_json()}
        print(json.dumps(out, indent=2))
        return EXIT_OK
    print(f"{c.name}: {args.to} ids for {c.capture.boundaries} (L = {c.L}, {c.target.architecture})")
    print(f"  ids:        {t.ids}")
    print(f"  key:        {t.key_path}")
    print(f"  convention: {t.convention}")
    print(f"  holds for:  {t.holds_for}")
    for k, v in t.extra.items():
        print(f"  {k}: {v}")
    for n in t.notes:
        print(f"  note: {n}")
    return EXIT_OK


# --- registration ----------------------------------------------------------------------------


@register
def _add_commands(sub) -> None:
    p = sub.add_parser("init", help="derive a contract from target and draft config.json files")
    p.add_argument("--target", required=True, metavar="TARGET_DIR_OR_CONFIG")
    p.add_argument("--draft", required=True, metavar="DRAFT_DIR_OR_CONFIG")
    p.add_argument("--engine", metavar="ENGINE",
                   help="sglang[==X.Y.Z] (default version: installed), vllm, speculators or specforge; "
                        "inferred when unambiguous")
    p.add_argument("--verifier", default="B_L", choices=["B_L", "F"],
                   help="last data slot: B_L pre-norm (speculators, default) or F post-norm")
    p.add_argument("--name", help="contract name (default: target--draft)")
    p.add_argument("--allow-embedding", action="store_true", help="accept B_0 as an aux slot")
    p.add_argument("-o", "--output", required=True, metavar="FILE")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    p.set_defaults(func=cmd_init)

    c = sub.add_parser("calibrate", help="measure norm bands on real data and write them into a contract")
    c.add_argument("contract", metavar="CONTRACT")
    c.add_argument("--data", metavar="DIR", help="speculators 0.9.0 dataset (bands from the real loader)")
    c.add_argument("--reference", metavar="MODEL_DIR",
                   help="HF target dir: slot identity of --data is verified first; norm profile; bands when no "
                        "--data (default: the contract's fixture or target.path)")
    c.add_argument("--no-reference", action="store_true",
                   help="calibrate from --data without a reference (slot identity not verified)")
    c.add_argument("--safety-factor", type=float, default=1.5, metavar="KAPPA",
                   help="band = [p0.1/kappa, p99.9*kappa] (default 1.5)")
    c.add_argument("--plot", metavar="FILE.png", help="save the norm profile as a PNG")
    c.add_argument("-o", "--output", metavar="OUT", help="write the calibrated contract here")
    c.add_argument("--in-place", action="store_true", help="overwrite CONTRACT itself")
    c.add_argument("--force", action="store_true", help="overwrite OUT if it exists")
    c.set_defaults(func=cmd_calibrate)

    t = sub.add_parser("translate", help="print the ids and config key a tool needs for a contract")
    t.add_argument("contract", metavar="CONTRACT")
    t.add_argument("--to", required=True, choices=["sglang", "vllm", "speculators", "specforge"])
    t.add_argument("--engine-version", metavar="V", help="tool release (SGLang default: installed)")
    t.add_argument("--json", action="store_true", help="print JSON")
    t.set_defaults(func=cmd_translate)
