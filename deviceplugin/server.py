"""The gRPC shell: one DevicePlugin server per advertised resource on a unix socket in the device-plugin
directory, registration with the kubelet, and re-registration when the kubelet restarts (it recreates
kubelet.sock and wipes plugin sockets, so servers are rebuilt and registered again).

The decisions (which devices, which env) live in resources.py / allocate.py / handoff.py; this file only
moves them over the wire.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from typing import Protocol

import grpc

from deviceplugin.allocate import (
    AllocateError,
    AllocContext,
    allocate_assignment,
    allocate_slots,
    preferred_allocation,
)
from deviceplugin.api import api_pb2, api_pb2_grpc
from deviceplugin.handoff import Match, PodView, assigned_devices, find_assignment
from deviceplugin.labels import Health
from deviceplugin.metrics import PluginMetrics
from deviceplugin.resources import Resource, Slot
from fgpu_contracts.keys import ASSIGNMENT
from fgpu_contracts.signature import problem
from simgpu.errors import SimgpuError

log = logging.getLogger("fgpu.deviceplugin")

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"


class HealthBoard:
    """Health per device UUID (GPU or MIG); ListAndWatch streams wait on it and push every change."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._health: dict[str, Health] = {}
        self.version = 0

    def update(self, health: Mapping[str, Health]) -> None:
        with self._cond:
            if dict(health) != self._health:
                self._health = dict(health)
                self.version += 1
                self._cond.notify_all()

    def snapshot(self) -> tuple[int, dict[str, Health]]:
        with self._cond:
            return self.version, dict(self._health)

    def wait_change(self, version: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.version != version, timeout)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def bump(self) -> None:
        """Something besides health changed (a MIG re-layout): every watcher sends its list again."""
        with self._cond:
            self.version += 1
            self._cond.notify_all()


class PodSource(Protocol):
    """Where fractional Allocate finds the scheduler's assignment (the Kubernetes API, or a test stub)."""

    def pending_pods(self, node: str, fresh: bool = False) -> list[PodView]: ...

    def confirm(self, pod: PodView) -> PodView | None:
        """The pod as the API holds it now (a quorum read), None when it is no longer pending on its node; the
        source's cache takes the answer in (a hand-off written back a moment ago, a pod deleted)."""

    def mark_allocated(self, pod: PodView, container: str) -> None: ...


def slot_health(slot: Slot, health: Mapping[str, Health]) -> str:
    for uuid in (slot.gpu_uuid, slot.device_uuid):
        h = health.get(uuid)
        if h is not None and not h.healthy:
            return UNHEALTHY
    return HEALTHY


@dataclass
class _Shared:
    ctx: AllocContext
    board: HealthBoard
    devices: dict[str, Slot]  # every GPU / MIG UUID on the node
    pods: PodSource | None
    stop: threading.Event
    taken: set[tuple[str, str]] = field(default_factory=set)
    refused: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)  # (uid, container) -> hand-off
    lock: threading.Lock = field(default_factory=threading.Lock)
    metrics: PluginMetrics = field(default_factory=PluginMetrics)


