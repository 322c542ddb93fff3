"""DRAM bandwidth a kernel reaches on `n` SMs: the achievable fraction of the datasheet bandwidth, or
what n SMs can keep in flight (Little's law: per-SM bytes in flight / latency), whichever is smaller,
joined by a soft minimum so the curve bends like the measured one (H100 MPS: 25% of SMs -> 67%)."""
from __future__ import annotations

from simgpu.perf.ops import CopyOp, ElementwiseOp

SOFTMIN_P = 3.0


def softmin(a: float, b: float, p: float = SOFTMIN_P) -> float:
    return (a ** -p + b ** -p) ** (-1.0 / p)


def bandwidth(mem_bw: float, efficiency: float, sms: int, per_sm: float) -> float:
    """Bytes/s (read + write) a bandwidth-bound kernel moves with `sms` SMs."""
    return softmin(mem_bw * efficiency, max(sms, 1) * per_sm)


def inflight_per_sm(op: CopyOp | ElementwiseOp, per_sm: float) -> float:
    """DRAM traffic (read + write bytes/s at the unloaded latency) that one SM running `op` keeps in
    flight, given `per_sm`, a copy's (sm_bandwidth_bytes_per_s, fitted on copies).

    Derivation (Little's law, no fitted constant). A streaming SM is limited by the loads its resident
    threads have outstanding: a thread waits for its loads, never for its stores. A copy thread has one
    load in flight (an element group of its source). PyTorch's elementwise kernels load every input's
    element group before computing (ATen's elementwise_kernel_helper: load all arguments, compute,
    store), so a thread of an op with k inputs has k loads in flight: k times the read bytes per SM.
    Each byte read brings (k + 1)/k bytes of traffic (the output is written once for k inputs read),
    against a copy's 2. Traffic in flight relative to a copy: k * ((k + 1)/k) / 2 = (k + 1)/2 -- an
    add (k = 2) keeps 2x a copy's loads but 1.5x its traffic in flight, which is the ratio the H100
    add-next-to-GEMM mixes point to (bench/data/h100_colocation_mps_bw.json, simgpu/README.md).

    Why this is an upper bound, and why measured ratios may fall below it: the SM holds a finite
    number of outstanding L1 misses (miss-status registers, load queue entries; Lashgar, Salehi and
    Baniasadi, "Understanding outstanding memory request handling resources in GPGPUs", 2015), so once
    the threads' loads exceed that, more loads per thread add no memory-level parallelism (Volkov,
    "Understanding latency hiding on GPUs", PhD thesis, UC Berkeley 2016: bandwidth saturates at a
    bytes-in-flight limit per SM, not per thread). More inputs also cost registers, hence occupancy.
    The (k + 1)/2 law assumes a copy does not already sit at that per-SM cap: on 50% of an H100's SMs
    the add alone moves 12% more than the copy (3.05 against 2.73 TB/s), so it does not. The copy is the
    driver's memcpy kernel (PyTorch issues a contiguous same-dtype copy_ as cudaMemcpyAsync), assumed
    to keep the same loads in flight per thread as a unary elementwise kernel."""
    if isinstance(op, ElementwiseOp):
        return per_sm * (op.inputs + 1) / 2.0
    return per_sm
