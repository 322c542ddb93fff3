"""FGD's fragmentation measure (Weng et al., ATC'23, section 3), vectorised over many node states at once.

The *target workload* is the distribution of pod shapes (CPU, GPU fraction, GPU count, model constraint) that
covers 95% of the trace's pods, most frequent first, with frequencies renormalised to sum to 1; CPU-only pods
are included (the simulator's defaults: podPopularityThreshold 95, podIncreaseStep 1, isInvolvedCpuPods true).

For one node and one target pod shape, the node's idle GPU milli counts as fragment unless the pod fits
(model allowed, enough CPU, enough GPUs with room); when it fits, only the GPUs too small for the pod's
fraction count. CPU-only shapes count every idle GPU as fragment. The node's fragment is the
frequency-weighted sum over shapes; the cluster's is the sum over nodes (`frag ratio` = fragment / idle).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .model import Cluster, Request

POPULARITY = 0.95


@dataclass(frozen=True)
class TargetWorkload:
    """Target pod shapes with frequencies. Arrays hold the GPU shapes; CPU-only shapes fold into `cpu_freq`."""

    shapes: tuple[tuple[tuple[int, int, int, tuple[str, ...]], float], ...]
    milli: np.ndarray  # (T,) GPU fraction per GPU
    count: np.ndarray  # (T,) GPUs
    cpu: np.ndarray  # (T,) CPU milli
    freq: np.ndarray  # (T,)
    models: tuple[tuple[str, ...], ...]
    cpu_freq: float

    @classmethod
    def from_requests(cls, requests: Iterable[Request], popularity: float = POPULARITY) -> TargetWorkload:
        """Most frequent shapes first (ties: larger shape first, as the simulator's reverse sort), until
        `popularity` of all pods are covered; then renormalise."""
        counts = Counter(r.spec for r in requests)
        if not counts:
            raise ValueError("the target workload needs at least one pod")
        total = sum(counts.values())
        ordered = sorted(counts.items(), key=lambda kv: (kv[1], _order_key(kv[0])), reverse=True)
        chosen, covered = [], 0
        for shape, n in ordered:
            if covered >= popularity * total:
                break
            chosen.append((shape, n))
            covered += n
        shapes = tuple((shape, n / covered) for shape, n in chosen)
        return cls.from_shapes(shapes)

    @classmethod
    def from_shapes(cls, shapes: Sequence[tuple[tuple[int, int, int, tuple[str, ...]], float]]) -> TargetWorkload:
        gpu = [(s, f) for s, f in shapes if s[1] > 0 and s[2] > 0]
        cpu_freq = float(sum(f for s, f in shapes if not (s[1] > 0 and s[2] > 0)))
        return cls(
            shapes=tuple(shapes),
            milli=np.array([s[1] for s, _ in gpu], dtype=np.int32),
            count=np.array([s[2] for s, _ in gpu], dtype=np.int32),
            cpu=np.array([s[0] for s, _ in gpu], dtype=np.int64),
            freq=np.array([f for _, f in gpu], dtype=np.float64),
            models=tuple(s[3] for s, _ in gpu),
            cpu_freq=cpu_freq,
        )

    def access(self, cluster: Cluster) -> np.ndarray:
        """(models, T) bool: may shape t run on GPU model m?"""
        table = np.ones((len(cluster.models), len(self.models)), dtype=bool)
        for t, allowed in enumerate(self.models):
            if allowed:
                table[:, t] = [m in allowed and m != "" for m in cluster.models]
        table[[i for i, m in enumerate(cluster.models) if m == ""], :] = False
        return table


def _order_key(shape: tuple[int, int, int, tuple[str, ...]]) -> tuple:
    cpu, milli, count, models = shape
    return (cpu, milli, count, "|".join(models))


class FragMeter:
    """Computes node fragment amounts for arbitrary states of one cluster's nodes."""

    def __init__(self, cluster: Cluster, workload: TargetWorkload):
        self.workload = workload
        self.access = workload.access(cluster)
        # Shapes share few distinct GPU fractions: count fitting GPUs once per fraction, then fan out.
        self.fractions, self.shape_fraction = np.unique(workload.milli, return_inverse=True)
        self.fraction_grid = self.fractions.astype(np.int32)[None, :, None]
        self.count = workload.count[None, :]
        self.cpu = workload.cpu[None, :]
        self.freq = workload.freq

    def amount(self, cpu_left: np.ndarray, gpu_left: np.ndarray, model_idx: np.ndarray) -> np.ndarray:
        """Fragment (milli-GPU) of M node states: cpu_left (M,), gpu_left (M, G), model_idx (M,)."""
        idle = gpu_left.sum(axis=1)
        if self.freq.size == 0:
            return idle * self.workload.cpu_freq
        fits = gpu_left[:, None, :] >= self.fraction_grid  # (M, U, G)
        fitting = fits.sum(axis=2)[:, self.shape_fraction]  # (M, T) GPUs with room for shape t
        small = (idle[:, None] - (gpu_left[:, None, :] * fits).sum(axis=2))[:, self.shape_fraction]
        ok = self.access[model_idx] & (cpu_left[:, None] >= self.cpu) & (fitting >= self.count)
        per_shape = np.where(ok, small, idle[:, None])
        return per_shape @ self.freq + idle * self.workload.cpu_freq

    def node_amounts(self, cluster: Cluster, nodes: np.ndarray | None = None) -> np.ndarray:
        sel = slice(None) if nodes is None else nodes
        return self.amount(cluster.cpu_left[sel], cluster.gpu_left[sel], cluster.model_idx[sel])