class DevicePluginService(api_pb2_grpc.DevicePluginServicer):
    def __init__(self, resource: Resource, shared: _Shared) -> None:
        self.resource = resource
        self.shared = shared
        self.closed = threading.Event()

    @property
    def resource(self) -> Resource:
        return self._resource

    @resource.setter
    def resource(self, resource: Resource) -> None:
        """Set again when the node re-advertises (a dynamic-MIG change): what is derived from it follows."""
        self._resource = resource
        self._gpus = frozenset(slot.device_uuid for slot in resource.slots)  # the GPUs it shares out
        # device UUID -> its one device ID, for resources whose IDs are single devices (not replicas of one)
        slot_of = {slot.device_uuid: slot.id for slot in resource.slots}
        self._slot_of = slot_of if len(slot_of) == len(resource.slots) and not resource.fractional else None

    def options(self) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def GetDevicePluginOptions(self, request, context):
        return self.options()

    def _devices(self, health: Mapping[str, Health]) -> api_pb2.ListAndWatchResponse:
        return api_pb2.ListAndWatchResponse(
            devices=[api_pb2.Device(ID=s.id, health=slot_health(s, health)) for s in self.resource.slots])

    def ListAndWatch(self, request, context) -> Iterator[api_pb2.ListAndWatchResponse]:
        board = self.shared.board
        version, health = board.snapshot()
        last = self._devices(health)
        yield last
        while context.is_active() and not self.closed.is_set() and not self.shared.stop.is_set():
            if not board.wait_change(version, timeout=0.5):
                continue
            version, health = board.snapshot()
            current = self._devices(health)
            if current != last:
                last = current
                yield current

    def GetPreferredAllocation(self, request, context):
        out = api_pb2.PreferredAllocationResponse()
        for req in request.container_requests:
            ids = None if req.must_include_deviceIDs else \
                self._assigned(list(req.available_deviceIDs), req.allocation_size)
            if ids is None:
                ids = preferred_allocation(self.resource, list(req.available_deviceIDs),
                                           list(req.must_include_deviceIDs), req.allocation_size)
            out.container_responses.add(deviceIDs=ids)
        return out

    def _assigned(self, available: list[str], size: int) -> list[str] | None:
        """The scheduler's own pick for a counted single-device resource (handoff.assigned_devices); None for
        fractional and replicated resources, without the API, or when the cache cannot be read."""
        shared = self.shared
        if self.resource.fractional or shared.pods is None or self._slot_of is None:
            return None
        try:
            pods = shared.pods.pending_pods(shared.ctx.node_name, fresh=False)
        except Exception as err:  # the packing order still answers; Allocate reports API trouble itself
            log.warning("GetPreferredAllocation %s: pending pods unreadable (%s); packing order", self.resource.name,
                        err)
            return None
        return assigned_devices(pods, shared.ctx.node_name, self._slot_of, available, size)

    def Allocate(self, request, context):
        start = time.perf_counter()
        out = api_pb2.AllocateResponse()
        result = "error"
        try:
            for req in request.container_requests:
                alloc = self._allocate_one(list(req.devices_ids))
                resp = out.container_responses.add()
                resp.envs.update(alloc.envs)
                for container_path, host_path, read_only in alloc.mounts:
                    resp.mounts.add(container_path=container_path, host_path=host_path, read_only=read_only)
            result = "ok"
        except AllocateError as err:
            log.warning("Allocate %s refused: %s", self.resource.name, err)
            invalid = err.field == "devices_ids"
            result = "invalid" if invalid else "refused"
            code = grpc.StatusCode.INVALID_ARGUMENT if invalid else \
                grpc.StatusCode.UNAVAILABLE if err.transient else grpc.StatusCode.FAILED_PRECONDITION
            self._count(result, start)
            context.abort(code, str(err))
        finally:
            if result in ("ok", "error"):
                self._count(result, start)
        log.debug("Allocate %s served in %.3f ms", self.resource.name, (time.perf_counter() - start) * 1000)
        return out

    def _count(self, result: str, start: float) -> None:
        self.shared.metrics.allocate(self.resource.name, result, time.perf_counter() - start)

    def _allocate_one(self, ids: list[str]):
        shared = self.shared
        if not self.resource.fractional:
            return allocate_slots(self.resource, ids, shared.ctx)
        if shared.pods is None:
            raise AllocateError(f"{self.resource.name} is fractional and needs the Kubernetes API to read the "
                                f"scheduler's {ASSIGNMENT}; this plugin runs standalone (no kubeconfig)",
                                field=ASSIGNMENT)
        with shared.lock:
            match = self._confirmed_match(ids)
            if match is not None and match.refused:
                shared.refused[(match.pod.uid, match.container.name)] = match.pod.handoff()
            alloc = allocate_assignment(self.resource, ids, match, shared.ctx, shared.devices)
            shared.taken.add((match.pod.uid, match.container.name))
        shared.pods.mark_allocated(match.pod, match.container.name)
        log.info("Allocate %s: %s/%s container %s -> %s", self.resource.name, match.pod.namespace,
                 match.pod.name, match.container.name, alloc.envs.get("NVIDIA_VISIBLE_DEVICES"))
        return alloc

    def _confirmed_match(self, ids: list[str], tries: int = 8) -> Match | None:
        """The match from the watch cache; a miss is tried once more on a fresh list, and a refused hand-off is
        read again from the API (the cache may not yet show the guard writing the scheduler's value back), then
        matched again on the corrected cache. A match that is not refused is not re-read: a GET costs ~4 ms on
        Allocate's path (its p99 target is 5 ms), and the kubelet admits a pod within milliseconds of its
        arrival, so a pod deleted before its turn came was deleted well before that and the watch shows it."""
        match, listed = self._match(ids, fresh=False), False
        for _ in range(tries):
            if match is None:
                if listed:
                    return None
                match, listed = self._match(ids, fresh=True), True
                continue
            if not match.refused:
                return match
            current = self._read(functools.partial(self.shared.pods.confirm, match.pod))
            if current is not None and current.annotations == match.pod.annotations:
                return match
            match = self._match(ids, fresh=False)
        raise AllocateError(f"the pods pending on node {self.shared.ctx.node_name} changed under {tries} reads in "
                            f"a row; the kubelet retries", field=ASSIGNMENT, transient=True)

    def _read(self, call):
        try:
            return call()
        except Exception as err:  # apiserver down, RBAC, ...: the kubelet shows this on the pod
            raise AllocateError(f"cannot read pending pods of node {self.shared.ctx.node_name} from the "
                                f"Kubernetes API: {err}", field=ASSIGNMENT, transient=True) from None

    def _match(self, ids: list[str], fresh: bool) -> Match | None:
        shared = self.shared
        pods = self._read(lambda: shared.pods.pending_pods(shared.ctx.node_name, fresh=fresh))
        if len(shared.taken) + len(shared.refused) > 2 * len(pods) + 256:  # forget pods no longer pending
            live = {p.uid for p in pods}
            shared.taken.intersection_update({t for t in shared.taken if t[0] in live})
            shared.refused = {k: v for k, v in shared.refused.items() if k[0] in live}
        return find_assignment(pods, shared.ctx.node_name, len(ids), shared.taken, self._verify, shared.refused,
                               self._gpus)

    def _verify(self, pod: PodView, node: str) -> str | None:
        key = self.shared.ctx.handoff_key
        return None if key is None else problem(key, pod.uid, node, pod.annotations)

    def PreStartContainer(self, request, context):
        for device_id in request.devices_ids:
            if self.resource.slot(device_id) is None:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"unknown device ID {device_id!r} for {self.resource.name}")
        return api_pb2.PreStartContainerResponse()


