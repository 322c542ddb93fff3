"""`packing`: prefer (1) already-shared GPUs with the least room left, then (2) free GPUs on a node already in
use, then (3) an idle node with few GPUs. Scores 50-100, 33-50 and 0-33 as in the FGD simulator."""
from __future__ import annotations

import numpy as np

from ..model import MILLI, Request
from .base import MAX_NODE_SCORE, BasePolicy


class GpuPackingPolicy(BasePolicy):
    name = "packing"

    def score(self, request: Request, feasible: np.ndarray) -> np.ndarray:
        scores = np.zeros(feasible.shape, dtype=np.int64)
        if not request.wants_gpu:
            return scores
        nodes = np.flatnonzero(feasible)
        left = self.cluster.gpu_left[nodes]
        fully_free = (left == MILLI).sum(axis=1)
        idle_node = np.maximum(MAX_NODE_SCORE // 3 - fully_free, fully_free)
        ordered = np.sort(left, axis=1)  # least room first: the GPUs the request would take
        fits = ordered >= request.gpu_milli
        take = fits & (np.cumsum(fits, axis=1) <= request.num_gpu)
        free_used = (take & (ordered == MILLI)).sum(axis=1)
        uses_free = np.maximum(MAX_NODE_SCORE // 2 - free_used, MAX_NODE_SCORE // 3)
        room_pct = np.where(take, ordered * 100 // MILLI, 0).sum(axis=1)
        shares = np.maximum(MAX_NODE_SCORE - room_pct // 10, MAX_NODE_SCORE // 2)
        idle = fully_free == self.cluster.gpu_count[nodes]
        scores[nodes] = np.where(idle, idle_node, np.where(free_used > 0, uses_free, shares))
        return scores
