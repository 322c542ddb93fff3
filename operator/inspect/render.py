"""Print a report: `table` for people (aligned columns, then per-node and cluster totals, like
`kubectl inspect gpushare`), `json` and `yaml` for scripts (the documented, versioned `model` fields).
Column meanings are in docs/inspect.md."""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from itertools import groupby

import yaml

from fgpu_contracts.errors import InputError

from .model import (
    CheckReport,
    ClusterReport,
    GpuView,
    MigView,
    NodeView,
    PodReport,
    Report,
    Share,
    Usage,
    report_document,
)

OUTPUTS = ("table", "json", "yaml")
_GIB = 1 << 30


def render(report: Report, output: str = "table") -> str:
    """The report as text in `output` format, ending in a newline."""
    if output == "json":
        return json.dumps(report_document(report), indent=2) + "\n"
    if output == "yaml":
        return yaml.safe_dump(report_document(report), sort_keys=False, width=1 << 16)  # a message stays one line
    if output == "table":
        if isinstance(report, CheckReport):
            lines = check_lines(report)
        else:
            lines = cluster_table(report) if isinstance(report, ClusterReport) else pod_table(report)
        return "\n".join(lines) + "\n"
    raise InputError(f"unknown output format {output!r}", field="-o", allowed=OUTPUTS)


