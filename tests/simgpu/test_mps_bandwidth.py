"""MPS co-location of compute-bound GEMMs with bandwidth-bound kernels: DRAM shared by Little's law.

Behaviour, not fitted numbers: a GEMM loses more next to a streamer than next to a GEMM of the same SM
share, nobody moves more bytes than DRAM has, more streamer SMs hurt the GEMM more, the new
constant only acts when kernels share the GPU, and an elementwise op reading more input tensors keeps
more loads in flight (a larger DRAM share, a slower GEMM beside it) while a unary one is a copy."""
from __future__ import annotations

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simgpu.catalog import get_gpu
from simgpu.errors import SimgpuError
from simgpu.perf import (
    ClientLoad,
    CopyOp,
    ElementwiseOp,
    GemmOp,
    colocate,
    mps_visible_sms,
    op_cost,
    op_to_dict,
    params_for,
    parse_op,
)
from simgpu.perf.colocation import _latency_factor
from simgpu.perf.memory import bandwidth
from simgpu.perf.ops import ELEMENTWISE_INPUTS
from simgpu.perf.params import PerfParams
from simgpu.profile import with_params

H100 = get_gpu("H100")
GEMM = GemmOp(8192, 8192, 8192, "bf16")
MID = GemmOp(4096, 4096, 4096, "bf16")
COPY = CopyOp(2**30)            # moves 2 GiB a call
ADD = ElementwiseOp(3 * 2**30, 2**28, inputs=2)  # z = x + y over 2^28 floats, as measured


def moved(op) -> float:
    return 2.0 * op.bytes if isinstance(op, CopyOp) else float(op.bytes)


def mps(gpu, *clients: tuple) -> list[float]:
    return colocate(gpu, "mps", [ClientLoad(op, pct) for op, pct in clients])


@pytest.mark.parametrize("gemm", [GEMM, MID])
@pytest.mark.parametrize("gpu_name", ["H100", "H200", "A100-80GB"])
def test_a_streamer_hurts_a_gemm_more_than_a_gemm_of_the_same_share(gpu_name, gemm):
    gpu = get_gpu(gpu_name)
    alone = mps(gpu, (gemm, 50))[0]
    next_to_gemm = mps(gpu, (gemm, 50), (gemm, 50))[0]
    next_to_copy = mps(gpu, (gemm, 50), (COPY, 50))[0]
    assert next_to_copy < next_to_gemm <= alone * 1.001
    # and it is a real loss, not rounding: a quarter of its speed at least (H100 measured: half)
    assert next_to_copy < 0.75 * alone


@settings(max_examples=25, deadline=None)
@given(gemm_pct=st.integers(10, 100), stream_pct=st.integers(10, 100),
       stream=st.sampled_from([COPY, ADD, CopyOp(2**28), ElementwiseOp(4 * 2**30, inputs=3)]),
       gpu_name=st.sampled_from(["H100", "H200"]))
def test_nobody_moves_more_than_dram_has(gemm_pct, stream_pct, stream, gpu_name):
    gpu = get_gpu(gpu_name)
    g_rate, s_rate = mps(gpu, (GEMM, gemm_pct), (stream, stream_pct))
    streamed = s_rate * moved(stream)
    assert streamed <= gpu.mem_bw_bytes_per_s
    # the streamer never beats itself alone on the same SMs
    assert s_rate <= mps(gpu, (stream, stream_pct))[0] * 1.001
    assert g_rate <= mps(gpu, (GEMM, gemm_pct))[0] * 1.001


@pytest.mark.parametrize("gemm", [GEMM, MID])
def test_more_streamer_sms_hurt_the_gemm_more(gemm):
    rates = [mps(H100, (gemm, 25), (COPY, pct)) for pct in (10, 25, 40, 50, 60, 75)]
    gemm_rates = [g for g, _ in rates]
    copy_rates = [c for _, c in rates]
    assert all(b <= a * 1.005 for a, b in zip(gemm_rates, gemm_rates[1:], strict=False))
    assert all(b >= a * 0.995 for a, b in zip(copy_rates, copy_rates[1:], strict=False))
    assert gemm_rates[-1] < 0.8 * gemm_rates[0]


def test_a_gemm_with_more_sms_loses_less_of_its_speed():
    """At a fixed split of the GPU, the side with more SMs keeps more of its own speed."""
    small = mps(H100, (GEMM, 25), (COPY, 75))[0] / mps(H100, (GEMM, 25))[0]
    large = mps(H100, (GEMM, 75), (COPY, 25))[0] / mps(H100, (GEMM, 75))[0]
    assert small < large


@settings(max_examples=50, deadline=None)
@given(sms=st.integers(1, 132), bw=st.floats(5e11, 1e13), per_sm=st.floats(1e10, 2e11))
def test_one_streamer_by_littles_law_is_the_soft_minimum(sms, bw, per_sm):
    """The sharing law reduces to memory.bandwidth for a single streamer: outstanding / loaded latency."""
    outstanding = sms * per_sm
    assert outstanding / _latency_factor(outstanding, bw) == pytest.approx(bandwidth(bw, 1.0, sms, per_sm), rel=1e-9)


def test_the_clock_term_only_acts_when_kernels_share_the_gpu():
    base = params_for(H100)
    gpus = [with_params(H100, base.model_copy(update={"stream_latency_on_chip": x})) for x in (0.0, 1.0)]
    for op, pct in ((GEMM, 50), (COPY, 50), (COPY, None), (ADD, 25)):
        a, b = (mps(g, (op, pct))[0] for g in gpus)
        assert a == pytest.approx(b, rel=1e-9)
    # next to a GEMM that holds the clock under the power limit, the streamer streams less per SM
    low, high = (mps(g, (GEMM, 75), (COPY, 25))[1] for g in gpus)
    assert high < low


