"""Timeline mode: replay a trace's arrivals and lifetimes (pods depart), with a wait queue.

Pods arrive at their `creation_time` and run for their trace lifetime (`deletion_time - creation_time`)
from the moment they are placed, so waiting delays a pod's departure (no work is lost). A pod that fits
nowhere waits in a FIFO queue; after every departure the queue is retried in arrival order, and a waiting
pod that still does not fit does not block the ones behind it. At equal times departures go first. A pod
that fits no node even of an empty cluster never joins the queue; it is counted as unplaceable.

Offered load: the trace's requested GPU, time-averaged over the busy period, over the cluster's GPU
capacity, where a pod requests its GPUs from its arrival for its lifetime (as if it never waited). The
busy period is the 1st to 99th percentile of arrival times (the openb default trace has a few pods months
before the rest). `arrival_speedup(trace, capacity, L)` finds the one factor k that divides every
inter-arrival gap so that the offered load is L; lifetimes stay as they are. Offered load grows with k, up
to a limit where every pod lives past the end of the busy period (`max_offered_load`).

Slowdown of a sharing pod = its solo speed / its expected speed next to the other sharing pods of its GPU,
averaged over its lifetime (weighted by time). With simgpu importable, `interference.InterferenceModel` prices
it with simgpu's time-slicing model (each pod loops on a GEMM, busy a fraction of time equal to its GPU share).
For GPUs simgpu has no model of (the undisclosed G2/G3 get stand-ins there; others fall through), or without
simgpu, a documented fallback: k always-busy clients each get 1/k of the GPU, minus a 0.15 ms context switch
per 2.1 ms slice (the H100 time-slicing measurements in docs/sources.md).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace

import numpy as np
from fgpu_operator.placement.errors import PlacementInputError
from fgpu_operator.placement.filters import filter_nodes, fits_node
from fgpu_operator.placement.fragmentation import TargetWorkload
from fgpu_operator.placement.framework import Framework, Unschedulable
from fgpu_operator.placement.model import MILLI, Cluster, NodeSpec, Placement
from fgpu_operator.placement.policies import make_policy

from .trace import QOS_CLASSES, Trace

SLICE_S, SWITCH_S = 2.1e-3, 0.15e-3
TIME_POINTS = 20
BUSY_PERCENTILES = (1.0, 99.0)
MAX_LOG10_SPEEDUP = 12  # arrival gaps are divided (or multiplied) by at most 1e12


def fallback_slowdown(k: int) -> float:
    return 1.0 if k <= 1 else k * (SLICE_S + SWITCH_S) / SLICE_S


def make_interference():
    """simgpu's model through `interference.InterferenceModel` (duty cycle = GPU share), or None without it."""
    try:
        import simgpu.perf  # noqa: F401

        from .interference import InterferenceModel
    except ImportError:
        return None
    return InterferenceModel()


def slowdown(model, gpu_model: str, others: list[float]) -> tuple[float, str]:
    """(slowdown of one sharing pod whose co-runners have duty cycles `others`, source of the number)."""
    if not others:
        return 1.0, "solo"
    if model is None:
        return fallback_slowdown(1 + len(others)), "fallback"
    if not model.modelled(gpu_model):
        return fallback_slowdown(1 + len(others)), "fallback"
    return model.factor(gpu_model, others), "simgpu.perf"


