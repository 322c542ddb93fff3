"""The scheduler: pods with `schedulerName: fgpu-scheduler` in, Bindings out — kube-scheduler's
assume-then-bind flow over the pure `LiveCluster`.

Watch events (delivered by the Kopf handlers) keep the model true: nodes and their GPU inventory, and every
bound pod (any scheduler's: their CPU counts too) restored from its hand-off annotation. A pending pod is
decided at once and reserved in memory (assume); the Binding — node name and hand-off annotation in one
atomic write — goes out with bounded concurrency; a failed write releases the reservation. A pod that fits
nowhere gets PodScheduled=False and a FailedScheduling event with the core's explanation, and is parked until
capacity changes (a pod released, a node added or changed, a GPU healthy again): no polling.

Only the leader (a coordination Lease) binds; a standby keeps the same model warm from the same watches.
A bound pod's hand-off annotation edited by anyone else is written back (`handoff_guard`), by the leader.
With a hand-off key every assignment is signed on the Binding, and a bound pod whose assignment does not verify
is not taken at its word (`handoff_guard.distrust`).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass

from fgpu_contracts import dra as names
from fgpu_contracts import keys
from fgpu_contracts.errors import InputError

from ..kube.events import EventRecorder
from ..kube.outcome import Result
from ..kube.pods import MERGE_PATCH, bind, set_annotations, set_unschedulable
from ..kube.session import STRATEGIC_MERGE, ApiSession
from ..objects import pod_key, timestamp
from ..placement.framework import Unschedulable
from ..placement.live import Allocation, LiveCluster
from . import claims, translate
from .gpunodes import NodeAllocations, allocation_rows
from .handoff_guard import Handoff, HandoffGuard, Restore, distrust
from .metrics import OperatorMetrics, unschedulable_reason
from .mig_relayout import REASON as MIG_REASON
from .mig_relayout import Finished, MigRelayouts, seconds_since
from .preempt import Preemptions
from .queue import ActiveQueue, sort_key

log = logging.getLogger("fgpu.scheduler")
FINISHED = ("Succeeded", "Failed")
#: Seconds before a pod whose attempt raised is tried again, doubling per error in a row up to the second figure:
#: kube-scheduler's podInitialBackoffSeconds and podMaxBackoffSeconds. Without it such a pod waited for the next
#: capacity change, which a quiet cluster may never make.
ERROR_BACKOFF = (1.0, 10.0)


@dataclass
class Pending:
    pod: dict
    request: object  # GpuRequest | None
    message: str = ""  # the last explanation written on the pod
    reason: str = ""  # why it was parked, one of metrics.REASONS (the pending-pods gauge)
    errors: int = 0  # attempts in a row that raised (their backoff doubles)
    claims_pending: bool = False  # parked until its ResourceClaims exist (a claim or the pod's status changes)

    @property
    def key(self) -> tuple[int, int]:
        return sort_key(self.pod, self.request is None or self.request.priority == "high")


class Scheduler:
    """Feed it watch events (`on_pod`, `on_node`); `run()` places pending pods while `is_leader()`."""

    def __init__(self, live: LiveCluster, api: ApiSession, events: EventRecorder,
                 is_leader: Callable[[], bool] = lambda: True, scheduler_name: str = keys.SCHEDULER_NAME,
                 max_binds_in_flight: int = 64, metrics: OperatorMetrics | None = None,
                 handoff_key: bytes | None = None):
        self.live, self.api, self.events = live, api, events
        self.handoff_key = handoff_key  # signs every assignment (None: unsigned, as before keys existed)
        self.metrics = metrics or OperatorMetrics()
        self.is_leader, self.scheduler_name = is_leader, scheduler_name
        self.queue: ActiveQueue[Pending] = ActiveQueue()  # uid -> pod waiting for a decision
        self.parked: dict[str, Pending] = {}  # uid -> pod that fit nowhere at its last try
        self.binding: set[str] = set()  # uids whose Binding is in flight
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(max_binds_in_flight)
        self._tasks: set[asyncio.Task] = set()
        self._seen_bound: dict[str, dict] = {}  # uid -> bound pod seen while our own Binding was in flight
        self._explaining: dict[str, asyncio.Task] = {}  # uid -> its PodScheduled=False write in flight
        self.nodes: dict[str, dict] = {}  # name -> the Node's fields placement reads
        self.gpunodes: dict[str, dict] = {}  # name -> its GPUNode's spec
        self.held = NodeAllocations()  # what each bound pod holds, for GPUNode status
        self.guard = HandoffGuard()  # the hand-off each bound pod must keep
        self.gpu_policy = "binpack"  # the cluster's GPU policy (SchedulingPolicy), for requests naming none
        self.default_slo = translate.DEFAULT_SLO_SLOWDOWN  # the cluster's slowdown bound for high-priority pods
        self.slo_filter = "fgpu"  # which node policies keep co-runners' SLOs (SchedulingPolicy sloFilter)
        self.preemptions = Preemptions()  # bound pods' priorities, and preemptors waiting for their victims
        self.slices: dict[str, dict[str, dict]] = {}  # node -> its fgpu-dra ResourceSlices by name
        self.pools: dict[str, claims.DraPool] = {}  # node -> its fgpu-dra pool
        self.claims: dict[tuple[str, str], dict] = {}  # (namespace, name) -> ResourceClaim
        self.owned_claims: dict[tuple[str, str], str] = {}  # (pod uid, pod claim name) -> its template's claim
        self.extended_claims: dict[str, str] = {}  # pod uid -> its KEP-5004 claim (same namespace)
        # A claim several pods use (one resourceClaimName): its devices are held once, by its first live user in
        # the model; the others ride on it with their CPU only, and one of them inherits the devices when it ends
        self.claim_users: dict[tuple[str, str], list[str]] = {}  # claim -> pod uids, the holder first
        self._full_core: dict[str, object] = {}  # uid -> its core request with the claim's GPUs (an heir's)
        self.extended_classes: dict[str, str] = {}  # extended resource name -> fgpu-dra's DeviceClass serving it
        self.new_share_id: Callable[[], str] = lambda: str(uuidlib.uuid4())
        self.mig = MigRelayouts()  # dynamic-MIG changes in flight, and the pods waiting for them
        self.status_soon: Callable[[], None] = lambda: None  # GPUNode status written now (StatusWriter.soon)

    # --- watch events (synchronous: they only update memory) ---------------------------------------------
    def on_node(self, kind: str, node: dict) -> None:
        name = (node.get("metadata") or {}).get("name", "")
        if kind == "DELETED":
            self.held.dirty.add(name)
            self.nodes.pop(name, None)
            for uid in self.live.remove_node(name):
                log.warning("node %s deleted with pod %s allocated on it", name, uid)
            return
        fields = _placement_fields(node)
        if self.nodes.get(name) == fields:
            return  # a heartbeat (conditions, times): nothing placement reads changed, nothing to parse
        self.held.dirty.add(name)  # its GPUNode's Schedulable condition may change
        self.nodes[name] = fields
        self._refresh(name)

    def on_gpunode(self, kind: str, gpunode: dict) -> None:
        """A GPUNode's spec is the inventory of a node that publishes no annotation."""
        name = (gpunode.get("metadata") or {}).get("name", "")
        if kind == "DELETED":
            self.gpunodes.pop(name, None)
        else:
            self.gpunodes[name] = gpunode.get("spec") or {}
        finished, changed = self.mig.observe(name, None if kind == "DELETED" else gpunode)
        if changed:
            self.held.dirty.add(name)  # its status shows the change's phase
            self.status_soon()
        ended = self._end_changes(finished)
        if name in self.nodes:
            self._refresh(name)
        self._after_changes(ended)

    def _refresh(self, name: str) -> None:
        spec = claims.with_pool(translate.node_spec(self.nodes[name], self.gpunodes.get(name)), self.pools.get(name),
                                self.extended_classes)
        spec = self.mig.overlay(spec)  # GPUs being re-laid show their desired layout
        if self.live.upsert_node(spec):
            self.retry_waiting()

    def on_resourceslice(self, kind: str, obj: dict) -> None:
        """fgpu-dra's slices: a node whose pool fgpu-scheduler owns is placed on from them (`claims.with_pool`)."""
        spec = obj.get("spec") or {}
        if spec.get("driver") != names.DRIVER:
            return
        node, name = spec.get("nodeName", ""), (obj.get("metadata") or {}).get("name", "")
        held = self.slices.setdefault(node, {})
        if kind == "DELETED":
            held.pop(name, None)
        else:
            held[name] = obj
        pool = claims.dra_pool(node, held.values())
        if pool is None:
            self.slices.pop(node, None)
            self.pools.pop(node, None)
        elif self.pools.get(node) == pool:
            return
        else:
            self.pools[node] = pool
        if node in self.nodes:
            self._refresh(node)

    def on_resourceclaim(self, kind: str, obj: dict) -> None:
        """Claims: what a pending pod asks, and what a bound pod's claims hold (read back on restore)."""
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        owner, special = claims.owned_claim(obj), claims.extended_owner(obj)
        if kind == "DELETED":
            self.claims.pop(key, None)
            if owner is not None:
                self.owned_claims.pop(owner, None)
            if special is not None and self.extended_claims.get(special) == key[1]:
                del self.extended_claims[special]
            return
        self.claims[key] = obj
        if special is not None:
            self.extended_claims[special] = key[1]
        if owner is not None:
            self.owned_claims[owner] = key[1]
        self._retry_claim_waiters()

    async def _add_finalizer(self, key: tuple[str, str]):
        """The finalizer, against the claim's resourceVersion; the claim as written goes to the cache."""
        claim = self.claims.get(key)
        if claim is None:
            return None
        meta = claim.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or ())
        if names.DELETE_PROTECTION in finalizers:
            return None
        out = await self.api.request("PATCH", f"/apis/resource.k8s.io/v1/namespaces/{key[0]}/resourceclaims/{key[1]}",
                                     body={"metadata": {"resourceVersion": meta.get("resourceVersion"),
                                                        "finalizers": [*finalizers, names.DELETE_PROTECTION]}},
                                     content_type=MERGE_PATCH)
        if out.ok:
            self._newer(key, out.body)
        return out

    def _newer(self, key: tuple[str, str], claim: dict) -> None:
        """A claim our write returned: kept unless the watch brought a newer one meanwhile."""
        have = self.claims.get(key)
        rv = lambda c: int((c.get("metadata") or {}).get("resourceVersion") or 0)  # noqa: E731
        if have is None or rv(claim) >= rv(have):
            self.claims[key] = claim

    def on_deviceclass(self, kind: str, obj: dict) -> None:
        """KEP-5004: a class of fgpu-dra's with `extendedResourceName` lets whole-GPU pods of fgpu-scheduler onto
        fgpu-owned DRA nodes, where fgpu makes their claim as kube-scheduler does."""
        name = (obj.get("metadata") or {}).get("name", "")
        resource = (obj.get("spec") or {}).get("extendedResourceName")
        for r in [r for r, c in self.extended_classes.items() if c == name]:
            del self.extended_classes[r]
        if kind != "DELETED" and resource and name in claims.WHOLE_CLASSES:
            self.extended_classes[resource] = name
        for node in [n for n in self.pools if n in self.nodes]:  # their counted resources change
            self._refresh(node)
        self.retry_waiting()

    def _retry_claim_waiters(self) -> None:
        waiting = [uid for uid, e in self.parked.items() if e.claims_pending]
        for uid in waiting:
            entry = self.parked.pop(uid)
            self.queue.push(uid, entry, entry.key)
        if waiting:
            self._wake.set()

    def on_pod(self, kind: str, pod: dict) -> None:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        uid = meta.get("uid", "")
        if kind == "DELETED" or status.get("phase") in FINISHED:
            self._forget(uid)
            return
        node = spec.get("nodeName")
        if node:
            if uid in self.preemptions.evicting:  # released for a preemptor: never taken back while it goes
                self.preemptions.pods[uid] = pod
                return
            self.preemptions.bound(uid, pod)
            self.queue.remove(uid)
            self.parked.pop(uid, None)
            if uid in self.binding:
                self._seen_bound[uid] = pod  # ours landed, or another scheduler's did: `_bind` decides
            elif uid not in self.live.allocations and uid not in self.live.unplaced:
                self._restore(uid, pod, node)
            else:
                self._keep_handoff(uid, pod)
            return
        if spec.get("schedulerName") != self.scheduler_name or meta.get("deletionTimestamp"):
            return
        if uid in self.mig.waiting:
            self.mig.waiting[uid][0].pod = _pending_fields(pod)
            return
        if uid in self.binding or uid in self.live.allocations:
            return
        entry = self.parked.get(uid) or self.queue.get(uid)
        if entry is not None:
            entry.pod = _pending_fields(pod)  # keep its place, with the fresh object
            if entry.claims_pending:  # the controller-manager may have named its claim in the pod's status
                self._retry_claim_waiters()
            return
        entry = Pending(_pending_fields(pod), translate.gpu_request(pod))
        self.queue.push(uid, entry, entry.key)
        self._wake.set()

    def _forget(self, uid: str) -> None:
        ready = self.preemptions.gone(uid)
        if ready is not None:  # its last victim is gone: the preemptor binds to the room it held
            self._spawn(self._bind_nominated(ready.entry, ready.allocation))
        self.held.drop(uid)
        self.mig.forget_pod(uid)
        self.guard.forget(uid)
        self.queue.remove(uid)
        self.parked.pop(uid, None)
        self.events.forget(uid)
        released = None if uid in self.binding else self.live.release(uid)
        self._hand_down(uid, released)
        if released is not None:
            self.retry_waiting()

    def _users(self, key: tuple[str, str], but: str = "") -> list[str]:
        """The claim's users still in the model (the holder first), `but` left out."""
        return [u for u in self.claim_users.get(key, ()) if u != but and u in self.live.allocations]

    def _use(self, uid: str, key: tuple[str, str], core) -> bool:
        """Count `uid` as a user of the claim; True when another live pod holds its devices already."""
        users = self.claim_users.setdefault(key, [])
        if uid not in users:
            users.append(uid)
        self._full_core[uid] = core
        return bool(self._users(key)) and self._users(key)[0] != uid

    def _hand_down(self, uid: str, released: Allocation | None) -> None:
        """A shared claim's holder ended: the claim is still allocated and reserved for its other pods, so the next
        of them takes its devices in the model (the controller-manager deallocates only after the last)."""
        self._full_core.pop(uid, None)
        for key, users in list(self.claim_users.items()):
            if uid not in users:
                continue
            holder = users[0] == uid
            users.remove(uid)
            rest = self._users(key)
            if not rest:
                self.claim_users.pop(key, None)
            elif holder and released is not None and (released.gpus or released.mig):
                heir = self.live.allocations[rest[0]]
                self.live.release(heir.uid)
                self.live.restore(heir.uid, self._full_core.get(heir.uid, released.request), heir.node,
                                  released.gpus, released.mig)
                users.remove(heir.uid)
                users.insert(0, heir.uid)

    def _restore(self, uid: str, pod: dict, node: str) -> None:
        if ((pod.get("spec") or {}).get("resourceClaims") or uid in self.extended_claims
                or (pod.get("status") or {}).get("extendedResourceClaimStatus")):
            self._restore_claimed(uid, pod, node)
            return
        request = translate.gpu_request(pod)
        bound = translate.bound_devices(pod)
        doubt = distrust(self.handoff_key, uid, node, pod)
        if doubt is not None:
            meta = pod.get("metadata") or {}
            log.warning("pod %s: %s", pod_key(pod), doubt.message)
            self.events.post(meta.get("namespace", ""), meta.get("name", ""), uid, doubt.reason, doubt.message)
            bound = bound if doubt.count_claim else None
        try:
            core = translate.core_request(pod, request if bound else None, self.gpu_policy, self.default_slo)
        except InputError:
            core = translate.core_request(pod, None)
        self.live.restore(uid, core, node, bound.gpus if bound else (), bound.mig if bound else ())
        if doubt is None:  # first sight: a pod bound before this process started; nothing verified to keep else
            self.guard.record(uid, Handoff.of(pod))
        if bound is not None:
            meta = pod.get("metadata") or {}
            self.held.hold(uid, node, allocation_rows(meta.get("namespace", ""), meta.get("name", ""), uid,
                                                      bound.assignment))

    def _restore_claimed(self, uid: str, pod: dict, node: str) -> None:
        """A bound pod with claims holds what its claims' allocations name in fgpu-owned pools (restart,
        another replica): learnt back, so the model never hands those devices out again."""
        held = [h for _, name in claims.claim_names(pod, self.owned_claims, self.extended_claims) if name is not None
                for h in [claims.allocated_devices(self.claims.get((pod["metadata"].get("namespace", ""), name),
                                                                   {}), self.pools)] if h is not None]
        try:
            plan = claims.claim_plan(pod, self.claims, self.owned_claims, self.extended_claims)
            core = translate.core_request(pod, plan.gpu_request if held else None, self.gpu_policy)
            if held and self._use(uid, (plan.namespace, plan.claim), core):  # another pod of the claim holds it
                self.live.restore(uid, translate.core_request(pod, None), node)
                return
        except (claims.ClaimsNotReady, InputError):
            core = translate.core_request(pod, None)
        self.live.restore(uid, core, node, tuple(g for h in held for g in h.gpus), tuple(m for h in held for m in h.mig))

    def _keep_handoff(self, uid: str, pod: dict) -> None:
        restore = self.guard.check(uid, pod)
        if restore is not None and self.is_leader():
            self._spawn(self._restore_handoff(uid, pod, restore))

    async def _restore_handoff(self, uid: str, pod: dict, restore: Restore) -> None:
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        out = await set_annotations(self.api, ns, name, uid, restore.annotations)
        if out.ok:
            log.warning("pod %s/%s: %s", ns, name, restore.message)
            self.events.post(ns, name, uid, restore.reason, restore.message)
        elif out.result is not Result.GONE:
            reason, message = restore.failed(str(out))
            log.warning("pod %s/%s: %s", ns, name, message)
            self.events.post(ns, name, uid, reason, message)

    def retry_waiting(self) -> None:
        """Capacity changed: every parked pod gets another try (kube-scheduler's move to the active queue)."""
        for uid, entry in self.parked.items():
            self.queue.push(uid, entry, entry.key)
        self.parked.clear()
        self._wake.set()

    def _retry_after_error(self, uid: str, entry: Pending, errors: int) -> None:
        """An errored pod's backoff is over: back to the queue, unless it is no longer parked for that error
        (capacity changed and it was retried, and then placed, parked for another reason or errored again with
        a longer backoff of its own; or it was deleted)."""
        if self.parked.get(uid) is entry and entry.reason == "Error" and entry.errors == errors:
            del self.parked[uid]
            self.queue.push(uid, entry, entry.key)
            self._wake.set()

    # --- the loop ------------------------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.queue and self.is_leader():
                uid, entry = self.queue.pop()
                try:
                    await self._schedule_one(uid, entry)
                except Exception:  # one bad pod must not stop the scheduler: log it, park it, retry it later
                    log.exception("scheduling %s failed", pod_key(entry.pod))
                    self.metrics.attempt("error", "Error")
                    entry.reason, entry.errors = "Error", entry.errors + 1
                    self.parked[uid] = entry
                    first, most = ERROR_BACKOFF
                    backoff = min(first * 2 ** (entry.errors - 1), most)
                    asyncio.get_running_loop().call_later(backoff, self._retry_after_error, uid, entry, entry.errors)
                await asyncio.sleep(0)  # let watch events in between decisions

    async def _schedule_one(self, uid: str, entry: Pending) -> None:
        pod, request, plan, extended = entry.pod, entry.request, None, None
        entry.claims_pending = False
        try:
            if (pod.get("spec") or {}).get("resourceClaims") or uid in self.extended_claims:
                plan = claims.claim_plan(pod, self.claims, self.owned_claims, self.extended_claims)
                # a share the webhook wrote as a claim keeps its pod-level asks (policy, groups, filters) in
                # fgpu.io/request: the claim says the device, the annotation the rest
                request = plan.gpu_request if request is None else request.model_copy(
                    update={"containers": plan.gpu_request.containers})
            policy = request.node_policy if request is not None else None
            guard = translate.guards_slo(request, policy or self.live.default_policy, self.slo_filter)
            if (plan is not None and not (plan.claim_obj.get("status") or {}).get("allocation")
                    and self._users((plan.namespace, plan.claim), but=uid)):
                raise claims.ClaimsNotReady(f"ResourceClaim {plan.namespace}/{plan.claim} is being allocated for "
                                            "another pod that shares it")  # then this one rides on it
            extended = None if plan is not None else self._extended(pod, request)
            core = claims.kept_apart(translate.core_request(pod, request, self.gpu_policy, self.default_slo, guard),
                                     plan is not None, extended is not None)
            if self.mig.pod_changes(uid):  # a change made for it by an earlier leader: it waits for that one
                self._hold_for_changes(uid, entry, core)
                return
            outcome = self._claimed_before(uid, pod, plan, core) or self.live.schedule(uid, core, policy)
            if isinstance(outcome, Allocation) and plan is not None:
                self._use(uid, (plan.namespace, plan.claim), core)
            if isinstance(outcome, Allocation) and extended is not None and self._owned_dra(outcome.node):
                container, name, count, cls = extended
                meta = pod.get("metadata") or {}
                plan = claims.ClaimPlan(namespace=meta.get("namespace", ""), claim="", request=name,
                                        kind=names.KIND_GPU, gpu_request=request, container=container,
                                        create=claims.extended_claim(pod, name, cls, count))
        except claims.ClaimsNotReady:  # the controller-manager has not made its claim yet: wait, say nothing
            entry.claims_pending, entry.reason = True, "Other"
            self.parked[uid] = entry
            return
        except InputError as err:  # a shape the core does not place: say so on the pod, never guess
            outcome = str(err)
        if isinstance(outcome, Allocation):
            self.metrics.attempt("scheduled")
            self.binding.add(uid)
            await self._slots.acquire()
            self._spawn(self._bind(uid, entry, outcome, plan))
            return
        extra = ""
        if isinstance(outcome, Unschedulable) and core.is_mig:
            relayout = self.mig.plan(self.live, uid, entry, core)
            if isinstance(relayout, tuple):
                self._start_relayout(uid, entry, core, *relayout)
                return  # it holds its instance-to-be and binds when the node reports the change applied
            extra = relayout
        if isinstance(outcome, Unschedulable) and self.preemptions.plan(self, uid, entry, core, policy):
            return  # nominated: it holds the freed room and binds when its victims are gone
        message = f"{outcome} {extra}" if extra else str(outcome)
        entry.reason = unschedulable_reason(outcome) if isinstance(outcome, Unschedulable) else "InvalidRequest"
        self.metrics.attempt("unschedulable", entry.reason)
        self.parked[uid] = entry
        if message != entry.message:
            entry.message = message
            self._spawn(self._explain(uid, pod, message), self._explaining, uid)

    def _extended(self, pod: dict, request) -> tuple[str, str, int, str] | None:
        """KEP-5004, as kube-scheduler serves it: whole GPUs of one container, with fgpu-dra's class mapping the
        resource, may also go to an fgpu-owned DRA node, with a claim fgpu makes. (container, request name,
        count, class); None: the device plugin's nodes only."""
        cls = self.extended_classes.get(keys.GPU_RESOURCE)
        if cls is None or request is None or len(request.containers) != 1 or any(
                c.is_mig or c.is_share for c in request.containers):
            return None
        found = claims.extended_request(pod, keys.GPU_RESOURCE)
        return (*found, cls) if found is not None else None

    def _owned_dra(self, node: str) -> bool:
        pool = self.pools.get(node)
        return pool is not None and pool.owned

    def _claimed_before(self, uid: str, pod: dict, plan: claims.ClaimPlan | None, core) -> Allocation | None:
        """A claim already allocated (by this allocator before a restart or a failed Binding, or for another pod
        that shares it) keeps its devices: the pod goes where they are. A pod of a claim another live pod holds
        rides on it with its CPU only (the devices are counted once). One allocated elsewhere (a pool fgpu does
        not own) is refused."""
        if plan is None or not (plan.claim_obj.get("status") or {}).get("allocation"):
            return None
        held = claims.allocated_devices(plan.claim_obj, self.pools)
        if held is None:
            raise claims.Unsupported(f"ResourceClaim {plan.namespace}/{plan.claim} is allocated on devices "
                                     "fgpu-scheduler does not allocate (docs/dra.md)", field="spec.resourceClaims")
        if self._users((plan.namespace, plan.claim), but=uid):
            return self.live.restore(uid, translate.core_request(pod, None), held.node)
        return self.live.restore(uid, core, held.node, held.gpus, held.mig)

    async def _write_claim(self, plan: claims.ClaimPlan, allocation: Allocation, pod: dict):
        """PreBind: a KEP-5004 claim created first; the delete-protection finalizer, then status.allocation +
        reservedFor, each against the claim's resourceVersion (a claim changed meanwhile is a conflict, decided
        again); then a KEP-5004 pod's status names its claim."""
        if plan.create is not None:  # KEP-5004: the claim is made here, as kube-scheduler's PreBind makes it
            out = await self.api.request("POST", f"/apis/resource.k8s.io/v1/namespaces/{plan.namespace}/resourceclaims",
                                         body=dict(plan.create))
            if not out.ok:
                return out
            made = out.body
            self.claims[(plan.namespace, made["metadata"]["name"])] = made
            self.extended_claims[(pod.get("metadata") or {}).get("uid", "")] = made["metadata"]["name"]
            plan = dataclasses.replace(plan, claim=made["metadata"]["name"], claim_obj=made, create=None)
        out = await self._write_allocation(plan, allocation, pod)
        if plan.container and (out is None or out.ok):  # the kubelet finds the claim in the pod's status
            meta = pod.get("metadata") or {}
            wanted = claims.extended_status(plan.container, keys.GPU_RESOURCE, plan.request, plan.claim)
            if (pod.get("status") or {}).get("extendedResourceClaimStatus") != wanted:
                out = await self.api.request(
                    "PATCH", f"/api/v1/namespaces/{plan.namespace}/pods/{meta.get('name', '')}/status",
                    body={"metadata": {"uid": meta.get("uid", "")}, "status": {"extendedResourceClaimStatus": wanted}},
                    content_type=MERGE_PATCH, params={"fieldValidation": "Strict"})
        return out

    async def _write_allocation(self, plan: claims.ClaimPlan, allocation: Allocation, pod: dict):
        key = (plan.namespace, plan.claim)
        path = f"/apis/resource.k8s.io/v1/namespaces/{plan.namespace}/resourceclaims/{plan.claim}"
        claim = self.claims.get(key, plan.claim_obj)  # the newest seen
        status = claim.get("status") or {}
        protected = names.DELETE_PROTECTION in ((claim.get("metadata") or {}).get("finalizers") or ())
        if not protected and not status.get("allocation") and not status.get("reservedFor"):
            return await self._allocate_fresh(key, path, claim, claims.claim_status(
                plan, allocation, self.pools[allocation.node], pod, self.new_share_id))
        if not protected:
            out = await self._add_finalizer(key)
            if out is not None and not out.ok:
                return out
            claim = self.claims.get(key, claim)  # a retry starts from here
            status = claim.get("status") or {}
        if status.get("allocation"):  # ours from before: only the pod's reservation may be missing
            wanted = claims.claim_status(plan, allocation, self.pools[allocation.node], pod, self.new_share_id)
            body = {"reservedFor": [*(status.get("reservedFor") or ()), *wanted["reservedFor"]]}
            if any(r.get("uid") == wanted["reservedFor"][0]["uid"] for r in status.get("reservedFor") or ()):
                return None
        else:
            body = claims.claim_status(plan, allocation, self.pools[allocation.node], pod, self.new_share_id)
        out = await self.api.request("PATCH", f"{path}/status", body={
            "metadata": {"resourceVersion": (claim.get("metadata") or {}).get("resourceVersion")}, "status": body},
            content_type=MERGE_PATCH)
        if out.ok:
            self._newer(key, out.body)
        return out

    async def _allocate_fresh(self, key: tuple[str, str], path: str, claim: dict, body: dict):
        """A claim no one has allocated or reserved yet: the finalizer and the status go out at once, one round
        trip instead of two. The status is conditioned on the claim's uid, not its resourceVersion (the finalizer
        changes that): the only other writer of a claim's status, the controller-manager, leaves an unreserved,
        unallocated claim alone, and no other allocator allocates fgpu-owned pools. If the finalizer fails after the
        status landed, the retry finds the claim allocated by fgpu and adds the finalizer before anything else."""
        uid = (claim.get("metadata") or {}).get("uid")
        # neither write may carry the resourceVersion: each changes it for the other. The finalizer goes as a
        # strategic merge patch, which adds to metadata.finalizers (a merge list) without replacing it
        finalizer, written = await asyncio.gather(
            self.api.request("PATCH", path, body={"metadata": {"uid": uid, "finalizers": [names.DELETE_PROTECTION]}},
                             content_type=STRATEGIC_MERGE),
            self.api.request("PATCH", f"{path}/status", body={"metadata": {"uid": uid}, "status": body},
                             content_type=MERGE_PATCH))
        for out in (finalizer, written):
            if out.ok:
                self._newer(key, out.body)
        return finalizer if not finalizer.ok else written

    async def _explain(self, uid: str, pod: dict, message: str, reason: str = "") -> None:
        """PodScheduled=False and a FailedScheduling event (or, waiting for a MIG re-layout, a Normal
        MigReconfiguring one): written beside the loop, never holding it up."""
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        await set_unschedulable(self.api, ns, name, message, reason or "Unschedulable", pod=pod)
        if reason:
            self.events.post(ns, name, uid, reason, message, type="Normal")
        else:
            self.events.post(ns, name, uid, "FailedScheduling", message)

    # --- dynamic MIG (mig_relayout) ------------------------------------------------------------------------
    def _start_relayout(self, uid: str, entry: Pending, core, changes, message: str) -> None:
        """Record the changes (GPUNode status, next write), show the desired layout, hold the new instances."""
        self.mig.record(changes, uid, (entry, core))
        self.metrics.attempt("unschedulable", MIG_REASON)
        self.metrics.mig_started(len(changes))
        node = changes[0].node
        log.info("pod %s: %s", pod_key(entry.pod), message)
        self._hold_instances(uid, core, node)
        self.status_soon()
        self._tell_waiting(uid, entry, message)

    def _hold_for_changes(self, uid: str, entry: Pending, core) -> None:
        """A pod an adopted change (a previous leader's) was made for: hold its instance-to-be again."""
        changes = self.mig.pod_changes(uid)
        self.mig.record([], uid, (entry, core))
        self._hold_instances(uid, core, changes[0].node)
        ids = ", ".join(f"{c.id} of GPU {c.gpu}" for c in changes)
        self._tell_waiting(uid, entry, f"waiting for the MIG re-layout {ids} on node {changes[0].node} "
                                       f"(made for it before a leader change); it binds when the node reports it applied")

    def _hold_instances(self, uid: str, core, node: str) -> None:
        self.held.dirty.add(node)
        if node in self.nodes:
            self._refresh(node)
        self.live.release(uid)
        self.live.restore(uid, core, node, (), self.mig.instances_for(uid, self.live.specs.get(node)))

    def _tell_waiting(self, uid: str, entry: Pending, message: str) -> None:
        entry.reason = MIG_REASON
        if message != entry.message:
            entry.message = message
            self._spawn(self._explain(uid, entry.pod, message, MIG_REASON), self._explaining, uid)

    def _end_changes(self, finished: Finished) -> list[tuple[str, str]]:
        """Changes ended: count them, and release the holds of their waiting pods (before the node's spec
        drops the overlay). Returns (pod uid, what next: bind, retry or hold) for `_after_changes`."""
        out: list[tuple[str, str]] = []
        for change, ok in [(c, True) for c in finished.done] + [(c, False) for c in finished.failed]:
            self.metrics.mig_finished("done" if ok else "failed", seconds_since(change.started))
            log.log(logging.INFO if ok else logging.WARNING, "MIG change %s of GPU %s on %s: %s %s", change.id,
                    change.gpu, change.node, change.phase, change.message)
            for uid in dict.fromkeys(change.pod_uids):
                if uid not in self.mig.waiting or any(u == uid for u, _ in out):
                    continue
                self.live.release(uid)
                failed = any(uid in c.pod_uids for c in finished.failed)
                out.append((uid, "retry" if failed else "hold" if self.mig.pod_changes(uid) else "bind"))
        return out

    def _after_changes(self, ended: list[tuple[str, str]]) -> None:
        for uid, next_step in ended:
            entry, core = self.mig.waiting[uid]
            node = next(c.node for c in self.mig.changes.values() if uid in c.pod_uids)
            if next_step == "hold":  # one of its GPUs is done, another still being re-laid
                self.live.restore(uid, core, node, (), self.mig.instances_for(uid, self.live.specs.get(node)))
                continue
            self.mig.forget_pod(uid)
            names = self.mig.instances_for(uid, self.live.specs.get(node))
            spec = self.live.specs.get(node)
            real = {m.uuid for g in spec.gpus for m in g.mig} if spec else set()
            if next_step == "bind" and all(n in real for n in names):
                allocation = self.live.restore(uid, core, node, (), names)
                self._spawn(self._bind_nominated(entry, allocation))
                continue
            if next_step == "bind":  # done, but the inventory does not show its instances (yet): decide again
                entry.message, entry.reason = "", ""
                self.queue.push(uid, entry, entry.key)
                self._wake.set()
                continue
            # failed: the GPU keeps what it reports; the pod waits for capacity to change, never re-laying
            # the same GPU in a loop (its instance in the way is one the model does not know is in use)
            failed = next(c for c in self.mig.changes.values() if uid in c.pod_uids and c.phase == "Failed")
            message = (f"the MIG re-layout {failed.id} of GPU {failed.gpu} on node {node} failed: {failed.message}; "
                       "waiting for capacity to change")
            entry.reason = "MigSlot"
            self.parked[uid] = entry
            if message != entry.message:
                entry.message = message
                self._spawn(self._explain(uid, entry.pod, message), self._explaining, uid)

    def _spawn(self, coro, registry: dict | None = None, uid: object = "") -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if registry is not None:
            registry[uid] = task
            task.add_done_callback(lambda t: registry.pop(uid, None) if registry.get(uid) is t else None)
        return task

    async def _bind(self, uid: str, entry: Pending, allocation: Allocation,
                    plan: claims.ClaimPlan | None = None) -> None:
        meta = entry.pod.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        try:
            explaining = self._explaining.get(uid)
            if explaining is not None:  # its PodScheduled=False must land before the Binding, not after
                await asyncio.wait([explaining])
            annotations, assignment = {}, None
            if entry.request is not None and plan is None:  # a claim's devices are read from the claim
                assignment = translate.assignment_for(allocation, entry.request, self._gpu_memory(allocation),
                                                      self.default_slo)
                annotations = translate.binding_annotations(assignment, timestamp(micro=True), uid, self.handoff_key)
            if not self.is_leader():  # lost the lease while waiting: whoever leads next decides
                self.live.release(uid)
                self.metrics.bind("not_leader")
                self.queue.push(uid, entry, entry.key)  # kept for when we lead again; a bind seen drops it
                return
            if plan is not None:
                written = await self._write_claim(plan, allocation, entry.pod)
                if written is not None and not written.ok:
                    log.info("claim %s/%s of pod %s/%s not written: %s; deciding again", plan.namespace, plan.claim,
                             ns, name, written)
                    self.live.release(uid)
                    if written.result is not Result.GONE:
                        self.queue.push(uid, entry, entry.key)
                        self._wake.set()
                    return
            out = await bind(self.api, ns, name, uid, allocation.node, annotations)
            self.metrics.bind(out.result.value, entry.pod)
            if out.ok:
                if assignment is not None:
                    self.held.hold(uid, allocation.node, allocation_rows(ns, name, uid, assignment))
                self.guard.record(uid, Handoff.of_annotations(annotations))
                if (seen := self._seen_bound.get(uid)) is not None:  # edited while our Binding was in flight
                    self._keep_handoff(uid, seen)
                self.events.post(ns, name, uid, "Scheduled", f"Successfully assigned {ns}/{name} to {allocation.node}",
                                 type="Normal")
                return
            if plan is None or out.result is Result.GONE:  # an allocated claim keeps its devices for the retry
                self.live.release(uid)
            bound = self._seen_bound.get(uid)
            if bound is not None:  # someone else bound it meanwhile: what runs is theirs
                self._restore(uid, bound, bound["spec"]["nodeName"])
                return
            if out.result is Result.UNAVAILABLE or out.result is Result.FAILED:
                log.warning("binding %s/%s to %s failed: %s; retrying", ns, name, allocation.node, out)
                self.queue.push(uid, entry, entry.key)
                self._wake.set()
            elif out.result is not Result.GONE:
                log.info("binding %s/%s to %s: %s", ns, name, allocation.node, out)
        finally:
            self.binding.discard(uid)
            self._seen_bound.pop(uid, None)
            self._slots.release()

    async def _bind_nominated(self, entry: Pending, allocation: Allocation) -> None:
        uid = allocation.uid
        self.binding.add(uid)
        await self._slots.acquire()
        await self._bind(uid, entry, allocation)

    def _gpu_memory(self, allocation: Allocation) -> dict[str, int]:
        """Memory (MiB) of each GPU the allocation names, from the node's inventory."""
        spec = self.live.specs.get(allocation.node)
        return {g.uuid: g.mem_mib for g in spec.gpus} if spec else {}

    async def drain(self) -> None:
        """Wait for the writes in flight (shutdown). It does not wait for queued pods to be decided: `settle` does.

        A task leaves `_tasks` in its done callback, which runs a loop turn after the task ends, so the set may
        hold only finished tasks; `asyncio.gather` of finished tasks completes without suspending (Python 3.12),
        so a loop of it never let that callback run: drain spun forever and `wait_for` around it never fired."""
        while self._tasks:
            running = [t for t in self._tasks if not t.done()]
            if running:
                await asyncio.wait(running)
            else:
                await asyncio.sleep(0)  # finished tasks' done callbacks run: they leave the set

    async def settle(self) -> None:
        """Until the run loop has decided every queued pod and every write it started has ended (tests over a
        fake API; `run()` must be running as leader, else the queue never empties: bound it with a timeout).
        Each round yields first: a loop of `drain()` alone never suspends while writes are idle and pods queued,
        so the run loop never gets to pop them and the loop spins forever."""
        while True:
            await asyncio.sleep(0)
            if self._tasks:
                await self.drain()
            elif not self.queue:
                return


