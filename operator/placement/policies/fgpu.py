"""`fgpu` (the default): FGD's score, minus a penalty for GPUs left idle behind an exhausted CPU.

FGD quantises its score to floor(100 * sigmoid(dF/1000)), so many nodes tie and the reference scheduler takes
the first in a fixed random node order. That order knows nothing about CPU: a GPU pod with many cores per GPU
lands on a node whose remaining CPU then cannot feed its remaining GPUs, and those GPUs stay idle for good
(at 100% arrival FGD leaves 12-18 whole GPUs idle this way on the default trace, mostly on 96-core 8-GPU
nodes). fgpu therefore:

* charges a GPU pod 10 FGD score points per tenth of a GPU that it newly *strands* on a node: idle GPU
  capacity beyond what the node's remaining CPU can feed at the target workload's CPU per GPU (its
  demand-weighted mean, ~11 cores on openb). Counted in tenths, so near-equal nodes still tie and keep FGD's
  node order; where nothing is stranded, FGD's score decides alone;
* breaks a CPU-only pod's ties towards the node with the fewest idle whole GPUs (then one already in use).

The GPU-pod rule is off when the target workload asks for more CPU per GPU (CPU-only pods included) than the
cluster has: then the CPU runs out before the GPUs, GPUs are stranded wherever the pods go, and steering GPU
pods to CPU-rich nodes only takes that CPU from the CPU-only pods (on openb this is the cpu250 trace alone:
18.3 cores asked per GPU, 17.2 in the cluster). The CPU-only tie-break never outweighs one FGD score step. Only the current cluster state and FGD's target workload are
used, no future arrivals. Measurements and the ceiling analysis: docs/placement.md.
"""
from __future__ import annotations

import numpy as np

from ..fragmentation import TargetWorkload
from ..model import MILLI, Cluster, Request
from .fgd import FgdPolicy

#: CPU-only tie-break weights stay below one FGD score step (FGD scores are whole numbers 0..100).
_STEP = 100.0
#: FGD points charged per tenth of a GPU newly stranded (default trace, ten seeds: 95.84; as a mere
#: tie-break 95.75; FGD 95.27).
_POINTS_PER_STRANDED_TENTH = 10
_MAX_COUNTED_GPUS = 8
#: Stranded capacity is compared in tenths of a GPU: finer differences keep FGD's node order.
_STRAND_QUANTUM = MILLI // 10


def cpu_per_gpu(workload: TargetWorkload) -> float:
    """Milli-cores per whole GPU that the target workload's GPU pods ask for (frequency x GPU weighted)."""
    gpu_milli = workload.freq * workload.milli * workload.count
    if gpu_milli.sum() <= 0:
        return float("inf")
    return float((workload.freq * workload.cpu).sum() / gpu_milli.sum() * MILLI)


def cpu_demand_per_gpu(workload: TargetWorkload) -> float:
    """Milli-cores per whole GPU that the whole target workload asks for, CPU-only pods included."""
    cpu = sum(freq * shape[0] for shape, freq in workload.shapes)
    gpu = sum(freq * shape[1] * shape[2] for shape, freq in workload.shapes)
    return float("inf") if gpu <= 0 else cpu / gpu * MILLI


def stranded_gpu_milli(cpu_left: np.ndarray, idle_gpu_milli: np.ndarray, cpu_per_whole_gpu: float) -> np.ndarray:
    """Idle GPU milli beyond what the node's remaining CPU can feed at `cpu_per_whole_gpu`."""
    fed = np.maximum(cpu_left, 0) / cpu_per_whole_gpu * MILLI
    return np.maximum(idle_gpu_milli - fed, 0.0)


class FgpuPolicy(FgdPolicy):
    name = "fgpu"

    def attach(self, cluster: Cluster, rng: np.random.Generator) -> None:
        super().attach(cluster, rng)
        self.cpu_per_gpu = cpu_per_gpu(self.workload)
        cluster_cpu_per_gpu = cluster.cpu_cap.sum() / max(cluster.total_gpus, 1)
        #: Steer GPU pods away from stranding only while the cluster has the CPU the workload asks for.
        self.protect_gpus = cpu_demand_per_gpu(self.workload) <= cluster_cpu_per_gpu

    def cache_key(self, request: Request) -> tuple:
        return (request.spec, request.cpu_milli)  # stranding reads the CPU asked, spec rounds 0 up to 100

    def evaluate(self, request: Request, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """FGD's score with the charges below; everything depends on the node's own state only, so FGD's
        per-node cache holds it."""
        fgd, gpus = super().evaluate(request, nodes)
        c = self.cluster
        if request.wants_gpu:
            if not self.protect_gpus:
                return fgd * _STEP, gpus
            cpu, idle = c.cpu_left[nodes], c.gpu_left_total[nodes]
            before = stranded_gpu_milli(cpu, idle, self.cpu_per_gpu)
            after = stranded_gpu_milli(cpu - request.cpu_milli, idle - request.total_gpu_milli, self.cpu_per_gpu)
            newly = np.clip(np.round((after - before) / _STRAND_QUANTUM), 0, _MAX_COUNTED_GPUS * 10 - 1)
            return fgd * _STEP - newly * (_POINTS_PER_STRANDED_TENTH * _STEP), gpus
        idle_gpus = np.minimum((c.gpu_left[nodes] == MILLI).sum(axis=1), _MAX_COUNTED_GPUS)
        in_use = (c.gpu_left_total[nodes] < c.gpu_count[nodes] * MILLI) | (c.cpu_left[nodes] < c.cpu_cap[nodes])
        return fgd * _STEP + (_MAX_COUNTED_GPUS - idle_gpus) * 2.0 + in_use, gpus
