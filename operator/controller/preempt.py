"""Preemption in the scheduler shell: the pure planner decides (`LiveCluster.preempt`), this writes it out.

For a pod that fits nowhere, the planner releases the victims' allocations and reserves the preemptor's on
the room they free, at once: that reservation is the assume cache's hold, so no lower-priority pod takes the
room while the victims terminate. Then, as kube-scheduler does, the preemptor gets `nominatedNodeName`,
each victim the `DisruptionTarget` condition (reason `PreemptionByScheduler`), a `Preempted` Event naming
the preemptor, and a graceful delete. The preemptor is bound when the last victim is gone, not before: until
then the victims still run on the GPU. No preemption loop: while its victims terminate the preemptor holds
its allocation, so it is never decided again (a held allocation is returned as is). A victim that could not
be deleted is taken back into the model and never chosen again; the preemptor's hold is released and it is
parked, with the reason, until capacity changes.

PodDisruptionBudgets come from a watch (`Budgets`, fed by the PDB event handler), not from a list per
decision: the planner reads each lower-priority pod's budget and its `status.disruptionsAllowed` from memory,
so kube-scheduler's first rule (fewest PDB violations) costs no apiserver call. A budget is best effort, as
in kube-scheduler: a violating victim may still be chosen when nothing else frees enough.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..kube.outcome import Result
from ..kube.pods import delete_pod, mark_preempted, set_nominated_node
from ..objects import parse_time
from ..placement.live import Allocation
from ..placement.preemption import PREEMPT_NEVER, NoPreemption

log = logging.getLogger("fgpu.preempt")


def selects(selector: dict | None, labels: Mapping[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions) against a pod's labels. policy/v1: an empty selector
    selects every pod of the namespace, a missing one none; an unknown operator selects nothing."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or ():
        key, op, values = e.get("key", ""), e.get("operator", ""), e.get("values") or ()
        ok = {"In": key in labels and labels[key] in values, "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}.get(op, False)
        if not ok:
            return False
    return True


@dataclass(frozen=True, slots=True)
class Budget:
    """One PodDisruptionBudget as preemption reads it."""

    selector: dict | None
    allowed: int  # status.disruptionsAllowed (0 until the disruption controller has counted)
    disrupted: frozenset[str]  # status.disruptedPods: evictions it already counts


@dataclass
class Budgets:
    """The cluster's PodDisruptionBudgets by namespace, kept from their watch events."""

    by_namespace: dict[str, dict[str, Budget]] = field(default_factory=dict)

    def on_event(self, kind: str, pdb: dict) -> None:
        meta, spec, status = pdb.get("metadata") or {}, pdb.get("spec") or {}, pdb.get("status") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        if kind == "DELETED":
            self.by_namespace.get(ns, {}).pop(name, None)
            if not self.by_namespace.get(ns, True):
                del self.by_namespace[ns]
            return
        allowed = status.get("disruptionsAllowed")
        self.by_namespace.setdefault(ns, {})[name] = Budget(
            spec.get("selector"), allowed if isinstance(allowed, int) else 0,
            frozenset(status.get("disruptedPods") or ()))

    def of(self, pods: Iterable[tuple[str, dict]]) -> tuple[dict[str, int], dict[str, str]]:
        """(budget -> disruptions allowed, pod uid -> its budget) for the planner, over (uid, pod) pairs. A pod
        that several budgets select counts under the one with the least room (the Eviction API refuses such
        a pod outright); one a budget already counts as disrupted is not charged to it again."""
        budgets: dict[str, int] = {}
        pdb_of: dict[str, str] = {}
        if not self.by_namespace:
            return budgets, pdb_of
        for uid, pod in pods:
            meta = pod.get("metadata") or {}
            mine = self.by_namespace.get(meta.get("namespace", ""))
            if not mine:
                continue
            labels = meta.get("labels") or {}
            hits = [(b.allowed, name) for name, b in mine.items()
                    if meta.get("name", "") not in b.disrupted and selects(b.selector, labels)]
            if hits:
                allowed, name = min(hits)
                key = f"{meta.get('namespace', '')}/{name}"
                budgets[key], pdb_of[uid] = allowed, key
        return budgets, pdb_of


@dataclass
class Nomination:
    """A preemptor waiting for its victims: its held allocation, the victims still terminating, its entry."""

    allocation: Allocation
    victims: set[str]
    entry: object  # scheduler.Pending


