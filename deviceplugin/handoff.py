"""The device plugin's side of the scheduler hand-off (the contract itself is fgpu_contracts.assignment): which
pending pod's container an Allocate call is for (pure).

Kubelet's Allocate request names device IDs but not the pod; as HAMi does, the plugin takes the oldest pending
pod on its node whose next unallocated container asks for as many devices as the request has, and records the
containers it has allocated in `fgpu.io/allocated` so a plugin restart does not hand the same one out twice.

With a hand-off key, only a pod whose assignment carries the scheduler's signature is handed anything
(fgpu_contracts.signature): an unsigned or edited one still matches (so its own Allocate is refused with the
reason, the kubelet's admission error on that pod) but never ahead of a verified one, so a forged pod can
neither take a share nor jump the queue.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from fgpu_contracts.assignment import Assignment, ContainerAssignment, parse_assignment
from fgpu_contracts.errors import InputError
from fgpu_contracts.keys import ALLOCATED, ASSIGNED_AT, ASSIGNMENT


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
                    taken: set[tuple[str, str]] = frozenset(), verify: Verify | None = None) -> Match | None:
    """The container an Allocate of `device_count` devices is for: the oldest assigned pending pod on `node`
    whose first not-yet-allocated container has `device_count` devices. `taken` holds (pod uid, container)
    pairs this plugin allocated but may not have recorded on the pod yet. Unparseable annotations are
    skipped (the pod then never matches; the operator's validation is the place to reject them). With
    `verify`, a verified pod always comes before one that is not (whose Match says why in `refused`)."""
    best_key: tuple[str, str, str, str] | None = None
    best: Match | None = None
    for pod in pods:  # one pass, no sort: Allocate runs this on every call with ~100 pods
        if pod.node_name != node or pod.phase != "Pending" or ASSIGNMENT not in pod.annotations:
            continue
        try:
            assignment = parse_assignment(pod.annotations[ASSIGNMENT])
        except InputError:
            continue
        if assignment.node != node:
            continue
        key = (pod.annotations.get(ASSIGNED_AT, ""), pod.created, pod.namespace, pod.name)
        if best_key is not None and key >= best_key and not best.refused:
            continue
        done = pod.allocated_containers()
        first = next((c for c in assignment.containers
                      if c.name not in done and (pod.uid, c.name) not in taken), None)
        if first is None or len(first.devices) != device_count:
            continue
        refused = (verify(pod, node) or "") if verify is not None else ""
        if best is not None and (bool(refused), key) >= (bool(best.refused), best_key):
            continue
        best_key, best = key, Match(pod, first, assignment, refused)
    return best
