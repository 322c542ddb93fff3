"""The metric catalogue: every metric fgpu's components export — name, type, labels, unit, meaning, and
whose dashboards already read it (dcgm-exporter's `DCGM_FI_*`, HAMi's `hami_*`) — in one place. The
exporters take their help text and label names from here, `docs/metrics.md` is rendered from it
(`python -m fgpu_contracts.metrics`), and tests fail when an exporter and the catalogue disagree.

One file per component (daemon, device plugin, operator) so each is read beside its exporter; `CATALOGUE`
is all of them, and a name may appear once only.
"""
from __future__ import annotations

from typing import Literal

import pydantic

from fgpu_contracts.wire import WireModel

MetricType = Literal["gauge", "counter", "histogram"]
Component = Literal["daemon", "deviceplugin", "operator"]
Compat = Literal["dcgm", "hami", ""]


class Metric(WireModel):
    """One metric family as a scrape shows it (a counter's `_total` suffix is part of `name`)."""

    name: str = pydantic.Field(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    type: MetricType
    component: Component
    help: str = pydantic.Field(min_length=1)
    labels: tuple[str, ...] = ()
    unit: str = ""  # bytes, seconds, ratio, percent, MiB, W, MHz, ... ("" for a plain count)
    compat: Compat = ""  # whose existing dashboards read this name unchanged
    buckets: tuple[float, ...] = ()  # histograms only

    @pydantic.model_validator(mode="after")
    def _shape(self) -> Metric:
        if self.type == "counter" and not self.name.endswith("_total"):
            raise ValueError(f"counter {self.name} must end in _total (as exposition shows it)")
        if bool(self.buckets) != (self.type == "histogram"):
            raise ValueError(f"{self.name}: buckets go with histograms, and histograms need them")
        return self


def _catalogue() -> tuple[Metric, ...]:
    from fgpu_contracts.metrics import daemon, deviceplugin, operator  # noqa: PLC0415  (their module-level lists)

    metrics = (*daemon.METRICS, *deviceplugin.METRICS, *operator.METRICS)
    seen: set[str] = set()
    for m in metrics:
        if m.name in seen:
            raise ValueError(f"metric {m.name} is catalogued twice")
        seen.add(m.name)
    return metrics


def of(component: Component) -> dict[str, Metric]:
    """The component's metrics by name."""
    return {m.name: m for m in CATALOGUE if m.component == component}


def lookup(name: str) -> Metric:
    """A metric by name; KeyError names it when the catalogue has no such metric."""
    for m in CATALOGUE:
        if m.name == name:
            return m
    raise KeyError(f"metric {name} is not in the catalogue (fgpu_contracts/metrics)")


CATALOGUE: tuple[Metric, ...] = ()  # filled below, once the component modules (which import Metric) are loaded
CATALOGUE = _catalogue()
