"""The node configuration: one versioned YAML file that says which emulated GPUs a node has and how they are
shared. Read by the device plugin (what to advertise) and the node daemon (what to emulate).

In the spirit of NVIDIA's k8s-device-plugin config (peers.md section 5): `version: v1`, and NVIDIA's
`sharing.timeSlicing|mps.{renameByDefault, failRequestsGreaterThanOne, resources[{name, rename, replicas,
devices}]}` block is accepted as is (`devices`: all, a count, or a list of indices / MIG indices / UUIDs; what is
left out stays whole, as in NVIDIA's device map). fgpu adds per-GPU sharing modes, MIG layouts, fractional sharing, memory-quota mode and
time dilation. See docs/deviceplugin.md for the reference and deploy/examples/node-config/ for examples.

Pure: no Kubernetes, no gRPC. Every error is a SimgpuError naming the field (e.g. ``gpus[0].model``).
"""
from .load import load_node_config, parse_node_config, resolve_node_name
from .resolve import NodeConfig
from .schema import (
    DEFAULT_SLO_SLOWDOWN,
    DEFAULT_TOKEN_SECRET_FILE,
    DEVICES_ALLOWED,
    SHARING_MODES,
    DeviceRef,
    Fractional,
    FractionalResources,
    GpuDevice,
    GpuGroup,
    MigConfig,
    MigInstance,
    Qos,
    ReplicatedResource,
    ReplicatedSharing,
    Sharing,
    SharingMode,
    gpu_uuid,
    mig_uuid,
)

__all__ = [
    "DEFAULT_SLO_SLOWDOWN", "DEFAULT_TOKEN_SECRET_FILE", "DEVICES_ALLOWED", "SHARING_MODES",
    "DeviceRef", "Fractional", "FractionalResources", "GpuDevice", "GpuGroup", "MigConfig", "MigInstance",
    "NodeConfig", "Qos", "ReplicatedResource", "ReplicatedSharing", "Sharing", "SharingMode", "gpu_uuid",
    "load_node_config", "mig_uuid", "parse_node_config", "resolve_node_name",
]
