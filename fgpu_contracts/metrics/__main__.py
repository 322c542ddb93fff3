"""Render the metric catalogue as docs/metrics.md: `python -m fgpu_contracts.metrics > docs/metrics.md`
(tests/contracts/test_metrics_catalogue.py fails when the committed file is not this output)."""
from __future__ import annotations

import sys

from fgpu_contracts.metrics import CATALOGUE, Metric

TITLES = {"daemon": "Node daemon (simgpu) — per GPU, MIG instance and pod",
          "deviceplugin": "Device plugin — per node", "operator": "Operator — scheduler, webhook, allocations"}
COMPAT = {"dcgm": "dcgm-exporter", "hami": "HAMi", "": ""}


def render() -> str:
    lines = ["# Metrics", "",
             "Every metric fgpu exports, generated from the catalogue in `fgpu_contracts/metrics/` "
             "(`python -m fgpu_contracts.metrics > docs/metrics.md`); tests fail when an exporter and the "
             "catalogue disagree. *Compatible with* names the dashboards that read a metric unchanged.", ""]
    for component, title in TITLES.items():
        metrics = [m for m in CATALOGUE if m.component == component]
        lines += [f"## {title}", "", "| name | type | unit | labels | meaning | compatible with |",
                  "|---|---|---|---|---|---|"]
        lines += [_row(m) for m in metrics]
        lines.append("")
    return "\n".join(lines)


def _row(m: Metric) -> str:
    labels = ", ".join(f"`{label}`" for label in m.labels)
    kind = m.type if m.type != "histogram" else f"histogram ({', '.join(f'{b:g}' for b in m.buckets)})"
    return f"| `{m.name}` | {kind} | {m.unit} | {labels} | {m.help.replace('|', '/')} | {COMPAT[m.compat]} |"


if __name__ == "__main__":
    sys.stdout.write(render())
