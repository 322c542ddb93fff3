"""Node labels in GPU Feature Discovery's vocabulary (peers.md section (c)), the `fgpu.io/emulated` marker, and
the node's GPU inventory for the operator (pure). The inventory's format is fgpu_contracts.inventory; this
module only fills it in from the node config and the GPUs' health.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from deviceplugin.resources import Resource, gpu_slots, node_level_resources
from fgpu_contracts.inventory import GpuInfo, Inventory, MigChangeReport, MigDevice, dump_inventory
from fgpu_contracts.keys import (
    EMULATED,
    GPU_RESOURCE,
    INVENTORY,
    SHARING_MODE_LABEL,
    mig_resource_name,
    model_label_prefix,
)
from simgpu.nodeconfig import GpuDevice, NodeConfig

_MIB = 1 << 20
_STRATEGY = {"exclusive": "none", "timeSlicing": "time-slicing", "mps": "mps", "fractional": "none"}


@dataclass(frozen=True)
class Health:
    healthy: bool = True
    xid: int | None = None


def _value(text: str) -> str:
    """A valid label value: <= 63 chars of [A-Za-z0-9._-], starting and ending alphanumeric."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63]
    return cleaned.strip("-._")


def _put_if_agreed(labels: dict[str, str], key: str, values: Iterable[object]) -> None:
    """Set `key` only when every GPU it describes has the same value; on disagreement leave it off (GFD would
    publish one GPU's value, chosen by map iteration order, and it can change from run to run)."""
    distinct = set(values)
    if len(distinct) == 1:
        labels[key] = str(distinct.pop())
    else:
        labels.pop(key, None)


def _product(gpu: GpuDevice) -> str:
    """What GFD puts in `nvidia.com/gpu.product`: NVML's device name (spaces become hyphens in `_value`), so
    a nodeSelector copied from a real cluster (KAI's way to ask for a model) matches the emulated node."""
    return gpu.spec.nvml_name or gpu.model


def _shared_under_plain_name(cfg: NodeConfig, gpu: GpuDevice) -> bool:
    """GFD's `-SHARED` rule: replicas advertised under the unrenamed nvidia.com/gpu."""
    return gpu.sharing in ("timeSlicing", "mps") and any(
        name == GPU_RESOURCE and slots[0].replicas > 1 for name, slots, _ in gpu_slots(cfg, gpu))


