"""Timeline mode: replay the trace's own creation and deletion times (pods depart), with a wait queue.

Events are processed in time order (departures before arrivals at the same second). A pod that does not fit
waits in a FIFO queue and is retried whenever resources are freed (later pods may pass a waiting one that
still does not fit); a pod still waiting at its deletion time gives up. We report allocation over time, the
queueing delay of pods that had to wait, and the slowdown of pods sharing a GPU, by QoS class.

Slowdown of a sharing pod = its solo speed / its speed with the co-located sharing pods of its GPU, all busy,
time-sliced, averaged over its lifetime (weighted by time). With `simgpu.perf` importable we use its
time-slicing model (a 2048^3 GEMM loop per client, fp16 where the GPU has it on the node's GPU model, or a comparable catalog GPU);
otherwise a documented fallback: k busy clients each get 1/k of the GPU, minus a context switch of 0.15 ms
per 2.1 ms slice (the H100 measurements in data/calibration/h100_reference.json).
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from fgpu_operator.placement.fragmentation import TargetWorkload
from fgpu_operator.placement.framework import Framework, Unschedulable
from fgpu_operator.placement.model import MILLI, Cluster, NodeSpec, Placement
from fgpu_operator.placement.policies import make_policy

from .trace import QOS_CLASSES, Trace

SLICE_S, SWITCH_S = 2.1e-3, 0.15e-3
#: openb GPU model -> simgpu catalog GPU used for the interference model (G2/G3 are undisclosed: A10/A100).
SIMGPU_MODEL = {"T4": "T4", "P100": "P100", "V100M16": "V100-16GB", "V100M32": "V100", "A10": "A10",
                "G2": "A10", "G3": "A100-40GB", "A100": "A100-80GB"}
TIME_POINTS = 20


def fallback_slowdown(k: int) -> float:
    return 1.0 if k <= 1 else k * (SLICE_S + SWITCH_S) / SLICE_S


@lru_cache(maxsize=256)
def slowdown(model: str, k: int) -> tuple[float, str]:
    """(slowdown of each of k busy co-located clients, source of the number)."""
    if k <= 1:
        return 1.0, "solo"
    try:
        from simgpu.catalog import get_gpu
        from simgpu.perf.colocation import ClientLoad, colocate
        from simgpu.perf.ops import GemmOp
    except ImportError:
        return fallback_slowdown(k), "fallback"
    gpu = get_gpu(SIMGPU_MODEL.get(model, "T4"))
    dtypes = gpu.supported_dtypes()
    op = GemmOp(2048, 2048, 2048, "fp16" if "fp16" in dtypes else dtypes[0])
    solo = colocate(gpu, "timeslice", [ClientLoad(op)])[0]
    shared = colocate(gpu, "timeslice", [ClientLoad(op)] * k)
    return float(solo / np.mean(shared)), "simgpu.perf"


@dataclass
class TimelineResult:
    trace: str
    policy: str
    seed: int
    total_gpus: int
    times: np.ndarray
    used: np.ndarray
    placed: int = 0
    waited: int = 0
    gave_up: int = 0
    delays: list[float] = field(default_factory=list)
    slowdown_by_qos: dict[str, list[float]] = field(default_factory=dict)
    model_source: str = "solo"

    def alloc_over_time(self, points: int = TIME_POINTS) -> dict[int, float]:
        """Time-weighted mean allocation (%) in `points` equal spans of the trace, keyed by span start (s)."""
        if self.times.size == 0:
            return {}
        t0, t1 = float(self.times[0]), float(self.times[-1])
        edges = np.linspace(t0, t1, points + 1)
        out = {}
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            out[int(a)] = round(self._mean_used(a, b) / self.total_gpus / 10, 2)
        return out

    def _mean_used(self, a: float, b: float) -> float:
        if b <= a:
            idx = max(0, np.searchsorted(self.times, a, side="right") - 1)
            return float(self.used[idx])
        grid = np.concatenate(([a], self.times[(self.times > a) & (self.times < b)], [b]))
        idx = np.clip(np.searchsorted(self.times, grid[:-1], side="right") - 1, 0, None)
        return float(np.sum(self.used[idx] * np.diff(grid)) / (b - a))

    def as_json(self) -> dict:
        d = np.array(self.delays) if self.delays else np.zeros(0)
        return {
            "policy": self.policy, "trace": self.trace, "mode": "timeline", "seed": self.seed,
            "alloc_over_time": {str(k): v for k, v in self.alloc_over_time().items()},
            "mean_alloc_pct": round(self.mean_alloc(), 2),
            "pods_placed": self.placed, "pods_waited": self.waited, "pods_gave_up": self.gave_up,
            "queue_delay_s": {"mean": round(float(d.mean()), 1) if d.size else 0.0,
                              "p95": round(float(np.percentile(d, 95)), 1) if d.size else 0.0},
            "slowdown_by_qos": {q: _stats(v) for q, v in self.slowdown_by_qos.items()},
            "slowdown_model": self.model_source,
        }

    def mean_alloc(self) -> float:
        if self.times.size < 2:
            return 0.0
        return self._mean_used(float(self.times[0]), float(self.times[-1])) / self.total_gpus / 10


def _stats(values: list[float]) -> dict:
    if not values:
        return {"pods": 0, "mean": 1.0, "p95": 1.0}
    v = np.array(values)
    return {"pods": int(v.size), "mean": round(float(v.mean()), 3), "p95": round(float(np.percentile(v, 95)), 3)}


class _Sharing:
    """Per GPU, which sharing pods run there and since when: accumulates each pod's time-weighted slowdown."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.residents: dict[tuple[int, int], set[str]] = {}
        self.since: dict[tuple[int, int], float] = {}
        self.acc: dict[str, list[float]] = {}  # name -> [sum(dt * slowdown), sum(dt)]
        self.source = "solo"

    def _flush(self, gpu: tuple[int, int], now: float) -> None:
        pods = self.residents.get(gpu, set())
        if pods:
            model = self.cluster.nodes[gpu[0]].model
            factor, source = slowdown(model, len(pods))
            if source != "solo":
                self.source = source
            dt = now - self.since[gpu]
            for name in pods:
                self.acc[name][0] += dt * factor
                self.acc[name][1] += dt
        self.since[gpu] = now

    def join(self, p: Placement, now: float) -> None:
        gpu = (p.node, p.gpus[0])
        self._flush(gpu, now)
        self.residents.setdefault(gpu, set()).add(p.request.name)
        self.acc.setdefault(p.request.name, [0.0, 0.0])

    def leave(self, p: Placement, now: float) -> float:
        gpu = (p.node, p.gpus[0])
        self._flush(gpu, now)
        self.residents[gpu].discard(p.request.name)
        total, span = self.acc.pop(p.request.name)
        return total / span if span > 0 else 1.0


