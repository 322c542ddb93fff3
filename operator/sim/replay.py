"""The FGD paper's replay protocol (kubernetes-scheduler-simulator, `--shuffle-pod=true -tune 1.3`).

Per seed: sort pods by name and shuffle them; tune the workload to `tune` x the cluster's GPU capacity by
appending pods sampled with replacement from the trace (or dropping random pods while above); then pods arrive
one by one and never depart. After each pod we record the GPU milli that has arrived (failed pods included),
the GPU milli in use, and the cluster's fragment. Records are binned by arrived percentage of capacity
(0..130): the bin's value is the mean over its records (the simulator's analysis scripts do the same).
One numpy Generator seeded with the seed drives shuffling, tuning and tie-breaking, in that order, so every
policy sees the same arrival sequence for a given seed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
from fgpu_operator.placement.fragmentation import FragMeter, TargetWorkload
from fgpu_operator.placement.framework import Admission, Framework, Unschedulable
from fgpu_operator.placement.model import MILLI, Cluster, NodeSpec, Request
from fgpu_operator.placement.policies import make_policy

from .trace import Trace

MAX_ARRIVED_PCT = 130


def tune_workload(requests: list[Request], total_gpu_milli: int, ratio: float,
                  rng: np.random.Generator) -> list[Request]:
    """Shuffle, then scale the workload's GPU demand to `ratio` x capacity (appended samples go last)."""
    by_name = sorted(requests, key=lambda r: r.name)
    order = list(by_name)
    rng.shuffle(order)
    if ratio <= 0:
        return order
    target = ratio * total_gpu_milli
    demand = sum(r.total_gpu_milli for r in order)
    while demand > target and order:
        demand -= order.pop(int(rng.integers(len(order)))).total_gpu_milli
    i = 0
    while demand < target:
        sample = by_name[int(rng.integers(len(by_name)))]
        # The simulator compares with the per-GPU fraction here, not the total; kept for faithfulness.
        if demand + (sample.gpu_milli if sample.wants_gpu else 0) > target:
            break
        order.append(_clone(sample, f"{sample.name}-tuned-{i}"))
        demand += sample.total_gpu_milli
        i += 1
    return order


def _clone(request: Request, name: str) -> Request:
    return replace(request, name=name)  # every field, QoS included (a protected pod's copy is protected)


@dataclass
class ReplayResult:
    trace: str
    policy: str
    seed: int
    total_gpus: int
    arrived: np.ndarray  # GPU milli arrived after each pod
    used: np.ndarray  # GPU milli allocated after each pod
    frag: np.ndarray  # cluster fragment (milli) after each pod
    pods: int
    failed: int
    failed_gpu_milli: int
    seconds: float
    failures: list[str] = field(default_factory=list)

    def binned(self) -> tuple[dict[int, float], dict[int, float]]:
        """Allocation ratio and fragmentation ratio (%) per arrived percentage 0..130."""
        total = self.total_gpus
        arrived_pct = np.round(self.arrived / total / 10)
        alloc = np.round(self.used / total / 10, 2)
        idle = total * MILLI - self.used
        with np.errstate(divide="ignore", invalid="ignore"):
            frag = np.where(idle > 0, 100.0 * self.frag / idle, 0.0)
        out_alloc, out_frag = {}, {}
        for pct in range(MAX_ARRIVED_PCT + 1):
            sel = arrived_pct == pct
            if not sel.any():
                sel = np.abs(arrived_pct - pct) <= 1
                if not sel.any():
                    continue
            out_alloc[pct] = round(float(alloc[sel].mean()), 2)
            out_frag[pct] = round(float(frag[sel].mean()), 2)
        return out_alloc, out_frag


def replay(nodes: list[NodeSpec], trace: Trace, policy_name: str, seed: int, tune: float = 1.3,
           workload: TargetWorkload | None = None, keep_failures: int = 0,
           admission: Admission | None = None, watch=None) -> ReplayResult:
    """One (trace, policy, seed) replay of the FGD protocol (`admission`: see `Framework`). `watch`
    (`attach(cluster)`, `join(placement, step)`, `leave(placement, step)`, `checkpoint(step, arrived, used)`)
    follows every share, pod arrivals counting as time (the QoS simulation, `qos_timeline.replay_qos`)."""
    started = time.perf_counter()
    cluster = Cluster(list(nodes))
    if watch is not None:
        watch.attach(cluster)
    workload = workload or TargetWorkload.from_requests(trace.requests)
    rng = np.random.default_rng(seed)
    requests = tune_workload(trace.requests, cluster.total_gpus * MILLI, tune, rng)
    framework = Framework(cluster, make_policy(policy_name, workload), rng, admission=admission)
    meter = FragMeter(cluster, workload)
    node_frag = meter.node_amounts(cluster)
    frag_total = float(node_frag.sum())
    n = len(requests)
    arrived, used, frag = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n)
    arrived_now = used_now = failed = failed_milli = 0
    failures: list[str] = []
    for i, request in enumerate(requests):
        arrived_now += request.total_gpu_milli
        outcome = framework.schedule(request, explained=len(failures) < keep_failures)
        if isinstance(outcome, Unschedulable):
            failed += 1
            failed_milli += request.total_gpu_milli
            if len(failures) < keep_failures:
                failures.append(str(outcome))
        else:
            used_now += request.total_gpu_milli
            node = outcome.node
            new = float(meter.node_amounts(cluster, np.array([node]))[0])
            frag_total += new - node_frag[node]
            node_frag[node] = new
            if watch is not None and request.is_share:
                watch.join(outcome, i)
        arrived[i], used[i], frag[i] = arrived_now, used_now, frag_total
        if watch is not None:
            watch.checkpoint(i + 1, arrived_now, used_now)
    return ReplayResult(trace.name, policy_name, seed, cluster.total_gpus, arrived, used, frag, n, failed,
                        failed_milli, time.perf_counter() - started, failures)
