"""A node's GPU inventory annotation as a device plugin publishes it, for tests that stand in for the plugin
(a KWOK node, a fake watch event). Built through the contract's own models, so a test cannot drift from the
wire format. (A module at the tests root, importable from every test folder.)"""
from __future__ import annotations

from collections.abc import Callable

from fgpu_contracts.inventory import GpuInfo, Inventory, dump_inventory

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
