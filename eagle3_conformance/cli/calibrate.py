"""``eagle3-conformance calibrate CONTRACT (--data DIR | --reference MODEL_DIR)``: norm bands measured
on real data (slot identity verified first) or a reference forward, written into a copy of the
contract (:mod:`eagle3_conformance.authoring.calibrate`). Never writes the input unless ``--in-place``.
Exit 1 when the data's slots are not the contract's boundaries (nothing written)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from eagle3_conformance.cli.common import (
    add_contract_arguments,
    check_data_dir,
    check_output,
    console,
    error,
    load_contract,
    resolve_reference,
)
from eagle3_conformance.core.errors import UsageError
from eagle3_conformance.core.exit_codes import ExitCode


def add_parser(sub) -> None:
    c = sub.add_parser("calibrate", help="measure norm bands on real data and write them into a contract")
    add_contract_arguments(c)
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
    c.set_defaults(func=run)


def _output(args, src_path: Path, ref_dir: Optional[Path]) -> Optional[Path]:
    """The file to write (None: print only). ``ref_dir``: the reference, ``--reference`` or by default the
    contract's fixture or ``target.path`` (:func:`eagle3_conformance.cli.common.resolve_reference`), as the
    help says.

    Raises:
        UsageError: a bad safety factor, nothing to calibrate from, or an output that conflicts.
    """
    if args.safety_factor < 1:
        raise UsageError(f"--safety-factor {args.safety_factor}: must be >= 1 (REFERENCE.md 7.3: 1.5-2)")
    if not args.data and ref_dir is None:
        raise UsageError("calibrate needs --data DIR or --reference MODEL_DIR"
                         + ("" if args.no_reference else " (the contract names no fixture and no target.path)"))
    if args.in_place and args.output:
        raise UsageError("give either -o OUT or --in-place, not both")
    if args.in_place:
        return src_path
    if not args.output:
        return None
    out = Path(args.output)
    if out.exists() and out.resolve() == src_path.resolve():
        raise UsageError(f"{out} is the input contract; pass --in-place to overwrite it")
    if out.exists() and not args.force:
        raise UsageError(f"{out}: exists; refusing to overwrite (pass --force)")
    return out


def _reference_model(c, ref_dir: Path):
    """Raises: UsageError: the reference does not load, or is not the contract's L and d."""
    from eagle3_conformance.reference import ReferenceError, load_reference_model

    try:
        ref_model = load_reference_model(ref_dir, c.target)
    except ReferenceError as e:
        raise UsageError(str(e)) from None
    if ref_model.num_layers != c.L or ref_model.hidden_size != c.target.hidden_size:
        raise UsageError(f"{ref_dir}: reference has L={ref_model.num_layers}, d={ref_model.hidden_size}; "
                         f"the contract says L={c.L}, d={c.target.hidden_size}")
    return ref_model


def _show(con, c, cal, ref_model, ref_origin, args) -> None:
    """The norm profile (with a reference), the plot, one line per band."""
    from eagle3_conformance.authoring.calibrate import quantiles, reference_profile
    from eagle3_conformance.authoring.profile import plot_profile, render_profile

    if ref_model is not None:
        profile = reference_profile(c, ref_model, cal.prompts)
        render_profile(c, profile, cal.bands, con)
        if args.plot:
            plot_profile(c, profile, cal.bands, Path(args.plot),
                         f"profile: reference {ref_origin}, {len(cal.prompts)} prompts. Bands: "
                         f"{cal.source.split(';')[0]}")
            con.print(f"plot: {args.plot}")
    else:
        con.print("[yellow]norm profile across all boundaries needs --reference or a contract fixture / "
                  "target.path; showing the slots only[/yellow]")
        if args.plot:
            raise UsageError("--plot needs a reference model (--reference MODEL_DIR, or a contract fixture)")
    for b, (lo, hi) in cal.bands.items():
        q = quantiles(cal.per_slot[b])
        con.print(f"band {b}: [{lo:.4g}, {hi:.4g}]  (p0.1 {q[0]:.4g}, median {q[1]:.4g}, p99.9 {q[2]:.4g}, "
                  f"n {cal.per_slot[b].numel()}, kappa {cal.kappa})")


def _gate_line(c, gate: str) -> str:
    """Which identity gate refused, its value in force, and the contract key that changes it."""
    from eagle3_conformance.core import gates

    if gate == "gates.identity_noise_deg":
        return (f"gate that failed: slot identity, rank rule (another boundary matches better by more than the "
                f"precision-noise allowance {gates.identity_noise_deg(c, True):g} deg); contract key "
                f"gates.identity_noise_deg (docs/gates.md: raise it only for a serving dtype noisier than measured)")
    if gate == "gates.slot_identity_min_cosine":
        return (f"gate that failed: slot identity, cosine floor {gates.row_min_cosine(c, True):g} (the declared boundary "
                f"is the closest, but too far to be it); contract key gates.slot_identity_min_cosine (docs/gates.md)")
    return ("gate that failed: slot identity, no boundary matches (cosine < 0.5): no contract key changes this; "
            "the data holds another tensor or the reference is another checkpoint")


def run(args) -> int:
    from eagle3_conformance.authoring.calibrate import identity_problems, measure_bands, write_bands

    src_path = Path(args.contract)
    c = load_contract(args.contract)
    ref_dir = resolve_reference(c, args)
    out = _output(args, src_path, ref_dir)
    con = console()
    data = check_data_dir(args.data) if args.data else None
    ref_origin = None
    if ref_dir is not None:
        ref_origin = str(ref_dir) if args.reference else f"{ref_dir} (from {args.contract})"
    if out is not None:
        check_output(out, "-o" if args.output else "--in-place", input_dirs=(data, ref_dir), need_parent=False)
    if args.plot:
        if Path(args.plot).suffix.lower() not in (".png", ".svg", ".pdf"):
            raise UsageError(f"--plot {args.plot}: give a .png (or .svg / .pdf) file name")
        check_output(args.plot, "--plot", inputs=(args.contract,), input_dirs=(data, ref_dir))
    ref_model = _reference_model(c, ref_dir) if ref_dir is not None else None
    if data is not None:
        if ref_model is not None:
            wrong = identity_problems(c, data, ref_model)
            if wrong:
                for line, _ in wrong:
                    error(line)
                print(f"eagle3-conformance: calibrate refused: the slots of {data} are not the boundaries "
                      f"{args.contract} declares, so their norms would calibrate the wrong layers; no file written",
                      file=sys.stderr)
                for gate in dict.fromkeys(g for _, g in wrong):
                    print("eagle3-conformance: " + _gate_line(c, gate), file=sys.stderr)
                return ExitCode.VIOLATIONS
        else:
            con.print(f"[yellow]warning: slot identity not verified: no reference model (give --reference "
                      f"MODEL_DIR); the bands describe whatever {data} holds in each slot, which may not be "
                      f"the boundaries the contract declares[/yellow]")
    cal = measure_bands(c, data, ref_model, ref_dir, float(args.safety_factor))
    _show(con, c, cal, ref_model, ref_origin, args)
    if out is None:
        con.print("no file written (give -o OUT, or --in-place to update the contract)")
        return ExitCode.CONFORMS
    text = write_bands(src_path.read_text(encoding="utf-8"), cal.bands, cal.kappa, cal.source, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    con.print(f"wrote {out}: norm bands calibrated (kappa {cal.kappa})")
    return ExitCode.CONFORMS
