"""FP8 transport error of hs-connectors 0.9.0 on a real trained target (docs/gates.md, "FP8 transport").

hs-connectors' ``fp8`` backend (``FP8HiddenStatesConnector._write_tensors``,
hs_connectors/fp8_hidden_states_connector.py:49-56) quantises the whole [T, N, H] stack of a
sample with ONE float32 scale per token, ``amax over (N, H) / 448`` (hs_connectors/fp8_utils.py:29-51),
and ``FP8Transfer`` dequantises it to bfloat16 (transfer.py:212-248). This script runs the
fixture's corpus samples through the float32 reference (and, with ``--bf16``, a bfloat16 forward as
a GPU server computes it), stacks the slots as vLLM's connector does (bf16, aux ascending, B_L
last), quantises and dequantises them with hs_connectors' own functions, and prints per slot:

- amax per slot (median and max over tokens; token 0 separately: massive activations);
- the per-token relative RMS error ``||deq - x|| / ||x||`` of the dequantised slot against the
  float32 reference boundary (what :func:`eagle3_conformance.checks.check_fp8_scale_error` gates), with
  token 0 excluded (``norm_bands.exclude_positions``) and, separately, at token 0;
- the fraction of values flushed to zero;
- the same with one massive value injected into B_L of a token (``--outlier`` x that token's amax),
  the fault the gate exists for (ECOSYSTEM.md 2.2 item 4).

With ``--checks``, the fixture's own stored data (and its ``-bf16`` variant's, written by a
bfloat16 forward) is rewritten as the fp8 backend writes it and run through ``check-data``
(every sample through speculators' loader with ``FP8Transfer``, every check against the float32
reference), once with ``training.transfer: fp8`` (correct: must not fail) and once with ``file``
(FP8 read as plain files: which checks see it).

Usage: python benchmarks/bench_fp8_transport.py [--fixture smollm2-135m] [--slots B_4 B_15 B_27 B_30]
       [--bf16] [--outliers 3 10 30 100] [--checks]
"""

from __future__ import annotations

import argparse
import time

from eagle3_conformance.environment import torch_env

torch_env.prepare()
import torch  # noqa: E402


