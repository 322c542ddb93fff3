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
from collections.abc import Mapping
from dataclasses import dataclass

from deviceplugin.resources import Resource, mig_resource_name, node_level_resources
from simgpu.nodeconfig import GpuDevice, NodeConfig

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


def node_labels(cfg: NodeConfig, gpus: list[GpuDevice]) -> dict[str, str]:
    first = gpus[0]
    spec = first.spec
    strategy = cfg.effective_mig_strategy
    block = cfg.replicated(first.sharing)
    renamed = block is not None and block.advertised_name("nvidia.com/gpu") != "nvidia.com/gpu"
    product = spec.name
    labels = {
        EMULATED: "true",
        SHARING_MODE_LABEL: first.sharing,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.family": spec.arch,
        "nvidia.com/gpu.count": str(len(gpus)),
        "nvidia.com/gpu.memory": str(spec.mem_bytes // _MIB),
        "nvidia.com/gpu.replicas": str(cfg.fractional.split_count if first.sharing == "fractional"
                                       else first.replicas),
        "nvidia.com/gpu.sharing-strategy": _STRATEGY[first.sharing],
        "nvidia.com/mig.capable": str(any(g.spec.mig for g in gpus)).lower(),
        "nvidia.com/mig.strategy": strategy,
        "nvidia.com/mps.capable": str(first.sharing == "mps").lower(),
    }
    if first.sharing in ("timeSlicing", "mps") and not renamed and first.replicas > 1:
        product += "-SHARED"  # GFD's rule when shared replicas keep the plain resource name
    instances = [inst for g in gpus for inst in g.mig]
    if strategy == "single" and instances:
        inst = instances[0]
        product = f"{spec.name}-MIG-{inst.profile}"
        labels["nvidia.com/gpu.count"] = str(len(instances))
        labels["nvidia.com/gpu.memory"] = str(inst.mem_bytes // _MIB)
        labels["nvidia.com/gpu.multiprocessors"] = str(inst.sms)
    elif strategy == "mixed":
        counts = Counter(inst.profile for inst in instances)
        for inst in instances:
            prefix = mig_resource_name(inst.profile)
            labels[f"{prefix}.count"] = str(counts[inst.profile])
            labels[f"{prefix}.memory"] = str(inst.mem_bytes // _MIB)
            labels[f"{prefix}.multiprocessors"] = str(inst.sms)
    labels["nvidia.com/gpu.product"] = _value(product)
    return labels


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