def columns(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as left-aligned columns two spaces apart (kubectl's layout), trailing blanks trimmed."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))] if rows else []
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


# --- numbers -------------------------------------------------------------------------------------------------
def _gib(mem_bytes: int) -> str:
    return f"{mem_bytes / _GIB:.1f}"


def _pct(part: float, whole: float) -> str:
    return f"{round(100 * part / whole) if whole else 0}%"


def _compute(used: Usage, devices: int) -> str:
    return f"{used.milli_gpu / 1000:.2f}/{devices}"


def _memory(used: Usage, total_bytes: int) -> str:
    return f"{_gib(used.mem_bytes)}/{_gib(total_bytes)}"


# --- the cluster ---------------------------------------------------------------------------------------------
GPU_HEADER = ("NODE", "GPU", "MODEL", "MIG", "SHARING", "HEALTH", "COMPUTE", "MEMORY(GiB)", "SM%", "PODS")
NODE_HEADER = ("NODE", "STATUS", "GPUS", "HEALTHY", "COMPUTE", "MEMORY(GiB)", "PODS")


def _pods(shares: Iterable[Share]) -> str:
    names = sorted({f"{s.namespace}/{s.pod}" for s in shares})
    return ", ".join(names) or "-"


def mig_layout(migs: Sequence[MigView]) -> str:
    """A GPU's MIG instances in slice order, repeats folded: `4g.20gb+3g.20gb`, `7x1g.5gb`."""
    parts = []
    for profile, run in groupby(m.profile for m in migs):
        n = len(list(run))
        parts.append(f"{n}x{profile}" if n > 1 else profile)
    return "+".join(parts) or "-"


def _health(healthy: bool, xid: int | None = None) -> str:
    if healthy:
        return "ok"
    return f"XID {xid}" if xid else "unhealthy"


def _sharing(gpu: GpuView) -> str:
    return f"{gpu.sharing}/{gpu.replicas}" if gpu.sharing in ("timeSlicing", "mps") else gpu.sharing


def _layout_cell(gpu: GpuView) -> str:
    """The MIG layout; a dynamic GPU says so, and a change in progress shows where it goes."""
    layout = mig_layout(gpu.mig) + (" (dynamic)" if gpu.mig_dynamic else "")
    c = gpu.mig_change
    if c is not None and c.phase in ("Pending", "Applying"):
        layout += f" -> {'+'.join(c.layout)} [{c.phase} {c.id}]"
    return layout


def mig_change_lines(report: ClusterReport) -> list[str]:
    """Every GPU's current (or last) dynamic-MIG change: phase, desired layout, start, pods, message."""
    rows = [(n.name, str(g.index), g.mig_change.id, g.mig_change.phase, "+".join(g.mig_change.layout) or "-",
             g.mig_change.started, ", ".join(g.mig_change.pods) or "-", g.mig_change.message or "-")
            for n in report.nodes for g in n.gpus if g.mig_change is not None]
    return columns([("NODE", "GPU", "MIG CHANGE", "PHASE", "LAYOUT", "STARTED", "FOR", "MESSAGE"), *rows]) if rows else []


def _gpu_rows(node: NodeView, gpu: GpuView) -> list[tuple[str, ...]]:
    rows = [(node.name, str(gpu.index), gpu.short_name, _layout_cell(gpu), _sharing(gpu),
             _health(gpu.healthy, gpu.xid), _compute(gpu.allocated, 1), _memory(gpu.allocated, gpu.mem_bytes),
             f"{gpu.allocated.sm_pct}%", _pods(gpu.shares))]
    for n, mig in enumerate(gpu.mig):
        rows.append((node.name, f"{gpu.index}:{n}", gpu.short_name, f"{mig.profile}@{mig.start}", "mig",
                     _health(mig.healthy), _compute(mig.allocated, 1), _memory(mig.allocated, mig.mem_bytes),
                     f"{mig.allocated.sm_pct}%", _pods(mig.shares)))
    return rows


def _status(node: NodeView) -> str:
    return ("Ready" if node.ready else "NotReady") + ("" if node.schedulable else ",SchedulingDisabled")


def _node_row(node: NodeView) -> tuple[str, ...]:
    n = len(node.gpus)
    return (node.name, _status(node), str(n), f"{sum(g.healthy for g in node.gpus)}/{n}",
            f"{_compute(node.allocated, n)} ({_pct(node.allocated.milli_gpu, node.capacity.milli_gpu)})",
            f"{_memory(node.allocated, node.capacity.mem_bytes)} "
            f"({_pct(node.allocated.mem_bytes, node.capacity.mem_bytes)})", str(len(node.pods)))


def _cluster_line(report: ClusterReport) -> str:
    s = report.summary
    used, total = s.allocated, s.capacity
    return (f"cluster: {s.nodes} node(s), {s.gpus} GPU(s) ({s.unhealthy_gpus} unhealthy), {s.pods} pod(s) "
            f"holding GPUs, {s.pending} pending; compute {_compute(used, s.gpus)} "
            f"({_pct(used.milli_gpu, total.milli_gpu)}), memory {_memory(used, total.mem_bytes)} GiB "
            f"({_pct(used.mem_bytes, total.mem_bytes)})")


def cluster_table(report: ClusterReport) -> list[str]:
    """GPU rows (MIG instances under their GPU), node totals, the cluster line, then pending pods and
    problems when there are any."""
    if report.nodes:
        lines = columns([GPU_HEADER, *(r for n in report.nodes for g in n.gpus for r in _gpu_rows(n, g))])
        lines += ["", *columns([NODE_HEADER, *(_node_row(n) for n in report.nodes)])]
    else:
        lines = ["no node publishes a GPU inventory (fgpu.io/gpu-inventory): is fgpu's device plugin running?"]
    if changes := mig_change_lines(report):
        lines += ["", *changes]
    lines += ["", _cluster_line(report)]
    if report.pending:
        rows = [(f"{p.namespace}/{p.name}", p.reason or "-", p.message or "(no attempt reported yet)")
                for p in report.pending]
        lines += ["", *columns([("PENDING", "REASON", "MESSAGE"), *rows]),
                  "(`fgpu inspect pod NAME -n NAMESPACE` tells more about one pod)"]
    if report.problems:
        lines += ["", "problems (left out of the numbers above):",
                  *(f"  {p.object}: {p.message}" for p in report.problems)]
    return lines


# --- one pod -------------------------------------------------------------------------------------------------
DEVICE_HEADER = ("CONTAINER", "PRIORITY", "GPU", "MODEL", "MIG", "UUID", "COMPUTE", "MEMORY(GiB)", "SM%")


def _headline(pod: PodReport) -> str:
    where = f"pod {pod.namespace}/{pod.name}"
    if pod.state == "scheduled":
        return f"{where}: scheduled on node {pod.node} (phase {pod.phase})"
    if pod.state == "bound":
        return f"{where}: on node {pod.node} without an fgpu assignment: it holds no fgpu GPU share"
    if pod.state == "finished":
        on = f" on node {pod.node}" if pod.node else ""
        return f"{where}: finished ({pod.phase}){on}; its GPUs are released"
    return f"{where}: not scheduled (phase {pod.phase}, scheduler {pod.scheduler_name})"


def _why(pod: PodReport) -> list[str]:
    lines = []
    if pod.message or pod.reason:
        lines.append(f"why: PodScheduled=False, {pod.reason or 'no reason'}: {pod.message or '(no message)'}")
    if pod.event:
        e = pod.event
        lines.append(f"last {e.reason} event ({e.count}x, last seen {e.last_seen or 'unknown'}): {e.message}")
    return lines or [f"why: nothing reported yet: {pod.scheduler_name} has not tried this pod"]


def _asked(request: dict) -> str:
    """The canonical request (fgpu.io/request, camelCase) in a few words."""
    parts = []
    for c in request.get("containers", ()):
        if c.get("migProfile"):
            what = f"{c.get('count', 1)}x MIG {c['migProfile']}"
        else:
            what = f"{c.get('count', 1)}x {c.get('milliGpu', 1000) / 1000:.2f} GPU"
            if c.get("memBytes"):
                what += f", {_gib(c['memBytes'])} GiB"
            elif c.get("memPct"):
                what += f", {c['memPct']}% memory"
            if c.get("smPct"):
                what += f", SM {c['smPct']}%"
        parts.append(f"{c.get('container')}: {what}")
    models = "".join(
        (f"; models {', '.join(f['allow'])}" if f.get("allow") else "")
        + (f"; not models {', '.join(f['deny'])}" if f.get("deny") else "") + f" ({f['rule']}'s rule)"
        for f in request.get("modelFilters", ()))
    source, priority = request.get("source", "fgpu"), request.get("priority")
    return f"asked ({source} spelling): {'; '.join(parts)}; priority {priority}{models}"


def _device_row(d) -> tuple[str, ...]:
    return (d.container, d.priority, "?" if d.gpu_index is None else str(d.gpu_index), d.model or "?",
            d.mig_profile or "-", d.uuid, f"{d.usage.milli_gpu / 1000:.2f}", _gib(d.usage.mem_bytes),
            f"{d.usage.sm_pct}%")


def pod_table(pod: PodReport) -> list[str]:
    lines = [_headline(pod)]
    if pod.devices:
        lines += columns([DEVICE_HEADER, *(_device_row(d) for d in pod.devices)])
    if pod.state == "pending":
        lines += _why(pod)
    if pod.request:
        lines.append(_asked(pod.request))
    return lines


# --- the check -----------------------------------------------------------------------------------------------
def check_lines(report: CheckReport) -> list[str]:
    """One line per violation; or one line saying what holds."""
    if report.violations:
        return list(report.violations)
    s = report.summary
    daemons = f"; no context open for a pod gone or elsewhere on {', '.join(report.daemons)}" if report.daemons else ""
    return [f"ok: {s.pods} pods hold shares of {s.gpus} GPUs on {s.nodes} nodes; no GPU over-allocated, no bound "
            f"pod without its allocation, no allocation without its binding{daemons}"]
