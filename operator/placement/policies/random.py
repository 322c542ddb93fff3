"""`random`: one feasible node drawn uniformly per request (the simulator's RandomScore gives it the top score
in PreScore); a shared request goes to a random fitting GPU on it (a share on N GPUs: N distinct ones)."""
from __future__ import annotations

import numpy as np

from ..fit import gpu_fit
from ..model import Request
from .base import MAX_NODE_SCORE, BasePolicy


class RandomPolicy(BasePolicy):
    name = "random"

    def score(self, request: Request, feasible: np.ndarray) -> np.ndarray:
        scores = np.zeros(feasible.shape, dtype=np.int64)
        candidates = np.flatnonzero(feasible)
        scores[candidates[self.rng.integers(candidates.size)]] = MAX_NODE_SCORE
        return scores

    def choose_gpus(self, request: Request, node: int) -> tuple[int, ...]:
        if not request.is_share:
            return super().choose_gpus(request, node)
        fits = np.flatnonzero(gpu_fit(self.cluster, request, node))
        if request.num_gpu == 1:  # one draw, as the simulator's
            return (int(fits[self.rng.integers(fits.size)]),)
        return tuple(sorted(int(g) for g in self.rng.choice(fits, request.num_gpu, replace=False)))
