"""MPS SM shares and clock headroom; co-location under time-slicing and MPS."""
from __future__ import annotations

import math

import pytest

from simgpu.catalog import get_gpu
from simgpu.errors import SimgpuError
from simgpu.perf import (
    CONTEXT_SWITCH_S,
    TIMESLICE_S,
    ClientLoad,
    CopyOp,
    GemmOp,
    colocate,
    mps_visible_sms,
    timeslice_params,
)

H100 = get_gpu("H100")
BIG = GemmOp(8192, 8192, 8192, "bf16")
SMALL = GemmOp(1024, 1024, 1024, "bf16")
STREAM = CopyOp(2**30)


def solo(op, mode="timeslice", pct=None) -> float:
    return colocate(H100, mode, [ClientLoad(op, pct)])[0]


@pytest.mark.parametrize("pct", range(1, 101))
def test_visible_sms_match_the_h100_measurement(pct):
    assert mps_visible_sms(H100, pct) == (132 if pct == 100 else max(8, 2 * math.floor(pct * 66 / 100)))


def test_visible_sms_generalise_by_tpc():
    a100 = get_gpu("A100-80GB")  # 108 SMs = 54 TPCs
    assert mps_visible_sms(a100, 50) == 54
    assert mps_visible_sms(a100, 100) == 108
    assert mps_visible_sms(a100, 1) == 8
    assert all(mps_visible_sms(a100, p) % 2 == 0 for p in range(1, 100))


@pytest.mark.parametrize("bad", [0, 100.5, -3, 101, "50", None, True, float("nan")])
def test_bad_mps_percentages(bad):
    with pytest.raises(SimgpuError) as err:
        mps_visible_sms(H100, bad)
    assert err.value.field == "mps_pct" and err.value.allowed == ["1..100"]


def test_half_the_sms_give_about_two_thirds_of_the_throughput():
    full = solo(BIG, "mps")
    half = solo(BIG, "mps", 50) / full
    assert 0.6 < half < 0.72  # measured 0.657: fewer SMs draw less power, so they clock higher
    curve = [solo(BIG, "mps", p) / full for p in (10, 25, 50, 75, 100)]
    assert curve == sorted(curve)
    assert all(c > p / 100 for c, p in zip(curve[:-1], (10, 25, 50, 75), strict=True))


def test_memory_bound_kernels_need_few_sms():
    full = solo(STREAM, "mps")
    assert solo(STREAM, "mps", 25) / full > 0.55  # measured 0.67 with a quarter of the SMs
    assert solo(STREAM, "mps", 50) / full > solo(BIG, "mps", 50) / solo(BIG, "mps")


def test_timeslice_constants():
    assert timeslice_params(H100) == (TIMESLICE_S, CONTEXT_SWITCH_S)
    assert (TIMESLICE_S, CONTEXT_SWITCH_S) == (2.09e-3, 0.15e-3)


def test_time_slicing_big_kernels_loses_about_a_tenth():
    alone = solo(BIG)
    for n in (2, 4):
        rates = colocate(H100, "timeslice", [ClientLoad(BIG)] * n)
        assert len(rates) == n
        assert max(rates) < alone / n
        assert 0.85 < sum(rates) / alone < 0.97  # measured 0.908 (2 and 4 processes)
        assert max(rates) / min(rates) < 1.05  # fair


def test_time_slicing_many_small_kernels_loses_far_more():
    alone = solo(SMALL)
    pair = sum(colocate(H100, "timeslice", [ClientLoad(SMALL)] * 2)) / alone
    big_pair = sum(colocate(H100, "timeslice", [ClientLoad(BIG)] * 2)) / solo(BIG)
    assert pair < 0.5 < big_pair  # measured 0.395 vs 0.908


def test_mps_full_share_clients_lose_nothing_in_aggregate():
    alone = solo(BIG, "mps")
    rates = colocate(H100, "mps", [ClientLoad(BIG), ClientLoad(BIG)])
    assert sum(rates) == pytest.approx(alone, rel=0.05)


def test_mps_fifo_sharing_gives_gemm_and_copy_one_op_each_per_round():
    g, s = colocate(H100, "mps", [ClientLoad(BIG), ClientLoad(STREAM)])
    assert g == pytest.approx(s, rel=0.05)  # measured 465 and 464 it/s


def test_a_batch_of_one_syncs_after_every_op():
    four = colocate(H100, "timeslice", [ClientLoad(SMALL, batch=4)])[0]
    one = colocate(H100, "timeslice", [ClientLoad(SMALL, batch=1)])[0]
    assert one < four


@pytest.mark.parametrize("mode, clients, field", [
    ("roundrobin", [ClientLoad(BIG)], "mode"),
    ("mps", [], "clients"),
    ("timeslice", [ClientLoad(BIG, mps_pct=50)], "clients[0].mps_pct"),
    ("mps", [ClientLoad(BIG), ClientLoad(BIG, mps_pct=0)], "clients[1].mps_pct"),
    ("mps", [ClientLoad(BIG, batch=0)], "clients[0].batch"),
    ("mps", ["gemm"], "clients[0]"),
])
def test_colocate_rejects_bad_input(mode, clients, field):
    with pytest.raises(SimgpuError) as err:
        colocate(H100, mode, clients)
    assert err.value.field == field


def test_colocate_checks_the_dtype_against_the_gpu():
    with pytest.raises(SimgpuError) as err:
        colocate(get_gpu("T4"), "timeslice", [ClientLoad(GemmOp(64, 64, 64, "bf16"))])
    assert err.value.field == "clients[0].op.dtype"


def test_mps_small_kernels_slip_into_a_big_gemms_last_wave():
    g_alone = solo(BIG, "mps")
    small, big = colocate(H100, "mps", [ClientLoad(SMALL), ClientLoad(BIG)])
    assert big > 0.95 * g_alone  # the GEMM hardly notices
    assert small > 3 * big  # several small kernels per GEMM kernel, not one (measured 5x on H100 and H200)


def test_mps_split_clients_run_side_by_side():
    rates = colocate(H100, "mps", [ClientLoad(BIG, 25), ClientLoad(BIG, 75)])
    assert rates[1] > 2.5 * rates[0]  # measured 457 vs 153 it/s
    assert sum(rates) < solo(BIG, "mps") * 1.05
