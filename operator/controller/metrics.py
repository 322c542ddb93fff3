"""The operator's Prometheus exporter: names, help and labels from the catalogue
(`fgpu_contracts.metrics.operator`), nothing spelled twice.

Events are counted where they happen, at the cost of a cached counter child's `inc` (scheduling attempts,
Binding results, create->bound latency, webhook decisions). Everything that is state — pending pods, the
cluster's allocation and fragmentation, per-GPU and per-container allocations, leadership — is computed at
scrape time from the scheduler's in-memory model by `ModelGauges`, so a released pod's series vanish with
it and nothing is kept up to date per pod. The model is not thread-safe (one asyncio loop owns it), so the
scrape thread has the loop take a `snapshot` (counts, numpy figures, references to immutable rows: ~10 ms for
1000 nodes and 16k pods on a busy 2-CPU machine) and builds the series itself; `exposition` writes them.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from fgpu_contracts.metrics import Metric, of

from ..kube.outcome import Result
from ..objects import parse_time
from ..placement.filters import FILTERS, NodeAffinity, NodeUnschedulable
from ..placement.fragmentation import FragMeter
from ..placement.framework import Unschedulable
from ..placement.gpus import gpu_memory_mib, gpu_sms
from ..placement.model import MILLI
from ..placement.slo_filter import HELD_REASON as SLO_HELD_REASON
from ..placement.slo_filter import REASON as SLO_REASON
from . import exposition
from .exposition import Samples

log = logging.getLogger("fgpu.metrics")
CATALOGUE: dict[str, Metric] = of("operator")
MIB = 1 << 20

#: Why a pod is unschedulable, as a small fixed set: the filter plug-in (kube-scheduler's names), or one of ours.
REASONS = (*(f.name for f in FILTERS), "NoNodes", "InvalidRequest", "MigReconfiguring", "Error", "Other")
QUEUES = ("active", "binding", "unschedulable")
SHARING = ("fractional", "exclusive", "timeSlicing", "mps", "mig")
PLACED_MODES = ("fractional", "exclusive")  # the GPUs placement gives shares / whole GPUs of

_EXACT = {NodeUnschedulable.reason: "NodeUnschedulable", NodeAffinity.reason: "NodeAffinity",
          "Too many pods": "NodeResourcesFit", "Insufficient cpu": "NodeResourcesFit",
          "Insufficient memory": "NodeResourcesFit", "node(s) had no GPU": "GpuModel",
          "node(s) had no GPU of the requested model": "GpuModel", "Insufficient GPU": "GpuFit",
          "Insufficient whole GPU": "GpuFit", "Insufficient GPU memory": "GpuFit",
          SLO_REASON: "SloFit", SLO_HELD_REASON: "SloFit"}
_PREFIXES = (("node(s) had untolerated taint", "TaintToleration"), ("node(s) had no GPU allowed", "GpuFit"),
             ("node(s) had fewer than", "GpuFit"),
             ("Insufficient nvidia.com/mig-", "MigSlot"), ("Insufficient ", "NodeResourcesFit"))
_ORDER = {name: i for i, name in enumerate(REASONS)}


def reason_plugin(reason: str) -> str:
    """The filter plug-in that writes this rejection reason (filters.py's wording), or Other."""
    found = _EXACT.get(reason)
    if found is None:
        found = next((plugin for prefix, plugin in _PREFIXES if reason.startswith(prefix)), "Other")
    return found


def unschedulable_reason(outcome: Unschedulable) -> str:
    """One reason for a failed placement: the plug-in that rejected the most nodes (ties: the later filter,
    the one closer to fitting); NoNodes when there are none."""
    if outcome.total_nodes == 0:
        return "NoNodes"
    counts: dict[str, int] = {}
    for reason, n in outcome.reasons:
        plugin = reason_plugin(reason)
        counts[plugin] = counts.get(plugin, 0) + n
    if not counts:
        return "Other"
    return max(counts, key=lambda p: (counts[p], _ORDER[p]))


#: fgpu_scheduler_preemptions_total's results (the catalogue's help says what each means).
PREEMPTION_RESULTS = ("nominated", "none", "never", "failed")


def _counter(name: str, registry: CollectorRegistry) -> Counter:
    m = CATALOGUE[name]
    return Counter(name.removesuffix("_total"), m.help, m.labels, registry=registry)


def _histogram(name: str, registry: CollectorRegistry) -> Histogram:
    m = CATALOGUE[name]
    return Histogram(name, m.help, m.labels, registry=registry, buckets=m.buckets)


class OperatorMetrics:
    """The operator's registry of event counters (called from the scheduler and the webhook) and the model's
    gauges (`attach` them to the scheduler once there is one)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self._attempts = _counter("fgpu_scheduler_attempts_total", self.registry)
        self._binds = _counter("fgpu_scheduler_binds_total", self.registry)
        self._latency = _histogram("fgpu_scheduler_create_to_bound_seconds", self.registry)
        self._admissions = _counter("fgpu_webhook_admissions_total", self.registry)
        self._events_dropped = _counter("fgpu_scheduler_events_dropped_total", self.registry)
        self._slo_holds = _counter("fgpu_scheduler_slo_holds_total", self.registry)
        self._mig_changes = _counter("fgpu_mig_reconfigurations_total", self.registry)
        self._mig_seconds = _histogram("fgpu_mig_reconfiguration_seconds", self.registry)
        self._preemptions = _counter("fgpu_scheduler_preemptions_total", self.registry)
        self._victims = _counter("fgpu_scheduler_preemption_victims_total", self.registry)
        self._preempt_seconds = _histogram("fgpu_scheduler_preemption_decision_seconds", self.registry)
        self._children: dict[tuple, object] = {}
        # Every outcome's series exists from the start at 0: one first seen at 1 hides that increment from
        # rate() and increase(), so the first bind conflict or the first pod of a reason would never show.
        for result in Result:
            self._child(self._binds, result.value)
        self._child(self._binds, "not_leader")
        self._child(self._attempts, "scheduled", "")
        self._child(self._attempts, "error", "Error")
        for reason in REASONS:
            if reason != "Error":
                self._child(self._attempts, "unschedulable", reason)
        for change in ("held", "released"):
            self._child(self._slo_holds, change)
        for result in ("started", "done", "failed"):
            self._child(self._mig_changes, result)
        for result in PREEMPTION_RESULTS:
            self._child(self._preemptions, result)
        self.model = ModelGauges()

    def _child(self, metric, *labels: str):
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    # --- events --------------------------------------------------------------------------------------------
    def attempt(self, result: str, reason: str = "") -> None:
        self._child(self._attempts, result, reason).inc()

    def bind(self, result: str, pod: dict | None = None) -> None:
        """A Binding's result; for `ok`, the pod's create->bound latency is observed."""
        self._child(self._binds, result).inc()
        if result == "ok" and pod is not None:
            created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
            if created is not None:
                self._latency.observe(max(0.0, time.time() - created.timestamp()))

    def event_dropped(self) -> None:
        self._events_dropped.inc()

    def slo_hold(self, change: str) -> None:
        """A GPU held against low-priority shares (its protected pod measured over its SLO), or released."""
        self._child(self._slo_holds, change).inc()

    def mig_started(self, gpus: int) -> None:
        """A dynamic-MIG re-layout recorded, changing `gpus` GPUs."""
        self._child(self._mig_changes, "started").inc(gpus)

    def mig_finished(self, result: str, seconds: float) -> None:
        self._child(self._mig_changes, result).inc()
        self._mig_seconds.observe(seconds)

    def preemption(self, result: str, victims: int = 0, seconds: float | None = None) -> None:
        """One preemption attempt (PREEMPTION_RESULTS), its victims, and the planner's time when it ran."""
        self._child(self._preemptions, result).inc()
        if victims:
            self._victims.inc(victims)
        if seconds is not None:
            self._preempt_seconds.observe(seconds)

    def admission(self, webhook: str, outcome: str, source: str = "") -> None:
        self._child(self._admissions, webhook, outcome, source).inc()

    # --- state ---------------------------------------------------------------------------------------------
    def attach(self, scheduler, identity: str, is_leader: Callable[[], bool],
               loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Read the scheduler's model at scrape time, on `loop` (the one that owns the model)."""
        m = self.model
        m.identity, m.is_leader, m.loop, m.scheduler = identity, is_leader, loop, scheduler

    def exposition(self) -> bytes:
        """What /metrics answers, whole (tests; the endpoint sends `exposition_chunks` piece by piece)."""
        return b"".join(self.exposition_chunks())

    def exposition_chunks(self) -> list[bytes]:
        """The registry's families, then every gauge of the catalogue, in pieces (`GaugeWriter.chunks`)."""
        return [generate_latest(self.registry), *self.model.chunks()]

    def serve(self, port: int, addr: str = "0.0.0.0"):
        """Serve /metrics on a thread; returns the HTTP server (`shutdown()` it). OSError if the port is taken."""
        return exposition.serve(self.exposition_chunks, port, addr)


class ModelGauges:
    """Every gauge of the catalogue, computed from the scheduler's model when scraped."""

    GAUGES = tuple(name for name, m in CATALOGUE.items() if m.type == "gauge")
    FAMILIES = tuple((name, CATALOGUE[name].help, CATALOGUE[name].labels) for name in GAUGES)  # the writer's

    def __init__(self, timeout_s: float = 5.0):
        self.scheduler = None  # a Scheduler (not imported: it imports this module)
        self.identity = ""
        self.is_leader: Callable[[], bool] = lambda: False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.timeout_s = timeout_s
        self.writer = exposition.GaugeWriter(self.FAMILIES)

    def chunks(self) -> list[bytes]:
        return self.writer.chunks(*self.read())

    def samples(self) -> Samples:
        """Every sample one scrape writes, the cluster's and every node's, as one mapping."""
        cluster, parts = self.read()
        out = {name: dict(series) for name, series in cluster.items()}
        for _, _, compute in parts:
            for name, series in compute().items():
                out.setdefault(name, {}).update(series)
        return out

    def read(self) -> tuple[Samples, list[Part]]:
        """The cluster's samples, and each node's part (its samples computed only when the writer needs them)."""
        out: Samples = {}
        if self.identity:
            out["fgpu_operator_leader"] = {(self.identity,): 1.0 if self.is_leader() else 0.0}
        scheduler = self.scheduler
        if scheduler is None:  # start-up: nothing to read yet
            return out, []
        try:
            snap = self._on_loop(lambda: snapshot(scheduler))
        except Exception as err:  # the loop is busy or gone (shutdown): this scrape has no model series
            log.warning("metrics: the scheduler's model was not read: %r", err)
            return out, []
        out.update(cluster_samples(snap))
        return out, node_parts(snap)

    def _on_loop(self, read: Callable[[], dict]):
        loop = self.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop or not loop.is_running():
            return read()
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(read())
                except BaseException as err:  # noqa: BLE001  (handed to the scrape thread)
                    future.set_exception(err)

        loop.call_soon_threadsafe(run)
        try:
            return future.result(self.timeout_s)
        finally:
            future.cancel()


@dataclass(frozen=True)
class Snapshot:
    """What the gauges need, copied from the model on its loop: counts, the cluster figures (numpy, a few
    ms), and references to immutable parts (node specs, each pod's hand-off rows)."""

    pending: dict[tuple[str, str], float]
    gpus: dict[tuple[str, str], float]
    allocation: float
    fragmentation: float
    fragment_gpus: float
    specs: dict  # node name -> NodeSpec (frozen)
    held: dict  # node name -> the rows of each pod there (each a tuple of dicts never changed in place)
    mig_changes: dict = field(default_factory=dict)  # (node, GPU) -> 1 while its change is in flight, else 0


def snapshot(s) -> Snapshot:
    """Read the scheduler `s`'s model; runs on the model's loop, so keep it to copies and numpy."""
    pending = {("active", ""): float(len(s.queue)), ("binding", ""): float(len(s.binding))}
    pending.update({("unschedulable", r): 0.0 for r in REASONS})
    for entry in s.parked.values():
        pending["unschedulable", entry.reason if entry.reason in _ORDER else "Other"] += 1

    # the cluster: GPUs, allocation and FGD fragmentation over the placed GPUs (the simulator's function)
    live = s.live
    specs = dict(live.specs)
    gpus = {(mode, h): 0.0 for mode in SHARING for h in ("true", "false")}
    for spec in specs.values():
        for g in spec.gpus:
            key = ("mig" if g.mig else g.sharing, "true" if g.healthy else "false")
            gpus[key] = gpus.get(key, 0.0) + 1
    alloc = frag = fragment = 0.0
    c = live.cluster
    if c is not None:
        placed = c.gpu_slots & c.gpu_healthy & np.isin(c.gpu_mode, PLACED_MODES)
        left = np.where(placed, np.clip(c.gpu_left, 0, MILLI), 0)
        capacity, idle = int(placed.sum()) * MILLI, int(left.sum())
        if capacity:
            alloc = (capacity - idle) / capacity
            fragment = float(FragMeter(c, live.workload).amount(c.cpu_left, left, c.model_idx).sum())
            fragment = min(max(fragment, 0.0), float(idle))
            frag = fragment / idle if idle else 0.0
    # NodeAllocations keeps node -> pod uid -> rows; a shallow copy of that index (its public `rows` sorts
    # every node's rows, which costs the loop ten times as much as this)
    held = {node: tuple(pods.values()) for node, pods in s.held._by_node.items()}
    busy = {c.gpu for c in s.mig.in_flight()}
    changes = {(name, g.uuid): float(g.uuid in busy) for name, spec in specs.items() for g in spec.gpus
               if g.mig_dynamic}
    return Snapshot(pending, gpus, alloc, frag, fragment / MILLI, specs, held, changes)


def cluster_samples(snap: Snapshot) -> Samples:
    """The gauges of the whole cluster (no NaN, none < 0)."""
    return {"fgpu_scheduler_pending_pods": snap.pending, "fgpu_cluster_gpus": snap.gpus,
            "fgpu_cluster_gpu_allocation_ratio": {(): snap.allocation},
            "fgpu_cluster_gpu_fragmentation_ratio": {(): snap.fragmentation},
            "fgpu_cluster_fragmented_gpus": {(): snap.fragment_gpus},
            "fgpu_mig_reconfiguration_in_progress": snap.mig_changes}


#: a node's part of a scrape: its name, what its series follow from (its spec and each pod's rows there, by
#: identity), and a function giving its samples
Part = tuple[str, tuple, Callable[[], Samples]]


def node_parts(snap: Snapshot) -> list[Part]:
    """Each node's part: the nodes the model has, then nodes it lost that pods still hold shares of."""
    nodes = [(name, spec, snap.held.get(name, ())) for name, spec in snap.specs.items()]
    nodes += [(name, None, held) for name, held in snap.held.items() if name not in snap.specs]
    return [(name, (spec, *held), functools.partial(node_samples, name, spec, held)) for name, spec, held in nodes]


PER_GPU = ("fgpu_scheduler_gpu_allocated_ratio", "fgpu_scheduler_gpu_memory_allocated_bytes",
           "fgpu_scheduler_gpu_sm_allocated_ratio", "fgpu_scheduler_gpu_containers", "hami_gpu_memory_limit_bytes",
           "hami_gpu_core_limit_ratio", "hami_gpu_memory_allocated_bytes", "hami_gpu_core_allocated_ratio",
           "hami_node_gpu_memory_allocated_ratio")


def node_samples(node: str, spec, held: tuple) -> Samples:
    """One node's per-GPU and per-container gauges from its spec (None: the model no longer has the node) and
    what each pod there holds (its hand-off rows). No NaN, none < 0."""
    device: dict[str, tuple] = {}  # uuid -> (GPU index, GPU, MIG instance or None)
    for j, g in enumerate(spec.gpus if spec is not None else ()):
        device.setdefault(g.uuid, (j, g, None))
        for m in g.mig:
            device.setdefault(m.uuid, (j, g, m))
    used: dict[str, list[float]] = {}  # GPU uuid -> [milli, bytes, sm pct, containers]
    vmem: dict[tuple[str, ...], float] = {}
    vcore: dict[tuple[str, ...], float] = {}
    for rows in held:
        for row in rows:
            found = device.get(row["uuid"])
            milli, mem, sm = _row_share(row, found)
            labels = (row.get("namespace", ""), node, row.get("pod", ""), row.get("container", ""), row["uuid"])
            vmem[labels] = vmem.get(labels, 0.0) + mem
            vcore[labels] = vcore.get(labels, 0.0) + sm
            if found is not None:
                acc = used.setdefault(found[1].uuid, [0.0, 0.0, 0.0, 0.0])
                acc[0] += milli
                acc[1] += mem
                acc[2] += sm
                acc[3] += 1
    out: Samples = {"hami_vgpu_memory_allocated_bytes": vmem, "hami_vgpu_core_allocated_ratio": vcore}
    out.update({name: {} for name in PER_GPU})
    for j, g in enumerate(spec.gpus if spec is not None else ()):
        milli, mem, sm, count = used.get(g.uuid, (0.0, 0.0, 0.0, 0.0))
        limit = float((g.mem_mib or gpu_memory_mib(g.model)) * MIB)
        hami = (node, g.uuid, str(j), g.model)
        ours = (*hami, "mig" if g.mig else g.sharing)
        out["fgpu_scheduler_gpu_allocated_ratio"][ours] = milli / MILLI
        out["fgpu_scheduler_gpu_memory_allocated_bytes"][ours] = mem
        out["fgpu_scheduler_gpu_sm_allocated_ratio"][ours] = sm / 100
        out["fgpu_scheduler_gpu_containers"][ours] = count
        out["hami_gpu_memory_limit_bytes"][hami] = limit
        out["hami_gpu_core_limit_ratio"][hami] = 100.0
        out["hami_gpu_memory_allocated_bytes"][(node, g.uuid, str(j), "100", g.model)] = mem
        out["hami_gpu_core_allocated_ratio"][hami] = sm
        if limit > 0:
            out["hami_node_gpu_memory_allocated_ratio"][hami[:3]] = mem / limit
    return out


def _row_share(row: dict, found: tuple | None) -> tuple[float, float, float]:
    """(milli-GPU, bytes, SM percent) one hand-off row holds of its physical GPU. A MIG instance holds its
    memory and its slice of the GPU (its SMs' share of the GPU's) as compute and SM share."""
    if found is not None and found[2] is not None:
        _, g, m = found
        sms, mem_mib = g.sms or gpu_sms(g.model), g.mem_mib or gpu_memory_mib(g.model)
        share = m.sms / sms if sms and m.sms else (m.mem_mib / mem_mib if mem_mib else 0.0)
        share = min(share, 1.0)
        return share * MILLI, float(m.mem_mib * MIB), 100.0 * share
    if found is None and row.get("migProfile"):  # an instance the node no longer lists: no size to report
        return 0.0, 0.0, 0.0
    milli = float(row.get("milliGpu", MILLI))
    mem = row.get("memBytes")
    if mem is None and found is not None:
        g = found[1]
        mem = (g.mem_mib or gpu_memory_mib(g.model)) * MIB
    sm = row.get("smPct")
    return milli, float(mem or 0), float(sm if sm is not None else 100)
