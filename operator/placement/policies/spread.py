"""HAMi's node policies, for live clusters: `binpack` fills the most-allocated node that fits (fewer nodes
busy, whole GPUs kept free), `spread` the least-allocated one (less interference between pods). Within the
node, binpack takes the GPU with the least room, spread the one with the most (a share on N GPUs: the N
fullest or the N emptiest that fit)."""
from __future__ import annotations

import numpy as np

from ..framework import best_fit_gpus
from ..model import Request
from .base import BasePolicy


class BinpackPolicy(BasePolicy):
    name = "binpack"

    def score(self, request: Request, feasible: np.ndarray) -> np.ndarray:
        c = self.cluster
        return (c.gpu_count * 1000 - c.gpu_left_total) * 1000 // np.maximum(c.gpu_count, 1)


class SpreadPolicy(BasePolicy):
    name = "spread"

    def score(self, request: Request, feasible: np.ndarray) -> np.ndarray:
        c = self.cluster
        return c.gpu_left_total * 1000 // np.maximum(c.gpu_count, 1)

    def choose_gpus(self, request: Request, node: int) -> tuple[int, ...]:
        return best_fit_gpus(self.cluster, request, node, spread=True)
