"""Several clients looping on their ops on one GPU: iterations/s each achieves.

Each client loops like a training/inference step or calibration/measure.py's worker: it issues `batch`
ops (the host spends `host_dispatch_s` on each), then synchronises. Two sharing modes are simulated
event by event, because the measured rates depend on that loop structure:

* timeslice: one context owns the whole GPU at a time. It keeps it until its slice ends (then, if
  another context has work, it is preempted: a context switch plus saving and restoring every SM's
  registers and shared memory through DRAM) or until it runs out of work (a cheaper yield switch).
  Many small kernels therefore pay a switch for every batch: the heavy loss for small kernels.
* mps: kernels from all clients run concurrently. The block scheduler hands SMs to kernels in the order
  they became ready (FIFO), each kernel taking at most its client's visible SMs (the MPS percentage);
  running kernels share the power budget (clock) and DRAM. DRAM is shared by Little's law (each kernel
  gets its outstanding requests over the loaded latency), which is why a streaming kernel, whose SMs
  keep far more requests outstanding than a GEMM's prefetches, takes most of it (`_speeds`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from simgpu.errors import SimgpuError
from simgpu.perf.cost import check_dtype, gemm_at_power, mps_visible_sms, stream_kernel
from simgpu.perf.gemm import gemm_time
from simgpu.perf.memory import SOFTMIN_P, inflight_per_sm
from simgpu.perf.ops import CopyOp, ElementwiseOp, GemmOp, Op
from simgpu.perf.params import PerfParams, params_for
from simgpu.perf.power import clock_mhz

MODES = ("timeslice", "mps")
MAX_EVENTS = 400_000
POWER_ITERATIONS = 8


@dataclass(frozen=True)
class ClientLoad:
    """One client looping on `op`; `mps_pct` is its CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (mps mode only);
    `batch` ops are issued between synchronisations."""

    op: Op
    mps_pct: float | None = None
    batch: int = 4


def timeslice_params(gpu) -> tuple[float, float]:
    """(slice length, context-switch cost) in seconds for this GPU's architecture (or profile)."""
    params = params_for(gpu)
    return params.timeslice_s, params.context_switch_s


def _validate(gpu, mode: str, clients: list[ClientLoad]) -> None:
    if mode not in MODES:
        raise SimgpuError(f"unknown mode {mode!r}", field="mode", allowed=MODES)
    if not isinstance(clients, list | tuple) or not clients:
        raise SimgpuError("need at least one client", field="clients", allowed=["a non-empty list"])
    for i, c in enumerate(clients):
        if not isinstance(c, ClientLoad) or not isinstance(c.op, GemmOp | CopyOp | ElementwiseOp):
            raise SimgpuError(f"got {c!r}", field=f"clients[{i}]", allowed=["ClientLoad(op, mps_pct)"])
        if isinstance(c.op, GemmOp):
            try:
                check_dtype(gpu, c.op.dtype)
            except SimgpuError as err:
                raise SimgpuError(str(err), field=f"clients[{i}].op.dtype", allowed=gpu.supported_dtypes()) from None
        if c.mps_pct is not None:
            if mode != "mps":
                raise SimgpuError("mps_pct applies to mode mps only", field=f"clients[{i}].mps_pct",
                                  allowed=["absent in mode timeslice"])
            if isinstance(c.mps_pct, bool) or not isinstance(c.mps_pct, int | float) or not 1 <= c.mps_pct <= 100:
                raise SimgpuError(f"got {c.mps_pct!r}", field=f"clients[{i}].mps_pct", allowed=["1..100"])
        if isinstance(c.batch, bool) or not isinstance(c.batch, int) or c.batch < 1:
            raise SimgpuError(f"got {c.batch!r}", field=f"clients[{i}].batch", allowed=["a positive integer"])


def colocate(gpu, mode: Literal["timeslice", "mps"], clients: list[ClientLoad]) -> list[float]:
    """Iterations (ops) per second of each client when all loop on their ops at once."""
    _validate(gpu, mode, list(clients))
    params = params_for(gpu)
    if mode == "timeslice":
        return _timeslice(gpu, params, list(clients))
    return _mps(gpu, params, list(clients))


# ---------------------------------------------------------------- time-slicing

