"""The every-row path of check-data at memory speed (issue 42): the slot check decides on the first rows of
real data and still fails on every fault it exists for wherever the fault's evidence lies in the block; the
statistics that see every value (finite, RMS per row, bands) come from one pass; the checks run on one
thread beside that pass."""

from __future__ import annotations

import shutil

import pytest
import torch
from torch.overrides import TorchFunctionMode

from eagle3_conformance.checks import degenerate, registry
from eagle3_conformance.checks.degenerate import CHUNK_ELEMS, FIRST_ROWS, _row_chunks
from eagle3_conformance.scan import DISK_PATH, scan


class _Converted(TorchFunctionMode):
    """Records the element count of every tensor converted with ``.float()`` inside the block."""

    def __init__(self):
        super().__init__()
        self.sizes: list[int] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.float:
            self.sizes.append(args[0].numel())
        return func(*args, **(kwargs or {}))


def _rows(n: int, d: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


IDS = torch.arange(5000)  # every token different


def test_row_chunks_start_at_two_rows_double_and_never_exceed_the_chunk():
    n, d = 5000, 4096
    chunks = list(_row_chunks(n, d))
    assert chunks[0] == (0, FIRST_ROWS) and chunks[1] == (FIRST_ROWS, 3 * FIRST_ROWS)
    assert chunks[-1][1] == n and all(a == b for (_, a), (b, _) in zip(chunks, chunks[1:]))  # contiguous, complete
    assert max((b - a) * d for a, b in chunks) <= CHUNK_ELEMS
    assert list(_row_chunks(3, CHUNK_ELEMS * 2)) == [(0, 1), (1, 2), (2, 3)]  # at least one row, however wide


def test_real_rows_are_decided_on_the_first_two_rows():
    """O(d) on real data: one non-zero row, one row that varies, one row unlike row 0 answer all three
    questions; nothing beyond the first chunk is converted."""
    x = _rows(4096, 4096)
    with _Converted() as seen:
        assert degenerate(x, IDS[:4096]) is None
    assert max(seen.sizes) <= FIRST_ROWS * 4096 and sum(seen.sizes) <= (FIRST_ROWS + 1) * 4096


@pytest.mark.parametrize("fault", ["zero", "constant", "repeated"])
def test_a_degenerate_block_is_read_in_chunks_never_converted_whole(fault):
    n, d = 3000, 4096
    x = {"zero": torch.zeros(n, d), "constant": torch.arange(n).float()[:, None].expand(n, d) + 1,
         "repeated": _rows(1, d).float().expand(n, d)}[fault].to(torch.bfloat16)
    with _Converted() as seen:
        why = degenerate(x, IDS[:n])
    assert why == {"zero": "all rows zero", "constant": "every row constant", "repeated": "one row repeated"}[fault]
    assert max(seen.sizes) <= CHUNK_ELEMS < n * d


# --- the faults, wherever their evidence lies in the block ------------------------------------------


def test_all_zero_fails_and_one_non_zero_last_row_passes():
    x = torch.zeros(3000, 64, dtype=torch.bfloat16)
    assert degenerate(x, IDS[:3000]) == "all rows zero"
    x[-1] = _rows(1, 64)[0]
    assert degenerate(x, IDS[:3000]) is None  # the evidence is in the last chunk: read to the end


def test_constant_rows_fail_whatever_their_values_and_one_varying_last_row_passes():
    """Each row one value (different per row): row 0 vs row 1 answers 'repeated' at once, but 'constant'
    needs every row."""
    x = (torch.arange(3000).float()[:, None] * 0.5 + 1).expand(3000, 64).contiguous().to(torch.bfloat16)
    assert degenerate(x, IDS[:3000]) == "every row constant"
    x[-1, 5] = -7.0
    assert degenerate(x, IDS[:3000]) is None


def test_one_row_repeated_fails_when_the_first_tokens_are_one_id_and_only_later_ids_differ():
    """The ids that make a repeated row a fault may begin after the first rows: "a a a ... b"."""
    n = 3000
    x = _rows(1, 64).expand(n, 64)
    ids = torch.zeros(n, dtype=torch.long)
    assert degenerate(x, ids) is None  # one token repeated: equal rows are legitimate (the embedding B_0)
    ids[-1] = 9
    assert degenerate(x, ids) == "one row repeated"
    assert degenerate(x, None) == "one row repeated"  # ids unknown: counted as different


def test_repeated_rows_then_one_different_last_row_pass():
    x = _rows(1, 64).expand(3000, 64).contiguous()
    x[-1, 0] += 1
    assert degenerate(x, IDS[:3000]) is None


def test_rows_that_turn_degenerate_after_the_first_rows_are_not_every_row():
    """The check's question is every row; a slot whose zero or repeated rows begin after the first rows
    holds hidden states in those first rows, on either implementation (the norm band, on every row's RMS,
    is what judges the zero rows: test_zero_rows_after_the_first_rows_fail_the_band_on_every_row)."""
    x = _rows(3000, 64)
    x[2:] = 0
    assert degenerate(x, IDS[:3000]) is None
    y = _rows(3000, 64)
    y[2:] = y[2]
    assert degenerate(y, IDS[:3000]) is None


@pytest.mark.parametrize("where", [0, 1, 2999])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_values_leave_the_verdict_to_the_finite_check(where, value):
    """A block holding NaN or Inf is None (the finite check names it), wherever the value lies: in an
    all-zero block, a constant block, a repeated block, and as a whole row of NaN or Inf."""
    zero = torch.zeros(3000, 64)
    zero[where, 3] = value
    const = torch.full((3000, 64), 0.25)
    const[where] = value
    rep = _rows(1, 64).float().expand(3000, 64).contiguous()
    rep[where, 5] = value
    inf_rows = torch.zeros(3000, 64)
    inf_rows[where] = float("inf")  # one row of one value (Inf): "constant" unless the finite check speaks
    for x in (zero, const, rep, inf_rows):
        assert degenerate(x.to(torch.bfloat16), IDS[:3000]) is None


def test_float8_rows_are_compared_as_values():
    x = torch.zeros(100, 64).to(torch.float8_e4m3fn)
    assert degenerate(x, IDS[:100]) == "all rows zero"
    assert degenerate(_rows(100, 64).float().to(torch.float8_e4m3fn), IDS[:100]) is None


# --- through check-data's all-rows pass ---------------------------------------------------------------


def _copy(tiny, tmp_path):
    out = tmp_path / "data"
    shutil.copytree(tiny.data_dir, out)
    return out


def _edit(data, i: int, fn) -> int:
    from safetensors.torch import load_file, save_file

    f = data / "hidden_states" / f"hs_{i}.safetensors"
    t = load_file(str(f))
    fn(t["hidden_states"])
    save_file(t, str(f))
    return int(t["hidden_states"].shape[0])


def test_nan_in_the_last_row_of_the_last_sample_fails_finite(tiny, tiny_contract, tmp_path):
    data = _copy(tiny, tmp_path)
    last = 11
    T = _edit(data, last, lambda hs: hs[-1, 2].__setitem__(-1, float("nan")))  # last row, aux slot 2, last value
    bad = [f for f in scan(tiny_contract, data, sample=0).findings if f.status == "fail"]
    assert [(f.path, f.check, f.where, f.observed) for f in bad] == [
        (DISK_PATH, "finite", f"sample {last}", f"non-finite rows [{T - 1}]")]


@pytest.mark.parametrize("fault,why", [("zero", "all rows zero"), ("repeated", "one row repeated")])
def test_a_degenerate_slot_fails_slot_degenerate_on_every_row_pass(tiny, tiny_contract, tmp_path, fault, why):
    data = _copy(tiny, tmp_path)

    def inject(hs):
        if fault == "zero":
            hs[:, 2] = 0
        else:
            hs[:, 2] = hs[-1, 2].clone()  # the last row's state over every token

    rows = [_edit(data, i, inject) for i in range(12)]
    bad = [f for f in scan(tiny_contract, data, sample=0).findings if f.check == "slot_degenerate"
           and f.status == "fail"]
    # one row cannot be "repeated": a one-token sample is not a fault of that kind
    assert len(bad) == (12 if fault == "zero" else sum(t > 1 for t in rows)) >= 11
    assert {f.slot for f in bad} == {"slot 2"} and all(why in f.message for f in bad)


def test_zero_rows_after_the_first_rows_fail_the_band_on_every_row(tiny, tiny_contract, tmp_path):
    """Zero rows that begin after the first rows (a capture that stopped writing) are not 'every row zero';
    the calibrated norm band, read from the one RMS pass over every row, fails them."""
    from conftest import contract_with

    c = contract_with(tiny_contract, **{"norm_bands.status": "calibrated", "norm_bands.bands": [
        {"slot": s, "lo": 1e-3, "hi": 1e3} for s in ["B_2", "B_4", "B_5", "B_8"]]})
    data = _copy(tiny, tmp_path)
    assert not [f for f in scan(c, data, sample=0).findings if f.status == "fail"]
    T = _edit(data, 3, lambda hs: hs[2:, 1].zero_())
    bad = [f for f in scan(c, data, sample=0).findings if f.status == "fail"]
    assert [(f.check, f.slot, f.where) for f in bad] == [("norm_band", "slot 1", "sample 3")]
    assert f"{T - 2} rows outside the band" in bad[0].message


def test_the_checks_run_on_one_thread_beside_the_rms_pass(tiny, tiny_contract, monkeypatch):
    from dataclasses import replace

    from eagle3_conformance.scan import rms as rms_mod

    seen: dict[str, set] = {"rms": set(), "checks": set()}
    orig = rms_mod.slot_rms
    monkeypatch.setattr(rms_mod, "slot_rms",
                        lambda *a, **k: (seen["rms"].add(torch.get_num_threads()), orig(*a, **k))[1])
    spec = registry.REGISTRY["slot_degenerate"]
    monkeypatch.setitem(registry.REGISTRY, "slot_degenerate", replace(
        spec, fn=lambda *a: (seen["checks"].add(torch.get_num_threads()), spec.fn(*a))[1]))
    before = torch.get_num_threads()
    scan(tiny_contract, tiny.data_dir, sample=0, cpus_per_worker=2)
    assert seen == {"rms": {2}, "checks": {1}} and torch.get_num_threads() == before


def test_openmp_threads_sleep_between_regions_unless_the_user_says_otherwise():
    import os
    import subprocess
    import sys

    code = ("from eagle3_conformance.environment import torch_env; torch_env.prepare(); import os; "
            "print(os.environ['OMP_WAIT_POLICY'])")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "PASSIVE"
    assert subprocess.run([sys.executable, "-c", code], env={**env, "OMP_WAIT_POLICY": "ACTIVE"}, capture_output=True,
                          text=True, check=True).stdout.strip() == "ACTIVE"
