"""`packing`: prefer (1) already-shared GPUs with the least room left, then (2) free GPUs on a node already in
use, then (3) an idle node with few GPUs. Scores 50-100, 33-50 and 0-33 as in the FGD simulator."""
from __future__ import annotations

import numpy as np

from ..model import MILLI, Cluster, Request
from .base import MAX_NODE_SCORE, BasePolicy


class GpuPackingPolicy(BasePolicy):
    name = "packing"

    def attach(self, cluster: Cluster, rng: np.random.Generator) -> None:
        super().attach(cluster, rng)
        self._sorted = np.sort(cluster.gpu_left, axis=1)  # least room first, kept per node version
        self._version = cluster.version.copy()

    def score(self, request: Request, feasible: np.ndarray) -> np.ndarray:
        scores = np.zeros(feasible.shape, dtype=np.int64)
        if not request.wants_gpu:
            return scores
        c = self.cluster
        changed = np.flatnonzero(self._version != c.version)
        if changed.size:
            self._sorted[changed] = np.sort(c.gpu_left[changed], axis=1)
            self._version[changed] = c.version[changed]
        nodes = np.flatnonzero(feasible)
        ordered = self._sorted[nodes]  # the GPUs the request would take come first
        fully_free = (ordered == MILLI).sum(axis=1)
        idle_node = np.maximum(MAX_NODE_SCORE // 3 - fully_free, fully_free)
        fits = ordered >= request.gpu_milli
        take = fits & (np.cumsum(fits, axis=1) <= request.num_gpu)
        free_used = (take & (ordered == MILLI)).sum(axis=1)
        uses_free = np.maximum(MAX_NODE_SCORE // 2 - free_used, MAX_NODE_SCORE // 3)
        room_pct = np.where(take, ordered * 100 // MILLI, 0).sum(axis=1)
        shares = np.maximum(MAX_NODE_SCORE - room_pct // 10, MAX_NODE_SCORE // 2)
        idle = fully_free == c.gpu_count[nodes]
        scores[nodes] = np.where(idle, idle_node, np.where(free_used > 0, uses_free, shares))
        return scores