def _host_per_batch(params: PerfParams, batch: int, kernel: float) -> float:
    """Host time of a batch not hidden behind GPU work: the first op's dispatch, plus the dispatch of
    each later op in so far as it is slower than the kernel before it."""
    h = params.host_dispatch_s
    return h + (batch - 1) * max(0.0, h - kernel)


def _solo_kernel(gpu, params: PerfParams, op: Op, sms: int | None = None) -> float:
    n = sms or gpu.sms
    if isinstance(op, GemmOp):
        return gemm_at_power(gpu, params, op, n, sustained=True)[0].seconds
    return stream_kernel(gpu, params, op, n).seconds


def _timeslice(gpu, params: PerfParams, clients: list[ClientLoad]) -> list[float]:
    """Round-robin slices; the clock follows the power averaged over the slices of all contexts (slices
    are shorter than the power controller's window), so a GEMM sharing with a copy runs faster."""
    mhz = [gemm_at_power(gpu, params, c.op, gpu.sms, sustained=True)[1] if isinstance(c.op, GemmOp) else gpu.boost_mhz
           for c in clients]
    rates: list[float] = []
    for _ in range(POWER_ITERATIONS):
        kernel, demand = [], []
        for c, f in zip(clients, mhz, strict=True):
            if isinstance(c.op, GemmOp):
                g = gemm_time(gpu, params, c.op, gpu.sms, f)
                kernel.append(g.seconds)
                demand.append(params.power(c.op.dtype) * min(1.0, g.compute_s / g.seconds))
            else:
                kernel.append(stream_kernel(gpu, params, c.op, gpu.sms).seconds)
                demand.append(0.0)
        rates = _timeslice_at(gpu, params, clients, kernel)
        average = sum(r * k * d for r, k, d in zip(rates, kernel, demand, strict=True))
        target = clock_mhz(gpu, average)
        if all(abs(target - f) < 1.0 for c, f in zip(clients, mhz, strict=True) if isinstance(c.op, GemmOp)):
            break
        mhz = [0.5 * (f + target) if isinstance(c.op, GemmOp) else f for c, f in zip(clients, mhz, strict=True)]
    return rates


def _timeslice_at(gpu, params: PerfParams, clients: list[ClientLoad], kernel: list[float]) -> list[float]:
    n = len(clients)
    work = [c.batch * k for c, k in zip(clients, kernel, strict=True)]
    host = [_host_per_batch(params, c.batch, k) for c, k in zip(clients, kernel, strict=True)]
    if n == 1:
        return [clients[0].batch / (host[0] + work[0])]
    state = 2.0 * gpu.sms * params.sm_state_bytes / (gpu.mem_bw_bytes_per_s * params.dram_efficiency)
    preempt_cost = params.context_switch_s + state
    yield_cost = params.context_switch_s
    slice_s = params.timeslice_s
    period = max(h + w for h, w in zip(host, work, strict=True))
    horizon = max(200 * slice_s, min(100 * period, 3000 * slice_s))  # steady state; partial batches count

    ready = list(host)
    remaining = list(work)
    done = [0.0] * n
    t, cur, slice_left = 0.0, -1, slice_s
    for _ in range(MAX_EVENTS):
        if t >= horizon:
            break
        if cur >= 0 and ready[cur] <= t:
            if remaining[cur] <= slice_left:
                t += remaining[cur]
                slice_left -= remaining[cur]
                done[cur] += clients[cur].batch
                ready[cur] = t + host[cur]
                remaining[cur] = work[cur]
                continue
            t += slice_left
            remaining[cur] -= slice_left
            nxt = _next_ready(ready, cur, t)
            slice_left = slice_s
            if nxt is not None:
                t += preempt_cost
                cur = nxt
            continue
        nxt = _next_ready(ready, cur, t, include_self=True)
        if nxt is None:
            t = min(ready)
            continue
        if cur >= 0 and nxt != cur:
            t += yield_cost
        cur, slice_left = nxt, slice_s
    partial = [c.batch * (1.0 - r / w) if ready[i] <= t else 0.0
               for i, (c, r, w) in enumerate(zip(clients, remaining, work, strict=True))]
    return [(d + p) / t for d, p in zip(done, partial, strict=True)]


