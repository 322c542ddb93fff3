"""Timeline mode: replay the trace's own creation and deletion times (pods depart), with a wait queue.

Events are processed in time order (departures before arrivals at the same second). A pod that does not fit
waits in a FIFO queue and is retried whenever resources are freed (later pods may pass a waiting one that
still does not fit); a pod still waiting at its deletion time gives up. We report allocation over time, the
queueing delay of pods that had to wait, and the slowdown of pods sharing a GPU, by QoS class.

Slowdown of a sharing pod = its solo speed / its expected speed next to the other sharing pods of its GPU,
averaged over its lifetime (weighted by time). With simgpu importable, `interference.InterferenceModel` prices
it with simgpu's time-slicing model (each pod loops on a GEMM, busy a fraction of time equal to its GPU share).
For GPUs simgpu has no model of (the undisclosed G2/G3 get stand-ins there; others fall through), or without
simgpu, a documented fallback: k always-busy clients each get 1/k of the GPU, minus a 0.15 ms context switch
per 2.1 ms slice (the H100 time-slicing measurements in DESIGN.md section 6).
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from fgpu_operator.placement.fragmentation import TargetWorkload
from fgpu_operator.placement.framework import Framework, Unschedulable
from fgpu_operator.placement.model import MILLI, Cluster, NodeSpec, Placement
from fgpu_operator.placement.policies import make_policy

from .trace import QOS_CLASSES, Trace

SLICE_S, SWITCH_S = 2.1e-3, 0.15e-3
TIME_POINTS = 20


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
        self.duty[p.request.name] = p.request.gpu_milli / MILLI
        self.acc.setdefault(p.request.name, [0.0, 0.0])

    def leave(self, p: Placement, now: float) -> float:
        gpu = (p.node, p.gpus[0])
        self._flush(gpu, now)
        self.residents[gpu].discard(p.request.name)
        self.duty.pop(p.request.name, None)
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


__all__ = ["TimelineResult", "fallback_slowdown", "run_timeline", "slowdown"]
