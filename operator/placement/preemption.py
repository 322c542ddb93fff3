"""Preemption: for a pod that fits nowhere, which lower-priority pods to evict, and where it then goes.

kube-scheduler's DefaultPreemption, with GPUs in its place. Priority is the pod's `spec.priority` (its
PriorityClass); only pods of strictly lower priority are victims, whatever they hold: a fractional share,
whole GPUs or a MIG instance. A pod whose `preemptionPolicy` is `Never` preempts nobody.

Candidates. A request for one device (a share, one whole GPU, one MIG instance) is tried device by device:
on each GPU (or instance) of each node where preemption might help (every filter but the resource ones
passes), the lower-priority pods on that device are removed, and the pod must then fit *on that device*;
a multi-GPU request is tried node by node. If the node still lacks CPU, memory or pod room, the other
lower-priority pods of the node join the pool. Then, as kube-scheduler does, victims are *reprieved* one by
one, most important first (higher priority, then earlier start), those whose PodDisruptionBudget would be
violated before the others, each kept if the pod still fits without evicting it. The fit is the one fit
rule (`filters`, `fit`), run on the cluster with the pool released and re-reserved, so nothing here can
disagree with placement.

Choice among candidates (kube-scheduler's pickOneNodeForPreemption): fewest PDB violations, then the lowest
highest-victim priority, then the smallest sum of victim priorities, then the fewest victims, then the
latest start among the highest-priority victims, then the node's tie-break rank. Like kube-scheduler it
stops looking after max(100, 10% of nodes) candidate nodes (MinCandidateNodesAbsolute/Percentage).

A PDB is best effort, as in kube-scheduler: a victim counts as a violation when its budget has no
disruption left (the `budgets` map: PDB name -> disruptionsAllowed), but may still be chosen.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from .filters import FILTERS
from .fit import gpu_fit
from .mig_plan import nodes_where_resources_may_help
from .model import MILLI, Cluster, Placement, Request

RESOURCE_FILTERS = ("NodeResourcesFit", "GpuFit", "SloFit", "MigSlot")  # what evictions can change
MIN_CANDIDATE_NODES = 100
MIN_CANDIDATE_PERCENT = 10
PREEMPT_NEVER = "Never"
_RESOURCE_PLUGINS = tuple(p for p in FILTERS if p.name in RESOURCE_FILTERS)
#: kube-scheduler adds MaxInt32 + 1 to each victim's priority before summing, so that more victims always
#: weigh more even when priorities are negative.
_PRIORITY_OFFSET = 2**31


@dataclass(frozen=True, slots=True)
class Running:
    """A placed pod as preemption sees it: what it holds, its priority and start, its PDB ('' for none)."""

    key: str
    placement: Placement
    priority: int
    start: float = 0.0
    pdb: str = ""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A place the preemptor fits once `victims` are gone: the node and the GPU(s) or MIG instance."""

    node: int
    gpus: tuple[int, ...]
    mig: tuple[str, ...]
    victims: tuple[Running, ...]
    pdb_violations: int

    def order_key(self, rank: int) -> tuple:
        """kube-scheduler's order: smaller is better."""
        top = max(v.priority for v in self.victims)
        return (self.pdb_violations, top, sum(v.priority + _PRIORITY_OFFSET for v in self.victims),
                len(self.victims), -min(v.start for v in self.victims if v.priority == top), rank)


@dataclass(frozen=True, slots=True)
class NoPreemption:
    """Why preemption does not help, one line for the Pending reason."""

    reason: str

    def __str__(self) -> str:
        return self.reason


def _importance(v: Running) -> tuple:
    """kube-scheduler's MoreImportantPod: higher priority, then earlier start, first."""
    return (-v.priority, v.start, v.key)