def node_labels(cfg: NodeConfig, gpus: list[GpuDevice]) -> dict[str, str]:
    """GFD's labels for the node, plus fgpu's. A `nvidia.com/gpu.*` label that describes a GPU property
    (product, memory, family, replicas, sharing) is published only when all the GPUs it describes agree, so a
    nodeSelector on it never matches a node where the kubelet could hand out a different GPU; per-model counts
    are always published as `fgpu.io/gpu-<product>.count` (docs/deviceplugin.md, "Mixed-model nodes")."""
    strategy = cfg.effective_mig_strategy
    labels = {
        EMULATED: "true",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(len(gpus)),
        "nvidia.com/mig.capable": str(any(g.spec.mig for g in gpus)).lower(),
        "nvidia.com/mig.strategy": strategy,
    }
    specs = {g.model: g.spec for g in gpus}
    for model, count in Counter(g.model for g in gpus).items():
        prefix = model_label_prefix(_value(model))  # one count/memory pair per GPU model on the node
        labels[f"{prefix}.count"] = str(count)
        labels[f"{prefix}.memory"] = str(specs[model].mem_bytes // _MIB)
    _put_if_agreed(labels, "nvidia.com/gpu.family", (g.spec.arch for g in gpus))
    _put_if_agreed(labels, "nvidia.com/gpu.memory", (g.spec.mem_bytes // _MIB for g in gpus))
    # sharing is a property of the GPUs advertised whole or as replicas/slots: not of MIG-enabled ones (GFD
    # labels those without sharing and lets the full GPUs' labels win), unless every GPU is MIG-enabled
    plain = [g for g in gpus if not g.mig] or gpus
    _put_if_agreed(labels, SHARING_MODE_LABEL, (g.sharing for g in plain))
    _put_if_agreed(labels, "nvidia.com/gpu.sharing-strategy", (_STRATEGY[g.sharing] for g in plain))
    _put_if_agreed(labels, "nvidia.com/mps.capable", (str(g.sharing == "mps").lower() for g in plain))
    _put_if_agreed(labels, "nvidia.com/gpu.replicas",
                   (cfg.fractional.split_count if g.sharing == "fractional" else g.replicas for g in plain))
    if len({g.model for g in gpus}) == 1:  # GFD's product: NVML's name, label-safe (NVIDIA-A100-SXM4-80GB)
        _put_if_agreed(labels, "nvidia.com/gpu.product",
                       (_value(_product(g) + ("-SHARED" if _shared_under_plain_name(cfg, g) else "")) for g in plain))
    instances = [(g, inst) for g in gpus for inst in g.mig]
    if strategy == "single" and instances:
        labels["nvidia.com/gpu.count"] = str(len(instances))
        _put_if_agreed(labels, "nvidia.com/gpu.product", (_value(f"{_product(g)}-MIG-{i.profile}") for g, i in instances))
        _put_if_agreed(labels, "nvidia.com/gpu.memory", (i.mem_bytes // _MIB for _, i in instances))
        _put_if_agreed(labels, "nvidia.com/gpu.multiprocessors", (i.sms for _, i in instances))
    elif strategy == "mixed":
        by_profile: dict[str, list] = {}
        for _, inst in instances:
            by_profile.setdefault(inst.profile, []).append(inst)
        for profile, members in by_profile.items():
            prefix = mig_resource_name(profile)
            labels[f"{prefix}.count"] = str(len(members))
            _put_if_agreed(labels, f"{prefix}.memory", (i.mem_bytes // _MIB for i in members))
            _put_if_agreed(labels, f"{prefix}.multiprocessors", (i.sms for i in members))
    return labels


_OWNED = re.compile(r"fgpu\.io/(emulated|sharing-mode|gpu-[A-Za-z0-9._-]+\.(count|memory))"
                    r"|nvidia\.com/(gpu\.(present|family|count|memory|replicas|sharing-strategy|product|multiprocessors)"
                    r"|mig\.(capable|strategy)|mps\.capable|mig-[A-Za-z0-9._-]+\.(count|memory|multiprocessors))")


def stale_labels(current: Mapping[str, str], desired: Mapping[str, str]) -> list[str]:
    """Labels this plugin would write that are on the node but no longer true (e.g. gpu.product after the node
    became mixed-model): a merge patch only adds, so these must be removed explicitly."""
    return sorted(k for k in current if k not in desired and _OWNED.fullmatch(k))


def inventory(cfg: NodeConfig, node_name: str, gpus: list[GpuDevice], resources: list[Resource],
              health: Mapping[str, Health], reports: Mapping[str, MigChangeReport] | None = None) -> Inventory:
    """The node's GPUs as configured (a dynamic-MIG GPU with its layout now), with their health now (a MIG
    device is unhealthy with its GPU) and `reports`: GPU uuid -> the node's answer to its last MIG change."""
    ok = Health()
    reports = reports or {}

    def gpu_info(gpu: GpuDevice) -> GpuInfo:
        h = health.get(gpu.uuid, ok)
        return GpuInfo(
            index=gpu.index, uuid=gpu.uuid, model=gpu.model, short_name=gpu.spec.short_name,
            mem_bytes=gpu.spec.mem_bytes, sms=gpu.spec.sms, sharing=gpu.sharing,
            replicas=cfg.fractional.split_count if gpu.sharing == "fractional" else gpu.replicas,
            healthy=h.healthy, xid=h.xid, pci_bus_id=gpu.pci_bus_id or None,
            mig=tuple(MigDevice(uuid=m.uuid, profile=m.profile, start=m.start, mem_bytes=m.mem_bytes, sms=m.sms,
                                healthy=h.healthy and health.get(m.uuid, ok).healthy) for m in gpu.mig),
            mig_dynamic=gpu.mig_dynamic, mig_change=reports.get(gpu.uuid),
        )

    return Inventory(
        node=node_name, mig_strategy=cfg.effective_mig_strategy, memory_quota=cfg.memory_quota,
        time_dilation=cfg.time_dilation, resources={r.name: len(r.slots) for r in resources},
        node_resources=node_level_resources(cfg, node_name), gpus=tuple(map(gpu_info, gpus)),
    )


def inventory_annotation(inv: Inventory) -> dict[str, str]:
    return {INVENTORY: dump_inventory(inv)}
