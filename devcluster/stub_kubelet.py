"""A stub kubelet for device plugin tests: the Registration service on a kubelet.sock that checks what a
plugin registers (API version, extended-resource name, endpoint), dials the plugin back and follows its
ListAndWatch like the kubelet does; tests drive Allocate & co. through `plugin(resource)`."""
from __future__ import annotations

import os
import re
import threading
from concurrent import futures

import grpc

from deviceplugin.api import api_pb2, api_pb2_grpc

# kubelet's rule for extended resources: a domain-prefixed name outside kubernetes.io (v1helper).
_RESOURCE_RE = re.compile(r"^(?!kubernetes\.io/)([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z]{2,}/[A-Za-z0-9][-A-Za-z0-9_.]*$")


class StubKubelet(api_pb2_grpc.RegistrationServicer):
    def __init__(self, plugin_dir: str) -> None:
        self.dir = plugin_dir
        self.socket = os.path.join(plugin_dir, "kubelet.sock")
        self.registrations: list[api_pb2.RegisterRequest] = []
        self.devices: dict[str, list[api_pb2.Device]] = {}  # latest ListAndWatch per resource
        self.updates: dict[str, int] = {}
        self._cond = threading.Condition()
        self._server: grpc.Server | None = None
        self._streams: list[grpc.Channel] = []

    # --- Registration service ---
    def Register(self, request, context):
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version!r}")
        if not _RESOURCE_RE.match(request.resource_name):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid resource name {request.resource_name!r}")
        endpoint = os.path.join(self.dir, request.endpoint)
        if not os.path.exists(endpoint):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"endpoint {endpoint} does not exist")
        with self._cond:
            self.registrations.append(request)
            self._cond.notify_all()
        # the kubelet dials back asynchronously after Register returns
        threading.Thread(target=self._follow, args=(request.resource_name, endpoint), daemon=True).start()
        return api_pb2.Empty()

    def _follow(self, resource: str, endpoint: str) -> None:
        channel = grpc.insecure_channel(f"unix://{endpoint}")
        self._streams.append(channel)
        stub = api_pb2_grpc.DevicePluginStub(channel)
        try:
            stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
            for resp in stub.ListAndWatch(api_pb2.Empty()):
                with self._cond:
                    self.devices[resource] = list(resp.devices)
                    self.updates[resource] = self.updates.get(resource, 0) + 1
                    self._cond.notify_all()
        except (grpc.RpcError, ValueError):
            pass  # plugin or stub stopped (ValueError: the channel was closed under us)

    # --- lifecycle ---
    def start(self) -> None:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        api_pb2_grpc.add_RegistrationServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix://{self.socket}")
        self._server.start()

    def stop(self) -> None:
        for channel in self._streams:
            channel.close()
        self._streams.clear()
        if self._server is not None:
            self._server.stop(grace=0).wait()
            self._server = None
        if os.path.exists(self.socket):
            os.unlink(self.socket)

    def restart(self) -> None:
        """What a kubelet restart looks like to a plugin: sockets wiped, kubelet.sock recreated."""
        self.stop()
        for name in os.listdir(self.dir):
            if name.endswith(".sock"):
                os.unlink(os.path.join(self.dir, name))
        self.start()

    # --- helpers for tests ---
    def wait_registered(self, resource: str, count: int = 1, timeout: float = 10.0) -> api_pb2.RegisterRequest:
        with self._cond:
            ok = self._cond.wait_for(
                lambda: sum(r.resource_name == resource for r in self.registrations) >= count, timeout)
            assert ok, f"{resource} not registered {count}x within {timeout}s; got " \
                       f"{[r.resource_name for r in self.registrations]}"
            return [r for r in self.registrations if r.resource_name == resource][-1]

    def wait_devices(self, resource: str, predicate=lambda devs: True, timeout: float = 10.0) -> list:
        with self._cond:
            ok = self._cond.wait_for(lambda: resource in self.devices and predicate(self.devices[resource]),
                                     timeout)
            assert ok, f"ListAndWatch for {resource}: condition not met in {timeout}s ({self.devices.get(resource)})"
            return list(self.devices[resource])

    def plugin(self, resource: str) -> api_pb2_grpc.DevicePluginStub:
        req = self.wait_registered(resource)
        channel = grpc.insecure_channel(f"unix://{os.path.join(self.dir, req.endpoint)}")
        self._streams.append(channel)
        return api_pb2_grpc.DevicePluginStub(channel)