def _next_ready(ready: list[float], cur: int, t: float, include_self: bool = False) -> int | None:
    """The next context after `cur` (round-robin) that has work queued at time t."""
    n = len(ready)
    order = [(cur + step) % n for step in range(1, n + 1)] if cur >= 0 else list(range(n))
    for j in order:
        if j == cur and not include_self:
            continue
        if ready[j] <= t:
            return j
    return None


# ---------------------------------------------------------------- MPS

class _Profiles:
    """Memoised (compute s, DRAM bytes, seconds, power weight, CTAs) of each op on n SMs at a clock."""

    def __init__(self, gpu, params: PerfParams):
        self.gpu, self.params, self.memo = gpu, params, {}

    def get(self, op: Op, sms: int, mhz: float) -> tuple[float, float, float, float, float]:
        key = (op, sms, round(mhz))
        hit = self.memo.get(key)
        if hit is None:
            if isinstance(op, GemmOp):
                g = gemm_time(self.gpu, self.params, op, sms, round(mhz))
                weight = self.params.power(op.dtype) * min(1.0, g.compute_s / g.seconds)
                hit = (g.compute_s, g.dram_bytes, g.seconds, weight, float(g.ctas))
            else:
                seconds, moved, _, compute = stream_kernel(self.gpu, self.params, op, sms)
                hit = (compute, moved, seconds, 0.0, math.inf)  # many short CTAs: takes what it is given
            self.memo[key] = hit
        return hit


def _mps(gpu, params: PerfParams, clients: list[ClientLoad]) -> list[float]:
    """Fluid simulation. A kernel wants min(visible SMs, its CTAs) SMs (one CTA per SM for GEMM tiles),
    and only its last wave's CTAs once it is in its last wave; SMs go to ready kernels in FIFO order,
    so a kernel queued behind another starts on the SMs that the other's last wave leaves idle."""
    n = len(clients)
    caps = [gpu.sms if c.mps_pct is None else mps_visible_sms(gpu, c.mps_pct) for c in clients]
    prof = _Profiles(gpu, params)
    h = params.host_dispatch_s
    solo = [_solo_kernel(gpu, params, c.op, caps[i]) for i, c in enumerate(clients)]
    horizon = max(0.005, 60 * max(c.batch * max(s, h) + h for c, s in zip(clients, solo, strict=True)))
    ctas = [prof.get(c.op, caps[i], gpu.boost_mhz)[4] for i, c in enumerate(clients)]
    waves = [1 if math.isinf(k) else max(1, math.ceil(k / cap)) for k, cap in zip(ctas, caps, strict=True)]
    last = [cap if math.isinf(k) else k - (w - 1) * cap for k, cap, w in zip(ctas, caps, waves, strict=True)]

    batch_start = [0.0] * n
    index = [0] * n            # next op of the batch
    eligible_at = [h] * n      # when the next op may start (submitted and previous op finished)
    left = [1.0] * n           # fraction of the current op still to do
    running = [False] * n
    fifo = [math.inf] * n      # when the current op became ready: the block scheduler's order
    done = [0.0] * n
    t = 0.0
    for _ in range(MAX_EVENTS):
        if t >= horizon:
            break
        for i in range(n):
            if not running[i] and eligible_at[i] <= t + 1e-15:
                running[i], fifo[i] = True, eligible_at[i]
        in_last = [waves[i] > 1 and left[i] <= 1.0 / waves[i] + 1e-12 for i in range(n)]
        want = [int(min(caps[i], last[i] if in_last[i] else ctas[i])) for i in range(n)]
        alloc = [0] * n
        free = gpu.sms
        for i in sorted((i for i in range(n) if running[i]), key=lambda i: (fifo[i], i)):
            alloc[i] = min(want[i], free)
            free -= alloc[i]
        speed = _speeds(gpu, params, prof, clients, alloc, want, caps)
        step = math.inf
        for i in range(n):
            if running[i] and speed[i] > 0:
                step = min(step, left[i] / speed[i])
                if waves[i] > 1 and not in_last[i]:
                    step = min(step, (left[i] - 1.0 / waves[i]) / speed[i])
            elif not running[i]:
                step = min(step, eligible_at[i] - t)
        if not math.isfinite(step):
            break
        t += max(step, 0.0)
        for i in range(n):
            if running[i] and speed[i] > 0:
                left[i] -= speed[i] * step
                if left[i] <= 1e-9:
                    done[i] += 1
                    running[i], left[i], fifo[i] = False, 1.0, math.inf
                    index[i] += 1
                    if index[i] == clients[i].batch:
                        index[i], batch_start[i] = 0, t
                    eligible_at[i] = max(t, batch_start[i] + (index[i] + 1) * h)
    return [(d + (1.0 - left[i] if running[i] else 0.0)) / t for i, d in enumerate(done)]


