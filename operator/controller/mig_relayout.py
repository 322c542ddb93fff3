"""Dynamic MIG in the scheduler shell: a MIG pod that fits no instance gets a re-layout of a dynamic-MIG
GPU's idle instances (`mig_plan.plan_relayout` decides), recorded on the GPUNode for the node to apply.

The hand-shake (fgpu_contracts/inventory.py): the leader writes the desired layout in GPUNode
status.migChanges (phase Pending, a change id, the start time, the pod held for each new instance); the
node's plugin sees it, has the node daemon apply it, and reports Applying, then Done (with the new instances
in the inventory) or Failed, in that GPU's spec `migChange`. Meanwhile the model shows the desired layout
(`mig_changes.overlay`): the instances being destroyed are unavailable, the new one is held by its pod, the
GPU is frozen (never two changes at once). On Done the pod is bound to the real instance; on Failed its hold
is released and it is decided again.

A leader killed mid-change: the change is durable on the GPUNode and the node applies it without the
operator, so the next leader *finishes* it (adopts it from status, holds the new instance for its pod again,
binds the pod on Done) rather than rolling it back: a rollback would be a second reconfiguration of the same
GPU, as long again, for a pod that still wants the first. What the node reports is the truth: a Failed
change leaves the layout the GPU reports.
"""
from __future__ import annotations

import logging
import time
import uuid as uuidlib
from dataclasses import dataclass, field, replace

from fgpu_contracts.inventory import MigChange, MigChangeReport
from fgpu_contracts.keys import MIG_RESOURCE_PREFIX

from ..objects import parse_time, pod_key, timestamp
from ..placement import mig_changes
from ..placement.mig_changes import MigChange as Change
from ..placement.mig_plan import NoRelayout, is_relayout_candidate, plan_relayout
from ..placement.model import NodeSpec

log = logging.getLogger("fgpu.mig")
REASON = "MigReconfiguring"  # the waiting pod's PodScheduled reason and Event reason


def wire(change: Change) -> dict:
    """A change as GPUNode status.migChanges lists it."""
    doc = MigChange(gpu=change.gpu, id=change.id, phase=change.phase, started_time=change.started,
                    layout=tuple({"profile": p, "start": s} for p, s in change.layout), pods=change.pods,
                    pod_uids=change.pod_uids, targets=tuple({"profile": p, "start": s} for p, s in change.targets),
                    message=change.message)
    return doc.model_dump(mode="json", by_alias=True)


def _from_wire(node: str, doc: dict) -> Change | None:
    try:
        c = MigChange.model_validate(doc)
    except ValueError as err:
        log.warning("GPUNode %s: a migChanges entry is not one (%s); ignored", node, err)
        return None
    return Change(node, c.gpu, c.id, tuple((p.profile, p.start) for p in c.layout), c.phase, c.started_time,
                  c.pods, c.pod_uids, tuple((p.profile, p.start) for p in c.targets), c.message)


@dataclass
class Finished:
    """Changes that ended at the last GPUNode event: the pods they were made for, and whether they ended well."""

    done: list[Change] = field(default_factory=list)
    failed: list[Change] = field(default_factory=list)


