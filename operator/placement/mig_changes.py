"""Dynamic MIG changes in flight: what the operator's model shows of a GPU between deciding a re-layout
(`mig_plan.plan_relayout`) and the node reporting it applied.

While a change is Pending or Applying, the GPU is `frozen` (never a second change on it) and the model
shows its *desired* layout: the instances it destroys are gone at once (no other pod takes one, and they are
unavailable while the node re-lays them), kept ones keep their UUID, and each new instance appears under a
placeholder name (`mig_plan.default_name`) held by the pod it was made for, or marked unusable until that pod
is held again (a new leader learns the change from the GPUNode before it sees the pod). When the node reports
Done with that layout, the pod's new instances are the real ones of the same profile and start slice.
Pure: the controller keeps the changes and writes them to GPUNode status.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from simgpu import mig

from .mig_plan import Relayout, default_name
from .model import MigSlot, NodeSpec

IN_FLIGHT = ("Pending", "Applying")
Placement = tuple[str, int]  # (profile, start slice)


@dataclass(frozen=True, slots=True)
class MigChange:
    """One GPU's change as the operator tracks it (GPUNode status.migChanges, one entry per GPU)."""

    node: str
    gpu: str
    id: str
    layout: tuple[Placement, ...]
    phase: str
    started: str  # RFC 3339, as written on the GPUNode
    pods: tuple[str, ...] = ()  # "namespace/name" of each pod held for a new instance
    pod_uids: tuple[str, ...] = ()
    targets: tuple[Placement, ...] = ()  # the new instance each pod takes, in pod order
    message: str = ""

    @property
    def in_flight(self) -> bool:
        return self.phase in IN_FLIGHT


def changes_for(plan: Relayout, node: str, gpu_uuids: tuple[str, ...], change_id: str, started: str,
                pod: str, uid: str) -> list[MigChange]:
    """The plan's GPU changes as MigChanges (one per GPU), each holding the pod's new instances there."""
    out = []
    for k, c in enumerate(plan.changes):
        targets = tuple((m.profile, m.start) for m in c.create)
        out.append(MigChange(node, gpu_uuids[c.gpu], f"{change_id}-{k}" if len(plan.changes) > 1 else change_id,
                             tuple((m.profile, m.start) for m in c.layout), "Pending", started,
                             (pod,) * len(targets), (uid,) * len(targets), targets))
    return out


def overlay(spec: NodeSpec, changes: Mapping[str, MigChange], held: Iterable[str] = ()) -> NodeSpec:
    """The node as placement sees it while its GPUs' changes are in flight (see the module's docstring).
    `held`: pod uids whose new instances are already held in the model (the others' are kept unusable)."""
    held = set(held)
    gpus = list(spec.gpus)
    touched = False
    for j, g in enumerate(gpus):
        change = changes.get(g.uuid)
        if change is None or not change.in_flight:
            continue
        by_place = {(m.profile, m.start): m for m in g.mig}
        waiting = {t for t, uid in zip(change.targets, change.pod_uids, strict=True) if uid not in held}
        slots = []
        for profile, start in change.layout:
            m = by_place.get((profile, start))
            if m is None:
                prof = mig.get_profile(g.model, profile)
                m = MigSlot(default_name(g.uuid, profile, start), profile, prof.mem_bytes >> 20, prof.sms, True, start)
            slots.append(replace(m, healthy=m.healthy and (profile, start) not in waiting))
        gpus[j] = replace(g, mig=tuple(slots))
        touched = True
    return replace(spec, gpus=tuple(gpus)) if touched else spec


def instance_names(change: MigChange, uid: str, gpu_mig: Iterable[MigSlot] = ()) -> tuple[str, ...]:
    """The instances `uid` takes on the change's GPU: the real ones once the node reports them (same profile
    and start), else the placeholders."""
    real = {(m.profile, m.start): m.uuid for m in gpu_mig}
    return tuple(real.get(t, default_name(change.gpu, *t))
                 for t, u in zip(change.targets, change.pod_uids, strict=True) if u == uid)


def progress(change: MigChange, report_id: str | None, report_phase: str | None, report_message: str,
             mig_now: Iterable[tuple[str, int]]) -> MigChange:
    """The change after the node's report on its GPU (spec.gpus[].migChange): a report for another id is not
    about it. Done counts only if the GPU's instances are the desired layout; otherwise it failed."""
    if report_id != change.id or report_phase is None or report_phase == change.phase:
        return change
    if report_phase == "Done" and sorted(mig_now) != sorted(change.layout):
        return replace(change, phase="Failed", message=f"the node reported it done, but the GPU has "
                       f"{_spelled(mig_now)} instead of {_spelled(change.layout)}")
    return replace(change, phase=report_phase, message=report_message)


def _spelled(layout: Iterable[Placement]) -> str:
    return ", ".join(f"{p}@{s}" for p, s in sorted(layout, key=lambda x: x[1])) or "no instance"


def describe(change: MigChange, before: Iterable[tuple[str, int]]) -> str:
    """What the change does, for the waiting pod's message: which idle instances go, which are created."""
    before = set(before)
    after = set(change.layout)
    gone, new = sorted(before - after, key=lambda x: x[1]), sorted(after - before, key=lambda x: x[1])
    return f"destroys idle {_spelled(gone)}, creates {_spelled(new)}"


__all__ = ["IN_FLIGHT", "MigChange", "changes_for", "describe", "instance_names", "overlay", "progress"]
