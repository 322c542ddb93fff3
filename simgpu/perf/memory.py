"""DRAM bandwidth a kernel reaches on `n` SMs: the achievable fraction of the datasheet bandwidth, or
what n SMs can keep in flight (Little's law: per-SM bytes in flight / latency), whichever is smaller,
joined by a soft minimum so the curve bends like the measured one (H100 MPS: 25% of SMs -> 67%)."""
from __future__ import annotations

SOFTMIN_P = 3.0


def softmin(a: float, b: float, p: float = SOFTMIN_P) -> float:
    return (a ** -p + b ** -p) ** (-1.0 / p)


def bandwidth(mem_bw: float, efficiency: float, sms: int, per_sm: float) -> float:
    """Bytes/s (read + write) a bandwidth-bound kernel moves with `sms` SMs."""
    return softmin(mem_bw * efficiency, max(sms, 1) * per_sm)
