"""The demo's QoS check: each example pod's SLO attainment as the QoS board's own "SLO attainment" panel shows it
(operator/observe/boards.py, its query with every variable at All, as `fgpu report` and Grafana run it), read from
the demo's Prometheus, beside the pod's class as the scheduler handed it out (fgpu.io/assignment: priority 0 is
protected, whatever made it so: fgpu.io/priority, a bound, or a PriorityClass at the protected value).

The daemon's attainment is cumulative since the pod's context opened (one evaluation per 50 ms of its work), so
the last value is the attainment over the pod's run so far."""
from __future__ import annotations

import time
from dataclasses import dataclass

from fgpu_operator.observe import report
from fgpu_operator.observe.boards import QOS
from fgpu_operator.observe.prom import Prometheus

from fgpu_contracts.assignment import parse_assignment
from fgpu_contracts.keys import ASSIGNMENT

PANEL = "SLO attainment"
TARGET = 0.95  # issue 35's demo target: every protected pod at or above it over its run


@dataclass(frozen=True)
class Row:
    pod: str
    protected: bool
    bound: float | None  # the daemon's fgpu_qos_slo_slowdown_bound, else the assignment's sloSlowdown
    gpu: str
    attainment: float | None  # the board's panel, lowest series of the pod (None: no series)
    evaluations: float | None
    slowdown: float | None  # fgpu_pod_slowdown now (busy time over the time the work takes alone)

    @property
    def ok(self) -> bool:
        return not self.protected or (self.attainment is not None and self.attainment >= TARGET)


def panel_query() -> str:
    """The board's query for the panel, as Grafana sends it with every variable at All."""
    (panel,) = [p for p in QOS.panels if p.title == PANEL]
    (target,) = panel.targets
    window = report.Window.last(60, time.time(), 15.0)
    return report.query(QOS, target.expr, window)


def _by_pod(prom: Prometheus, expr: str, pick=min) -> dict[str, float]:
    out: dict[str, list[float]] = {}
    for s in prom.query(expr):
        if s.labels.get("pod"):
            out.setdefault(s.labels["pod"], []).append(s.points[-1][1])
    return {pod: pick(values) for pod, values in out.items()}


def classes(pods) -> dict[str, tuple[bool, float | None, str]]:
    """pod name -> (protected, bound, GPU UUIDs) from each placed pod's fgpu.io/assignment."""
    out = {}
    for pod in pods:
        raw = (pod.metadata.annotations or {}).get(ASSIGNMENT)
        if raw is None:
            continue
        assignment = parse_assignment(raw)
        protected = any(c.priority == 0 for c in assignment.containers)
        bound = next((c.slo_slowdown for c in assignment.containers if c.slo_slowdown is not None), None)
        gpus = ",".join(d.uuid for c in assignment.containers for d in c.devices)
        out[pod.metadata.name] = (protected, bound, gpus)
    return out


def measure(prom: Prometheus, pods) -> list[Row]:
    """One row per placed pod that holds a GPU share (an fgpu.io/assignment), protected ones first."""
    attainment = _by_pod(prom, panel_query())
    evaluations = _by_pod(prom, "fgpu_qos_slo_evaluations_total")
    slowdown = _by_pod(prom, "fgpu_pod_slowdown", pick=max)
    bounds = _by_pod(prom, "fgpu_qos_slo_slowdown_bound")
    rows = [Row(name, protected, bounds.get(name, bound), gpus, attainment.get(name), evaluations.get(name),
                slowdown.get(name))
            for name, (protected, bound, gpus) in classes(pods).items()]
    return sorted(rows, key=lambda r: (not r.protected, r.pod))


def table(rows: list[Row]) -> str:
    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    lines = [f"{'POD':<18} {'CLASS':<11} {'BOUND':>5} {'SLOWDOWN':>8} {'EVALUATIONS':>11} {'ATTAINMENT':>10}  OK"]
    for r in rows:
        cls = "protected" if r.protected else "best-effort"
        bound = num(r.bound, ".2f") if r.protected else "-"
        lines.append(f"{r.pod:<18} {cls:<11} {bound:>5} {num(r.slowdown, '.2f'):>8} "
                     f"{num(r.evaluations, '.0f'):>11} {num(r.attainment, '.2%'):>10}  "
                     f"{('yes' if r.ok else 'NO') if r.protected else '-'}")
    return "\n".join(lines)


def facts(rows: list[Row]) -> dict:
    return {r.pod: {"protected": r.protected, "bound": r.bound, "gpu": r.gpu, "attainment": r.attainment,
                    "evaluations": r.evaluations, "slowdown": r.slowdown} for r in rows}

