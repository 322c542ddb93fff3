"""Metrics of the deviceplugin (see fgpu_contracts/metrics/__init__.py), served by
`fgpu-device-plugin --metrics-port`.

The plugin exports no HAMi name: HAMi's allocation names (`hami_gpu_*`, `hami_vgpu_*_allocated_*`) belong to
the operator, which knows every pod's share for as long as the pod exists (the plugin sees a container once, at
Allocate, and never learns that its pod was deleted, so its per-container series would go stale).
"""
from __future__ import annotations

from fgpu_contracts.metrics import Metric


def _m(name: str, type: str, help: str, labels: tuple[str, ...] = (), unit: str = "",
       buckets: tuple[float, ...] = ()) -> Metric:
    return Metric(name=name, type=type, component="deviceplugin", help=help, labels=labels, unit=unit,
                  buckets=buckets)


METRICS: tuple[Metric, ...] = (
    _m("fgpu_deviceplugin_allocations_total", "counter",
       "Allocate calls from the kubelet by resource and result: ok; invalid (unknown or repeated device "
       "IDs, an empty list); refused (no fgpu.io/assignment matches, a device not on this node, a fractional "
       "resource without the Kubernetes API); error (an unexpected failure).", ("resource", "result")),
    _m("fgpu_deviceplugin_allocate_duration_seconds", "histogram",
       "Time to answer one Allocate call, by resource (whatever its result).", ("resource",), unit="seconds",
       buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)),
    _m("fgpu_deviceplugin_devices", "gauge",
       "Device IDs advertised to the kubelet by resource and health (Healthy, Unhealthy; both present).",
       ("resource", "health")),
    _m("fgpu_deviceplugin_registrations_total", "counter",
       "Successful registrations with the kubelet (one at start, one more after every kubelet restart)."),
    _m("fgpu_deviceplugin_unwritten_records", "gauge",
       "Allocations recorded in the journal but not yet written on their pods (fgpu.io/allocated); 0 when "
       "the plugin runs without the Kubernetes API."),
)
