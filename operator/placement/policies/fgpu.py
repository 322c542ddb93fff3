"""`fgpu` (the default): FGD, plus CPU-only pods kept away from idle GPUs.

FGD scores a CPU-only pod by the fragmentation its CPU use causes for the target workload, quantised to
floor(100 * sigmoid(dF/1000)); on most nodes that is 0 ("changes nothing"), so hundreds of nodes tie and the
reference scheduler takes the first in a fixed random order. Those nodes often have idle whole GPUs, and the
CPU the pod takes is CPU that a later GPU pod on that node would have needed: GPUs end up idle behind
exhausted CPUs, and large multi-GPU pods find no node with both. fgpu keeps FGD's score as the primary key
for every pod; among a CPU-only pod's top-scoring nodes it takes the one with the fewest idle whole GPUs
(then one already in use). GPU pods are placed exactly as FGD places them. Measurements: docs/placement.md.
"""
from __future__ import annotations

import numpy as np

from ..model import MILLI, Request
from .fgd import FgdPolicy

#: Tie-break weights below one FGD score step (FGD scores are whole numbers 0..100).
_STEP = 100.0
_MAX_COUNTED_GPUS = 8


class FgpuPolicy(FgdPolicy):
    name = "fgpu"

    def score(self, request: Request, feasible: np.ndarray) -> np.ndarray:
        fgd = super().score(request, feasible)
        if request.wants_gpu:
            return fgd
        c = self.cluster
        idle_gpus = np.minimum((c.gpu_left == MILLI).sum(axis=1), _MAX_COUNTED_GPUS)
        in_use = (c.gpu_left_total < c.gpu_count * MILLI) | (c.cpu_left < c.cpu_cap)
        return fgd * _STEP + (_MAX_COUNTED_GPUS - idle_gpus) * 2.0 + in_use
