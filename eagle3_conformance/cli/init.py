"""``eagle3-conformance init --target DIR --draft DIR -o FILE``: a contract derived from two config.json
files (:func:`eagle3_conformance.authoring.init_families.derive_any_contract`: EAGLE-3, DFlash or MTP, by
the draft config's own keys); never writes over an input, and never writes a contract ``validate`` would
refuse: the text passes the contract gate every verb applies
(:func:`eagle3_conformance.authoring.gate.gated_text`) before it is written (exit 2 and nothing written
otherwise; a draft config whose two id lists differ is refused with both keys named). ``-o``'s directory
must exist (init creates none)."""

from __future__ import annotations

from pathlib import Path

from eagle3_conformance.cli.common import check_output
from eagle3_conformance.core.errors import UsageError
from eagle3_conformance.core.exit_codes import ExitCode


def add_parser(sub) -> None:
    p = sub.add_parser("init", help="derive a contract from target and draft config.json files")
    p.add_argument("--target", required=True, metavar="TARGET_DIR_OR_CONFIG")
    p.add_argument("--draft", required=True, metavar="DRAFT_DIR_OR_CONFIG")
    p.add_argument("--engine", metavar="ENGINE",
                   help="sglang[==X.Y.Z] (default version: installed), vllm, speculators or specforge; "
                        "inferred when unambiguous")
    p.add_argument("--verifier", default=None, choices=["B_L", "F"],
                   help="last data slot: B_L pre-norm (speculators, default) or F post-norm (SpecForge, its default)")
    p.add_argument("--name", help="contract name (default: target--draft)")
    p.add_argument("--allow-embedding", action="store_true", help="accept B_0 as an aux slot")
    p.add_argument("--generation-dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="the dtype the training data's generation server runs (vLLM for speculators' "
                        "generate-offline-data: its --dtype; SpecForge's SGLang capture): it is the stored dtype, "
                        "data_dtype. auto (default): the engine's own dtype rule (docs/speculators-generator.md)")
    p.add_argument("--serving-dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="the dtype the server is launched with (its --dtype): precision.serving, which the serving "
                        "checks' gates follow. auto (default): the serving engine's own dtype=auto rule (SGLang: "
                        "a float32 checkpoint is served in float16, Gemma in bfloat16)")
    p.add_argument("--dflash-sample-from-anchor", choices=["true", "false"], default=None,
                   help="DFlash drafts whose config.json has no key saying which row of a block predicts (R91): "
                        "true = the anchor row (DeepSpec / DSpark), false = row 1 first (z-lab, SpecForge); init "
                        "refuses to guess without it")
    p.add_argument("-o", "--output", required=True, metavar="FILE")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    p.set_defaults(func=run)


def run(args) -> int:
    from eagle3_conformance.authoring.init_families import derive_any_contract
    from eagle3_conformance.authoring.yaml_doc import dump_contract, write_new

    out = _output(args)
    doc = derive_any_contract(args.target, args.draft, engine=args.engine, verifier=args.verifier,
                          name=args.name, allow_embedding=args.allow_embedding, out_file=out,
                          generation_dtype=args.generation_dtype, serving_dtype=args.serving_dtype,
                          dflash_sample_from_anchor=None if args.dflash_sample_from_anchor is None
                          else args.dflash_sample_from_anchor == "true")
    text = dump_contract(doc, out)
    _gate(text, out, args)
    write_new(out, text, args.force)
    c = doc["capture"]
    print(f"wrote {out}: aux {list(c['boundaries'])} + verifier {doc['verifier_last']['tensor']}, "
          f"width {c['feature_width']}, bands uncalibrated")
    _final_notes(out)
    _norm_notes(args.draft)
    _field_notes(doc, Path(args.target) / "config.json" if Path(args.target).is_dir() else Path(args.target))
    return ExitCode.CONFORMS