def test_two_streamers_split_dram_evenly_and_fill_it():
    a, b = mps(H100, (COPY, 50), (COPY, 50))
    assert a == pytest.approx(b, rel=1e-3)
    solo_full = mps(H100, (COPY, None))[0]
    assert (a + b) == pytest.approx(solo_full, rel=0.05)


@pytest.mark.parametrize("bad", [-0.1, 1.5, "x"])
def test_the_constant_is_validated(bad):
    doc = params_for(H100).model_dump() | {"stream_latency_on_chip": bad}
    with pytest.raises(pydantic.ValidationError, match="stream_latency_on_chip"):
        PerfParams.model_validate(doc)


# ---------------------------------------------------------------- elementwise input count

def streamed(gpu, op, rate: float) -> float:
    """DRAM bytes/s a streamer moves at `rate` calls/s."""
    return rate * moved(op)


@pytest.mark.parametrize("gemm", [GEMM, MID])
@pytest.mark.parametrize("gpu_name", ["H100", "H200"])
def test_more_inputs_in_flight_take_more_dram_and_slow_the_gemm_more(gpu_name, gemm):
    """Same bytes, same SMs: an op whose threads keep more loads in flight takes a larger share of DRAM
    next to a GEMM, and the GEMM loses more of its speed."""
    gpu = get_gpu(gpu_name)
    gemm_rates, shares = [], []
    for k in (1, 2, 3, 4):
        op = ElementwiseOp(3 * 2**30, 2**28, inputs=k)
        g, s = mps(gpu, (gemm, 50), (op, 50))
        gemm_rates.append(g)
        shares.append(streamed(gpu, op, s))
    assert all(b < a for a, b in zip(gemm_rates, gemm_rates[1:], strict=False))
    assert all(b > a for a, b in zip(shares, shares[1:], strict=False))
    assert gemm_rates[1] < 0.95 * gemm_rates[0]  # a real difference between a unary op and an add


def test_an_add_hurts_a_gemm_more_than_a_copy_moving_the_same_bytes():
    copy_gemm = mps(H100, (GEMM, 50), (CopyOp(3 * 2**29), 50))[0]
    add_gemm = mps(H100, (GEMM, 50), (ADD, 50))[0]
    assert add_gemm < copy_gemm


@pytest.mark.parametrize("gpu_name", ["H100", "H200", "A100-80GB"])
@pytest.mark.parametrize("pct", [10, 25, 50, 75, None])
def test_a_unary_op_streams_exactly_like_a_copy_of_the_same_bytes(gpu_name, pct):
    """The default input count keeps every existing caller's prediction: one input is a copy's one load
    in flight per thread, alone (op_cost, MPS) and next to a GEMM."""
    gpu = get_gpu(gpu_name)
    unary, copy = ElementwiseOp(2 * 2**30), CopyOp(2**30)
    assert unary == ElementwiseOp(2 * 2**30, 0, inputs=1)
    assert mps(gpu, (unary, pct))[0] == pytest.approx(mps(gpu, (copy, pct))[0], rel=1e-12)
    sms = None if pct is None else mps_visible_sms(gpu, pct)
    assert op_cost(gpu, unary, sms).kernel_seconds == pytest.approx(op_cost(gpu, copy, sms).kernel_seconds, rel=1e-12)
    pair = mps(gpu, (GEMM, 50), (unary, 50)), mps(gpu, (GEMM, 50), (copy, 50))
    assert pair[0] == pytest.approx(pair[1], rel=1e-12)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_on_few_sms_k_inputs_stream_k_plus_1_over_2_times_a_unary_op(k):
    """SM-bound (2 SMs: far from DRAM's limit) a k-input op moves (k+1)/2 of a unary op's bytes/s
    (k loads in flight per thread, and each byte read brings (k+1)/k bytes of traffic); on the whole
    GPU both are DRAM-bound, so the input count barely matters there."""
    nbytes = 3 * 2**30

    def rate(op, sms):
        return nbytes / op_cost(H100, op, sms).kernel_seconds
    few = rate(ElementwiseOp(nbytes, inputs=k), 2) / rate(ElementwiseOp(nbytes), 2)
    assert few == pytest.approx((k + 1) / 2, rel=0.01)
    full = rate(ElementwiseOp(nbytes, inputs=k), None) / rate(ElementwiseOp(nbytes), None)
    assert 1.0 <= full < 1.02


@pytest.mark.parametrize("bad", [0, 5, -1, 2.5, True, "2", None])
def test_a_bad_input_count_is_refused_naming_the_field(bad):
    with pytest.raises(SimgpuError) as err:
        ElementwiseOp(2**20, inputs=bad)
    assert err.value.field == "inputs" and list(err.value.allowed) == list(ELEMENTWISE_INPUTS)
    with pytest.raises(SimgpuError) as err:
        parse_op({"op": "elementwise", "bytes": 2**20, "inputs": bad}, "clients[1].op.")
    assert err.value.field == "clients[1].op.inputs" and list(err.value.allowed) == list(ELEMENTWISE_INPUTS)


@settings(deadline=None)
@given(st.one_of(st.integers(), st.floats(allow_nan=True), st.text(max_size=3), st.booleans(), st.none()))
def test_any_input_count_parses_or_names_the_field(value):
    try:
        op = parse_op({"op": "elementwise", "bytes": 64, "inputs": value})
    except SimgpuError as err:
        assert err.field == "inputs" and err.allowed
        return
    assert op.inputs in ELEMENTWISE_INPUTS and op.inputs == value
    assert parse_op(op_to_dict(op)) == op
