"""A dashboard as plain data: what `grafana` renders with the SDK and `report` draws with matplotlib, so the
two always show the same queries."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PanelKind = Literal["timeseries", "stat"]


@dataclass(frozen=True)
class Target:
    """One PromQL query of a panel; `legend` is Grafana's legend format (`{{label}}` placeholders)."""

    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    targets: tuple[Target, ...]
    description: str = ""
    unit: str = ""  # Grafana's unit id: percent (0-100), percentunit (0-1), bytes, mbytes (MiB), s, watt, ...
    kind: PanelKind = "timeseries"
    key: bool = False  # one of the dashboard's key panels, which `fgpu report` draws
    width: int = 12  # of Grafana's 24 grid columns
    height: int = 8
    min: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Variable:
    """A template variable filled from Prometheus label values (`label_values(selector, label)`); every one is
    multi-valued with "All", so a panel's selector reads `label=~"$name"`."""

    name: str
    label: str
    query: str  # label_values(<series selector>, <label>)
    description: str = ""


@dataclass(frozen=True)
class Board:
    uid: str
    title: str
    description: str
    rows: tuple[Row, ...]
    variables: tuple[Variable, ...]
    tags: tuple[str, ...] = ("fgpu",)

    @property
    def panels(self) -> tuple[Panel, ...]:
        return tuple(p for row in self.rows for p in row.panels)

    @property
    def key_panels(self) -> tuple[Panel, ...]:
        return tuple(p for p in self.panels if p.key)
