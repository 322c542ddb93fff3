"""The device plugin's side of the scheduler hand-off (the contract itself is fgpu_contracts.assignment): which
pending pod's container an Allocate call is for (pure).

Kubelet's Allocate request names device IDs but not the pod. The kubelet admits the pods bound to its node one
at a time, in the order its watch delivered them, so the plugin takes the pending pod it saw arrive on its node
first (its `arrived` sequence: the resourceVersion of the first sighting, i.e. of the binding, which both
watches deliver in the same order) whose next unallocated container asks for as many devices as the request
has; it records the containers it allocated in `fgpu.io/allocated` so a plugin restart does not hand the same
one out twice. Not the oldest assignment: binds run concurrently, so the scheduler's decision order is not the
order pods reach the kubelet, and a share matched out of the kubelet's order lands in another pod's container.
A terminating pod is never admitted by the kubelet, so never matched. Only containers whose assigned devices are
GPUs the Allocate's resource shares out are candidates: a pod given a MIG instance or an exclusive GPU carries an
assignment too, but its Allocate comes through that device's own resource (the device IDs say everything) and
never consumes the hand-off, so without the check it would stay at the head of the line and the next share's
Allocate would take it (each later pod then starting with the previous pod's share).

With a hand-off key, only a pod whose assignment carries the scheduler's signature is handed anything
(fgpu_contracts.signature): an unsigned or edited pod at the head of the line is the one the kubelet is
admitting, so its own Allocate is refused with the reason (the kubelet's admission error on that pod); a
refused hand-off is passed over afterwards (`refused`) until it changes, so it blocks no pod behind it.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from fgpu_contracts.assignment import Assignment, ContainerAssignment, parse_assignment
from fgpu_contracts.errors import InputError
from fgpu_contracts.keys import ALLOCATED, ASSIGNED_AT, ASSIGNMENT, ASSIGNMENT_SIGNATURE


@dataclass(frozen=True)
class PodView:
    """The few pod fields the plugin needs (the Kubernetes shell builds these from the API)."""

    namespace: str
    name: str
    uid: str
    node_name: str
    phase: str
    annotations: dict[str, str] = field(default_factory=dict)
    created: str = ""  # RFC 3339; tie-breaker after assigned-at
    arrived: int = 0  # the order the plugin saw it bound to its node (resourceVersion of the first sighting)
    terminating: bool = False  # deletionTimestamp set: the kubelet admits it no more
    version: int = 0  # resourceVersion of this view (orders two views of one pod)

    @property
    def admissible(self) -> bool:
        """Pending and not being deleted: a pod the kubelet may still admit."""
        return self.phase == "Pending" and not self.terminating

    def order(self) -> tuple[int, str, str, str, str]:
        """The kubelet's admission order: arrival, then (arrival unknown or equal) assignment and creation."""
        return (self.arrived, self.annotations.get(ASSIGNED_AT, ""), self.created, self.namespace, self.name)

    def handoff(self) -> tuple[str, str]:
        """What a refusal was about: the assignment and its signature as the pod carries them now."""
        return self.annotations.get(ASSIGNMENT, ""), self.annotations.get(ASSIGNMENT_SIGNATURE, "")

    def allocated_containers(self) -> frozenset[str]:
        return _allocated(self.annotations.get(ALLOCATED, ""))


@lru_cache(maxsize=4096)
def _allocated(raw: str) -> frozenset[str]:
    if not raw:
        return frozenset()
    try:
        value = json.loads(raw)
    except ValueError:
        return frozenset()
    return frozenset(str(v) for v in value) if isinstance(value, list) else frozenset()


@dataclass(frozen=True)
class Match:
    pod: PodView
    container: ContainerAssignment
    assignment: Assignment
    refused: str = ""  # why this pod's assignment is not to be handed out ("": it is verified, or unchecked)


#: (pod, node) -> why its hand-off is not the scheduler's, None when it is (signature.problem with the key)
Verify = Callable[[PodView, str], "str | None"]


def find_assignment(pods: Iterable[PodView], node: str, device_count: int,
                    taken: set[tuple[str, str]] = frozenset(), verify: Verify | None = None,
                    refused: Mapping[tuple[str, str], tuple[str, str]] | None = None,
                    shared: frozenset[str] | None = None) -> Match | None:
    """The container an Allocate of `device_count` devices is for: among the assigned, pending, not terminating
    pods on `node`, the first in the kubelet's order (PodView.order) whose first not-yet-allocated container has
    `device_count` devices. `taken` holds (pod uid, container) pairs this plugin allocated but may not have
    recorded on the pod yet; `refused` maps (pod uid, container) to the hand-off (PodView.handoff) already
    refused for it, passed over while unchanged. Unparseable annotations are skipped (the pod then never
    matches; the operator's validation is the place to reject them). With `verify`, the match says in
    `refused` why its hand-off is not the scheduler's. With `shared` (the UUIDs of the GPUs the Allocate's
    resource shares out), a container assigned any device outside it is not this Allocate's."""
    best: tuple[tuple, PodView, ContainerAssignment, Assignment] | None = None
    for pod in pods:  # one pass, no sort: Allocate runs this on every call with ~100 pods
        if pod.node_name != node or not pod.admissible or ASSIGNMENT not in pod.annotations:
            continue
        key = pod.order()
        if best is not None and key >= best[0]:
            continue
        try:
            assignment = parse_assignment(pod.annotations[ASSIGNMENT])
        except InputError:
            continue
        if assignment.node != node:
            continue
        done = pod.allocated_containers()
        first = next((c for c in assignment.containers
                      if c.name not in done and (pod.uid, c.name) not in taken), None)
        if first is None or len(first.devices) != device_count:
            continue
        if shared is not None and any(d.uuid not in shared for d in first.devices):
            continue
        if refused and refused.get((pod.uid, first.name)) == pod.handoff():
            continue
        best = (key, pod, first, assignment)
    if best is None:
        return None
    _, pod, first, assignment = best
    return Match(pod, first, assignment, (verify(pod, node) or "") if verify is not None else "")


def assigned_devices(pods: Iterable[PodView], node: str, slot_of: Mapping[str, str], available: Iterable[str],
                     size: int) -> list[str] | None:
    """For a counted resource whose device IDs name single devices (MIG instances, whole GPUs), the IDs fgpu's
    scheduler assigned to the next container the kubelet admits, when they are all still free: the kubelet picks
    the devices of such a resource itself, and a pick other than the scheduler's would run the container on
    another instance than the operator accounts for (and a dynamic-MIG re-layout might then count that
    instance idle). `slot_of` maps a device UUID to its device ID. None when no pending assignment fits (the
    caller falls back to its packing order)."""
    free = set(available)
    skip: set[tuple[str, str]] = set()
    pods = list(pods)
    shared = frozenset(slot_of)
    while True:
        match = find_assignment(pods, node, size, skip, shared=shared)
        if match is None:
            return None
        ids = [slot_of[d.uuid] for d in match.container.devices]
        if all(i in free for i in ids):
            return ids
        skip.add((match.pod.uid, match.container.name))  # already admitted (its devices taken): the next one