def run_timeline(nodes: list[NodeSpec], trace: Trace, policy_name: str, seed: int = 42) -> TimelineResult:
    cluster = Cluster(list(nodes))
    rng = np.random.default_rng(seed)
    framework = Framework(cluster, make_policy(policy_name, TargetWorkload.from_requests(trace.requests)), rng)
    sharing = _Sharing(cluster)
    events: list[tuple[float, int, int]] = []  # (time, 0 = departure / 1 = arrival, pod index)
    for i, pod in enumerate(trace.pods):
        heapq.heappush(events, (float(pod.creation_time), 1, i))
    queue: deque[int] = deque()
    running: dict[int, Placement] = {}
    result = TimelineResult(trace.name, policy_name, seed, cluster.total_gpus, np.zeros(0), np.zeros(0),
                            slowdown_by_qos={q: [] for q in QOS_CLASSES})
    times, used = [], []
    used_now = 0

    def start(i: int, now: float) -> bool:
        nonlocal used_now
        pod = trace.pods[i]
        outcome = framework.schedule(pod.request, explained=False)
        if isinstance(outcome, Unschedulable):
            return False
        running[i] = outcome
        used_now += pod.request.total_gpu_milli
        result.placed += 1
        if pod.request.is_share:
            sharing.join(outcome, now)
        if pod.deletion_time is not None:
            heapq.heappush(events, (float(max(pod.deletion_time, now)), 0, i))
        return True

    while events:
        now, kind, i = heapq.heappop(events)
        pod = trace.pods[i]
        if kind == 1:
            if not start(i, now):
                queue.append(i)
                result.waited += 1
                if pod.deletion_time is not None:
                    heapq.heappush(events, (float(pod.deletion_time), 0, i))
        elif i in running:
            placement = running.pop(i)
            framework.release(placement)
            used_now -= pod.request.total_gpu_milli
            if pod.request.is_share:
                result.slowdown_by_qos.setdefault(pod.request.qos or "unknown", []).append(sharing.leave(placement, now))
            for j in list(queue):
                if start(j, now):
                    queue.remove(j)
                    result.delays.append(now - float(trace.pods[j].creation_time))
        elif i in queue:  # deleted while still waiting
            queue.remove(i)
            result.gave_up += 1
        times.append(now)
        used.append(used_now)
    end = times[-1] if times else 0.0
    for i, placement in running.items():  # pods without a deletion time run to the end of the trace
        if trace.pods[i].request.is_share:
            qos = trace.pods[i].request.qos or "unknown"
            result.slowdown_by_qos.setdefault(qos, []).append(sharing.leave(placement, end))
    result.gave_up += len(queue)
    result.times, result.used = np.array(times), np.array(used, dtype=np.int64)
    result.model_source = sharing.source
    return result


__all__ = ["MILLI", "TimelineResult", "fallback_slowdown", "run_timeline", "slowdown"]