@dataclass
class MigRelayouts:
    """Every GPU's current (or last) change, the pods waiting for one, and the node reports last seen."""

    changes: dict[str, Change] = field(default_factory=dict)  # GPU uuid -> its change
    waiting: dict[str, object] = field(default_factory=dict)  # pod uid -> scheduler.Pending held for a change
    held: set[str] = field(default_factory=set)  # pod uids whose new instances are held in the model
    reports: dict[str, tuple[tuple, list]] = field(default_factory=dict)  # GPU uuid -> (report, its mig now)
    new_id: object = lambda: uuidlib.uuid4().hex[:12]

    # --- reading -------------------------------------------------------------------------------------------
    def on_node(self, node: str) -> dict[str, Change]:
        return {g: c for g, c in self.changes.items() if c.node == node}

    def in_flight(self) -> list[Change]:
        return [c for c in self.changes.values() if c.in_flight]

    def status_rows(self, node: str) -> list[dict]:
        return [wire(c) for c in sorted(self.on_node(node).values(), key=lambda c: c.gpu)]

    def overlay(self, spec: NodeSpec) -> NodeSpec:
        return mig_changes.overlay(spec, self.on_node(spec.name), self.held)

    def pod_changes(self, uid: str) -> list[Change]:
        return [c for c in self.changes.values() if uid in c.pod_uids and c.in_flight]

    def frozen(self, cluster) -> frozenset[tuple[int, int]]:
        return frozenset(cluster.uuid_index[c.gpu] for c in self.in_flight() if c.gpu in cluster.uuid_index)

    # --- the GPUNode ---------------------------------------------------------------------------------------
    def observe(self, name: str, gpunode: dict | None) -> tuple[Finished, bool]:
        """Adopt the in-flight changes its status lists that this replica does not know (a new leader, a
        standby) and apply the node's reports. Returns the changes that ended, and whether any changed."""
        finished, changed = Finished(), False
        if gpunode is None:
            return finished, False
        for doc in (gpunode.get("status") or {}).get("migChanges") or ():
            adopted = _from_wire(name, doc)
            mine = self.changes.get(adopted.gpu) if adopted else None
            if adopted is not None and adopted.in_flight and (mine is None or not mine.in_flight and mine.id != adopted.id):
                self.changes[adopted.gpu] = adopted
                changed = True
                log.info("MIG change %s of GPU %s on %s adopted from the GPUNode (%s)", adopted.id, adopted.gpu,
                         name, adopted.phase)
        spec = gpunode.get("spec") or {}
        for gpu in spec.get("gpus") or ():
            uuid = gpu.get("uuid")
            change = self.changes.get(uuid)
            report = gpu.get("migChange")
            if change is None or not change.in_flight or not isinstance(report, dict):
                continue
            try:
                r = MigChangeReport.model_validate(report)
            except ValueError:
                continue
            mig_now = [(m.get("profile"), m.get("start")) for m in gpu.get("mig") or ()]
            after = mig_changes.progress(change, r.id, r.phase, r.message, mig_now)
            if after != change:
                self.changes[uuid] = after
                changed = True
                if after.phase == "Done":
                    finished.done.append(after)
                elif after.phase == "Failed":
                    finished.failed.append(after)
        return finished, changed

    # --- deciding ------------------------------------------------------------------------------------------
    def plan(self, live, uid: str, entry, core) -> tuple[list[Change], str] | str:
        """For a MIG pod no instance holds: ([changes], message for the pod) when a re-layout gives it its
        instances (the caller records them), else the planner's reasons ("" when none applies)."""
        cluster = live.cluster
        if cluster is None or not is_relayout_candidate(cluster, core):
            return ""
        fw = live._framework(live.default_policy)
        plan = plan_relayout(cluster, _without_mig_resources(core), node_rank=fw.node_rank,
                             frozen=self.frozen(cluster))
        if isinstance(plan, NoRelayout):
            return f"No MIG re-layout helps: {plan}." if plan.considered else ""
        node = cluster.nodes[plan.node]
        gpu_uuids = tuple(g.uuid for g in node.gpus)
        started = timestamp()
        changes = mig_changes.changes_for(plan, node.name, gpu_uuids, self.new_id(), started, pod_key(entry.pod), uid)
        said = "; ".join(f"GPU {c.gpu} (change {c.id}) " + mig_changes.describe(
            c, [(m.profile, m.start) for m in node.gpus[[g.uuid for g in node.gpus].index(c.gpu)].mig])
            for c in changes)
        message = (f"waiting for a MIG re-layout on node {node.name}: {said}; the pod binds to its new "
                   f"{core.mig_profile} instance when the node reports the change applied")
        return changes, message

    def record(self, changes: list[Change], uid: str, entry) -> None:
        for c in changes:
            self.changes[c.gpu] = c
        self.waiting[uid] = entry
        self.held.add(uid)

    def forget_pod(self, uid: str) -> None:
        self.waiting.pop(uid, None)
        self.held.discard(uid)

    def instances_for(self, uid: str, spec: NodeSpec | None) -> tuple[str, ...]:
        """The instances `uid` was promised, named as the node's inventory (`spec`, no overlay) names them: by
        changes in flight or done, never a failed one (the GPU kept its layout; a later re-layout for the same
        pod, on another GPU, must not inherit that change's instance-to-be)."""
        gpus = {g.uuid: g for g in spec.gpus} if spec else {}
        return tuple(name for c in self.changes.values() if uid in c.pod_uids and c.phase != "Failed"
                     for name in mig_changes.instance_names(c, uid, gpus[c.gpu].mig if c.gpu in gpus else ()))


def _without_mig_resources(core):
    """The request as the planner weighs nodes: an `nvidia.com/mig-<profile>` resource it asks is what the
    re-layout creates (the node advertises it once applied), so no node is ruled out for lacking it yet."""
    if core.constraints is None or not any(n.startswith(MIG_RESOURCE_PREFIX) for n, _ in core.constraints.extended):
        return core
    kept = tuple((n, a) for n, a in core.constraints.extended if not n.startswith(MIG_RESOURCE_PREFIX))
    return replace(core, constraints=replace(core.constraints, extended=kept))


def seconds_since(started: str) -> float:
    t = parse_time(started)
    return max(0.0, time.time() - t.timestamp()) if t else 0.0


__all__ = ["REASON", "Finished", "MigRelayouts", "seconds_since", "wire"]
