"""Placement in named phases, like kube-scheduler's framework: filter -> score -> select -> reserve (-> release).

Filter (the plug-ins in `filters`) keeps the nodes that can hold the request; a failed placement explains
itself in kube-scheduler's words ("0/1213 nodes are available: 313 node(s) had no GPU of the requested model,
900 Insufficient GPU.").
Score is the policy's. Among top-scoring nodes the framework takes the one first in a fixed random node order
drawn once per run: the FGD simulator patches kube-scheduler's selectHost to pick the lexicographically
smallest node name, and names nodes with a random-permutation prefix, so ties always go to the same nodes
(which itself packs). Then the policy picks the GPUs of that node, and the framework reserves them.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .filters import filter_nodes, rejection_counts
from .fit import gpu_fit
from .model import Cluster, Placement, Request
from .slo_filter import least_slack_lost, margin_first
from .slo_guard import guards


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
    """A failed placement and why: counts of nodes per rejection reason (see `filters`)."""

    request: Request
    total_nodes: int
    reasons: tuple[tuple[str, int], ...]
    details: tuple[str, ...] = ()  # what a filter adds about its nodes (whose SLO blocked which GPU)

    def __str__(self) -> str:
        """kube-scheduler's FitError wording: "0/N nodes are available: <count reason, sorted>." and the
        filters' details after it."""
        histogram = sorted(f"{count} {reason}" for reason, count in self.reasons)
        text = f"0/{self.total_nodes} nodes are available" + (f": {', '.join(histogram)}." if histogram else ".")
        return " ".join((text, *(d[0].upper() + d[1:] + "." for d in self.details)))


def explain(cluster: Cluster, request: Request) -> Unschedulable:
    """Why no node fits: each node counted under the reasons of the first filter that rejects it."""
    details: list[str] = []
    counts = rejection_counts(cluster, request, details)
    return Unschedulable(request, cluster.size, tuple(sorted(counts.items())), tuple(details))


def best_fit_gpus(cluster: Cluster, request: Request, node: int, spread: bool = False) -> tuple[int, ...]:
    """The FGD simulator's default GPU selection: a shared request goes to the fitting GPUs with the least
    room left (`spread`: the most), one device per GPU, lowest index on ties; whole-GPU requests take the
    first fitting GPUs in index order."""
    if not request.wants_gpu:
        return ()
    fits = np.flatnonzero(gpu_fit(cluster, request, node))
    if request.is_share:
        left = cluster.gpu_left[node, fits]
        if request.num_gpu == 1:  # the replay's hot path
            return (int(fits[np.argmax(left) if spread else np.argmin(left)]),)
        order = np.argsort(-left if spread else left, kind="stable")[: request.num_gpu]
        return tuple(sorted(int(g) for g in fits[order]))
    return tuple(int(g) for g in fits[: request.num_gpu])


def preferring(held: Sequence[int], chosen: Sequence[int], count: int) -> tuple[int, ...]:
    """`count` GPUs: those of `held` first, then the rest of `chosen` (distinct fitting GPUs, at least `count`
    of them together)."""
    out = list(dict.fromkeys(held))[:count]
    out += [g for g in chosen if g not in out][: count - len(out)]
    return tuple(out)


def choose_mig(cluster: Cluster, request: Request, node: int) -> tuple[str, ...]:
    """Free healthy MIG instances of the profile on `node`, in UUID order (the layout is fixed)."""
    c = request.constraints
    free = sorted(u for u, (n, profile, healthy) in cluster.mig_slots.items()
                  if n == node and profile == request.mig_profile and healthy and u not in cluster.mig_taken
                  and not (c and (c.uuids and u not in c.uuids or u in c.exclude_uuids)))
    return tuple(free[: request.num_gpu])


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
        if request.is_mig:  # MIG instances are fixed slots: pack them (fewest free instances of the profile)
            scores = -self.cluster.mig_free[request.mig_profile][candidates]
            asked = request
        else:
            # QoS: nodes with GPUs that keep a margin for the model's error first. The policy scores them as the
            # plain request (its score caches stay one per request class); the GPUs are picked with the margin.
            asked, feasible = margin_first(self.cluster, request, feasible)
            candidates = np.flatnonzero(feasible)
            scores = np.asarray(self.policy.score(request, feasible))[candidates]
        top = candidates[scores == scores.max()]
        if top.size > 1 and guards(request):
            top = least_slack_lost(self.cluster, request, top)
        node = int(top[np.argmin(self.node_rank[top])]) if top.size > 1 else int(top[0])
        if request.is_mig:
            return self.cluster.reserve(request, node, (), choose_mig(self.cluster, request, node))
        gpus = self.choose_gpus(request, node)
        if asked is not request and not gpu_fit(self.cluster, asked, node)[list(gpus)].all():
            gpus = best_fit_gpus(self.cluster, asked, node)  # the policy's pick lacks the margin: the tightest that keep it
        return self.cluster.reserve(request, node, gpus)

    def choose_gpus(self, request: Request, node: int) -> tuple[int, ...]:
        """The policy's GPUs, unless the pod says otherwise: KubeShare affinity (GPUs already holding its
        group, as many as fit; the rest as usual) or HAMi's GPU policy `spread`."""
        c = request.constraints
        if c is None or not request.is_share:
            return self.policy.choose_gpus(request, node)

        def usual() -> tuple[int, ...]:
            if c.gpu_policy == "spread":
                return best_fit_gpus(self.cluster, request, node, spread=True)
            return self.policy.choose_gpus(request, node)

        if c.affinity_group:
            fits = gpu_fit(self.cluster, request, node)
            held = sorted(g for (n, g) in self.cluster.group_gpus.get(f"a:{c.affinity_group}", {})
                          if n == node and fits[g])
            if len(held) >= request.num_gpu:
                return tuple(held[: request.num_gpu])
            if held:
                return preferring(held, usual(), request.num_gpu)
        return usual()

    def release(self, placement: Placement) -> None:
        self.cluster.release(placement)