def _latency_factor(inflight: float, bw: float) -> float:
    """How much longer a DRAM request takes than unloaded when requesters keep `inflight` bytes/s worth
    of requests outstanding (each measured as the bandwidth it would draw at the unloaded latency):
    lambda(u) = (1 + u^p)^(1/p), u = inflight / bw. Little's law then gives each requester
    w / lambda -- for one streamer exactly the soft minimum of memory.bandwidth."""
    return (1.0 + (inflight / bw) ** SOFTMIN_P) ** (1.0 / SOFTMIN_P)


def _clock_scale(params: PerfParams, gpu, mhz: float) -> float:
    """What one SM streams at clock `mhz` relative to the maximum clock: its loads in flight are fixed
    (occupancy), the unloaded latency is part DRAM (ns) and part on-chip (SM/L2 clock cycles)."""
    chip = params.stream_latency_on_chip
    return 1.0 / ((1.0 - chip) + chip * gpu.boost_mhz / max(mhz, 1.0))


def _speeds(gpu, params: PerfParams, prof: _Profiles, clients: list[ClientLoad], alloc: list[int],
            want: list[int], caps: list[int]) -> list[float]:
    """Fraction of its op each client completes per second, given its SMs, the shared clock and DRAM.

    DRAM is shared by Little's law, not in proportion to demand. A bandwidth-bound kernel keeps every
    SM's load slots full: `sm_bandwidth_bytes_per_s` per SM at the unloaded latency for a copy, (k+1)/2
    of it for an elementwise op reading k inputs (`memory.inflight_per_sm`: k loads in flight per
    thread), less at a lower clock (`_clock_scale`). A GEMM keeps outstanding only the operand prefetches its software pipeline
    needs to run at full speed at the unloaded latency (its DRAM demand; letting that be a free
    multiple fitted 0.99, so none is used). The loaded latency grows with the total outstanding
    (`_latency_factor`) and each kernel gets its outstanding bytes over it: a streamer that
    oversubscribes DRAM takes most of it, and the GEMM stalls by the latency its own traffic alone
    would not have caused (measured: a GEMM next to a copy at 50/50 keeps 48% of its speed, 90% next to
    an L2-resident copy -- the loss is DRAM, not the L2 or the crossbar)."""
    active = [i for i, a in enumerate(alloc) if a > 0]
    speeds = [0.0] * len(alloc)
    if not active:
        return speeds

    def profile(i: int, mhz: float):
        gemm = isinstance(clients[i].op, GemmOp)
        return prof.get(clients[i].op, caps[i] if gemm else alloc[i], mhz)

    def share(i: int) -> float:
        return alloc[i] / want[i] if isinstance(clients[i].op, GemmOp) else 1.0

    mhz = gpu.boost_mhz
    for _ in range(3):
        demand = sum(alloc[i] / gpu.sms * profile(i, mhz)[3] for i in active)
        mhz = clock_mhz(gpu, demand)
    profiles = {i: profile(i, mhz) for i in active}
    bw = gpu.mem_bw_bytes_per_s * params.dram_efficiency
    inflight = {}
    for i, (_, dram, seconds, _, _) in profiles.items():
        if isinstance(clients[i].op, GemmOp):
            inflight[i] = dram / seconds * share(i)
        else:
            per_sm = inflight_per_sm(clients[i].op, params.sm_bandwidth_bytes_per_s)
            inflight[i] = alloc[i] * per_sm * _clock_scale(params, gpu, mhz)
    loaded = _latency_factor(sum(inflight.values()), bw)
    for i, (compute, dram, seconds, _, _) in profiles.items():
        if isinstance(clients[i].op, GemmOp):
            alone = _latency_factor(inflight[i], bw)
            speeds[i] = share(i) / seconds * min(1.0, alone / loaded)
        else:
            speeds[i] = 1.0 / (params.launch_seconds(gpu.boost_mhz) + max(compute, dram * loaded / inflight[i]))
    return speeds