class ResourceServer:
    """One resource's gRPC server on DIR/<socket_name>.<generation>.sock.

    Each restart binds a new file name: gRPC unlinks a unix socket's path when its server shuts down, so
    reusing one name would let the old server's teardown delete the new server's socket."""

    def __init__(self, resource: Resource, shared: _Shared, plugin_dir: str) -> None:
        self.resource = resource
        self.shared = shared
        self.plugin_dir = plugin_dir
        self.generation = 0
        self.endpoint = ""
        self.socket_path = ""
        self.service: DevicePluginService | None = None
        self.server: grpc.Server | None = None
        self.inode: int | None = None

    def _stem(self) -> str:
        return self.resource.socket_name.removesuffix(".sock")

    def remove_stale(self) -> None:
        """Sockets left by an earlier run of this plugin (e.g. after a crash)."""
        stem = self._stem() + "."
        for name in os.listdir(self.plugin_dir):
            if name.startswith(stem) and name.endswith(".sock"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.plugin_dir, name))

    def start(self) -> None:
        self.generation += 1
        self.endpoint = f"{self._stem()}.{os.getpid()}-{self.generation}.sock"
        self.socket_path = os.path.join(self.plugin_dir, self.endpoint)
        self.service = DevicePluginService(self.resource, self.shared)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="dp"))
        api_pb2_grpc.add_DevicePluginServicer_to_server(self.service, self.server)
        try:
            bound = self.server.add_insecure_port(f"unix://{self.socket_path}")
        except RuntimeError:
            bound = 0
        if not bound:
            raise SimgpuError(f"cannot listen on {self.socket_path}", field="--device-plugin-path")
        self.server.start()
        self.inode = _inode(self.socket_path)

    def stop(self) -> None:
        if self.service is not None:
            self.service.closed.set()
            self.shared.board.wake()
        if self.server is not None:
            self.server.stop(grace=0.2).wait()
        with contextlib.suppress(FileNotFoundError):
            if self.socket_path:
                os.unlink(self.socket_path)
        self.server = self.service = None

    def socket_intact(self) -> bool:
        return self.inode is not None and _inode(self.socket_path) == self.inode

    def register(self, kubelet_socket: str, timeout: float = 5.0) -> None:
        with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
            stub = api_pb2_grpc.RegistrationStub(channel)
            stub.Register(api_pb2.RegisterRequest(
                version=API_VERSION, endpoint=self.endpoint, resource_name=self.resource.name,
                options=self.service.options()), timeout=timeout)


def _inode(path: str) -> int | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino


