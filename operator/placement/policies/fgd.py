"""`fgd`: Fragmentation Gradient Descent (Weng et al., ATC'23). Place the request where the node's expected
fragmentation (over the target workload) grows least: score = floor(100 * sigmoid((F_before - F_after)/1000)).
For a shared request every fitting GPU is tried and the best one (lowest index on ties) is used; a share on N
GPUs tries every set of N distinct fitting GPUs that leaves a different node state (`share_sets`) and takes the
set that adds least fragmentation. Whole-GPU requests take the first free GPUs. Ties between nodes are broken
at random by the framework.

Speed: a node's score for a request shape only changes when the node does, so scores are cached per
(shape, node) and stamped with the node's version; each request recomputes only nodes changed since that
shape was last scored, in one vectorised batch.
"""
from __future__ import annotations

import numpy as np

from ..fit import gpu_fit
from ..fragmentation import FragMeter, TargetWorkload
from ..model import MILLI, Cluster, Request
from ..slo_guard import class_key
from .base import MAX_NODE_SCORE, BasePolicy


def take_whole_gpus(left: np.ndarray, fits: np.ndarray, milli: int, count: int) -> np.ndarray:
    """Per row, subtract `milli` from the first `count` GPUs that fit (mask `fits`), in index order."""
    take = fits & (np.cumsum(fits, axis=1) <= count)
    return np.where(take, left - milli, left)


def _repeats_earlier(left: np.ndarray) -> np.ndarray:
    """(N, G) bool: GPU j's room equals that of some GPU i < j on the same node. One broadcast compare (a loop
    over GPU columns cost ~20 small numpy calls a decision, most of FGD's own time on the operator's path)."""
    width = left.shape[1]
    earlier = np.tri(width, width, -1, dtype=bool)  # [j, i]: i < j
    return ((left[:, :, None] == left[:, None, :]) & earlier).any(axis=2)


#: Sets of GPUs tried per node for a share on several GPUs: beyond this (many GPUs, all with different room)
#: the least-room and most-room sets are tried beside the first ones enumerated.
MAX_SETS = 256


def share_sets(left: np.ndarray, fits: np.ndarray, count: int, limit: int = MAX_SETS) -> list[tuple[int, ...]]:
    """Sets of `count` distinct fitting GPUs of one node (`left`, `fits`: its rows), one per node state they
    can leave: the measure ignores GPU order, so a set is known by how many GPUs of each room it takes, and
    of GPUs with equal room it takes the lowest indices. Sorted, so the first best set is the lowest."""
    groups: dict[int, list[int]] = {}
    for g in np.flatnonzero(fits):
        groups.setdefault(int(left[g]), []).append(int(g))
    rooms = list(groups.values())
    tail = np.cumsum([len(r) for r in rooms][::-1])[::-1].tolist() + [0]  # GPUs in groups k.. onward
    out: list[tuple[int, ...]] = []

    def walk(k: int, need: int, taken: list[int]) -> None:
        if len(out) >= limit or tail[k] < need:
            return
        if need == 0:
            out.append(tuple(sorted(taken)))
            return
        for take in range(min(need, len(rooms[k])), -1, -1):
            walk(k + 1, need - take, taken + rooms[k][:take])

    walk(0, count, [])
    if len(out) >= limit:
        fitting = np.flatnonzero(fits)
        order = np.argsort(left[fitting], kind="stable")
        out += [tuple(sorted(int(g) for g in fitting[order[:count]])),
                tuple(sorted(int(g) for g in fitting[order[::-1][:count]]))]
    return sorted(set(out))


class ShapeCache:
    """Per request shape: the score and GPU choice (`width` GPUs) of every node, valid while the node's version
    matches."""

    def __init__(self, size: int, width: int = 1):
        self.version = np.full(size, -1, dtype=np.int64)
        self.score = np.zeros(size, dtype=np.float64)
        self.gpu = np.zeros((size, width), dtype=np.int64)


