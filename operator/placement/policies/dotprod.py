"""`dotprod`: Tetris-style dot product of the node's free vector and the request, as the FGD simulator
configures it for the paper (merged GPU dimension, normalised by the largest node spec). The simulator scores
100 * (1 - dot/2), so nodes with *less* matching free room win; GPUs are chosen best-fit."""
from __future__ import annotations

import numpy as np

from ..model import Request
from .base import MAX_NODE_SCORE, MAX_SPEC_CPU, MAX_SPEC_GPU, BasePolicy


class DotProductPolicy(BasePolicy):
    name = "dotprod"

    def score(self, request: Request, feasible: np.ndarray) -> np.ndarray:
        cpu, _, _, _ = request.spec
        node_cpu = self.cluster.cpu_left / MAX_SPEC_CPU
        node_gpu = self.gpu_left_total() / MAX_SPEC_GPU
        dot = node_cpu * (cpu / MAX_SPEC_CPU) + node_gpu * (request.total_gpu_milli / MAX_SPEC_GPU)
        return (MAX_NODE_SCORE * (1.0 - dot / 2.0)).astype(np.int64)