# --- offered load and arrival compression -------------------------------------------------------------
def _arrays(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival times, lifetimes (inf without a deletion time), requested GPU milli) of a timed trace."""
    created = np.array([float(p.creation_time) for p in trace.pods])
    life = np.array([np.inf if p.deletion_time is None else max(0.0, float(p.deletion_time) - float(p.creation_time))
                     for p in trace.pods])
    gpu = np.array([p.request.total_gpu_milli for p in trace.pods], dtype=float)
    return created, life, gpu


def busy_period(created: np.ndarray) -> tuple[float, float]:
    """The 1st to 99th percentile of arrival times (seconds)."""
    if created.size == 0:
        return 0.0, 0.0
    lo, hi = np.percentile(created, BUSY_PERCENTILES)
    return float(lo), float(hi)


def _compressed(created: np.ndarray, speedup: float) -> np.ndarray:
    start = created.min() if created.size else 0.0
    return start + (created - start) / speedup


def _load(created: np.ndarray, life: np.ndarray, gpu: np.ndarray, capacity_milli: int, speedup: float) -> float:
    arrival = (created - created.min()) / speedup  # shift-invariant; from 0 it keeps precision at large k
    lo, hi = busy_period(arrival)
    if hi <= lo:
        return 0.0
    overlap = np.clip(np.minimum(arrival + life, hi) - np.maximum(arrival, lo), 0.0, None)
    return float((gpu * overlap).sum() / ((hi - lo) * capacity_milli))


def offered_load(trace: Trace, capacity_milli: int, speedup: float = 1.0) -> float:
    """Requested GPU, time-averaged over the busy period, / capacity, with arrival gaps divided by `speedup`."""
    return _load(*_arrays(trace), capacity_milli, speedup)


def _limit(trace: Trace, capacity_milli: int, counted) -> float:
    created, life, gpu = _arrays(trace)
    lo, hi = busy_period(created)
    if hi <= lo:
        return 0.0
    share = np.clip((hi - np.maximum(created, lo)) / (hi - lo), 0.0, 1.0) * counted(life)
    return float((gpu * share).sum() / capacity_milli)


def max_offered_load(trace: Trace, capacity_milli: int) -> float:
    """The limit of `offered_load` as the speed-up grows without bound: every pod (of non-zero lifetime)
    then requests its GPUs from its arrival to the end of the busy period. Never reached by a finite factor."""
    return _limit(trace, capacity_milli, lambda life: life > 0)


def min_offered_load(trace: Trace, capacity_milli: int) -> float:
    """The limit as the speed-up shrinks towards 0: only pods that never end still count (0 on openb)."""
    return _limit(trace, capacity_milli, np.isinf)


def arrival_speedup(trace: Trace, capacity_milli: int, load: float) -> float:
    """The factor k (dividing every inter-arrival gap) that makes `offered_load` equal `load`.

    Offered load is non-decreasing in k (every pod's overlap with the busy period, measured in busy-period
    lengths, grows as the period shrinks around fixed lifetimes), so bisection on log k finds it."""
    top = max_offered_load(trace, capacity_milli)
    if not math.isfinite(load) or load <= 0:
        raise PlacementInputError(f"{load} must be a number above 0", field="--load")
    if top <= 0:
        raise PlacementInputError(f"trace {trace.name} has no spread of arrival times to compress", field="--load")
    floor = min_offered_load(trace, capacity_milli)
    if load <= floor:
        raise PlacementInputError(f"{load:g} is not reachable on trace {trace.name}: its pods without a deletion "
                                  f"time alone offer {floor:.3f} however far apart arrivals are", field="--load")
    if load >= top:
        raise PlacementInputError(
            f"{load:g} is not reachable on trace {trace.name} by compressing arrivals "
            f"(its offered load approaches {top:.3f} as arrivals bunch up; ask for less)", field="--load")
    arrays = _arrays(trace)
    lo, hi = 0.0, 0.0  # log10 k bracket
    while _load(*arrays, capacity_milli, 10.0**hi) < load:
        if hi >= MAX_LOG10_SPEEDUP:
            raise PlacementInputError(f"{load:g} is too close to trace {trace.name}'s ceiling of {top:.3f} "
                                      f"(it needs arrival gaps divided by more than 1e{MAX_LOG10_SPEEDUP})",
                                      field="--load")
        lo, hi = hi, hi + 1
    while _load(*arrays, capacity_milli, 10.0**lo) > load and lo > -MAX_LOG10_SPEEDUP:
        lo, hi = lo - 1, lo
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _load(*arrays, capacity_milli, 10.0**mid) < load else (lo, mid)
    return float(10.0 ** ((lo + hi) / 2))


def compress(trace: Trace, speedup: float) -> Trace:
    """The trace with inter-arrival gaps divided by `speedup`; order and lifetimes unchanged."""
    if speedup == 1.0:
        return trace
    created, life, _ = _arrays(trace)
    arrival = _compressed(created, speedup)
    pods = tuple(replace(p, creation_time=float(a), deletion_time=None if p.deletion_time is None else float(a + lf))
                 for p, a, lf in zip(trace.pods, arrival, life, strict=True))
    return Trace(trace.name, pods)


# --- results -----------------------------------------------------------------------------------------
def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values, kind="stable")
    cdf = np.cumsum(weights[order]) / weights.sum()
    return float(values[order][min(int(np.searchsorted(cdf, q)), values.size - 1)])


@dataclass
class TimelineResult:
    trace: str
    policy: str
    seed: int
    total_gpus: int
    busy: tuple[float, float]
    times: np.ndarray  # event times (s), ascending
    used: np.ndarray  # GPU milli allocated just after each event
    requested: np.ndarray  # GPU milli requested (running + waiting) just after each event
    speedup: float = 1.0
    offered: float = 0.0
    placed: int = 0
    waited: int = 0
    waiting_at_end: int = 0
    unplaceable: int = 0
    delays: list[float] = field(default_factory=list)
    slowdown_by_qos: dict[str, list[float]] = field(default_factory=dict)
    model_source: str = "solo"

    def _steps(self, series: np.ndarray, a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
        """(values, durations) of a step series (value after each event) over [a, b]."""
        inside = self.times[(self.times > a) & (self.times < b)]
        grid = np.concatenate(([a], inside, [b]))
        idx = np.searchsorted(self.times, grid[:-1], side="right") - 1
        values = np.where(idx >= 0, series[np.clip(idx, 0, None)], 0)
        return values.astype(float), np.diff(grid)

    def _pct(self, series: np.ndarray, a: float, b: float) -> dict[str, float]:
        """Time-weighted mean, p50, p95 and max of `series` in % of cluster GPUs over [a, b]."""
        scale = 100.0 / (self.total_gpus * MILLI)
        if self.times.size == 0:
            return {"mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0}
        values, weights = self._steps(series, a, b)
        if weights.sum() <= 0:  # a zero-length period: the value at its instant
            v = float(values[0]) * scale
            return {"mean": v, "p50": v, "p95": v, "max": v}
        return {"mean": float(np.average(values, weights=weights)) * scale,
                "p50": _weighted_quantile(values, weights, 0.5) * scale,
                "p95": _weighted_quantile(values, weights, 0.95) * scale,
                "max": float(values[weights > 0].max()) * scale}

    def alloc_stats(self) -> dict[str, float]:
        return self._pct(self.used, *self.busy)

    def requested_stats(self) -> dict[str, float]:
        return self._pct(self.requested, *self.busy)

    def alloc_over_time(self, points: int = TIME_POINTS) -> dict[int, float]:
        """Time-weighted mean allocation (%) in `points` equal spans of the busy period, keyed by span start (s)."""
        lo, hi = self.busy
        edges = np.linspace(lo, hi, points + 1)
        return {int(a): round(self._pct(self.used, a, b)["mean"], 2)
                for a, b in zip(edges[:-1], edges[1:], strict=True)}

    def as_json(self) -> dict:
        d = np.array(self.delays) if self.delays else np.zeros(0)
        delay = (lambda f: round(float(f(d)), 1)) if d.size else (lambda f: 0.0)
        return {
            "policy": self.policy, "trace": self.trace, "mode": "timeline", "seed": self.seed,
            "arrival_speedup": round(self.speedup, 3), "offered_load": round(self.offered, 4),
            "busy_period_s": [round(t, 1) for t in self.busy],
            "alloc_pct": {k: round(v, 2) for k, v in self.alloc_stats().items()},
            "requested_pct": {k: round(v, 2) for k, v in self.requested_stats().items()},
            "alloc_over_time": {str(k): v for k, v in self.alloc_over_time().items()},
            "pods_placed": self.placed, "pods_waited": self.waited,
            "pods_waiting_at_end": self.waiting_at_end, "pods_unplaceable": self.unplaceable,
            "queue_delay_s": {"mean": delay(np.mean), "p50": delay(np.median),
                              "p95": delay(lambda x: np.percentile(x, 95)), "max": delay(np.max)},
            "slowdown_by_qos": {q: _stats(v) for q, v in self.slowdown_by_qos.items()},
            "slowdown_model": self.model_source,
        }


def _stats(values: list[float]) -> dict:
    if not values:
        return {"pods": 0, "mean": 1.0, "p95": 1.0}
    v = np.array(values)
    return {"pods": int(v.size), "mean": round(float(v.mean()), 3), "p95": round(float(np.percentile(v, 95)), 3)}


class _Sharing:
    """Per GPU, which sharing pods run there and since when: accumulates each pod's time-weighted slowdown."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.model = make_interference()
        self.duty: dict[str, float] = {}
        self.residents: dict[tuple[int, int], set[str]] = {}
        self.since: dict[tuple[int, int], float] = {}
        self.acc: dict[str, list[float]] = {}  # name -> [sum(dt * slowdown), sum(dt)]
        self.source = "solo"

    def _flush(self, gpu: tuple[int, int], now: float) -> None:
        pods = self.residents.get(gpu, set())
        if pods:
            gpu_model = self.cluster.nodes[gpu[0]].model
            dt = now - self.since[gpu]
            for name in pods:
                others = sorted(self.duty[o] for o in pods if o != name)
                factor, source = slowdown(self.model, gpu_model, others)
                if source != "solo" and self.source != "fallback":
                    self.source = source
                self.acc[name][0] += dt * factor
                self.acc[name][1] += dt
        self.since[gpu] = now

    def join(self, p: Placement, now: float) -> None:
        gpu = (p.node, p.gpus[0])
        self._flush(gpu, now)
        self.residents.setdefault(gpu, set()).add(p.request.name)
        gpu_milli = p.request.gpu_milli
        self.duty[p.request.name] = self.model.workload.duty_of(gpu_milli) if self.model else gpu_milli / MILLI
        self.acc.setdefault(p.request.name, [0.0, 0.0])

    def leave(self, p: Placement, now: float) -> float:
        gpu = (p.node, p.gpus[0])
        self._flush(gpu, now)
        self.residents[gpu].discard(p.request.name)
        self.duty.pop(p.request.name, None)
        total, span = self.acc.pop(p.request.name)
        return total / span if span > 0 else 1.0