#: What is read of a waiting pod's spec: placement (`translate.core_request`, `claims.claim_plan`), the queue's
#: order (`sort_key`).
_SPEC_READ = ("nodeSelector", "affinity", "tolerations", "overhead", "priority", "preemptionPolicy", "schedulerName",
              "resourceClaims")
#: Metadata never read while a pod waits, and often most of it.
_META_UNREAD = ("managedFields",)
_ANNOTATIONS_UNREAD = ("kubectl.kubernetes.io/last-applied-configuration",)  # the whole object again, as applied


def _pending_fields(pod: dict) -> dict:
    """A waiting pod as the queue keeps it: what placement, the queue, its PodScheduled condition and its Binding
    read (metadata, the spec's scheduling fields, each container's name and resources, the status's conditions
    and the claims the controller-manager made for it),
    not its volumes, images, commands, env or managedFields. A backlog of thousands of pods is held until bound:
    a bench pod as the apiserver returns it takes ~10 KB of Python objects in full, ~4 KB so (tracemalloc)."""
    meta = {k: v for k, v in (pod.get("metadata") or {}).items() if k not in _META_UNREAD}
    if any(a in (meta.get("annotations") or {}) for a in _ANNOTATIONS_UNREAD):
        meta["annotations"] = {k: v for k, v in meta["annotations"].items() if k not in _ANNOTATIONS_UNREAD}
    spec = pod.get("spec") or {}
    kept = {k: spec[k] for k in _SPEC_READ if k in spec}
    for key in ("containers", "initContainers"):
        if spec.get(key):
            kept[key] = [{k: c[k] for k in ("name", "resources") if k in c} for c in spec[key]]
    status = pod.get("status") or {}
    return {"metadata": meta, "spec": kept,
            "status": {k: status[k] for k in ("conditions", "resourceClaimStatuses", "extendedResourceClaimStatus")
                       if status.get(k)}}


def _placement_fields(node: dict) -> dict:
    """The parts of a Node that placement reads (its managedFields and conditions are most of its size)."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    return {"metadata": {"name": meta.get("name", ""), "labels": meta.get("labels") or {},
                         "annotations": meta.get("annotations") or {}},
            "spec": node.get("spec") or {},
            "status": {k: status[k] for k in ("allocatable", "capacity") if k in status}}
