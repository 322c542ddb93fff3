"""The kubelet plugin: the registration socket (pluginregistration v1: GetInfo, NotifyRegistrationStatus) in
the kubelet's plugins_registry directory, and the DRA v1 service (NodePrepareResources /
NodeUnprepareResources) on its own socket, the endpoint GetInfo names.

Prepare reads the claim from the API (the kubelet sends only namespace, name and UID), checks it against the
claims already prepared here (prepare.check_commitment), writes the claim's CDI spec and the checkpoint, and
answers with CDI device ids. A claim already in the checkpoint is answered from it, so the kubelet retrying,
or calling again after its own or the driver's restart, gets the same devices and ids. Unprepare removes both;
an unknown claim is already unprepared. The decisions are in prepare.py; this file moves them over the wire.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass

import grpc

from deviceplugin.allocate import AllocContext
from deviceplugin.dra.api import dra_pb2, dra_pb2_grpc, pluginregistration_pb2, pluginregistration_pb2_grpc
from deviceplugin.dra.devices import NodeDevices
from deviceplugin.dra.prepare import (
    ClaimRef,
    PrepareError,
    allocated_devices,
    check_commitment,
    container_edits,
)
from deviceplugin.dra.state import (
    Checkpoint,
    PreparedClaim,
    cdi_device_name,
    cdi_spec,
    cdi_spec_path,
    remove_cdi_spec,
    write_cdi_spec,
)
from fgpu_contracts.dra import CDI_KIND, DRIVER
from simgpu.errors import SimgpuError

log = logging.getLogger("fgpu.dra")

PLUGIN_TYPE = "DRAPlugin"  # k8s.io/kubelet/pkg/apis/pluginregistration/v1 DRAPlugin
DRA_SERVICE = "v1.DRAPlugin"  # k8s.io/kubelet/pkg/apis/dra/v1 DRAPluginService
DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"

#: (namespace, name) -> the ResourceClaim as the API holds it now (a dict); raises when it cannot be read
ClaimSource = Callable[[str, str], Mapping]


@dataclass
class DriverState:
    node: str
    devices: NodeDevices
    ctx: AllocContext
    checkpoint: Checkpoint
    cdi_dir: str
    claims: ClaimSource

    def __post_init__(self) -> None:
        self.lock = threading.Lock()

    def forget_gone_claims(self) -> list[str]:
        """Drop the prepared claims that no longer exist in the API (deleted, or deleted and made again under
        another UID), with their CDI specs; returns their names. Such an entry is what a node torn down without
        NodeUnprepareResources leaves (the kubelet's own state wiped, or its pods deleted with the driver):
        counted on, it would hold its share of the GPU forever. Safe: a claim in use cannot be deleted (its
        delete-protection finalizer stays until no pod reserves it), so a missing claim has no container left.
        Claims the API cannot be asked about now are kept."""
        gone = []
        for uid, prepared in list(self.checkpoint.claims.items()):
            ref = prepared.ref
            try:
                current = self.claims(ref.namespace, ref.name)
            except LookupError:
                current = None
            except Exception as err:  # the API unreachable: keep it, the kubelet will unprepare it
                log.warning("cannot check prepared claim %s/%s: %s", ref.namespace, ref.name, err)
                continue
            if current is not None and (current.get("metadata") or {}).get("uid") == uid:
                continue
            with self.lock:
                remove_cdi_spec(self.cdi_dir, uid)
                self.checkpoint.claims.pop(uid, None)
                self.checkpoint.save()
            gone.append(f"{ref.namespace}/{ref.name}")
            log.info("forgot prepared claim %s/%s (%s): it no longer exists", ref.namespace, ref.name, uid)
        return gone


class DRAService(dra_pb2_grpc.DRAPluginServicer):
    def __init__(self, state: DriverState) -> None:
        self.state = state

    def NodePrepareResources(self, request, context):
        out = dra_pb2.NodePrepareResourcesResponse()
        for claim in request.claims:
            ref = ClaimRef(claim.namespace, claim.name, claim.uid)
            try:
                prepared = self._prepare(ref)
            except (PrepareError, SimgpuError) as err:
                log.warning("prepare %s/%s (%s) refused: %s", ref.namespace, ref.name, ref.uid, err)
                out.claims[ref.uid].error = str(err)
                continue
            except Exception as err:  # the API unreachable, a disk full: the kubelet retries
                log.warning("prepare %s/%s (%s) failed: %s", ref.namespace, ref.name, ref.uid, err)
                out.claims[ref.uid].error = f"cannot prepare claim {ref.namespace}/{ref.name}: {err}"
                continue
            resp = out.claims[ref.uid]
            first: set[str] = set()
            for a in prepared.devices:
                device = resp.devices.add(request_names=[a.request], pool_name=self.state.node, device_name=a.device)
                if a.request not in first:  # one CDI device per request carries all of its devices' edits
                    device.cdi_device_ids.append(prepared.cdi_ids[a.request])
                    first.add(a.request)
                if a.share_id:
                    device.share_id = a.share_id
        return out

    def _prepare(self, ref: ClaimRef) -> PreparedClaim:
        st = self.state
        t0 = time.monotonic()
        with st.lock:
            known = st.checkpoint.claims.get(ref.uid)
            if known is not None and os.path.exists(cdi_spec_path(st.cdi_dir, ref.uid)):
                return known
        claim = st.claims(ref.namespace, ref.name)  # outside the lock: an API read must not stall the rest
        with st.lock:
            known = st.checkpoint.claims.get(ref.uid)
            # prepared before but its CDI spec lost: hand out the same devices again
            allocated = known.devices if known is not None else allocated_devices(claim, ref, st.node, st.devices)
            problem = check_commitment(st.devices, st.checkpoint.allocated(excluding=ref.uid), allocated)
            if problem:
                raise PrepareError(f"claim {ref.namespace}/{ref.name} over-commits this node: {problem}",
                                   field="status.allocation")
            edits = container_edits(st.devices, allocated, claim, st.ctx)
            write_cdi_spec(st.cdi_dir, ref.uid, cdi_spec(ref.uid, edits))
            prepared = PreparedClaim(ref, allocated,
                                     {e.request: f"{CDI_KIND}={cdi_device_name(ref.uid, e.request)}" for e in edits})
            st.checkpoint.claims[ref.uid] = prepared
            st.checkpoint.save()
        # the time it took (the API read included) is the driver's share of a pod's start: docs/dra.md
        log.info("prepared %s/%s in %.1f ms: %s", ref.namespace, ref.name, 1000 * (time.monotonic() - t0),
                 ", ".join(a.device for a in allocated))
        return prepared

    def NodeUnprepareResources(self, request, context):
        out = dra_pb2.NodeUnprepareResourcesResponse()
        st = self.state
        for claim in request.claims:
            resp = out.claims[claim.uid]
            try:
                with st.lock:
                    remove_cdi_spec(st.cdi_dir, claim.uid)
                    if st.checkpoint.claims.pop(claim.uid, None) is not None:
                        st.checkpoint.save()
                        log.info("unprepared %s/%s", claim.namespace, claim.name)
            except OSError as err:
                resp.error = f"cannot unprepare claim {claim.namespace}/{claim.name}: {err}"
        return out


class RegistrationService(pluginregistration_pb2_grpc.RegistrationServicer):
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.registered = threading.Event()
        self.last_error = ""

    def GetInfo(self, request, context):
        return pluginregistration_pb2.PluginInfo(type=PLUGIN_TYPE, name=DRIVER, endpoint=self.endpoint,
                                                 supported_versions=[DRA_SERVICE])

    def NotifyRegistrationStatus(self, request, context):
        if request.plugin_registered:
            self.last_error = ""
            self.registered.set()
            log.info("the kubelet registered driver %s", DRIVER)
        else:
            self.last_error = request.error
            self.registered.clear()
            log.warning("the kubelet refused driver %s: %s", DRIVER, request.error)
        return pluginregistration_pb2.RegistrationStatusResponse()


class _SocketServer:
    """One gRPC server on a fixed unix socket path, restarted when the file disappears (a kubelet wiping its
    plugin directories): stopped and waited for first, since gRPC unlinks the path at shutdown."""

    def __init__(self, path: str, add: Callable[[grpc.Server], None], flag: str) -> None:
        self.path, self.add, self.flag = path, add, flag
        self.server: grpc.Server | None = None
        self.inode: int | None = None

    def start(self) -> None:
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
        except OSError as err:
            raise SimgpuError(f"{os.path.dirname(self.path)}: {err.strerror or err}", field=self.flag) from None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # left by an earlier run
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="dra"))
        self.add(server)
        try:
            bound = server.add_insecure_port(f"unix://{self.path}")
        except RuntimeError:
            bound = 0
        if not bound:
            raise SimgpuError(f"cannot listen on {self.path}", field=self.flag)
        server.start()
        self.server = server
        self.inode = os.stat(self.path).st_ino

    def intact(self) -> bool:
        try:
            return os.stat(self.path).st_ino == self.inode
        except FileNotFoundError:
            return False

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=0.2).wait()
            self.server = None


class KubeletPlugin:
    """The two servers; start() returns once both listen; a thread puts back a socket that disappears."""

    def __init__(self, state: DriverState, registry_dir: str = DEFAULT_REGISTRY_DIR,
                 plugins_dir: str = DEFAULT_PLUGINS_DIR, poll_s: float = 0.5) -> None:
        self.endpoint = os.path.join(os.path.abspath(plugins_dir), DRIVER, "dra.sock")
        self.registration_socket = os.path.join(os.path.abspath(registry_dir), f"{DRIVER}-reg.sock")
        self.dra = DRAService(state)
        self.registration = RegistrationService(self.endpoint)
        self.servers = [
            _SocketServer(self.endpoint, lambda s: dra_pb2_grpc.add_DRAPluginServicer_to_server(self.dra, s),
                          "--plugins-dir"),
            _SocketServer(self.registration_socket, lambda s: pluginregistration_pb2_grpc
                          .add_RegistrationServicer_to_server(self.registration, s), "--registry-dir"),
        ]
        self.poll_s = poll_s
        self.stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        for server in self.servers:  # the DRA service first: the kubelet dials it as soon as it registers us
            server.start()
        self._thread = threading.Thread(target=self._watch, name="dra-sockets", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self.stopping.wait(self.poll_s):
            for server in self.servers:
                if not server.intact():
                    log.info("socket %s disappeared: serving it again", server.path)
                    server.stop()
                    try:
                        server.start()
                    except SimgpuError as err:
                        log.warning("%s", err)

    def stop(self) -> None:
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        for server in reversed(self.servers):
            server.stop()