def unplaceable_pods(cluster: Cluster, trace: Trace) -> list[bool]:
    """Per pod: True when it fits no node of `cluster` even empty (checked once per request shape)."""
    fresh = Cluster(list(cluster.nodes))
    fits: dict[tuple, bool] = {}
    out = []
    for p in trace.pods:
        r = p.request
        key = (r.cpu_milli, r.memory_mib, r.num_gpu, r.gpu_milli, r.gpu_mem_mib, r.gpu_models)
        if key not in fits:
            fits[key] = bool(filter_nodes(fresh, r).any())
        out.append(not fits[key])
    return out


def run_timeline(nodes: list[NodeSpec], trace: Trace, policy_name: str, seed: int = 42,
                 load: float | None = None) -> TimelineResult:
    """Replay `trace` through one policy; with `load`, first compress its arrivals to that offered load."""
    cluster = Cluster(list(nodes))
    capacity = cluster.total_gpus * MILLI
    speedup = arrival_speedup(trace, capacity, load) if load is not None else 1.0
    trace = compress(trace, speedup)
    created, life, _ = _arrays(trace)
    rng = np.random.default_rng(seed)
    framework = Framework(cluster, make_policy(policy_name, TargetWorkload.from_requests(trace.requests)), rng)
    sharing = _Sharing(cluster)
    result = TimelineResult(trace.name, policy_name, seed, cluster.total_gpus, busy_period(created),
                            np.zeros(0), np.zeros(0), np.zeros(0), speedup=speedup,
                            offered=offered_load(trace, capacity),
                            slowdown_by_qos={q: [] for q in QOS_CLASSES})
    unplaceable = unplaceable_pods(cluster, trace)
    events: list[tuple[float, int, int]] = []  # (time, 0 = departure / 1 = arrival, pod index)
    for i in range(len(trace.pods)):
        heapq.heappush(events, (float(created[i]), 1, i))
    queue: list[int] = []  # waiting pods, in arrival order
    running: dict[int, Placement] = {}
    times, used, requested = [], [], []
    used_now = requested_now = 0

    def start(i: int, now: float) -> bool:
        nonlocal used_now
        request = trace.pods[i].request
        outcome = framework.schedule(request, explained=False)
        if isinstance(outcome, Unschedulable):
            return False
        running[i] = outcome
        used_now += request.total_gpu_milli
        result.placed += 1
        if request.is_share:
            sharing.join(outcome, now)
        if math.isfinite(life[i]):
            heapq.heappush(events, (now + float(life[i]), 0, i))
        return True

    while events:
        now, kind, i = heapq.heappop(events)
        request = trace.pods[i].request
        if kind == 1:
            requested_now += request.total_gpu_milli
            if unplaceable[i]:
                result.unplaceable += 1
            elif not start(i, now):
                queue.append(i)
                result.waited += 1
        else:
            placement = running.pop(i)
            framework.release(placement)
            used_now -= request.total_gpu_milli
            requested_now -= request.total_gpu_milli
            if request.is_share:
                result.slowdown_by_qos.setdefault(request.qos or "unknown", []).append(sharing.leave(placement, now))
            still = []
            for j in queue:
                if fits_node(cluster, trace.pods[j].request, placement.node) and start(j, now):
                    result.delays.append(now - float(created[j]))
                else:
                    still.append(j)
            queue = still
        if times and times[-1] == now:
            used[-1], requested[-1] = used_now, requested_now
        else:
            times.append(now)
            used.append(used_now)
            requested.append(requested_now)
    end = times[-1] if times else 0.0
    for i, placement in running.items():  # pods without a deletion time run to the end of the trace
        if trace.pods[i].request.is_share:
            qos = trace.pods[i].request.qos or "unknown"
            result.slowdown_by_qos.setdefault(qos, []).append(sharing.leave(placement, end))
    result.waiting_at_end = len(queue) + result.unplaceable
    result.times = np.array(times)
    result.used = np.array(used, dtype=np.int64)
    result.requested = np.array(requested, dtype=np.int64)
    result.model_source = sharing.source
    return result


__all__ = ["TimelineResult", "arrival_speedup", "busy_period", "compress", "fallback_slowdown",
           "max_offered_load", "min_offered_load", "offered_load", "run_timeline", "slowdown", "unplaceable_pods"]
