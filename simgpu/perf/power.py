"""Achieved SM clock under the board power limit.

Dynamic power grows with active SMs x activity x f x V^2, and V grows roughly with f, so at the limit
f = f_peak * demand**(-1/3), capped at the max clock. `demand` is the sum over running kernels of
(SM share x the dtype's power demand x how busy the tensor/FP pipes are), where a dtype's power demand is
the whole GPU's dynamic power at the clock NVIDIA's datasheet peaks assume (peak_mhz), relative to the
budget the power limit sustains. Tying it to peak_mhz carries it across GPUs: NVIDIA quotes tensor peaks
at the clock it expects tensor work to hold (1830 of 1980 MHz on H100, the full 1410 MHz on A100). Fewer active SMs (an MPS
percentage) draw less power and so run at a higher clock: that is why 50% of the SMs give ~66% of the
throughput. Short kernels may overdraw the sustained budget for a while (burst headroom)."""
from __future__ import annotations

from simgpu.perf.params import PerfParams


def headroom(params: PerfParams, kernel_s: float | None) -> float:
    """Power budget relative to the sustained one: > 1 for a short kernel timed alone, 1 when sustained."""
    if kernel_s is None:
        return 1.0
    w = params.burst_window_s
    return 1.0 + (params.burst_headroom - 1.0) * w / (w + max(kernel_s, 0.0))


def clock_mhz(gpu, demand: float, budget: float = 1.0) -> float:
    """SM clock for a power demand (relative to the sustained budget at peak_mhz) and a budget factor."""
    if demand <= 0:
        return gpu.boost_mhz
    return min(gpu.boost_mhz, gpu.peak_mhz * (demand / budget) ** (-1.0 / 3.0))


def board_power(gpu, demand: float, budget: float = 1.0) -> tuple[float, float]:
    """(SM clock in MHz, dynamic power in W) of a GPU whose running kernels draw `demand` (as clock_mhz
    takes it). Dynamic power scales as demand x (f / peak_mhz)^3, so at the power limit it is exactly
    power_w x budget, and below it (clock capped at boost_mhz) it is less. Idle, static and memory-traffic
    power are not in the model (a bandwidth-bound kernel has no demand): an idle GPU reads 0 W."""
    mhz = clock_mhz(gpu, demand, budget)
    if demand <= 0:
        return mhz, 0.0
    # the min only removes rounding (700.0000000000002 W on a 700 W board): the product never exceeds it otherwise
    return mhz, min(gpu.power_w * budget, gpu.power_w * demand * (mhz / gpu.peak_mhz) ** 3)
