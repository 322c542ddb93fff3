"""Monitoring as code: fgpu's Grafana dashboards and `fgpu report`.

`model` is a dashboard's shape as plain data and `boards` the three dashboards (cluster overview, GPU/node
detail, QoS) with their PromQL; `grafana` turns them into Grafana JSON with grafana-foundation-sdk (`fgpu
dashboards`, committed in deploy/grafana/); `promql` reads and fills in the queries; `prom` is a small
Prometheus HTTP client; `report` draws each dashboard's key panels as a PNG from a Prometheus (`fgpu report`).
Nothing here needs a cluster; only `report` needs a Prometheus.
"""