class PluginManager:
    """Starts every resource server, registers them, and re-registers when kubelet.sock is recreated or a
    plugin socket disappears (polled every `poll_s`: inotify would add a dependency for a 0.1 s gain)."""

    def __init__(self, resources: list[Resource], shared: _Shared, plugin_dir: str, poll_s: float = 0.1) -> None:
        self.plugin_dir = plugin_dir
        self.kubelet_socket = os.path.join(plugin_dir, KUBELET_SOCKET)
        self.servers = [ResourceServer(r, shared, plugin_dir) for r in resources]
        self.shared = shared
        self.poll_s = poll_s
        self.registrations = 0  # successful registration rounds (for tests, the benchmark and metrics)
        self._thread: threading.Thread | None = None
        shared.metrics.attach(self.device_counts, lambda: self.registrations, self._unwritten)
        shared.metrics.serving(r.name for r in resources)

    def device_counts(self) -> dict[str, dict[str, int]]:
        """resource -> Healthy / Unhealthy -> device IDs, as ListAndWatch reports them now."""
        _, health = self.shared.board.snapshot()
        out: dict[str, dict[str, int]] = {}
        for server in self.servers:
            counts = out.setdefault(server.resource.name, {HEALTHY: 0, UNHEALTHY: 0})
            for slot in server.resource.slots:
                counts[slot_health(slot, health)] += 1
        return out

    def update(self, resources: list[Resource]) -> list[str]:
        """The node's devices changed (a dynamic-MIG re-layout): each server lists its resource's new devices
        (on the next board change), a resource that is new gets a server, registered at once, and one that is
        gone stays registered with no device (the kubelet then shows 0). Returns the new resources' names."""
        wanted = {r.name: r for r in resources}
        new = []
        for server in self.servers:
            r = wanted.pop(server.resource.name, None) or Resource(server.resource.name, ())
            server.resource = r
            if server.service is not None:
                server.service.resource = r
        for r in wanted.values():
            server = ResourceServer(r, self.shared, self.plugin_dir)
            server.remove_stale()
            server.start()
            self.servers.append(server)
            new.append(server)
        for server in new:
            try:
                server.register(self.kubelet_socket)
            except grpc.RpcError as err:  # the kubelet-watch thread registers every server again when it returns
                log.warning("registration of %s failed: %s", server.resource.name, _rpc_text(err))
        if new:
            self.shared.metrics.serving(s.resource.name for s in self.servers)
        return [s.resource.name for s in new]

    def _unwritten(self) -> int:
        recorder = getattr(self.shared.pods, "recorder", None)
        return recorder.pending() if recorder is not None else 0

    def start(self) -> None:
        os.makedirs(self.plugin_dir, exist_ok=True)
        for server in self.servers:
            server.remove_stale()
            server.start()
        self._thread = threading.Thread(target=self._watch, name="kubelet-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shared.stop.set()
        self.shared.board.wake()
        if self._thread is not None:
            self._thread.join(timeout=2)
        for server in self.servers:
            server.stop()

    def _register_all(self) -> bool:
        try:
            for server in self.servers:
                server.register(self.kubelet_socket)
        except grpc.RpcError as err:
            log.warning("registration with %s failed: %s", self.kubelet_socket, _rpc_text(err))
            return False
        self.registrations += 1
        log.info("registered %s with the kubelet", ", ".join(s.resource.name for s in self.servers))
        return True

    def _watch(self) -> None:
        registered_inode: int | None = None
        restarted_for: int | None = None
        retry_at = 0.0
        while not self.shared.stop.is_set():
            inode = _inode(self.kubelet_socket)
            broken = [s for s in self.servers if not s.socket_intact()]
            if inode is not None and (inode != registered_inode or broken) and time.monotonic() >= retry_at:
                stale = registered_inode is not None and restarted_for != inode
                if broken or stale:
                    log.info("kubelet restarted or plugin sockets removed: restarting servers and re-registering")
                    for server in self.servers:
                        server.stop()
                        server.start()
                    restarted_for = inode
                if self._register_all():
                    registered_inode = restarted_for = inode
                else:
                    retry_at = time.monotonic() + 0.25
            self.shared.stop.wait(self.poll_s)


def _rpc_text(err: grpc.RpcError) -> str:
    details = getattr(err, "details", None)
    return details() if callable(details) else str(err)


def make_shared(ctx: AllocContext, devices: dict[str, Slot], pods: PodSource | None,
                board: HealthBoard | None = None) -> _Shared:
    return _Shared(ctx=ctx, board=board or HealthBoard(), devices=devices, pods=pods, stop=threading.Event())
