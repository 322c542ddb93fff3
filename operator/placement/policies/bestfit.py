"""`bestfit`: the node whose free CPU and GPU would be smallest after placement (each normalised by the
largest node spec, weighted 1/2), min-max rescaled to 0-100 over the feasible nodes."""
from __future__ import annotations

import numpy as np

from ..model import Request
from .base import MAX_NODE_SCORE, MAX_SPEC_CPU, MAX_SPEC_GPU, BasePolicy


class BestFitPolicy(BasePolicy):
    name = "bestfit"

    def score(self, request: Request, feasible: np.ndarray) -> np.ndarray:
        cpu, _, _, _ = request.spec
        waste = ((self.cluster.cpu_left - cpu) / MAX_SPEC_CPU * 0.5
                 + (self.gpu_left_total() - request.total_gpu_milli) / MAX_SPEC_GPU * 0.5)
        raw = ((1.0 - waste) * MAX_NODE_SCORE).astype(np.int64)
        lo, hi = raw[feasible].min(), raw[feasible].max()
        if hi == lo:
            return np.zeros_like(raw)
        return (raw - lo) * MAX_NODE_SCORE // (hi - lo)
