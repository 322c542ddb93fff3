"""Metrics of the operator (see fgpu_contracts/metrics/__init__.py)."""
from __future__ import annotations

from fgpu_contracts.metrics import Metric

METRICS: tuple[Metric, ...] = ()
