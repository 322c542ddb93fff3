"""Placement in named phases, like kube-scheduler's framework: filter -> score -> select -> reserve (-> release).

Filter keeps the nodes that can hold the request and remembers why each other node was rejected, so a failed
placement explains itself ("0/1213 nodes are available: 900 insufficient GPU, 313 GPU model mismatch").
Score is the policy's. Among top-scoring nodes the framework takes the one first in a fixed random node order
drawn once per run: the FGD simulator patches kube-scheduler's selectHost to pick the lexicographically
smallest node name, and names nodes with a random-permutation prefix, so ties always go to the same nodes
(which itself packs). Then the policy picks the GPUs of that node, and the framework reserves them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .model import MILLI, Cluster, Placement, Request

#: Rejection reasons, in the order they are checked (a node is counted under its first failing reason).
REASONS = ("GPU model mismatch", "insufficient CPU", "insufficient memory", "insufficient GPU",
           "insufficient GPU memory")


class Policy(Protocol):
    """A placement policy: scores feasible nodes and picks GPUs within the chosen node."""

    name: str

    def attach(self, cluster: Cluster, rng: np.random.Generator) -> None:
        """Called once before a replay (and after the cluster is reset)."""

    def score(self, request: Request, feasible: np.ndarray) -> np.ndarray:
        """Scores for every node (only entries where `feasible` is true are read); higher is better."""

    def choose_gpus(self, request: Request, node: int) -> tuple[int, ...]:
        """GPU indices on `node` for the request (empty for CPU-only requests)."""


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """A failed placement and why: counts of nodes per rejection reason."""

    request: Request
    total_nodes: int
    reasons: tuple[tuple[str, int], ...]

    def __str__(self) -> str:
        parts = ", ".join(f"{count} {reason}" for reason, count in self.reasons)
        return f"0/{self.total_nodes} nodes are available for {self.request.name}: {parts}"


def fit_gpus(cluster: Cluster, request: Request) -> np.ndarray:
    """Per node: the number of GPUs that could each give the request its GPU fraction (and memory)."""
    fits = cluster.gpu_left >= request.gpu_milli
    if request.gpu_mem_mib:
        fits &= cluster.gpu_mem_left >= request.gpu_mem_mib
    return fits.sum(axis=1)


def filter_nodes(cluster: Cluster, request: Request) -> np.ndarray:
    """Feasible-node mask (the hot path: no explanations)."""
    ok = (cluster.cpu_left >= request.cpu_milli) & (cluster.mem_left >= request.memory_mib)
    if request.wants_gpu:
        ok &= cluster.model_mask(request.gpu_models) & (cluster.gpu_count > 0)
        ok &= fit_gpus(cluster, request) >= request.num_gpu
    return ok


def explain(cluster: Cluster, request: Request) -> Unschedulable:
    """Why no node fits: each node counted under the first reason it fails."""
    wants = request.wants_gpu
    checks = [
        ~(cluster.model_mask(request.gpu_models) & (cluster.gpu_count > 0)) if wants else None,
        cluster.cpu_left < request.cpu_milli,
        cluster.mem_left < request.memory_mib,
        (cluster.gpu_left >= request.gpu_milli).sum(axis=1) < request.num_gpu if wants else None,
        fit_gpus(cluster, request) < request.num_gpu if wants else None,
    ]
    reason = np.full(cluster.size, len(REASONS))
    for i, failed in reversed(list(enumerate(checks))):
        if failed is not None:
            reason[failed] = i
    counts = np.bincount(reason, minlength=len(REASONS) + 1)[: len(REASONS)]
    ordered = sorted(((REASONS[i], int(c)) for i, c in enumerate(counts) if c),
                     key=lambda kv: (-kv[1], REASONS.index(kv[0])))
    return Unschedulable(request, cluster.size, tuple(ordered))


def best_fit_gpus(cluster: Cluster, request: Request, node: int) -> tuple[int, ...]:
    """The FGD simulator's default GPU selection: a shared request goes to the fitting GPU with the least
    room left (lowest index on ties); whole-GPU requests take the first free GPUs in index order."""
    if not request.wants_gpu:
        return ()
    left = cluster.gpu_left[node, : cluster.gpu_count[node]]
    if request.is_share:
        fits = np.flatnonzero(left >= request.gpu_milli)
        return (int(fits[np.argmin(left[fits])]),)
    free = np.flatnonzero(left >= min(request.gpu_milli, MILLI))
    return tuple(int(g) for g in free[: request.num_gpu])


#: An admission check, asked before scoring with the feasible-node mask: a reason to turn the pod away even
#: though it fits (kube-scheduler's PreEnqueue/PreFilter rejections), or None to go on. It sees every request.
Admission = Callable[[Cluster, Request, np.ndarray], str | None]


class Framework:
    """Runs one policy's phases over a cluster; `schedule` places one request or explains why it cannot."""

    def __init__(self, cluster: Cluster, policy: Policy, rng: np.random.Generator,
                 node_order: np.ndarray | None = None, admission: Admission | None = None):
        self.cluster, self.policy, self.rng, self.admission = cluster, policy, rng, admission
        #: Tie-break rank per node (lower wins); by default a random permutation from `rng`.
        self.node_rank = rng.permutation(cluster.size) if node_order is None else np.asarray(node_order)
        policy.attach(cluster, rng)

    def schedule(self, request: Request, *, explained: bool = True) -> Placement | Unschedulable:
        """Place one request. With `explained=False` a failure carries no reasons (the replay's hot path)."""
        feasible = filter_nodes(self.cluster, request)
        candidates = np.flatnonzero(feasible)
        refusal = self.admission(self.cluster, request, feasible) if self.admission else None
        if candidates.size == 0:
            return explain(self.cluster, request) if explained else Unschedulable(request, self.cluster.size, ())
        if refusal:
            return Unschedulable(request, self.cluster.size, ((refusal, int(candidates.size)),))
        scores = np.asarray(self.policy.score(request, feasible))[candidates]
        top = candidates[scores == scores.max()]
        node = int(top[np.argmin(self.node_rank[top])]) if top.size > 1 else int(top[0])
        gpus = self.policy.choose_gpus(request, node)
        return self.cluster.reserve(request, node, gpus)

    def release(self, placement: Placement) -> None:
        self.cluster.release(placement)
