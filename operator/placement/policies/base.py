"""Shared pieces of the policies: node arrays as the FGD simulator's plugins see them."""
from __future__ import annotations

import numpy as np

from ..framework import best_fit_gpus
from ..model import Cluster, Request

#: The simulator's normalisation constants (open-gpu-share utils/const.go): the largest node spec.
MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8_000
MAX_NODE_SCORE = 100


class BasePolicy:
    """Holds the cluster and RNG; GPU choice defaults to the simulator's best-fit."""

    name = "base"

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self.rng: np.random.Generator | None = None

    def attach(self, cluster: Cluster, rng: np.random.Generator) -> None:
        self.cluster, self.rng = cluster, rng

    def choose_gpus(self, request: Request, node: int) -> tuple[int, ...]:
        return best_fit_gpus(self.cluster, request, node)

    def gpu_left_total(self) -> np.ndarray:
        return self.cluster.gpu_left_total