def _output(args) -> Path:
    """``-o``, once both configs read (an unreadable or malformed input is reported first) and the path is
    neither an input nor inside a model directory: a directory given as ``--target`` / ``--draft``, or the
    directory of a ``config.json`` given by name that holds the model's weights (what ``read_config`` records
    as ``target.path`` / ``draft.path``, f72caed: init never writes over or into its inputs). A config file
    with no weights beside it (a bare ``config.json`` in the working directory) protects only itself. The
    parent directory must exist: init creates none.

    Raises:
        DataError: an input config is missing or malformed (file:line:column).
        UsageError: ``-o`` is an input, lies inside a model directory, is a directory, or has no parent.
    """
    from eagle3_conformance.authoring.configs import read_config

    read = [read_config(a, role) for a, role in ((args.target, "target"), (args.draft, "draft"))]
    return check_output(args.output, "-o", inputs=tuple(f for _, f, _ in read),
                        input_dirs=tuple(d for _, _, d in read if d is not None))


def _gate(text: str, out: Path, args) -> None:
    """The contract gate on the text ``init`` would write, before anything is written.

    Raises:
        UsageError: ``validate`` would refuse it; its lines, counted in the text that was not written.
    """
    from eagle3_conformance.authoring.gate import gated_text, refusal_lines
    from eagle3_conformance.contract import ContractError

    try:
        gated_text(text, out)
    except ContractError as e:
        raise UsageError("\n".join(refusal_lines(e, out)) + f"\n{out}: not written: the contract derived from "
                         f"{args.target} and {args.draft} is refused by the checks `eagle3-conformance validate` "
                         "applies (lines above count in the text init would have written)") from None


def _norm_notes(draft) -> None:
    """Issue 37: where the tools read the draft config's Eagle3.1 norms differently (R53, R71)."""
    import json

    from eagle3_conformance.draft_config.draft_norms import norm_notes

    f = Path(draft) / "config.json" if Path(draft).is_dir() else Path(draft)
    try:
        cfg = json.loads(f.read_text())
    except (OSError, ValueError):
        return
    eagle = isinstance(cfg, dict) and ("eagle_config" in cfg or "eagle" in str(cfg.get("architectures", "")).lower())
    if eagle:
        for line in norm_notes(cfg):
            print(f"  note: {line}")


def _field_notes(doc, target_config: Path) -> None:
    """Issue 45: which boundary each training-data writer stores for an aux slot whose output-of id they
    read differently (R90), a serving dtype that cannot hold the draft's (R89), and a multimodal target
    whose data must hold vision features if serving feeds images (R92)."""
    import json

    from eagle3_conformance.core.notation import Boundary
    from eagle3_conformance.core.served_dtype import MAX_EXP
    from eagle3_conformance.engine_ids.writers import writer_notes

    lines = []
    if doc.get("method", "eagle3") == "eagle3":
        lines += writer_notes([Boundary.parse(b) for b in doc["capture"]["boundaries"]],
                              int(doc["target"]["num_hidden_layers"]))
    serving = (doc.get("precision") or {}).get("serving") or doc["target"].get("dtype")
    trained = doc["draft"].get("dtype")
    if trained and serving in MAX_EXP and MAX_EXP[serving] < MAX_EXP[trained]:
        lines.append(f"the engine runs the draft in the server's dtype, {serving} (precision.serving), which cannot hold "
                     f"the range of {trained}, the dtype the draft was trained in (draft.dtype): its activations may "
                     f"overflow to NaN (R89, vllm#55250); the engine paths fail draft_dtype. Serve with --dtype "
                     f"{'bfloat16' if trained == 'bfloat16' else 'bfloat16 or float32'}")
    try:
        tcfg = json.loads(Path(target_config).read_text())
    except (OSError, ValueError):
        tcfg = {}
    img = tcfg.get("image_token_id") if isinstance(tcfg, dict) else None
    if isinstance(img, int) and "multimodal" not in doc:
        lines.append(f"the target is multimodal (config.json image_token_id {img}): if serving feeds it images, add "
                     f"multimodal: {{image_token_id: {img}, image_tokens_served: true}}, and check-data then refuses "
                     "training data written without vision features (R92, speculators#606)")
    for line in lines:
        print(f"  note: {line}")


def _final_notes(out) -> None:
    """Issue 37: when an aux slot is B_L (id = L), what each engine does with that id (R53, R55)."""
    from eagle3_conformance.contract import ContractError, load_contract
    from eagle3_conformance.engine_ids.final_boundary import final_boundary_notes

    try:
        c = load_contract(out)
    except ContractError:
        return  # validate reports it
    for line in final_boundary_notes(c):
        print(f"  note: {line}")
