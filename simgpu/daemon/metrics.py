"""Prometheus metrics of the node daemon. Names, types, help and label names all come from the metric
catalogue (`fgpu_contracts/metrics/daemon.py`, rendered in docs/metrics.md): dcgm-exporter's `DCGM_FI_*`,
HAMi's `hami_*` usage metrics, and fgpu's per-pod and QoS series.

The asyncio loop calls `Exporter.step()` every interval: it brings the emulator up to now, takes the
counters of the window since the last step (simgpu.counters) and builds a whole new Snapshot; the scrape
thread only reads the latest snapshot, so scrapes never touch the live emulator and always see one
consistent window. Every family is served from the first scrape on (empty until the first snapshot).

Per-pod series are one per (device, pod container): several contexts of one container on one device are
added up, so a scrape has no duplicate series. They go with the last context of that container on that
device (closed, killed, pod deleted); so does its QoS state.

QoS: a high-priority pod (CUDA_TASK_PRIORITY 0) has an SLO, a bound on its slowdown versus running alone
(its grant's `slo_slowdown`, from fgpu.io/slo-slowdown or the cluster's default, else the node config's
qos.sloSlowdown). Its slowdown is evaluated over its busy time (time with a kernel queued) in evaluation
periods of at least SLO_MIN_BUSY_S: a window with less work is carried into the next one, so a period never
ends on a fragment (a window that caught only the context switch before its kernel). A period whose slowdown
exceeds the bound, or in which it made no progress at all, is a violation.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from fgpu_contracts import metrics as catalogue
from simgpu.counters import DeviceCounters
from simgpu.nodeconfig import DEFAULT_SLO_SLOWDOWN

MIB = 1 << 20
FAMILIES = catalogue.of("daemon")
HIGH = 0  # CUDA_TASK_PRIORITY of high-priority work
SLO_MIN_BUSY_S = 0.05  # virtual seconds of work per SLO evaluation (~24 time slices of 2.09 ms)


@dataclass
class Snapshot:
    """Samples ready to be scraped: family name -> list of (label values, value)."""

    samples: dict[str, list[tuple[tuple[str, ...], float]]] = field(
        default_factory=lambda: {name: [] for name in FAMILIES})

    def add(self, name: str, labels: Iterable[str], value: float | None) -> None:
        """One sample; a value that is not a finite number is left out, negatives read 0."""
        if value is None or not math.isfinite(value):
            return
        labels = tuple(labels)
        assert len(labels) == len(FAMILIES[name].labels), name
        self.samples[name].append((labels, max(0.0, float(value))))


@dataclass
class _Series:
    """What outlives one window for a (device, namespace, pod, container)."""

    kernels_retired: int = 0  # kernels of its contexts that have closed
    kernels_seen: dict[int, int] = field(default_factory=dict)  # context id -> kernels at the last step
    busy_s: float = 0.0  # work not evaluated yet: time with a kernel queued,
    solo_s: float = 0.0  # and what it would have taken alone
    evaluations: int = 0
    violations: int = 0


def _pod_key(spec) -> tuple[str, str, str]:
    labels = spec.labels
    return labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", "")


def _priority(value: int) -> str:
    return "high" if value == HIGH else "low"


class Exporter:
    """Snapshots of the runtime's node, window after window, and the QoS state between them."""

    def __init__(self, runtime, *, slo_slowdown: float = DEFAULT_SLO_SLOWDOWN):
        self.runtime = runtime
        self.slo_slowdown = slo_slowdown  # bound of high-priority pods whose grant has none
        self._prev = runtime.node.totals()
        self._series: dict[tuple[str, str, str, str], _Series] = {}

    def snapshot(self) -> Snapshot:
        """The current state over an empty window (at startup: memory and health, no activity yet)."""
        node = self.runtime.node
        return self._build(*node.counters(node.totals()), evaluate=False)

    def step(self) -> Snapshot:
        """Close the window since the last step and build its snapshot (SLOs evaluated)."""
        self.runtime.catch_up()
        node = self.runtime.node
        per_gpu, per_mig = node.counters(self._prev)
        self._prev = node.totals()
        return self._build(per_gpu, per_mig, evaluate=True)

    # --- building ------------------------------------------------------------------------------------------
    def _build(self, per_gpu: dict[str, DeviceCounters], per_mig: dict[str, DeviceCounters], *,
               evaluate: bool) -> Snapshot:
        node = self.runtime.node
        snap = Snapshot()
        health = {h["uuid"]: h for h in node.health()}
        devices = list(node.devices.values())
        enforced = all(d.priorities for d in devices) if devices else True
        snap.add("fgpu_qos_priorities_enabled", (node.node_name, node.node_name), 1.0 if enforced else 0.0)
        alive: set[tuple[str, str, str, str]] = set()
        model = FAMILIES["DCGM_FI_DEV_GPU_UTIL"].labels.index("modelName")
        for gpu in node.gpus:
            whole = per_gpu.get(gpu.uuid)
            if whole is not None:
                host = (str(gpu.index), f"NVIDIA-{gpu.spec.nvml_name or gpu.spec.name}", gpu.uuid)  # HAMi's type
                snap.add("hami_host_gpu_memory_used_bytes", host, whole.fb_used)
                snap.add("hami_host_gpu_utilization_ratio", host, 100.0 * whole.gr_engine_active)
            if gpu.mig:
                targets = [(d, per_mig.get(d.uuid), gpu.profiles[d.uuid], str(i)) for i, d in enumerate(gpu.devices)]
            else:
                targets = [(gpu.devices[0], whole, "", "")]
            for device, counters, profile, gi in targets:
                if counters is None:  # a device that appeared after the window began: next window
                    continue
                labels = (str(gpu.index), gpu.uuid, gpu.pci_bus_id, f"nvidia{gpu.index}", gpu.spec.name,
                          node.node_name, node.node_name, profile, gi)
                own = labels[:model] + labels[model + 1:]  # fgpu's series: the same but modelName
                alive |= self._device(snap, device, counters, labels, own, health, evaluate=evaluate)
        for key in [k for k in self._series if k not in alive]:
            del self._series[key]  # its contexts are gone (closed, pod deleted, device reconfigured)
        return snap

    def _device(self, snap: Snapshot, device, counters: DeviceCounters, labels: tuple[str, ...],
                own: tuple[str, ...], health: dict, *, evaluate: bool) -> set[tuple[str, str, str, str]]:
        groups: dict[tuple[str, str, str], list[int]] = {}
        for cid, client in device.clients.items():
            groups.setdefault(_pod_key(client.spec), []).append(cid)
        owner = next(iter(groups)) if len(groups) == 1 else ("", "", "")  # dcgm-exporter's pod mapping
        dcgm = (*labels, *owner)
        values = {
            "DCGM_FI_DEV_GPU_UTIL": 100.0 * counters.gr_engine_active,
            "DCGM_FI_DEV_FB_USED": counters.fb_used / MIB,
            "DCGM_FI_DEV_FB_FREE": counters.fb_free / MIB,
            "DCGM_FI_DEV_POWER_USAGE": counters.power_w,
            "DCGM_FI_DEV_SM_CLOCK": counters.sm_clock_mhz,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": counters.gr_engine_active,
            "DCGM_FI_PROF_SM_ACTIVE": counters.sm_active,
            "DCGM_FI_PROF_SM_OCCUPANCY": counters.sm_occupancy,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": counters.tensor_active,
            "DCGM_FI_PROF_DRAM_ACTIVE": counters.dram_active,
        }
        h = health.get(device.uuid, {"xid": 0, "healthy": True})
        values["DCGM_FI_DEV_XID_ERRORS"] = float(h["xid"] or 0)
        for name, value in values.items():
            snap.add(name, dcgm, value)
        snap.add("fgpu_device_healthy", (*own, *owner), 1.0 if h["healthy"] else 0.0)
        alive = set()
        for pod, cids in groups.items():
            key = (device.uuid, *pod)
            alive.add(key)
            self._pod(snap, device, counters, own, pod, cids, self._series.setdefault(key, _Series()),
                      evaluate=evaluate)
        return alive

    def _pod(self, snap: Snapshot, device, counters: DeviceCounters, labels: tuple[str, ...],
             pod: tuple[str, str, str], cids: list[int], series: _Series, *, evaluate: bool) -> None:
        clients = [device.clients[cid] for cid in cids]
        usage = [device.memory.usage(cid) for cid in cids]
        windows = [w for cid in cids if (w := counters.clients.get(cid)) is not None]
        contexts = self.runtime.contexts
        grants = [contexts[cid].grant for cid in cids if cid in contexts]
        priority = min(c.spec.priority for c in clients)
        per_pod = (*labels, *pod)
        qos = (*per_pod, _priority(priority))

        # kernels: a closed context's count moves to `retired`, so the counter never goes down
        for cid in [c for c in series.kernels_seen if c not in cids]:
            series.kernels_retired += series.kernels_seen.pop(cid)
        for cid, client in zip(cids, clients, strict=True):
            series.kernels_seen[cid] = client.totals.kernels_done
        used = sum(u.device_bytes for u in usage)
        limit = max(u.quota for u in usage)
        engine = min(1.0, sum(w.gr_engine_active for w in windows))
        snap.add("fgpu_pod_gpu_memory_used_bytes", per_pod, used)
        snap.add("fgpu_pod_gpu_memory_spilled_bytes", per_pod, sum(u.host_bytes for u in usage))
        snap.add("fgpu_pod_gpu_memory_limit_bytes", per_pod, limit)
        snap.add("fgpu_pod_sm_active", per_pod, min(1.0, sum(w.sm_active for w in windows)))
        snap.add("fgpu_pod_kernels_total", per_pod, series.kernels_retired + sum(series.kernels_seen.values()))

        busy = sum(w.busy_s for w in windows)
        solo = sum(w.solo_work_s for w in windows)
        rate = min(1.0, solo / busy) if busy > 1e-12 else None
        if rate is not None:
            snap.add("fgpu_pod_progress_rate", qos, rate)
            snap.add("fgpu_pod_slowdown", qos, 1.0 / rate if rate > 0 else None)  # no progress: no finite slowdown
        if priority == HIGH:
            bound = next((g.slo_slowdown for g in grants if g.slo_slowdown is not None), self.slo_slowdown)
            if evaluate:
                series.busy_s += busy
                series.solo_s += min(solo, busy)
                if series.busy_s >= SLO_MIN_BUSY_S:
                    series.evaluations += 1
                    if series.solo_s <= 0 or series.busy_s / series.solo_s > bound + 1e-9:
                        series.violations += 1
                    series.busy_s = series.solo_s = 0.0
            snap.add("fgpu_qos_slo_slowdown_bound", qos, bound)
            snap.add("fgpu_qos_slo_evaluations_total", qos, series.evaluations)
            snap.add("fgpu_qos_slo_violations_total", qos, series.violations)
            if series.evaluations:
                snap.add("fgpu_qos_slo_attainment_ratio", qos, 1.0 - series.violations / series.evaluations)

        if pod[1]:  # HAMi reports containers of pods only
            index = min((g.vdevice_index for g in grants), default=0)
            hami = (*pod, str(index), device.uuid)
            snap.add("hami_vgpu_memory_used_bytes", hami, used)
            snap.add("hami_container_device_memory_bytes", hami, used)
            snap.add("hami_vgpu_memory_limit_bytes", hami, limit)
            snap.add("hami_container_device_utilization_ratio", hami, 100.0 * engine)


class SnapshotCollector(Collector):
    """A prometheus_client collector serving the latest snapshot: every catalogued family, always."""

    def __init__(self):
        self.snapshot = Snapshot()

    def collect(self) -> Iterable:
        snap = self.snapshot  # one reference read: the loop swaps in whole new snapshots
        for name, metric in FAMILIES.items():
            if metric.type == "counter":
                family = CounterMetricFamily(name.removesuffix("_total"), metric.help, labels=metric.labels)
            else:
                family = GaugeMetricFamily(name, metric.help, labels=metric.labels)
            for labels, value in snap.samples.get(name, ()):
                family.add_metric(labels, value)
            yield family
