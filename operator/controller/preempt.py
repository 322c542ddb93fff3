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
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from ..kube.outcome import Result
from ..kube.pods import delete_pod, mark_preempted, set_nominated_node
from ..objects import parse_time
from ..placement.live import Allocation
from ..placement.preemption import NoPreemption

log = logging.getLogger("fgpu.preempt")


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

    def plan(self, scheduler, uid: str, entry, core) -> bool:
        """Try preemption for a pod that fits nowhere; True when it nominated (victims being evicted)."""
        spec = entry.pod.get("spec") or {}
        mine = spec.get("priority") if isinstance(spec.get("priority"), int) else 0
        if not self.levels or mine <= min(self.levels):
            return False
        victims_of = self.priority if not self.spared else {
            u: p for u, p in self.priority.items() if u not in self.spared}
        outcome = scheduler.live.preempt(uid, core, mine, victims_of, start_of=self.start,
                                         policy=spec.get("preemptionPolicy") or "PreemptLowerPriority")
        if isinstance(outcome, NoPreemption):
            return False
        allocation, victims = outcome
        if not victims:
            return False
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
