"""A node's GPU inventory annotation as a device plugin publishes it, for tests that stand in for the plugin
(a KWOK node, a fake watch event). Built through the contract's own models, so a test cannot drift from the
wire format. (A module at the tests root, importable from every test folder.)"""
from __future__ import annotations

from collections.abc import Callable

from fgpu_contracts.inventory import GpuInfo, Inventory, MigDevice, dump_inventory
from fgpu_contracts.keys import mig_resource_name

GIB = 1 << 30


def fractional_inventory(node: str, count: int, *, model: str = "H100-SXM5-80GB", mem_bytes: int = 80 * GIB,
                         uuid: Callable[[int], str] | None = None, unhealthy: dict[int, int] | None = None) -> str:
    """`count` fractional GPUs of `model` (splitCount 10); `unhealthy` maps GPU index -> XID."""
    uuid = uuid or (lambda i: f"GPU-{node}-{i}")
    unhealthy = unhealthy or {}
    gpus = tuple(GpuInfo(index=i, uuid=uuid(i), model=model, short_name=model.split("-")[0], mem_bytes=mem_bytes,
                         sms=132, sharing="fractional", replicas=10, healthy=i not in unhealthy,
                         xid=unhealthy.get(i)) for i in range(count))
    return dump_inventory(Inventory(node=node, mig_strategy="none", memory_quota="hard", time_dilation=1.0,
                                    resources={"nvidia.com/gpu": 10 * count}, node_resources={}, gpus=gpus))


def mig_inventory(node: str, layout: list[str], *, model: str = "H100-SXM5-80GB",
                  unhealthy: dict[str, int] | None = None, dynamic: bool = False) -> str:
    """One MIG-enabled GPU of `model` cut into `layout` (profile names, e.g. ["3g.40gb", "1g.10gb"]), placed
    and sized by simgpu's MIG tables; the instances are `MIG-<node>-<profile>-<start>` and each profile's
    count is advertised as NVIDIA's mixed-strategy resource. `unhealthy` maps an instance UUID -> XID; `dynamic`:
    the GPU is `mig: {dynamic: true}` (its idle instances may be re-laid)."""
    from simgpu import mig
    from simgpu.catalog import get_gpu

    spec, unhealthy = get_gpu(model), unhealthy or {}
    instances = []
    for place in mig.check_layout(spec, layout):
        profile = mig.get_profile(spec, place.profile)
        uuid = f"MIG-{node}-{place.profile}-{place.start}"
        instances.append(MigDevice(uuid=uuid, profile=place.profile, start=place.start, mem_bytes=profile.mem_bytes,
                                   sms=profile.sms, healthy=uuid not in unhealthy))
    gpu = GpuInfo(index=0, uuid=f"GPU-{node}-0", model=spec.name, short_name=spec.short_name,
                  mem_bytes=spec.mem_bytes, sms=spec.sms, sharing="exclusive", replicas=1, mig=tuple(instances),
                  mig_dynamic=dynamic)
    resources: dict[str, int] = {}
    for m in instances:
        name = mig_resource_name(m.profile)
        resources[name] = resources.get(name, 0) + 1
    return dump_inventory(Inventory(node=node, mig_strategy="mixed", memory_quota="hard", time_dilation=1.0,
                                    resources=resources, node_resources={}, gpus=(gpu,)))