class FgdPolicy(BasePolicy):
    name = "fgd"

    def __init__(self, workload: TargetWorkload):
        super().__init__()
        self.workload = workload
        self.meter: FragMeter | None = None
        self.caches: dict[tuple, ShapeCache] = {}

    def attach(self, cluster: Cluster, rng: np.random.Generator) -> None:
        super().attach(cluster, rng)
        self.meter = FragMeter(cluster, self.workload)
        self.caches = {}

    def node_scores(self, delta: np.ndarray) -> np.ndarray:
        """FGD's quantised score of a fragment change (positive delta = fragmentation reduced)."""
        return np.floor(1.0 / (1.0 + np.exp(-delta / 1000.0)) * MAX_NODE_SCORE)

    def cache_key(self, request: Request) -> tuple:
        """What a node's score depends on besides the node's own state."""
        return request.spec

    def score(self, request: Request, feasible: np.ndarray) -> np.ndarray:
        key = (self.cache_key(request), class_key(request))  # the QoS filter narrows the GPUs tried
        cache = self.caches.get(key)
        if cache is None:
            cache = self.caches[key] = ShapeCache(self.cluster.size, request.num_gpu if request.is_share else 1)
        stale = np.flatnonzero(feasible & (cache.version != self.cluster.version))
        if stale.size:
            cache.score[stale], cache.gpu[stale] = self.evaluate(request, stale)
            cache.version[stale] = self.cluster.version[stale]
        return cache.score

    def evaluate(self, request: Request, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Scores and chosen GPUs ((nodes, devices), for shared requests) for the given nodes as they are."""
        c = self.cluster
        cpu_req, milli, count, _ = request.spec
        cpu, left, model = c.cpu_left[nodes], c.gpu_left[nodes], c.model_idx[nodes]
        cpu_after = cpu - cpu_req
        n = nodes.size
        if not request.is_share:
            after_left = (take_whole_gpus(left, gpu_fit(c, request, nodes), milli, count) if request.wants_gpu
                          else left)
            both = self.meter.amount(np.concatenate([cpu, cpu_after]), np.concatenate([left, after_left]),
                                     np.concatenate([model, model]))
            return self.node_scores(both[:n] - both[n:]), np.zeros((n, 1), dtype=np.int64)
        if count > 1:
            return self._evaluate_sets(request, nodes)
        # A GPU whose room equals an earlier fitting GPU's on the same node gives the same node state (the measure
        # ignores GPU order), so only the first GPU of each distinct room is tried: the lowest index wins ties.
        # Only fitting GPUs count as repeats: one the fit rule refuses (an SLO, a UUID list) must not hide an
        # allowed GPU of the same room, so refused GPUs get distinct negative rooms here.
        fits = gpu_fit(c, request, nodes)
        candidate = fits & ~_repeats_earlier(np.where(fits, left, -1 - np.arange(left.shape[1])))
        row, gpu = np.nonzero(candidate)  # by node, then GPU index
        trial = left[row]
        trial[np.arange(row.size), gpu] -= milli
        both = self.meter.amount(np.concatenate([cpu, cpu_after[row]]), np.concatenate([left, trial]),
                                 np.concatenate([model, model[row]]))
        scores = self.node_scores(both[:n][row] - both[n:])
        order = np.lexsort((gpu, -scores, row))  # per node: best score first, then the lowest GPU index
        first = order[np.unique(row[order], return_index=True)[1]]
        best_score, best_gpu = np.full(n, -np.inf), np.zeros((n, 1), dtype=np.int64)
        best_score[row[first]], best_gpu[row[first], 0] = scores[first], gpu[first]
        return best_score, best_gpu

    def _evaluate_sets(self, request: Request, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A share on several GPUs: every set of `share_sets` tried at once; per node the best set (the
        lowest of equals)."""
        c = self.cluster
        cpu_req, milli, count, _ = request.spec
        cpu, left, model = c.cpu_left[nodes], c.gpu_left[nodes], c.model_idx[nodes]
        n = nodes.size
        fits = gpu_fit(c, request, nodes)
        row, sets = [], []
        for k in range(n):
            for chosen in share_sets(left[k], fits[k], count):
                row.append(k)
                sets.append(chosen)
        best_score, best_gpu = np.full(n, -np.inf), np.zeros((n, count), dtype=np.int64)
        if not sets:
            return best_score, best_gpu
        row, chosen = np.array(row), np.array(sets, dtype=np.int64)
        take = np.zeros((row.size, left.shape[1]), dtype=bool)
        take[np.arange(row.size)[:, None], chosen] = True
        trial = np.where(take, left[row] - milli, left[row])
        both = self.meter.amount(np.concatenate([cpu, cpu[row] - cpu_req]), np.concatenate([left, trial]),
                                 np.concatenate([model, model[row]]))
        scores = self.node_scores(both[:n][row] - both[n:])
        order = np.lexsort((np.arange(row.size), -scores, row))  # per node: best score, then the first set
        first = order[np.unique(row[order], return_index=True)[1]]
        best_score[row[first]], best_gpu[row[first]] = scores[first], chosen[first]
        return best_score, best_gpu

    def choose_gpus(self, request: Request, node: int) -> tuple[int, ...]:
        if request.is_share:
            return tuple(int(g) for g in self.caches[(self.cache_key(request), class_key(request))].gpu[node])
        return super().choose_gpus(request, node)


__all__ = ["FgdPolicy", "MILLI"]
