"""The device plugin's Prometheus exporter: names, help and labels from the catalogue
(`fgpu_contracts.metrics.deviceplugin`). Allocate results and latency are counted as they happen; the devices
advertised, kubelet registrations and unwritten allocation records are read when scraped (each under its own
lock or as a plain int, so the scrape thread never waits on an Allocate)."""
from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from fgpu_contracts.metrics import Metric, of

CATALOGUE: dict[str, Metric] = of("deviceplugin")
RESULTS = ("ok", "invalid", "refused", "error")
HEALTH = ("Healthy", "Unhealthy")


class PluginMetrics:
    """One plugin's registry. `attach` what the scrape reads once the servers are built."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        m = CATALOGUE["fgpu_deviceplugin_allocations_total"]
        self._allocations = Counter(m.name.removesuffix("_total"), m.help, m.labels, registry=self.registry)
        m = CATALOGUE["fgpu_deviceplugin_allocate_duration_seconds"]
        self._duration = Histogram(m.name, m.help, m.labels, registry=self.registry, buckets=m.buckets)
        self.state = StateCollector()
        self.registry.register(self.state)

    def serving(self, resources: Iterable[str]) -> None:
        """Start every resource's Allocate series at 0 (each result, and the latency histogram): a series that
        first appears at 1 hides its first call from rate() and histogram_quantile()."""
        for resource in resources:
            self._duration.labels(resource)
            for result in RESULTS:
                self._allocations.labels(resource, result)

    def allocate(self, resource: str, result: str, seconds: float) -> None:
        self._allocations.labels(resource, result).inc()
        self._duration.labels(resource).observe(max(0.0, seconds))

    def attach(self, devices: Callable[[], dict[str, dict[str, int]]], registrations: Callable[[], int],
               unwritten: Callable[[], int]) -> None:
        """`devices()`: resource -> health -> device IDs advertised; the others: counts as they are now."""
        s = self.state
        s.devices, s.registrations, s.unwritten = devices, registrations, unwritten

    def serve(self, port: int, addr: str = "0.0.0.0"):
        """Serve /metrics on a thread; returns the HTTP server (`shutdown()` it). OSError if the port is taken."""
        server, _ = start_http_server(port, addr, registry=self.registry)
        return server


class StateCollector(Collector):
    def __init__(self) -> None:
        self.devices: Callable[[], dict[str, dict[str, int]]] = dict
        self.registrations: Callable[[], int] = lambda: 0
        self.unwritten: Callable[[], int] = lambda: 0

    def describe(self) -> Iterable:
        return self._families()

    def collect(self) -> Iterable:
        devices, registrations, unwritten = self._families()
        for resource, counts in self.devices().items():
            for state in HEALTH:
                devices.add_metric([resource, state], max(0, counts.get(state, 0)))
        registrations.add_metric([], max(0, self.registrations()))
        unwritten.add_metric([], max(0, self.unwritten()))
        return [devices, registrations, unwritten]

    @staticmethod
    def _families():
        devices = CATALOGUE["fgpu_deviceplugin_devices"]
        registrations = CATALOGUE["fgpu_deviceplugin_registrations_total"]
        unwritten = CATALOGUE["fgpu_deviceplugin_unwritten_records"]
        return (GaugeMetricFamily(devices.name, devices.help, labels=devices.labels),
                CounterMetricFamily(registrations.name, registrations.help, labels=registrations.labels),
                GaugeMetricFamily(unwritten.name, unwritten.help, labels=unwritten.labels))
