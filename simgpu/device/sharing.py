"""Rates of concurrently running kernels: the fluid model for MPS (and a lone exclusive client).

Time-slicing is not fluid: one context owns the device at a time; simgpu.device.timeslice schedules it
slice by slice. Under MPS every client with a kernel in flight is a Runner, and the device's capacity
(1.0 = the whole device busy) is handed out by water-filling:

1. Priority groups in order (0 = high first; HAMi's CUDA_TASK_PRIORITY convention). Each client may
   take up to min(demand, compute share), where demand is the share of the full device's throughput its
   visible SMs deliver alone (simgpu.perf.op_cost on that many SMs: ~0.66 at 50% of an H100's SMs).
2. Soft-capped clients (Gaia's soft limit) then take the idle capacity left over, up to their demand;
   hard-capped ones never exceed their share.

The unit that is handed capacity is the grant (`Runner.unit`), not the context: a grant's contexts share its
one active-thread percentage and its one share, so the grant takes what its most demanding context could
alone, and splits that among its contexts. Extra contexts on one grant (or a stolen token) take nothing more
from the neighbours.

A client's speed (fraction of its solo speed) is allocation / demand. Two 100% clients get 0.5 each
(measured on H100: 340 + 340 TF of 676 alone); two 50% clients get 0.5 / 0.66 = 0.76 of their 50% solo
speed (measured 325 of 444 TF = 0.73). High-priority clients that have lower-priority co-runners lose
PRIORITY_INTERFERENCE of their speed: lower-priority blocks already on the SMs must drain before a newly
launched high-priority kernel gets them (a modelling assumption, not a measurement).

Memory spilled to host (oversubscribe mode) adds a PCIe transfer to each kernel: the spilled share of
the kernel's DRAM traffic crosses the host link at GPUSpec.pcie_bytes_per_s.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from simgpu.counters import ACTIVITY_FIELDS, Activity
from simgpu.device.perfmodel import PerfModel

EngineMode = Literal["exclusive", "timeslice", "mps"]
ENGINE_MODES: tuple[str, ...] = ("exclusive", "timeslice", "mps")

PRIORITY_INTERFERENCE = 0.03  # assumption: cost of draining lower-priority kernels, as a speed fraction

# Warp occupancy of typical kernels (assumption, the perf model does not give one): Hopper/Ampere cuBLAS
# GEMMs run one 256-384-thread CTA per SM (~0.19 of 2048 threads); streaming kernels fill most of the SM.
DEFAULT_OCCUPANCY = {"GemmOp": 0.19}
STREAMING_OCCUPANCY = 0.8


@dataclass(frozen=True)
class Runner:
    """A client with a kernel in flight, as the rate model sees it."""

    key: int
    op: Any
    priority: int = 0
    mps_pct: float | None = None
    share: float | None = None  # compute share cap in (0, 1]; None = uncapped
    soft: bool = False  # soft cap: may use idle capacity beyond `share`
    spill: float = 0.0  # fraction of the client's data in host memory
    unit: Hashable = None  # the grant it draws on (None: its own); `share` is the grant's


@dataclass(frozen=True)
class RunnerRate:
    rate: float  # progress of the current kernel per second
    speed: float  # fraction of the client's solo speed (alone, with its own SM limit and spill)
    solo_seconds: float  # the kernel's time alone (with SM limit and spill)
    capacity: float  # allocated share of the device
    activity: Activity  # this client's contribution to the device counters
    activity_tuple: tuple[float, ...] = field(default=(), compare=False)
    busy: float = 0.0  # fraction of the time its SMs execute its kernel (0 while it waits)
    # speed as a fraction of running alone with its own limits (a hard cap slows it alone too): the progress
    # rate that counters report; `speed` is against the uncapped solo speed, which times the kernel
    progress: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "activity_tuple", tuple(getattr(self.activity, f) for f in ACTIVITY_FIELDS))


def waterfill(limits: Sequence[float], capacity: float) -> list[float]:
    """Split `capacity` equally, never giving anyone more than their limit; leftovers go to the rest."""
    alloc = [0.0] * len(limits)
    open_ = [i for i, lim in enumerate(limits) if lim > 0]
    left = max(0.0, capacity)
    while open_ and left > 1e-12:
        each = left / len(open_)
        still = []
        for i in open_:
            give = min(each, limits[i] - alloc[i])
            alloc[i] += give
            left -= give
            if limits[i] - alloc[i] > 1e-12:
                still.append(i)
        if len(still) == len(open_):
            break
        open_ = still
    return alloc


def fill_units(limits: Sequence[float], units: Sequence[Hashable], capacity: float) -> list[float]:
    """waterfill over units (a unit takes at most its largest member's limit), then within each unit."""
    members: dict[Hashable, list[int]] = {}
    for i, unit in enumerate(units):
        members.setdefault(unit, []).append(i)
    groups = list(members.values())
    if len(groups) == len(limits):
        return waterfill(limits, capacity)
    got = waterfill([max(limits[i] for i in g) for g in groups], capacity)
    alloc = [0.0] * len(limits)
    for g, cap in zip(groups, got, strict=True):
        for i, a in zip(g, waterfill([limits[i] for i in g], cap), strict=True):
            alloc[i] = a
    return alloc


def allocate(demands: Sequence[float], caps: Sequence[float], soft: Sequence[bool],
             priorities: Sequence[int], units: Sequence[Hashable] | None = None) -> list[float]:
    """Capacity per client: priority groups first, hard caps never exceeded, soft caps fill idle capacity;
    clients of one unit (grant) share one allocation."""
    units = list(range(len(demands))) if units is None else units
    alloc = [0.0] * len(demands)
    left = 1.0
    groups = sorted(set(priorities))
    for extra_pass in (False, True):
        for prio in groups:
            members = [i for i, p in enumerate(priorities) if p == prio and (soft[i] or not extra_pass)]
            if extra_pass:
                limits = [demands[i] - alloc[i] for i in members]
            else:
                limits = [min(demands[i], caps[i]) for i in members]
            got = fill_units(limits, [units[i] for i in members], left)
            for i, g in zip(members, got, strict=True):
                alloc[i] += g
                left -= g
    return alloc


def kernel_seconds(cost: Any) -> float:
    """GPU busy time of one kernel (op_cost's `seconds` may include a host-dispatch floor)."""
    return cost.kernel_seconds or cost.seconds


def solo_seconds(perf: PerfModel, cost: Any, spill: float) -> float:
    """A kernel's time alone, plus the PCIe transfer of the spilled share of its DRAM traffic."""
    return kernel_seconds(cost) + spill * cost.dram_bytes / perf.spec.pcie_bytes_per_s


def activity_of(cost: Any, op: Any, busy: float, engine: float) -> Activity:
    """Counters contribution of a kernel that keeps the SMs working `busy` of the time (0..1)."""
    scale = busy * cost.seconds / kernel_seconds(cost)  # op_cost's activities are over `seconds`
    sm = min(1.0, cost.sm_active * scale)
    value = getattr(cost, "sm_occupancy", None)
    occupancy = float(value) if value is not None else DEFAULT_OCCUPANCY.get(type(op).__name__, STREAMING_OCCUPANCY)
    return Activity(sm_active=sm, sm_occupancy=sm * occupancy, tensor_active=min(1.0, cost.tensor_active * scale),
                    dram_active=min(1.0, cost.dram_active * scale), gr_engine_active=engine)


def solo_rate(perf: PerfModel, runner: Runner, sms: int | None = None) -> RunnerRate:
    """A runner that has the device (or its SM partition) to itself."""
    cost = perf.cost(runner.op, sms)
    solo = solo_seconds(perf, cost, runner.spill)
    busy = kernel_seconds(cost) / solo
    return RunnerRate(rate=1.0 / solo, speed=1.0, solo_seconds=solo, capacity=1.0,
                      activity=activity_of(cost, runner.op, busy, 1.0), busy=busy, progress=1.0)


def stalled(perf: PerfModel, runner: Runner, sms: int | None = None) -> RunnerRate:
    """A runner with a kernel queued that gets no GPU time right now (waiting for its slice)."""
    cost = perf.cost(runner.op, sms)
    return RunnerRate(rate=0.0, speed=0.0, solo_seconds=solo_seconds(perf, cost, runner.spill), capacity=0.0,
                      activity=Activity())


def share_concurrent(perf: PerfModel, runners: Sequence[Runner]) -> dict[int, RunnerRate]:
    """Rates of runners that execute at the same time (MPS), see the module docstring."""
    if not runners:
        return {}
    sms = [perf.visible_sms(r.mps_pct) for r in runners]
    costs = [perf.cost(r.op, n) for r, n in zip(runners, sms, strict=True)]
    demands = [min(1.0, kernel_seconds(perf.cost(r.op, None)) / kernel_seconds(c))
               for r, c in zip(runners, costs, strict=True)]
    caps = [1.0 if r.share is None else r.share for r in runners]
    units = [("ctx", r.key) if r.unit is None else ("grant", r.unit) for r in runners]
    alloc = allocate(demands, caps, [r.soft for r in runners], [r.priority for r in runners], units)
    lowest = max(r.priority for r in runners)
    out: dict[int, RunnerRate] = {}
    for i, r in enumerate(runners):
        speed = alloc[i] / demands[i]
        if r.priority < lowest:
            speed *= 1.0 - PRIORITY_INTERFERENCE
        speed = max(0.0, min(1.0, speed))
        alone = demands[i] if r.soft else min(demands[i], caps[i])  # its capacity with the device to itself
        solo = solo_seconds(perf, costs[i], r.spill)
        busy = speed * kernel_seconds(costs[i]) / solo
        out[r.key] = RunnerRate(rate=speed / solo, speed=speed, solo_seconds=solo, capacity=alloc[i],
                                activity=activity_of(costs[i], r.op, busy, 1.0 if alloc[i] > 1e-12 else 0.0),
                                busy=busy, progress=min(1.0, speed * demands[i] / alone) if alone > 0 else 0.0)
    return out
