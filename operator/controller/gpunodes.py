"""GPUNode status: what fgpu gave out on each node, container by container, and whether the node can take
GPU pods — written by the leader on the `status` subresource of the node's GPUNode (the device plugin owns
the spec). `kubectl get gpunodes` then shows allocated pods per node without reading every pod.

Writes are coalesced: a node whose allocations change is marked, and every `interval_s` each marked node
gets one merge patch with its current list — O(nodes) writes per interval, whatever the pod rate — through
its own rate-limited session, so status never competes with Bindings.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from fgpu_contracts import keys
from fgpu_contracts.assignment import Assignment
from fgpu_contracts.inventory import GPUNodeStatus

from ..kube.outcome import Result
from ..kube.session import ApiSession
from ..objects import timestamp
from ..placement.model import NodeSpec

log = logging.getLogger("fgpu.gpunodes")
MERGE_PATCH = "application/merge-patch+json"
PATH = f"/apis/{keys.CRD_GROUP}/{keys.CRD_VERSION}/{keys.GPUNODE_PLURAL}"


def allocation_rows(namespace: str, pod: str, uid: str, assignment: Assignment) -> tuple[dict, ...]:
    """The pod's devices as GPUNode status lists them (GpuAllocation on the wire: camelCase, no nulls)."""
    rows = []
    for c in assignment.containers:
        for d in c.devices:
            row = {"uuid": d.uuid, "milliGpu": d.milli_gpu, "memBytes": d.mem_bytes, "smPct": d.sm_pct,
                   "migProfile": d.mig_profile, "namespace": namespace, "pod": pod, "podUid": uid,
                   "container": c.name}
            rows.append({k: v for k, v in row.items() if v is not None})
    return tuple(rows)


def schedulable_condition(spec: NodeSpec | None) -> tuple[str, str, str]:
    """(status, reason, message) of the `Schedulable` condition: can fgpu place GPU pods on this node?"""
    if spec is None:
        return "False", "NodeMissing", "no Node object of this name"
    if spec.unschedulable:
        return "False", "Cordoned", "the node is cordoned (spec.unschedulable)"
    healthy = sum(g.healthy for g in spec.gpus)
    if not healthy:
        return "False", "NoHealthyGPU", f"none of its {len(spec.gpus)} GPUs is healthy"
    return "True", "GPUsAvailable", f"{healthy} of {len(spec.gpus)} GPUs healthy"


class NodeAllocations:
    """uid -> (node, rows): what each pod holds, indexed by node, with the nodes changed since the last write."""

    def __init__(self) -> None:
        self._by_node: dict[str, dict[str, tuple[dict, ...]]] = {}
        self._node_of: dict[str, str] = {}
        self.dirty: set[str] = set()

    def hold(self, uid: str, node: str, rows: tuple[dict, ...]) -> None:
        self.drop(uid)
        self._by_node.setdefault(node, {})[uid] = rows
        self._node_of[uid] = node
        self.dirty.add(node)

    def drop(self, uid: str) -> None:
        node = self._node_of.pop(uid, None)
        if node is not None:
            held = self._by_node.get(node, {})
            held.pop(uid, None)
            if not held:
                self._by_node.pop(node, None)
            self.dirty.add(node)

    def rows(self, node: str) -> list[dict]:
        """The node's allocations in a stable order (pod, container, device)."""
        rows = [r for held in self._by_node.get(node, {}).values() for r in held]
        return sorted(rows, key=lambda r: (r["namespace"], r["pod"], r["container"], r["uuid"]))

    def __len__(self) -> int:
        return len(self._node_of)


class StatusWriter:
    """Writes the marked nodes' GPUNode status every `interval_s` while this replica leads."""

    def __init__(self, api: ApiSession, held: NodeAllocations, spec_of: Callable[[str], NodeSpec | None],
                 is_leader: Callable[[], bool], interval_s: float = 1.0,
                 mig_changes: Callable[[str], list[dict]] = lambda name: []):
        self.api, self.held, self.spec_of, self.is_leader = api, held, spec_of, is_leader
        self.mig_changes = mig_changes  # node -> its GPUs' dynamic-MIG changes (status.migChanges)
        self.interval_s = interval_s
        self.known: set[str] = set()  # GPUNodes that exist (from the watch): only those get a status
        self._conditions: dict[str, dict] = {}  # node -> the Schedulable condition last written
        self._soon = asyncio.Event()

    def seen(self, name: str, exists: bool) -> None:
        if exists:
            self.known.add(name)
            self.held.dirty.add(name)
        else:
            self.known.discard(name)
            self._conditions.pop(name, None)

    def mark(self, names: Iterable[str]) -> None:
        self.held.dirty.update(names)

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._soon.wait(), self.interval_s)
            self._soon.clear()
            if self.is_leader():
                await self.flush()

    def soon(self) -> None:
        """Write now rather than at the interval's end: a node waits for this status (a MIG change)."""
        self._soon.set()

    async def flush(self) -> None:
        due = sorted(self.held.dirty & self.known)
        self.held.dirty -= set(due)
        results = await asyncio.gather(*(self._write(name) for name in due), return_exceptions=True)
        for name, result in zip(due, results, strict=True):
            if isinstance(result, BaseException) or result is False:
                self.held.dirty.add(name)  # try again next round

    async def _write(self, name: str) -> bool:
        status, reason, message = schedulable_condition(self.spec_of(name))
        last = self._conditions.get(name)
        since = last["lastTransitionTime"] if last and last["status"] == status else timestamp()
        condition = {"type": "Schedulable", "status": status, "reason": reason, "message": message,
                     "lastTransitionTime": since}
        status_doc = GPUNodeStatus.model_validate({"allocations": self.held.rows(name), "conditions": [condition],
                                                   "migChanges": self.mig_changes(name)})
        body = {"status": status_doc.model_dump(mode="json", by_alias=True, exclude_none=True)}
        out = await self.api.request("PATCH", f"{PATH}/{name}/status", body=body, content_type=MERGE_PATCH)
        if out.ok:
            self._conditions[name] = condition
            return True
        if out.result is Result.GONE:
            self.known.discard(name)
            return True
        log.warning("GPUNode %s status not written: %s", name, out)
        return False
