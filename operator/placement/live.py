"""The cluster model of a running cluster: nodes come and go, GPUs fail and recover, pods are reserved and
released by UID, and state is rebuilt from already-bound pods after a restart. Pure: the Kopf shell feeds it
watch events and asks it for decisions; nothing here knows about Kubernetes objects.

Placement runs on the same `Cluster` arrays, filters and policies as a trace replay. A pod's decision costs
one vectorised pass over the nodes. The arrays are rebuilt only when the node set or a node's GPUs change
(adding a node, a new MIG layout), lazily before the next decision, and every allocation is re-applied; label,
taint and cordon changes are applied in place; health changes flip one GPU's mask.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from .fragmentation import TargetWorkload
from .framework import Framework, Unschedulable
from .gpus import gpu_memory_mib
from .model import MILLI, Cluster, NodeSpec, Placement, Request
from .policies import DEFAULT_POLICY, make_policy
from .preemption import NoPreemption, Running, plan_preemption
from .slo_feedback import set_hold

#: The target workload FGD-style policies measure fragmentation against until the operator has a better
#: one: common fractional shares and whole-GPU counts, equally likely (docs/architecture.md).
DEFAULT_SHAPES = tuple(((1000, milli, 1, ()), 1.0) for milli in (100, 200, 250, 300, 500, 700, 1000)) + tuple(
    ((4000, MILLI, k, ()), 1.0) for k in (2, 4, 8))


@dataclass(frozen=True, slots=True)
class Allocation:
    """What one pod holds: the node, the GPUs (UUIDs) with its per-GPU share, or its MIG instances."""

    uid: str
    node: str
    request: Request
    gpus: tuple[str, ...] = ()
    mig: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Problem:
    """An inconsistency found while restoring or checking: said, never silently dropped."""

    uid: str
    message: str


def _rank(names: list[str]) -> np.ndarray:
    """Tie-break rank per node, stable across rebuilds and restarts (a hash of the name)."""
    keys = [hashlib.blake2b(n.encode(), digest_size=8).digest() for n in names]
    order = sorted(range(len(names)), key=lambda i: keys[i])
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names))
    return rank


class LiveCluster:
    """Nodes by name, allocations by pod UID, and the placement arrays built from them."""

    def __init__(self, policy: str = DEFAULT_POLICY, workload: TargetWorkload | None = None, seed: int = 0):
        make_policy(policy, workload)  # an unknown name fails here, once
        self.default_policy = policy
        self.workload = workload or TargetWorkload.from_shapes(
            [(shape, f / len(DEFAULT_SHAPES)) for shape, f in DEFAULT_SHAPES])
        self.seed = seed
        self.specs: dict[str, NodeSpec] = {}
        self.allocations: dict[str, Allocation] = {}
        #: Bound pods whose node is not known yet (start-up order) or was removed: kept, reported.
        self.unplaced: dict[str, Allocation] = {}
        self.problems: list[Problem] = []
        self._cluster: Cluster | None = None
        self._frameworks: dict[str, Framework] = {}
        self._index: dict[str, int] = {}
        self._dirty = True
        self._node_changes = 0  # bumped on every node added, changed or removed
        self._largest_gpu_mib = (-1, 0)  # (node changes it was computed at, MiB)
        self._gpu_sizes_mib: tuple[int, frozenset[int]] = (-1, frozenset())
        self._held: set[str] = set()  # GPU UUIDs held for low-priority shares (slo_feedback)

    # --- nodes ------------------------------------------------------------------------------------------
    def set_default_policy(self, policy: str) -> None:
        """The node policy for pods that name none (the cluster's SchedulingPolicy changed)."""
        make_policy(policy, self.workload)
        self.default_policy = policy

    def upsert_node(self, spec: NodeSpec) -> bool:
        """Add or update a node. True when capacity may have grown (waiting pods are worth retrying)."""
        old = self.specs.get(spec.name)
        if old == spec:
            return False
        self.specs[spec.name] = spec
        self._node_changes += 1
        if old is not None and not self._dirty and _same_capacity(old, spec):
            self._cluster.update_node_facts(self._index[spec.name], spec)
            return (old.unschedulable and not spec.unschedulable) or old.taints != spec.taints \
                or old.labels != spec.labels
        for uid, allocation in list(self.unplaced.items()):  # pods bound before their node was known
            if allocation.node == spec.name:
                self.allocations[uid] = self.unplaced.pop(uid)
        self._dirty = True
        return True

    def remove_node(self, name: str) -> list[str]:
        """Forget a node. Returns the UIDs of pods allocated there: their allocations move to `unplaced`
        (reported, and released when the pod goes) rather than vanishing."""
        if self.specs.pop(name, None) is None:
            return []
        self._node_changes += 1
        orphans = [uid for uid, a in self.allocations.items() if a.node == name]
        for uid in orphans:
            self.unplaced[uid] = self.allocations.pop(uid)
            self.problems.append(Problem(uid, f"node {name} was removed while the pod held an allocation there"))
        self._dirty = True
        return orphans

    def set_gpu_health(self, node: str, uuid: str, healthy: bool) -> bool:
        """Mark a GPU (or MIG instance) of `node` healthy or not. True when it became usable again."""
        spec = self.specs.get(node)
        if spec is None:
            return False
        gpus = tuple(replace(g, healthy=healthy) if g.uuid == uuid else
                     replace(g, mig=tuple(replace(m, healthy=healthy) if m.uuid == uuid else m for m in g.mig))
                     for g in spec.gpus)
        self.specs[node] = replace(spec, gpus=gpus)
        if not self._dirty:
            self._cluster.update_node_facts(self._index[node], self.specs[node])
            changed = self._cluster.set_gpu_health(uuid, healthy)
            return changed and healthy
        return healthy

    def set_slo_hold(self, uuid: str, held: bool) -> bool:
        """Hold a GPU against new low-priority shares (a protected pod there is measured over its SLO), or
        release it. True when the GPU was released (room for waiting pods)."""
        if (uuid in self._held) == held:
            return False
        (self._held.add if held else self._held.discard)(uuid)
        if not self._dirty and self._cluster is not None:
            set_hold(self._cluster, uuid, held)
        return not held

    # --- pods -------------------------------------------------------------------------------------------
    def schedule(self, uid: str, request: Request, policy: str | None = None) -> Allocation | Unschedulable:
        """Decide and reserve at once (assume): the caller writes the binding and `release`s on failure.
        A UID that already holds an allocation gets it back unchanged (idempotent)."""
        if uid in self.allocations:
            return self.allocations[uid]
        cluster = self._arrays()
        if cluster is None:
            return Unschedulable(request, 0, ())
        outcome = self._framework(policy or self.default_policy).schedule(request)
        if isinstance(outcome, Unschedulable):
            return outcome
        return self._record(uid, outcome)

    def preempt(self, uid: str, request: Request, priority: int, priority_of: Mapping[str, int], *,
                start_of: Mapping[str, float] | None = None, policy: str = "PreemptLowerPriority",
                budgets: Mapping[str, int] | None = None, pdb_of: Mapping[str, str] | None = None,
                ) -> tuple[Allocation, tuple[str, ...]] | NoPreemption:
        """For a pod that fits nowhere: pick victims (`preemption.plan_preemption`; `priority_of`: each
        allocated pod's PriorityClass value, 0 if absent), release their allocations and reserve the
        preemptor's on the room they free, so no lower-priority pod takes it while they terminate (the
        assume cache's hold for the nominated node). A pod missing from `priority_of` is never a victim.
        Returns (the preemptor's allocation, victim uids). The
        caller deletes the victims, binds the preemptor once they are gone, and on failure `release`s the
        preemptor and `restore`s any victim still running."""
        if uid in self.allocations:
            return self.allocations[uid], ()
        cluster = self._arrays()
        if cluster is None:
            return NoPreemption("preemption: no node")
        running = [Running(a.uid, self._placement(cluster, self._index[a.node], a), priority_of[a.uid],
                           (start_of or {}).get(a.uid, 0.0), (pdb_of or {}).get(a.uid, ""))
                   for a in self.allocations.values() if a.uid in priority_of]
        fw = self._framework(self.default_policy)
        cand = plan_preemption(cluster, request, priority, running, policy=policy, budgets=budgets,
                               node_rank=fw.node_rank)
        if isinstance(cand, NoPreemption):
            return cand
        victims = tuple(v.key for v in cand.victims)
        for v in victims:
            self.release(v)
        gpus = cand.gpus or (fw.choose_gpus(request, cand.node) if request.wants_gpu else ())
        return self._record(uid, cluster.reserve(request, cand.node, gpus, cand.mig)), victims

    def restore(self, uid: str, request: Request, node: str, gpus: tuple[str, ...] = (),
                mig: tuple[str, ...] = ()) -> Allocation:
        """Take in a pod that is already bound (operator start-up, another replica's decision). Idempotent.
        An allocation that does not fit (unknown GPU, over capacity) is still recorded, since it is what runs;
        the conflict goes to `problems`."""
        existing = self.allocations.get(uid) or self.unplaced.get(uid)
        if existing is not None:
            return existing
        allocation = Allocation(uid, node, request, tuple(gpus), tuple(mig))
        if node not in self.specs:
            self.unplaced[uid] = allocation
            return allocation
        self.allocations[uid] = allocation
        if not self._dirty:
            self._apply(self._cluster, allocation)
        return allocation

    def release(self, uid: str) -> Allocation | None:
        """Give a pod's allocation back (deleted, Succeeded, Failed, or a failed bind). Idempotent."""
        allocation = self.allocations.pop(uid, None)
        if allocation is None:
            return self.unplaced.pop(uid, None)
        if not self._dirty:
            i = self._index[allocation.node]
            self._cluster.release(self._placement(self._cluster, i, allocation))
        return allocation

    # --- reading ----------------------------------------------------------------------------------------
    def largest_gpu_mib(self) -> int:
        """Memory (MiB) of the largest GPU any node has, healthy or not (0 while no node has a GPU): the
        admission webhook refuses a per-device memory request above it. Cached until a node changes."""
        seen, largest = self._largest_gpu_mib
        if seen != self._node_changes:
            seen, specs = self._node_changes, list(self.specs.values())
            largest = max((g.mem_mib or gpu_memory_mib(g.model) for s in specs for g in s.gpus), default=0)
            self._largest_gpu_mib = (seen, largest)
        return largest

    def gpu_memory_sizes_mib(self) -> frozenset[int]:
        """The distinct memory sizes (MiB) of the cluster's GPUs: one size lets the webhook turn a fraction of a
        GPU's memory into the amount a DRA claim asks. Cached until a node changes."""
        seen, sizes = self._gpu_sizes_mib
        if seen != self._node_changes:
            seen = self._node_changes
            sizes = frozenset(g.mem_mib or gpu_memory_mib(g.model) for s in self.specs.values() for g in s.gpus)
            self._gpu_sizes_mib = (seen, sizes)
        return sizes

    @property
    def cluster(self) -> Cluster | None:
        """The placement arrays, brought up to date (None while there are no nodes)."""
        return self._arrays()

    def violations(self) -> list[str]:
        """Over-allocated GPUs, MIG instances or node resources; empty when the invariants hold."""
        c = self._arrays()
        if c is None:
            return []
        out = []
        for i, j in zip(*np.nonzero(c.gpu_slots & (c.gpu_left < 0)), strict=True):
            out.append(f"GPU {c.gpu_uuid[i][j]} on {c.nodes[i].name}: {MILLI - c.gpu_left[i, j]} milli allocated")
        for i, j in zip(*np.nonzero(c.gpu_slots & (c.gpu_mem_left < 0)), strict=True):
            out.append(f"GPU {c.gpu_uuid[i][j]} on {c.nodes[i].name}: memory over by {-c.gpu_mem_left[i, j]} MiB")
        holders: dict[str, list[str]] = {}
        for a in self.allocations.values():
            for uuid in a.mig:
                holders.setdefault(uuid, []).append(a.uid)
        out += [f"MIG instance {u} held by {len(h)} pods" for u, h in holders.items() if len(h) > 1]
        return out

    # --- internals --------------------------------------------------------------------------------------
    def _arrays(self) -> Cluster | None:
        if not self._dirty:
            return self._cluster
        names = sorted(self.specs)
        self._frameworks = {}
        self._index = {n: i for i, n in enumerate(names)}
        self._cluster = Cluster([self.specs[n] for n in names]) if names else None
        if self._cluster is not None:
            for allocation in self.allocations.values():
                self._apply(self._cluster, allocation)
            for uuid in self._held:
                set_hold(self._cluster, uuid, True)
        self._dirty = False
        return self._cluster

    def _framework(self, policy: str) -> Framework:
        fw = self._frameworks.get(policy)
        if fw is None:
            fw = Framework(self._cluster, make_policy(policy, self.workload), np.random.default_rng(self.seed),
                           node_order=_rank([n.name for n in self._cluster.nodes]))
            self._frameworks[policy] = fw
        return fw

    def _record(self, uid: str, placement: Placement) -> Allocation:
        c, node = self._cluster, placement.node
        allocation = Allocation(uid, c.nodes[node].name, placement.request,
                                tuple(c.gpu_uuid[node][g] for g in placement.gpus), placement.mig)
        self.allocations[uid] = allocation
        return allocation

    def _placement(self, c: Cluster, node: int, allocation: Allocation) -> Placement:
        gpus = tuple(c.uuid_index[u][1] for u in allocation.gpus if c.uuid_index.get(u, (None,))[0] == node)
        mig = tuple(u for u in allocation.mig if u in c.mig_slots)
        return Placement(allocation.request, node, gpus, mig)

    def _apply(self, c: Cluster, allocation: Allocation) -> None:
        node = self._index[allocation.node]
        placement = self._placement(c, node, allocation)
        if len(placement.gpus) != len(allocation.gpus) or len(placement.mig) != len(allocation.mig):
            self.problems.append(Problem(allocation.uid, f"allocation names devices not on node {allocation.node}: "
                                         f"{', '.join(allocation.gpus + allocation.mig)}"))
        c.reserve(allocation.request, node, placement.gpus, placement.mig)


def _same_capacity(a: NodeSpec, b: NodeSpec) -> bool:
    """Nothing the arrays hold differs (only labels, taints or the cordon did)."""
    return (a.cpu_milli, a.memory_mib, a.num_gpu, a.model, a.gpus, a.extended, a.max_pods) == (
        b.cpu_milli, b.memory_mib, b.num_gpu, b.model, b.gpus, b.extended, b.max_pods)