@dataclass
class Preemptions:
    """What preemption needs to know of bound pods (priority, start, name) and the nominations in flight."""

    priority: dict[str, int] = field(default_factory=dict)  # bound pod uid -> spec.priority (0 if none)
    levels: Counter = field(default_factory=Counter)  # priority -> bound pods (the lowest, without a scan)
    start: dict[str, float] = field(default_factory=dict)
    pods: dict[str, dict] = field(default_factory=dict)  # bound pod uid -> its last object (to restore one)
    nominated: dict[str, Nomination] = field(default_factory=dict)  # preemptor uid -> nomination
    evicting: dict[str, str] = field(default_factory=dict)  # victim uid -> preemptor uid
    spared: set[str] = field(default_factory=set)  # pods whose delete was refused: never chosen again
    budgets: Budgets = field(default_factory=Budgets)  # PodDisruptionBudgets, from their watch

    def bound(self, uid: str, pod: dict) -> None:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        self._drop_level(uid)
        self.priority[uid] = spec.get("priority") if isinstance(spec.get("priority"), int) else 0
        self.levels[self.priority[uid]] += 1
        started = parse_time(status.get("startTime"))
        self.start[uid] = started.timestamp() if started else 0.0
        self.pods[uid] = pod

    def gone(self, uid: str) -> Nomination | None:
        """A pod is gone: forget it; the nomination it completes (its last victim), if any."""
        self._drop_level(uid)
        self.priority.pop(uid, None)
        self.spared.discard(uid)
        self.start.pop(uid, None)
        self.pods.pop(uid, None)
        self.nominated.pop(uid, None)  # a preemptor deleted while waiting (the model releases its hold)
        preemptor = self.evicting.pop(uid, None)
        nomination = self.nominated.get(preemptor) if preemptor else None
        if nomination is None:
            return None
        nomination.victims.discard(uid)
        if nomination.victims:
            return None
        return self.nominated.pop(preemptor)

    def _drop_level(self, uid: str) -> None:
        old = self.priority.get(uid)
        if old is not None:
            self.levels[old] -= 1
            if not self.levels[old]:
                del self.levels[old]

    def plan(self, scheduler, uid: str, entry, core, node_policy: str | None = None) -> bool:
        """Try preemption for a pod that fits nowhere; True when it nominated (victims being evicted).
        `node_policy`: the pod's own placement policy (None: the cluster's)."""
        spec = entry.pod.get("spec") or {}
        mine = spec.get("priority") if isinstance(spec.get("priority"), int) else 0
        if not self.levels or mine <= min(self.levels):
            return False
        how = spec.get("preemptionPolicy") or "PreemptLowerPriority"
        if how == PREEMPT_NEVER:
            scheduler.metrics.preemption("never")
            return False
        victims_of = {u: p for u, p in self.priority.items() if p < mine and u not in self.spared}
        started = time.perf_counter()
        budgets, pdb_of = self.budgets.of((u, self.pods.get(u) or {}) for u in victims_of)
        outcome = scheduler.live.preempt(uid, core, mine, victims_of, start_of=self.start, policy=how,
                                         budgets=budgets, pdb_of=pdb_of, node_policy=node_policy)
        seconds = time.perf_counter() - started
        if isinstance(outcome, NoPreemption) or not outcome[1]:
            scheduler.metrics.preemption("none", seconds=seconds)
            return False
        allocation, victims = outcome
        scheduler.metrics.preemption("nominated", len(victims), seconds)
        self.nominated[uid] = Nomination(allocation, set(victims), entry)
        for v in victims:
            self.evicting[v] = uid
        scheduler._spawn(self._write(scheduler, uid, entry, allocation, victims))
        return True

    async def _write(self, scheduler, uid: str, entry, allocation: Allocation, victims: tuple[str, ...]) -> None:
        meta = entry.pod.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        await set_nominated_node(scheduler.api, ns, name, allocation.node)
        for v in victims:
            pod = self.pods.get(v) or {}
            vm = pod.get("metadata") or {}
            vns, vname = vm.get("namespace", ""), vm.get("name", "")
            message = f"Preempted by pod {ns}/{name} ({uid}) on node {allocation.node}"
            await mark_preempted(scheduler.api, vns, vname, f"fgpu-scheduler: {message}")
            scheduler.events.post(vns, vname, v, "Preempted", message, type="Normal")
            out = await delete_pod(scheduler.api, vns, vname, v)
            if not out.ok and out.result is not Result.GONE:
                log.warning("preempting %s/%s for %s/%s: delete failed: %s", vns, vname, ns, name, out)
                scheduler.metrics.preemption("failed")
                self._undo(scheduler, uid, pod, f"preemption: could not delete {vns}/{vname}: {out}")
                return

    def _undo(self, scheduler, uid: str, victim_pod: dict, message: str) -> None:
        """A victim stays: it is taken back into the model and never chosen again, and the preemptor's hold
        goes; the preemptor is parked with the reason until capacity changes (no loop of failed deletes)."""
        nomination = self.nominated.pop(uid, None)
        if nomination is not None:  # the hold goes first, so the model never counts the room twice
            for other in nomination.victims:
                self.evicting.pop(other, None)
            scheduler.live.release(uid)
        vuid = (victim_pod.get("metadata") or {}).get("uid", "")
        self.evicting.pop(vuid, None)
        self.spared.add(vuid)
        node = (victim_pod.get("spec") or {}).get("nodeName")
        if node:
            scheduler._restore(vuid, victim_pod, node)
        if nomination is not None:
            entry = nomination.entry
            entry.reason, entry.message = "Unschedulable", message
            scheduler.parked[uid] = entry
            scheduler._spawn(scheduler._explain(uid, entry.pod, message))