def plan_preemption(cluster: Cluster, request: Request, priority: int, running: Iterable[Running], *,
                    policy: str = "PreemptLowerPriority", budgets: Mapping[str, int] | None = None,
                    node_rank: np.ndarray | None = None, nodes: Iterable[int] | None = None
                    ) -> Candidate | NoPreemption:
    """The best candidate, or why there is none; `nodes`: look only there (the node a departure freed).
    The cluster is left as it was found."""
    if policy == PREEMPT_NEVER:
        return NoPreemption("preemption: not attempted, the pod's preemptionPolicy is Never")
    by_node: dict[int, list[Running]] = {}
    only = None if nodes is None else set(nodes)
    for r in running:
        if r.priority < priority and (only is None or r.placement.node in only):
            by_node.setdefault(r.placement.node, []).append(r)
    if not by_node:
        return NoPreemption("preemption: no pod of lower priority is running")
    may = nodes_where_resources_may_help(cluster, request, RESOURCE_FILTERS, np.array(sorted(by_node)))
    rank = node_rank if node_rank is not None else np.arange(cluster.size)
    nodes = sorted((int(n) for n in may), key=lambda n: rank[n])
    wanted = max(MIN_CANDIDATE_NODES, cluster.size * MIN_CANDIDATE_PERCENT // 100)
    budgets = dict(budgets or {})
    best: tuple | None = None
    found = 0
    for node in nodes:
        found_here = False
        beat = best[0][:4] if best is not None else None
        for cand in _node_candidates(cluster, request, node, by_node[node], budgets, beat):
            key = cand.order_key(int(rank[node]))
            if best is None or key < best[0]:
                best = (key, cand)
            found_here = True
        found += found_here
        if found >= wanted:
            break
    if best is None:
        return NoPreemption(f"preemption: 0/{cluster.size} nodes are available: evicting lower-priority pods "
                            f"would not make room on any of {len(nodes)} node(s) that hold them")
    return best[1]


def _cannot_beat(on: list[Running], need_milli: int, free_milli: int, beat: tuple | None,
                 held: bool = False) -> bool:
    """True when no set of victims among `on` can come before `beat` (the best key's first four parts) in
    kube-scheduler's order: a lower bound on each part (the fewest pods whose shares free enough, the lowest
    priority among them) already loses. Only when some pod of `on` must go (the device is short, or `held`:
    a MIG instance's holder); otherwise the victims may all be elsewhere on the node. Skips the exact
    evaluation of devices that cannot win."""
    if beat is None or not on:
        return False
    fewest, freed = 0, free_milli
    for r in sorted(on, key=lambda r: -r.placement.request.gpu_milli):
        if freed >= need_milli:
            break
        freed += r.placement.request.gpu_milli
        fewest += 1
    fewest = max(fewest, 1) if held else fewest
    if fewest == 0:
        return False
    low = min(r.priority for r in on)
    return (0, low, fewest * (low + _PRIORITY_OFFSET), fewest) > beat


def _node_candidates(cluster: Cluster, request: Request, node: int, lower: list[Running],
                     budgets: Mapping[str, int], beat: tuple | None = None) -> Iterable[Candidate]:
    """The candidates on one node: one per device for a single-device request, else the node. `beat`: skip
    devices whose candidates could not come before it."""
    if request.is_mig:
        for uuid in sorted({u for r in lower for u in r.placement.mig
                            if cluster.mig_slots[u][1] == request.mig_profile and cluster.mig_slots[u][2]}):
            on = [r for r in lower if uuid in r.placement.mig]
            if _cannot_beat(on, 0, 0, beat, held=True):
                continue
            cand = _evaluate(cluster, request, node, lower, on, lambda u=uuid: u not in cluster.mig_taken,
                             budgets)
            if cand is not None:
                yield Candidate(node, (), (uuid,), cand[0], cand[1])
    elif request.wants_gpu and request.num_gpu == 1:
        already = np.flatnonzero(gpu_fit(cluster, request, node))  # room there; the node lacks CPU or memory
        for g in sorted({g for r in lower for g in r.placement.gpus} | {int(g) for g in already}):
            if cluster.gpu_left[node, g] + sum(r.placement.request.gpu_milli for r in lower if g in r.placement.gpus) \
                    < request.gpu_milli:
                continue  # even with every lower-priority pod gone this GPU is too small (a cheap bound)
            on = [r for r in lower if g in r.placement.gpus]
            if _cannot_beat(on, request.gpu_milli, int(cluster.gpu_left[node, g]), beat):
                continue
            cand = _evaluate(cluster, request, node, lower, on,
                             lambda g=g: bool(gpu_fit(cluster, request, node)[g]), budgets)
            if cand is not None:
                yield Candidate(node, (g,), (), cand[0], cand[1])
    else:
        if request.wants_gpu and request.gpu_milli >= MILLI and _node_cannot_beat(cluster, request, node, lower, beat):
            return
        cand = _evaluate(cluster, request, node, lower, lower, lambda: True, budgets)
        if cand is not None:
            yield Candidate(node, (), (), cand[0], cand[1])


def _node_cannot_beat(cluster: Cluster, request: Request, node: int, lower: list[Running],
                      beat: tuple | None) -> bool:
    """For a request of whole GPUs: True when too few GPUs could ever be free (a GPU holding a pod of the
    preemptor's priority or above never is), or when a lower bound loses to `beat` (as `_cannot_beat`):
    every pod of each GPU freed goes, so at least the pods of the `short` GPUs with the fewest; the top
    victim's priority is at least the lowest among the freeable GPUs' pods."""
    count = int(cluster.gpu_count[node])
    on = [[r for r in lower if g in r.placement.gpus] for g in range(count)]
    left = cluster.gpu_left[node, :count]
    fit_now = [g for g in range(count) if left[g] >= request.gpu_milli]
    freeable = sorted((len(on[g]), g) for g in range(count) if g not in fit_now and on[g]
                      and left[g] + sum(r.placement.request.gpu_milli for r in on[g]) >= request.gpu_milli)
    short = request.num_gpu - len(fit_now)
    if short <= 0 or beat is None:
        return short > len(freeable)
    if short > len(freeable):
        return True
    fewest = sum(n for n, _ in freeable[:short])
    low = min(r.priority for _, g in freeable for r in on[g])
    return (0, low, fewest * (low + _PRIORITY_OFFSET), fewest) > beat


def _evaluate(cluster: Cluster, request: Request, node: int, lower: list[Running], pool: list[Running],
              on_device, budgets: Mapping[str, int]) -> tuple[tuple[Running, ...], int] | None:
    """Victims (and PDB violations) that let the request fit on `node` (and `on_device()`), or None."""
    rows = np.array([node])

    def fits() -> bool:  # the other filters passed already (nodes_where_resources_may_help)
        return on_device() and _resources_fit(cluster, request, rows)

    released: list[Running] = []
    try:
        for r in pool:
            cluster.release(r.placement)
            released.append(r)
        if not fits():
            pooled = {r.key for r in pool}
            extra = [r for r in lower if r.key not in pooled]
            if not extra:
                return None
            for r in extra:
                cluster.release(r.placement)
                released.append(r)
            if not fits():
                return None
        violating, fine = _split_by_budget(released, budgets)
        victims: list[Running] = []
        for r in sorted(violating, key=_importance) + sorted(fine, key=_importance):
            cluster.reserve(r.placement.request, r.placement.node, r.placement.gpus, r.placement.mig)
            if fits():
                released.remove(r)  # reprieved: it stays
            else:
                cluster.release(r.placement)
                victims.append(r)
        return tuple(victims), _violations(victims, budgets)
    finally:
        for r in released:
            cluster.reserve(r.placement.request, r.placement.node, r.placement.gpus, r.placement.mig)


def _resources_fit(cluster: Cluster, request: Request, rows: np.ndarray) -> bool:
    """The resource filters alone (NodeResourcesFit, GpuFit, MigSlot) for one node: the fit rule itself."""
    for plugin in _RESOURCE_PLUGINS:
        if not plugin.applies(cluster, request):
            continue
        if hasattr(plugin, "passes"):
            if not plugin.passes(cluster, request, rows)[0]:
                return False
        elif any(failed[0] for _, failed in plugin.failures(cluster, request, rows)):
            return False
    return True


def _split_by_budget(pods: list[Running], budgets: Mapping[str, int]) -> tuple[list[Running], list[Running]]:
    """kube-scheduler's filterPodsWithPDBViolation: which pods' eviction would break their budget."""
    left = dict(budgets)
    violating, fine = [], []
    for r in sorted(pods, key=_importance):
        if r.pdb and r.pdb in left:
            left[r.pdb] -= 1
            if left[r.pdb] < 0:
                violating.append(r)
                continue
        fine.append(r)
    return violating, fine


def _violations(victims: list[Running], budgets: Mapping[str, int]) -> int:
    return len(_split_by_budget(victims, budgets)[0])


__all__ = ["PREEMPT_NEVER", "Candidate", "NoPreemption", "Running", "plan_preemption"]
