"""Prometheus metrics of the node daemon, named and labelled like dcgm-exporter's so existing
dashboards work: DCGM_FI_DEV_FB_USED/FREE (MiB), DCGM_FI_DEV_GPU_UTIL (%), DCGM_FI_PROF_* (ratios),
DCGM_FI_DEV_XID_ERRORS, with labels gpu, UUID, device, modelName, Hostname (and GPU_I_PROFILE, GPU_I_ID
for MIG instances, which are reported one series each, as dcgm-exporter does), plus namespace, pod and
container when exactly one pod uses the device (dcgm-exporter's Kubernetes mapping; empty when shared).
Per-pod series (fgpu_pod_*) always carry the pod labels.

The asyncio loop computes a snapshot every interval (counters over that window); the scrape thread only
reads the latest snapshot, so scrapes never touch the live emulator.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from simgpu.counters import DeviceCounters

MIB = 1 << 20
GPU_LABELS = ["gpu", "UUID", "device", "modelName", "Hostname", "GPU_I_PROFILE", "GPU_I_ID"]
POD_LABELS = [*GPU_LABELS, "namespace", "pod", "container"]

# name -> (help, attribute of DeviceCounters, scale)
GPU_GAUGES = {
    "DCGM_FI_DEV_FB_USED": ("Framebuffer memory used (in MiB).", "fb_used", 1 / MIB),
    "DCGM_FI_DEV_FB_FREE": ("Framebuffer memory free (in MiB).", "fb_free", 1 / MIB),
    "DCGM_FI_DEV_GPU_UTIL": ("GPU utilization (in %).", "gr_engine_active", 100.0),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("Ratio of time the graphics engine is active.", "gr_engine_active", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("The ratio of cycles an SM has at least 1 warp assigned.", "sm_active", 1.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("The ratio of number of warps resident on an SM.", "sm_occupancy", 1.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("Ratio of cycles the tensor (HMMA) pipe is active.", "tensor_active", 1.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("Ratio of cycles the device memory interface is active.", "dram_active", 1.0),
}


@dataclass
class Snapshot:
    """Samples ready to be scraped: family name -> list of (labels, value)."""

    gauges: dict[str, list[tuple[list[str], float]]] = field(default_factory=dict)
    counters: dict[str, list[tuple[list[str], float]]] = field(default_factory=dict)


POD_GAUGES = {
    "fgpu_pod_gpu_memory_used_bytes": "Device memory held by the pod's context (bytes).",
    "fgpu_pod_gpu_memory_spilled_bytes": "Memory of the pod's context spilled to host (oversubscribe mode, bytes).",
    "fgpu_pod_gpu_memory_limit_bytes": "The pod's device-memory quota (bytes).",
    "fgpu_pod_sm_active": "Share of the GPU's SM cycles the pod's kernels kept busy.",
    "fgpu_pod_progress_rate": "The pod's speed while it had work, as a fraction of running alone (1 = no interference).",
    "fgpu_pod_slowdown": "How much longer the pod's kernels took than running alone.",
}
POD_COUNTERS = {"fgpu_pod_kernels": "Kernels completed by the pod's context."}
EXTRA_GAUGES = {
    "DCGM_FI_DEV_XID_ERRORS": "Value of the last XID error encountered (0: none).",
    "fgpu_device_healthy": "1 if the emulated device is healthy, 0 once an XID marked it unhealthy.",
}


def _pod_labels(spec) -> list[str]:
    pod = [spec.labels.get("namespace", ""), spec.labels.get("pod", ""), spec.labels.get("container", "")]
    return pod if any(pod) else ["", spec.name, ""]


def build_snapshot(runtime, per_gpu: dict[str, DeviceCounters], per_mig: dict[str, DeviceCounters]) -> Snapshot:
    """Samples for every GPU (or MIG instance) and every context, from one counters window."""
    node = runtime.node
    snap = Snapshot(gauges={name: [] for name in [*GPU_GAUGES, *EXTRA_GAUGES, *POD_GAUGES]},
                    counters={name: [] for name in POD_COUNTERS})
    health = {h["uuid"]: h for h in node.health()}
    for gpu in node.gpus:
        targets = [(d, per_mig[d.uuid], gpu.profiles[d.uuid], str(i)) for i, d in enumerate(gpu.devices)] if gpu.mig \
            else [(gpu.devices[0], per_gpu[gpu.uuid], "", "")]
        for device, counters, profile, gi in targets:
            labels = [str(gpu.index), gpu.uuid, f"nvidia{gpu.index}", gpu.spec.name, node.node_name, profile, gi]
            pods = {cid: _pod_labels(client.spec) for cid, client in device.clients.items()}
            owners = {tuple(p) for p in pods.values()}
            # dcgm-exporter's Kubernetes mapping: a device used by one pod carries that pod's labels
            owner = list(owners.pop()) if len(owners) == 1 else ["", "", ""]
            for name, (_, attr, scale) in GPU_GAUGES.items():
                snap.gauges[name].append((labels + owner, float(getattr(counters, attr)) * scale))
            h = health.get(device.uuid, {"xid": 0, "healthy": True})
            snap.gauges["DCGM_FI_DEV_XID_ERRORS"].append((labels + owner, float(h["xid"] or 0)))
            snap.gauges["fgpu_device_healthy"].append((labels + owner, 1.0 if h["healthy"] else 0.0))
            for cid, client in device.clients.items():
                pod = pods[cid]
                mem = device.memory.usage(cid)
                window = counters.clients.get(cid)
                values = {
                    "fgpu_pod_gpu_memory_used_bytes": mem.device_bytes,
                    "fgpu_pod_gpu_memory_spilled_bytes": mem.host_bytes,
                    "fgpu_pod_gpu_memory_limit_bytes": mem.quota,
                    "fgpu_pod_sm_active": window.sm_active if window else 0.0,
                }
                if window is not None and window.progress_rate is not None:
                    values["fgpu_pod_progress_rate"] = window.progress_rate
                    values["fgpu_pod_slowdown"] = window.slowdown
                for name, value in values.items():
                    snap.gauges[name].append((labels + pod, float(value)))
                snap.counters["fgpu_pod_kernels"].append((labels + pod, float(client.totals.kernels_done)))
    return snap


class SnapshotCollector(Collector):
    """A prometheus_client collector serving the runtime's latest snapshot."""

    def __init__(self):
        self.snapshot = Snapshot()

    def collect(self) -> Iterable:
        snap = self.snapshot  # one reference read: the loop swaps in whole new snapshots
        helps = {**{k: v[0] for k, v in GPU_GAUGES.items()}, **EXTRA_GAUGES, **POD_GAUGES}
        for name, samples in snap.gauges.items():
            family = GaugeMetricFamily(name, helps[name], labels=POD_LABELS)
            for labels, value in samples:
                family.add_metric(labels, value)
            yield family
        for name, samples in snap.counters.items():
            family = CounterMetricFamily(name, POD_COUNTERS[name], labels=POD_LABELS)
            for labels, value in samples:
                family.add_metric(labels, value)
            yield family
