"""Helpers for tests/dra: node configs, a stub kubelet that drives the driver's two sockets the way
the kubelet's plugin watcher and DRA manager do: GetInfo on the registration socket, NotifyRegistrationStatus,
then NodePrepareResources / NodeUnprepareResources on the endpoint GetInfo named."""
from __future__ import annotations

import grpc
import yaml

from deviceplugin.dra.api import dra_pb2, dra_pb2_grpc, pluginregistration_pb2, pluginregistration_pb2_grpc
from simgpu.nodeconfig import parse_node_config

NODE = "dra-node"
SECRET = b"dra-test-secret-0123456789abcdef"

# two fractional A100s (whole, shared and every MIG placement), an exclusive T4 (whole only), and an H100
# the config partitions (its two instances only)
CONFIG = """
version: v1
migStrategy: mixed
gpus:
  - model: A100-80GB
    count: 2
    sharing: fractional
  - model: T4
  - model: H100
    mig:
      layout: [4g.40gb, 3g.40gb]
fractional:
  resources:
    gpu: fgpu.io/vgpu
"""


def node_config(text: str = CONFIG):
    return parse_node_config(yaml.safe_load(text))


class StubKubelet:
    """What the kubelet does with a DRA driver's sockets, as a client."""

    def __init__(self, registration_socket: str) -> None:
        self.registration_socket = registration_socket
        self.channels: list[grpc.Channel] = []

    def _channel(self, path: str) -> grpc.Channel:
        channel = grpc.insecure_channel(f"unix://{path}")
        self.channels.append(channel)
        return channel

    def register(self) -> pluginregistration_pb2.PluginInfo:
        reg = pluginregistration_pb2_grpc.RegistrationStub(self._channel(self.registration_socket))
        info = reg.GetInfo(pluginregistration_pb2.InfoRequest(), timeout=5)
        reg.NotifyRegistrationStatus(pluginregistration_pb2.RegistrationStatus(plugin_registered=True), timeout=5)
        self.dra = dra_pb2_grpc.DRAPluginStub(self._channel(info.endpoint))
        return info

    def prepare(self, *claims: tuple[str, str, str]):
        req = dra_pb2.NodePrepareResourcesRequest(
            claims=[dra_pb2.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims])
        return self.dra.NodePrepareResources(req, timeout=5)

    def unprepare(self, *claims: tuple[str, str, str]):
        req = dra_pb2.NodeUnprepareResourcesRequest(
            claims=[dra_pb2.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims])
        return self.dra.NodeUnprepareResources(req, timeout=5)

    def close(self) -> None:
        for channel in self.channels:
            channel.close()


def allocated_claim(name: str, uid: str, results: list[dict], node: str = NODE, pod: str = "p1",
                    namespace: str = "default") -> dict:
    """A ResourceClaim as the apiserver returns it once a scheduler allocated and reserved it."""
    for r in results:
        r.setdefault("driver", "gpu.fgpu.io")
        r.setdefault("pool", node)
        r.setdefault("request", "gpu")
    # the request asks what the allocation consumed (as an allocator writes it: fgpu-dra refuses more)
    asked = next((dict(r["consumedCapacity"]) for r in results if r.get("consumedCapacity")), None)
    request = {"deviceClassName": "gpu-share.fgpu.io", **({"capacity": {"requests": asked}} if asked else {})}
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
        "status": {"allocation": {"devices": {"results": results}},
                   "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}]},
    }
