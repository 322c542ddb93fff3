"""`kube-dra`: what kube-scheduler (v1.37) does with a GPU pod whose GPUs are DRA claims, for the simulator to
put beside fgpu's policies (`fgpu simulate --allocator kube-dra`; docs/dra.md).

Node: DRA's own Score only rewards a `firstAvailable` alternative's rank, which these claims do not use, so
the node is chosen by the default plugins that see the pod's CPU and memory: NodeResourcesFit's
LeastAllocated and NodeResourcesBalancedAllocation (weight 1 each; requests of zero scored as 100m / 200Mi),
over the first feasible nodes in a rotating order (percentageOfNodesToScore's adaptive default: 50% - 1% per
125 nodes, at least 5% and 100 nodes), ties broken at random in every cycle (kube-scheduler draws a random
number per node), from the replay's generator. The GPUs play no part in the node's score.

Devices: the structured allocator takes the first device that satisfies the request in the order it tries
them (pools by name, slices by name, devices in slice order; fgpu-dra publishes a node's GPUs in index
order), so a share goes to the lowest-index GPU it fits on and whole GPUs are the lowest-index free ones.
Amounts are the trace's own (not rounded up to the request policy's 256Mi / 1% steps), so the comparison
measures the allocation rule alone.
"""
from __future__ import annotations

import numpy as np

from ..fit import gpu_fit
from ..model import Request
from .base import BasePolicy

MAX_SCORE = 100
NON_ZERO_CPU_MILLI = 100  # kube-scheduler's DefaultMilliCPURequest
NON_ZERO_MEMORY_MIB = 200  # DefaultMemoryRequest
MIN_FEASIBLE_NODES = 100  # minFeasibleNodesToFind
MIN_PERCENTAGE = 5  # minFeasibleNodesPercentageToFind


def nodes_to_find(n: int) -> int:
    """numFeasibleNodesToFind with percentageOfNodesToScore unset."""
    if n < MIN_FEASIBLE_NODES:
        return n
    pct = max(MIN_PERCENTAGE, 50 - n // 125)
    return max(MIN_FEASIBLE_NODES, n * pct // 100)


def _least_allocated(requested: np.ndarray, cap: np.ndarray) -> np.ndarray:
    ok = (cap > 0) & (requested <= cap)
    return np.where(ok, (cap - requested) * MAX_SCORE // np.maximum(cap, 1), 0)


def _balance(cpu_frac: np.ndarray, mem_frac: np.ndarray) -> np.ndarray:
    std = np.abs(np.minimum(cpu_frac, 1.0) - np.minimum(mem_frac, 1.0)) / 2
    return ((1 - std) * MAX_SCORE).astype(np.int64)


class KubeDraPolicy(BasePolicy):
    name = "kube-dra"

    def __init__(self) -> None:
        super().__init__()
        self.next_start = 0

    def _window(self, feasible: np.ndarray) -> np.ndarray:
        """The feasible nodes kube-scheduler scores this cycle, and the next cycle's start."""
        n = feasible.size
        order = (np.arange(n) + self.next_start) % n
        hits = np.flatnonzero(feasible[order])
        want = nodes_to_find(n)
        chosen = order[hits[:want]]
        processed = int(hits[want - 1]) + 1 if hits.size >= want else n
        self.next_start = (self.next_start + processed) % n
        mask = np.zeros(n, dtype=bool)
        mask[chosen] = True
        return mask

    def score(self, request: Request, feasible: np.ndarray) -> np.ndarray:
        """node_scores over this cycle's window, plus a random fraction below 1 that only breaks ties."""
        window = self._window(feasible)
        jitter = self.rng.random(feasible.size) * 0.5
        return np.where(window, self.node_scores(request) + jitter, -np.inf)

    def node_scores(self, request: Request) -> np.ndarray:
        """LeastAllocated + BalancedAllocation, each 0..100, for every node."""
        c = self.cluster
        cpu, mem = request.cpu_milli or NON_ZERO_CPU_MILLI, request.memory_mib or NON_ZERO_MEMORY_MIB
        cpu_before, mem_before = c.cpu_cap - c.cpu_left, c.mem_cap - c.mem_left
        cpu_after, mem_after = cpu_before + cpu, mem_before + mem
        least = (_least_allocated(cpu_after, c.cpu_cap) + _least_allocated(mem_after, c.mem_cap)) // 2
        cpu_cap, mem_cap = np.maximum(c.cpu_cap, 1), np.maximum(c.mem_cap, 1)
        with_pod = _balance(cpu_after / cpu_cap, mem_after / mem_cap)
        without = _balance(cpu_before / cpu_cap, mem_before / mem_cap)
        balanced = MAX_SCORE // 2 + (MAX_SCORE // 2 + with_pod - without) // 2
        return least + balanced

    def choose_gpus(self, request: Request, node: int) -> tuple[int, ...]:
        """First fit in GPU index order: the allocator's device order on one node. A request for N GPUs
        (whole, or a share on each of N: a claim's `count: N`) takes the first N GPUs it fits on."""
        if not request.wants_gpu:
            return ()
        fits = np.flatnonzero(gpu_fit(self.cluster, request, node))
        return tuple(int(g) for g in fits[: request.num_gpu])
