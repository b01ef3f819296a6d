"""``eagle3-conformance accept-estimate --draft DIR --target DIR --data DIR [-k 3] [--json OUT]``: an
acceptance estimate with no engine and no target forward (:mod:`eagle3_conformance.acceptance.estimate`):
the draft alone, teacher-forced on a speculators dataset, against the target's own next tokens.
Prints per-position acceptance and the mean accept length. Exit 0, or 2 for bad input (a draft
whose vocabulary, width or slot count does not fit the data is named, never a shape traceback; so is a
shard that cannot be read, and a NaN/Inf row: its document, row and slot)."""

from __future__ import annotations

import json
from pathlib import Path

from eagle3_conformance.cli.common import check_data_dir, check_output
from eagle3_conformance.core.errors import DataError, UsageError
from eagle3_conformance.core.exit_codes import ExitCode


def add_parser(sub) -> None:
    p = sub.add_parser("accept-estimate", help="per-position acceptance of a draft on stored training data, "
                                               "no engine (teacher-forced, speculators' forward)")
    p.add_argument("--draft", required=True, metavar="DIR", help="draft directory (config.json + model.safetensors "
                                                                  "with d2t/t2d)")
    p.add_argument("--target", required=True, metavar="DIR", help="HF-format target directory (its config, "
                                                                   "embedding and head; no forward is run)")
    p.add_argument("--data", required=True, metavar="DIR", help="speculators-format dataset (hidden_states/)")
    p.add_argument("-k", type=int, default=3, help="draft tokens per verify step (default 3)")
    p.add_argument("--json", metavar="OUT", help="write the estimate as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    if not 1 <= args.k <= 16:
        raise UsageError(f"-k {args.k}: draft tokens per step must be 1..16")
    data = check_data_dir(args.data)
    for flag, d in (("--draft", args.draft), ("--target", args.target)):
        if not Path(d).is_dir():
            raise DataError(f"{flag} {d}: not a directory")
    if args.json:
        check_output(args.json, "--json", input_dirs=(args.draft, args.target, str(data)))
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    try:
        from loguru import logger

        logger.disable("speculators")  # its loader logs every file it opens
    except ImportError:
        pass
    from eagle3_conformance.acceptance.estimate import estimate_acceptance, load_speculators_draft

    model = load_speculators_draft(Path(args.draft), Path(args.target), ttt_steps=args.k)
    e = estimate_acceptance(model, data, args.k)
    print(f"estimate over {e.starts} start rows in {e.documents} documents, k = {args.k}: mean accept length "
          f"{e.mean_accept_length:.3f}; draft position 1..{args.k} accepted in "
          + ", ".join(f"{p:.1%}" for p in e.per_position))
    if args.json:
        Path(args.json).write_text(json.dumps({"k": args.k, "per_position": e.per_position,
                                               "mean_accept_length": e.mean_accept_length, "starts": e.starts,
                                               "documents": e.documents, "per_document": e.per_document}, indent=1))
    return ExitCode.CONFORMS