def _err(deq: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """[T, N] relative RMS error per token and slot."""
    return (deq.float() - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-30)


def _q(x: torch.Tensor) -> torch.Tensor:
    from hs_connectors.fp8_utils import dequantize_fp8_tensor, quantize_tensor_to_fp8

    q, s = quantize_tensor_to_fp8(x)
    return dequantize_fp8_tensor(q, s, dtype=torch.bfloat16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixture", default="smollm2-135m")
    ap.add_argument("--slots", nargs="+", default=None, help="default: the fixture's data slots, then B_4 B_15 B_27 B_L")
    ap.add_argument("--bf16", action="store_true", help="also a bfloat16 forward (GPU-style GEMM) as the data")
    ap.add_argument("--outliers", nargs="+", type=float, default=[3, 10, 30, 100])
    ap.add_argument("--checks", action="store_true", help="only: every check on the fixture's data as FP8 "
                    "(and its -bf16 variant's), read with fp8 and with file")
    a = ap.parse_args()
    if a.checks:
        return run_checks(a.fixture)

    from eagle3_conformance.reference import ReferenceModel
    from eagle3_conformance.testbed.fixture_base import fixture_spec
    from eagle3_conformance.testbed.fixtures_real import corpus_samples, emulate_half_gemm, load_tokenizer, resolve_spec
    from eagle3_conformance.testbed.model_cache import ensure_model

    t0 = time.perf_counter()
    spec = resolve_spec(*fixture_spec(a.fixture))
    target = ensure_model(spec["model"], "float32")
    seqs = [list(s.input_ids) for s in corpus_samples(spec, load_tokenizer(target)) if len(s.input_ids) >= 2]
    ref = ReferenceModel(target)
    L = ref.model.config.num_hidden_layers
    slot_sets = [a.slots] if a.slots else [spec["data"]["slots"], ["B_4", "B_15", "B_27", f"B_{L}"]]
    forwards = {"float32 forward": ref}
    if a.bf16:
        bf = ReferenceModel(target)
        bf.model.to(torch.bfloat16)
        emulate_half_gemm(bf.model)
        forwards["bfloat16 forward"] = bf
    refs = [ref.capture(s) for s in seqs]
    print(f"{a.fixture}: {len(seqs)} corpus samples, {sum(map(len, seqs))} tokens (token 0 of each is its first)")
    for slots in slot_sets:
        print(f"\n== slots {slots} (aux ascending, verifier last; stored bf16 then FP8) ==")
        for fname, fwd in forwards.items():
            data = refs if fwd is ref else [fwd.capture(s) for s in seqs]
            errs, errs0, zero, amax, amax0, noise = [], [], [], [], [], []
            for r32, rd in zip(refs, data):
                want = torch.stack([r32.boundary(b) for b in slots], 1)  # float32 truth
                x = torch.stack([rd.boundary(b) for b in slots], 1).to(torch.bfloat16)  # what vLLM writes
                deq = _q(x)
                e = _err(deq, want)
                errs.append(e[1:])
                errs0.append(e[:1])
                noise.append(_err(x, want)[1:])
                zero.append(((deq == 0) & (x != 0)).float().mean(-1)[1:])
                am = x.float().abs().amax(-1)
                amax.append(am[1:])
                amax0.append(am[:1])
            E, E0, Z, A, A0, N = (torch.cat(v) for v in (errs, errs0, zero, amax, amax0, noise))
            print(f"-- {fname}: per-token relative RMS error vs the float32 reference, tokens 1.. ({E.shape[0]} rows)")
            print(f"{'slot':>6} {'amax med':>9} {'amax max':>9} {'amax@t0 max':>12} {'bf16 err med':>12} "
                  f"{'fp8 err med':>11} {'p99':>7} {'max':>7} {'max@t0':>7} {'zeroed max':>10}")
            for k, b in enumerate(slots):
                print(f"{b:>6} {float(A[:, k].median()):9.3g} {float(A[:, k].max()):9.3g} {float(A0[:, k].max()):12.3g} "
                      f"{float(N[:, k].median()):12.4f} {float(E[:, k].median()):11.4f} "
                      f"{float(torch.quantile(E[:, k], 0.99)):7.4f} {float(E[:, k].max()):7.4f} "
                      f"{float(E0[:, k].max()):7.4f} {float(Z[:, k].max()):10.3f}")
        # injected outlier: one value of B_L at token t set to f x that token's amax
        print(f"-- injected: one value of {slots[-1]} at a token set to f x the token's amax (float32 forward)")
        print(f"{'f':>6} " + " ".join(f"{b + ' err':>14}" for b in slots[:-1]) + "  zeroed(slot 0)")
        for f in a.outliers:
            worst = [0.0] * (len(slots) - 1)
            z0 = 0.0
            for r32 in refs:
                want = torch.stack([r32.boundary(b) for b in slots], 1)
                x = want.to(torch.bfloat16).clone()
                t = x.shape[0] // 2
                x[t, -1, 0] = f * float(x[t].float().abs().amax())
                deq = _q(x)
                e = _err(deq[t:t + 1, :-1], want[t:t + 1, :-1])[0]
                worst = [max(w, float(v)) for w, v in zip(worst, e)]
                z0 = max(z0, float(((deq[t, 0] == 0) & (x[t, 0] != 0)).float().mean()))
            print(f"{f:6g} " + " ".join(f"{w:14.4f}" for w in worst) + f"  {z0:.3f}")
    print(f"\n{time.perf_counter() - t0:.1f} s")


def run_checks(fixture: str) -> None:
    import collections
    import shutil
    import tempfile
    from pathlib import Path

    from safetensors.torch import load_file, save_file

    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.scan import scan
    from eagle3_conformance.testbed.datagen import hs_payload
    from eagle3_conformance.testbed.fixtures import REPO_ROOT, build_fixture

    for name in (fixture, fixture + "-bf16"):
        t0 = time.perf_counter()
        built = build_fixture(name)
        c = load_contract(REPO_ROOT / "contracts" / f"{name}.yaml")
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp) / "data"
            shutil.copytree(built.data_dir, d)
            for p in sorted((d / "hidden_states").glob("hs_*.safetensors")):  # as FP8HiddenStatesConnector writes
                t = load_file(str(p))
                save_file(hs_payload(t["hidden_states"], t["token_ids"], "fp8"), str(p))
            for tr in ("fp8", "file"):
                cc = c.model_copy(update={"training": c.training.model_copy(update={"transfer": tr})})
                res = scan(cc, d, sample=-1, reference_dir=built.target_dir)
                n = res.meta["samples"]
                fails = collections.Counter(f"{f.path}:{f.check}" for f in res.findings if f.status == "fail")
                print(f"{name} ({c.target.dtype} target, {n} samples) FP8 data read with {tr}: "
                      f"{sum(fails.values())} failed findings {dict(sorted(fails.items()))}")
                fe = [f for f in res.findings if f.check == "fp8_scale_error" and isinstance(f.observed, dict)]
                for slot in sorted({f.slot for f in fe}, key=lambda s: (s == "verifier", s)):
                    xs = [f.observed for f in fe if f.slot == slot]
                    worst = max(xs, key=lambda o: o["max"])
                    print(f"   fp8_scale_error {slot:>8}: max {worst['max']:.4f} (token {worst['token']}), "
                          f"median of sample medians {sorted(o['median'] for o in xs)[len(xs) // 2]:.4f}")
                mag = [f.observed["rms_ratio"] for f in res.findings if f.check == "magnitude"
                       and isinstance(f.observed, dict) and "rms_ratio" in f.observed]
                if mag:
                    print(f"   magnitude rms ratio: min {min(mag):.3f} max {max(mag):.3f} over {len(mag)} slot findings")
        print(f"   {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
