"""op_cost: the time and resource use of one op alone on a GPU (or on some of its SMs)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from simgpu.errors import SimgpuError
from simgpu.perf.gemm import GemmTime, flops_per_clk_per_sm, gemm_time
from simgpu.perf.memory import bandwidth, inflight_per_sm
from simgpu.perf.ops import CopyOp, ElementwiseOp, GemmOp, Op
from simgpu.perf.params import PerfParams, params_for
from simgpu.perf.power import clock_mhz, headroom


@dataclass(frozen=True)
class OpCost:
    """seconds: wall time of the op issued alone from a framework and timed with CUDA events around it:
    the host's dispatch then the kernel, or the framework's floor between the two events for tiny ops;
    kernel_seconds: GPU busy time alone (what the op costs the GPU when sharing it).
    Activities are fractions (0..1) of the whole GPU over `seconds`."""

    seconds: float
    flops: float
    dram_bytes: float
    sm_active: float
    tensor_active: float
    dram_active: float
    kernel_seconds: float = 0.0
    mhz: float = 0.0


def check_sm_count(gpu, sm_count: int | None) -> int:
    if sm_count is None:
        return gpu.sms
    if isinstance(sm_count, bool) or not isinstance(sm_count, int) or not 1 <= sm_count <= gpu.sms:
        raise SimgpuError(f"got {sm_count!r}", field="sm_count", allowed=[f"1..{gpu.sms}"])
    return sm_count


def check_dtype(gpu, dtype: str) -> None:
    if dtype not in gpu.supported_dtypes():
        raise SimgpuError(f"{dtype!r} is not supported on {gpu.name}", field="dtype",
                          allowed=gpu.supported_dtypes())


def gemm_at_power(gpu, params: PerfParams, op: GemmOp, sms: int, *, sustained: bool,
                  other_demand: float = 0.0) -> tuple[GemmTime, float]:
    """GEMM time with the clock its own power draw allows (a fixed point: clock -> time -> power)."""
    mhz = gpu.boost_mhz
    result = gemm_time(gpu, params, op, sms, mhz)
    for _ in range(8):
        busy = min(1.0, result.compute_s / result.seconds)
        demand = other_demand + sms / gpu.sms * params.power(op.dtype) * busy
        target = clock_mhz(gpu, demand, headroom(params, None if sustained else result.seconds))
        if abs(target - mhz) < 0.5:
            break
        mhz = 0.5 * (mhz + target)
        result = gemm_time(gpu, params, op, sms, mhz)
    return result, mhz


def power_demand(gpu, op: Op, sm_count: int | None = None) -> float:
    """Sustained power demand of `op` running on `sm_count` SMs, in simgpu.perf.power's units (the whole
    GPU's dynamic power at peak_mhz relative to the budget): SM share x the dtype's demand x how busy the
    tensor/FP pipes are, as gemm_at_power computes it. Bandwidth-bound kernels have none (the model does
    not let them move the clock)."""
    if not isinstance(op, GemmOp):
        return 0.0
    params = params_for(gpu)
    n = check_sm_count(gpu, sm_count)
    check_dtype(gpu, op.dtype)
    result, _ = gemm_at_power(gpu, params, op, n, sustained=True)
    return n / gpu.sms * params.power(op.dtype) * min(1.0, result.compute_s / result.seconds)


def kernel_seconds(gpu, op: Op, sms: int | None = None, *, sustained: bool = True,
                   params: PerfParams | None = None) -> float:
    """GPU busy time of one op on `sms` SMs (the building block of co-location)."""
    params = params or params_for(gpu)
    n = check_sm_count(gpu, sms)
    if isinstance(op, GemmOp):
        check_dtype(gpu, op.dtype)
        return gemm_at_power(gpu, params, op, n, sustained=sustained)[0].seconds
    return stream_kernel(gpu, params, op, n).seconds


class StreamKernel(NamedTuple):
    """A bandwidth-bound kernel (copy or elementwise) alone on some SMs at the boost clock."""

    seconds: float
    dram_bytes: float
    flops: float
    compute_s: float  # its arithmetic alone (it overlaps the memory traffic)


def stream_kernel(gpu, params: PerfParams, op: CopyOp | ElementwiseOp, sms: int) -> StreamKernel:
    """Time of a bandwidth-bound kernel on `sms` SMs: the slower of its DRAM traffic (at what those SMs
    can keep in flight) and its arithmetic, plus a launch."""
    moved = 2.0 * op.bytes if isinstance(op, CopyOp) else float(op.bytes)
    flops = 0.0 if isinstance(op, CopyOp) else float(op.flops)
    bw = bandwidth(gpu.mem_bw_bytes_per_s, params.dram_efficiency, sms,
                   inflight_per_sm(op, params.sm_bandwidth_bytes_per_s))
    compute = flops / (sms * gpu.fp32_flops_per_clk_per_sm * gpu.boost_mhz * 1e6)
    return StreamKernel(params.launch_seconds(gpu.boost_mhz) + max(moved / bw, compute), moved, flops, compute)


def event_timed(params: PerfParams, key: str, kernel: float, mhz: float) -> float:
    """What CUDA events around one op issued right after a synchronise measure: the start event fires at
    once and the kernel starts after the host's latency (dispatch + launch); the end event waits for the
    CPU's whole call too, so a tiny op shows the host's floor plus the kernel's own minimum (its launch
    cycles at the clock `mhz`). Host constants: simgpu/calibrate_host.py."""
    return max(params.floor(key) + params.launch_seconds(mhz), params.latency(key) + kernel)


def op_cost(gpu, op: Op, sm_count: int | None = None) -> OpCost:
    """Cost of `op` alone on `gpu` (or on `sm_count` of its SMs, as under an MPS percentage)."""
    params = params_for(gpu)
    n = check_sm_count(gpu, sm_count)
    share = n / gpu.sms
    if isinstance(op, GemmOp):
        check_dtype(gpu, op.dtype)
        t, mhz = gemm_at_power(gpu, params, op, n, sustained=False)
        seconds = event_timed(params, op.dtype, t.seconds, mhz)
        if op.dtype == "fp32":
            tensor = 0.0
        else:
            tensor = op.flops / (gpu.sms * flops_per_clk_per_sm(gpu, op.dtype) * mhz * 1e6 * seconds)
        return OpCost(seconds=seconds, flops=op.flops, dram_bytes=t.dram_bytes,
                      sm_active=share * t.seconds / seconds, tensor_active=min(1.0, tensor),
                      dram_active=min(1.0, t.dram_bytes / (gpu.mem_bw_bytes_per_s * seconds)),
                      kernel_seconds=t.seconds, mhz=mhz)
    if isinstance(op, CopyOp | ElementwiseOp):
        kernel, moved, flops, _ = stream_kernel(gpu, params, op, n)
        seconds = event_timed(params, "copy", kernel, gpu.boost_mhz)
        return OpCost(seconds=seconds, flops=flops, dram_bytes=moved, sm_active=share * kernel / seconds,
                      tensor_active=0.0, dram_active=min(1.0, moved / (gpu.mem_bw_bytes_per_s * seconds)),
                      kernel_seconds=kernel, mhz=gpu.boost_mhz)
    raise SimgpuError(f"not an op: {op!r}", field="op", allowed=["GemmOp", "CopyOp", "ElementwiseOp"])


def mps_visible_sms(gpu, pct: float) -> int:
    """SMs an MPS client sees at CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=pct: whole TPCs (2 SMs), rounded down,
    at least 8 SMs (measured on H100: max(8, 2 * floor(pct * 66 / 100)) of 132)."""
    if isinstance(pct, bool) or not isinstance(pct, int | float) or not 1 <= pct <= 100:
        raise SimgpuError(f"got {pct!r}", field="mps_pct", allowed=["1..100"])
    params = params_for(gpu)
    g = params.mps_sm_granularity
    if pct >= 100:
        return gpu.sms
    visible = g * math.floor(pct * (gpu.sms // g) / 100 + 1e-9)
    return max(min(params.mps_min_sms, gpu.sms), min(visible, gpu.sms))
