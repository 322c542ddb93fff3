"""Node labels in GPU Feature Discovery's vocabulary (peers.md section (c)), the `fgpu.io/emulated` marker, and
the node's GPU inventory for the operator (pure).

The inventory is a node annotation, `fgpu.io/gpu-inventory` (JSON, schema below), rather than a CRD: it
needs no CRD installed, travels with the Node object the scheduler already watches, and is small (a few
hundred bytes per GPU). Schema v1:

    {"version": "v1", "node": str, "migStrategy": str, "memoryQuota": str, "timeDilation": float,
     "resources": {name: device count}, "nodeResources": {fractional memory/cores resource: amount},
     "gpus": [{"index", "uuid", "model", "shortName", "memBytes", "sms", "sharing", "replicas",
               "healthy", "xid", "mig": [{"uuid", "profile", "start", "memBytes", "sms", "healthy"}]}]}
"""
from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from deviceplugin.resources import Resource, gpu_slots, node_level_resources
from simgpu.nodeconfig import GPU_RESOURCE, GpuDevice, NodeConfig, mig_resource_name

INVENTORY = "fgpu.io/gpu-inventory"
EMULATED = "fgpu.io/emulated"
SHARING_MODE_LABEL = "fgpu.io/sharing-mode"
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


def _shared_under_plain_name(cfg: NodeConfig, gpu: GpuDevice) -> bool:
    """GFD's `-SHARED` rule: replicas advertised under the unrenamed nvidia.com/gpu."""
    return gpu.sharing in ("timeSlicing", "mps") and any(
        name == GPU_RESOURCE and slots[0].replicas > 1 for name, slots, _ in gpu_slots(cfg, gpu))


def model_label_prefix(model: str) -> str:
    """fgpu's per-model labels, `fgpu.io/gpu-<product>.{count,memory}`: one pair per GPU model on the node."""
    return f"fgpu.io/gpu-{_value(model)}"


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
        labels[f"{model_label_prefix(model)}.count"] = str(count)
        labels[f"{model_label_prefix(model)}.memory"] = str(specs[model].mem_bytes // _MIB)
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
    if len({g.model for g in gpus}) == 1:
        _put_if_agreed(labels, "nvidia.com/gpu.product",
                       (_value(g.model + ("-SHARED" if _shared_under_plain_name(cfg, g) else "")) for g in plain))
    instances = [(g, inst) for g in gpus for inst in g.mig]
    if strategy == "single" and instances:
        labels["nvidia.com/gpu.count"] = str(len(instances))
        _put_if_agreed(labels, "nvidia.com/gpu.product", (_value(f"{g.model}-MIG-{i.profile}") for g, i in instances))
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
              health: Mapping[str, Health]) -> dict:
    ok = Health()
    out_gpus = []
    for gpu in gpus:
        h = health.get(gpu.uuid, ok)
        out_gpus.append({
            "index": gpu.index, "uuid": gpu.uuid, "model": gpu.model, "shortName": gpu.spec.short_name,
            "memBytes": gpu.spec.mem_bytes, "sms": gpu.spec.sms, "sharing": gpu.sharing,
            "replicas": cfg.fractional.split_count if gpu.sharing == "fractional" else gpu.replicas,
            "healthy": h.healthy, "xid": h.xid,
            "mig": [{"uuid": m.uuid, "profile": m.profile, "start": m.start, "memBytes": m.mem_bytes,
                     "sms": m.sms, "healthy": h.healthy and health.get(m.uuid, ok).healthy} for m in gpu.mig],
        })
    return {
        "version": "v1", "node": node_name, "migStrategy": cfg.effective_mig_strategy,
        "memoryQuota": cfg.memory_quota, "timeDilation": cfg.time_dilation,
        "resources": {r.name: len(r.slots) for r in resources},
        "nodeResources": node_level_resources(cfg, node_name), "gpus": out_gpus,
    }


def inventory_annotation(inv: dict) -> dict[str, str]:
    return {INVENTORY: json.dumps(inv, separators=(",", ":"), sort_keys=True)}
