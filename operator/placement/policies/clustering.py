"""`clustering`: keep pods of the same GPU shape together (shared-GPU pods with shared-GPU pods, k-GPU pods
with k-GPU pods): nodes holding only the same shape score 75-100, mixed nodes with it 50-75, empty nodes 25-50,
others 0-25; within a band, fuller nodes score higher. CPU-only requests score 0 everywhere."""
from __future__ import annotations

import numpy as np

from ..model import Request
from .base import MAX_NODE_SCORE, MAX_SPEC_GPU, BasePolicy


class GpuClusteringPolicy(BasePolicy):
    name = "clustering"

    def score(self, request: Request, feasible: np.ndarray) -> np.ndarray:
        tag = request.affinity_tag
        if tag is None:
            return np.zeros(feasible.shape, dtype=np.int64)
        affinity = self.cluster.affinity
        kinds = (affinity > 0).sum(axis=1)
        has = affinity[:, tag] > 0
        quarter = MAX_NODE_SCORE // 4
        fill = np.trunc(quarter * (MAX_SPEC_GPU - self.gpu_left_total()) / MAX_SPEC_GPU).astype(np.int64)
        band = np.where(has, np.where(kinds == 1, 3, 2), np.where(kinds == 0, 1, 0))
        return fill + band * quarter
