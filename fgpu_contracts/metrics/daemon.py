"""Metrics of the node daemon (see fgpu_contracts/metrics/__init__.py), served by simgpu/daemon/metrics.py.

Every value is computed by simgpu from what ran on the emulated GPUs over the last metrics window (one
second by default): nothing is random or drawn from a curve.

- dcgm-exporter's names and labels (`DCGM_FI_*`), one series per GPU, or per MIG instance on a MIG-enabled
  GPU (`GPU_I_PROFILE`, `GPU_I_ID`; empty on whole GPUs). `namespace`, `pod`, `container` name the pod using
  the device when exactly one does (dcgm-exporter's Kubernetes mapping) and are empty otherwise.
- HAMi's vGPU monitor usage metrics (`hami_*`), with HAMi's labels, so HAMi's dashboard works unchanged.
- fgpu's own per-pod (`fgpu_pod_*`) and QoS (`fgpu_qos_*`) series, which break a shared device down per pod.
"""
from __future__ import annotations

from fgpu_contracts.metrics import Metric

# dcgm-exporter's labels (internal/pkg/rendermetrics; `Hostname` before its rename to `hostname`, both here);
# `pci_bus_id` is the node config's (gpus[].pciBusIds) or the emulated default
GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "hostname", "GPU_I_PROFILE",
              "GPU_I_ID")
POD_LABELS = ("namespace", "pod", "container")
DCGM_LABELS = (*GPU_LABELS, *POD_LABELS)
# fgpu's own series join the DCGM ones on these; they leave out `modelName`, the one dcgm-exporter label that
# promtool's lint refuses (camelCase), so every fgpu family lints clean
FGPU_LABELS = tuple(label for label in DCGM_LABELS if label != "modelName")
QOS_LABELS = (*FGPU_LABELS, "priority")  # priority: "high" (CUDA_TASK_PRIORITY 0) or "low"
HAMI_HOST_LABELS = ("device_index", "device_type", "device_uuid")
HAMI_CONTAINER_LABELS = ("namespace", "pod", "container", "vdevice_index", "device_uuid")


def _metric(name: str, help: str, unit: str = "", labels: tuple[str, ...] = FGPU_LABELS, type: str = "gauge",
            compat: str = "") -> Metric:
    return Metric(name=name, type=type, component="daemon", help=help, labels=labels, unit=unit, compat=compat)


def _dcgm(name: str, help: str, unit: str) -> Metric:
    return _metric(name, help, unit, DCGM_LABELS, compat="dcgm")


def _hami(name: str, help: str, unit: str, labels: tuple[str, ...]) -> Metric:
    return _metric(name, help, unit, labels, compat="hami")


_fgpu = _metric


METRICS: tuple[Metric, ...] = (
    # --- dcgm-exporter ------------------------------------------------------------------------------------
    _dcgm("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %): share of the window with a kernel executing.", "percent"),
    _dcgm("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "MiB"),
    _dcgm("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "MiB"),
    _dcgm("DCGM_FI_DEV_POWER_USAGE",
          "Power draw (in W): the perf model's dynamic power of the kernels that ran (power_w at the power "
          "limit); idle, static and memory-traffic power are not modelled.", "W"),
    _dcgm("DCGM_FI_DEV_SM_CLOCK",
          "SM clock frequency (in MHz): the clock the power limit allows the running kernels (boost clock "
          "when idle; idle down-clocking is not modelled), averaged over the window.", "MHz"),
    _dcgm("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered (0: none).", ""),
    _dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", "ratio"),
    _dcgm("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned.", "ratio"),
    _dcgm("DCGM_FI_PROF_SM_OCCUPANCY",
          "The ratio of number of warps resident on an SM (assumed per kernel kind: GEMMs 0.19, streaming "
          "kernels 0.8).", "ratio"),
    _dcgm("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", "ratio"),
    _dcgm("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active.", "ratio"),
    # --- HAMi vGPU monitor (usage) ------------------------------------------------------------------------
    _hami("hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes (MIG instances summed).", "bytes",
          HAMI_HOST_LABELS),
    _hami("hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100).", "percent", HAMI_HOST_LABELS),
    _hami("hami_vgpu_memory_used_bytes", "vGPU device memory usage in bytes.", "bytes", HAMI_CONTAINER_LABELS),
    _hami("hami_vgpu_memory_limit_bytes", "vGPU device memory limit in bytes.", "bytes", HAMI_CONTAINER_LABELS),
    _hami("hami_container_device_memory_bytes",
          "Container device memory usage in bytes (the same value as hami_vgpu_memory_used_bytes).", "bytes",
          HAMI_CONTAINER_LABELS),
    _hami("hami_container_device_utilization_ratio",
          "Container device SM utilization ratio (0-100): share of the window its kernels executed.", "percent",
          HAMI_CONTAINER_LABELS),
    # --- fgpu: device ---------------------------------------------------------------------------------------
    _fgpu("fgpu_device_healthy", "1 if the emulated device is healthy, 0 once an XID marked it unhealthy."),
    # --- fgpu: per pod (one series per pod and device) ------------------------------------------------------
    _fgpu("fgpu_pod_gpu_memory_used_bytes", "Device memory held by the pod's contexts.", "bytes"),
    _fgpu("fgpu_pod_gpu_memory_spilled_bytes", "Memory of the pod's contexts spilled to host (oversubscribe mode).",
          "bytes"),
    _fgpu("fgpu_pod_gpu_memory_limit_bytes", "The pod's device-memory quota.", "bytes"),
    _fgpu("fgpu_pod_sm_active", "Share of the device's SM cycles the pod's kernels kept busy.", "ratio"),
    _fgpu("fgpu_pod_kernels_total", "Kernels the pod's contexts completed on the device.", type="counter"),
    _fgpu("fgpu_pod_progress_rate",
          "The pod's speed while it had work, as a fraction of running alone with its own limits (1 = no "
          "interference); absent for a window in which it had no work.", "ratio", QOS_LABELS),
    _fgpu("fgpu_pod_slowdown",
          "How much longer the pod's kernels took than running alone with its own limits (1 / progress rate); "
          "absent for a window in which it had no work.", "ratio", QOS_LABELS),
    # --- fgpu: QoS (high-priority pods' SLO) ----------------------------------------------------------------
    _fgpu("fgpu_qos_priorities_enabled",
          "1 if the node daemon enforces priorities (low-priority work yields to high-priority work), 0 if not "
          "(node config qos.priorities).", "", ("Hostname", "hostname")),
    _fgpu("fgpu_qos_slo_slowdown_bound",
          "A high-priority pod's SLO: the slowdown it tolerates (fgpu.io/slo-slowdown, else the cluster's "
          "default).", "ratio", QOS_LABELS),
    _fgpu("fgpu_qos_slo_evaluations_total",
          "Times a high-priority pod's SLO was evaluated: once per 50 ms of its work (time with a kernel "
          "queued), metrics windows with less carried over.", "", QOS_LABELS, "counter"),
    _fgpu("fgpu_qos_slo_violations_total",
          "SLO evaluations in which a high-priority pod's slowdown exceeded its bound.", "", QOS_LABELS, "counter"),
    _fgpu("fgpu_qos_slo_attainment_ratio",
          "Share of a high-priority pod's SLO evaluations that met its bound (since its first context opened on "
          "the device).", "ratio", QOS_LABELS),
)
