"""The cluster and request model: plain data + numpy arrays, so policies can score every node at once.

A node has CPU (milli-cores), host memory (MiB), a GPU model and per-GPU free capacity in milli-GPU (1000 = a
whole GPU) and in GPU memory (MiB). A request asks for `num_gpu` distinct GPUs of one node with `gpu_milli` of
each (below 1000: a share of each, e.g. HAMi's `nvidia.com/gpu: 2` at 50% per device), optionally GPU memory
per GPU, a GPU-model constraint, CPU and host memory; or `num_gpu` MIG instances of one profile. Live nodes add GPU identities, health, sharing modes, MIG instances
and kube-scheduler's node facts (labels, taints, cordon, counted resources); live requests add `Constraints`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .errors import PlacementInputError
from .gpus import gpu_memory_mib
from .models import ModelFilter, admits_all

MILLI = 1000
#: Affinity tags used by the GPU-clustering policy: 0 = shares one GPU, k = k whole GPUs.
SHARE_TAG = 0
MAX_TAGS = 9
#: How a GPU is offered (the node config's sharing mode): only `fractional` GPUs take shares, whole-GPU
#: requests take `fractional` or `exclusive` ones; time-sliced / MPS replicas are counted node resources.
SHAREABLE_MODES = ("fractional",)
WHOLE_MODES = ("fractional", "exclusive")


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod's toleration (core/v1 semantics; empty key with Exists tolerates every taint)."""

    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # "" matches every effect


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """One required node-affinity term: all its (key, operator, values) expressions must match."""

    expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class Constraints:
    """What a live pod adds to its shape: where it may go and with whom it may share a GPU.

    Traces carry none of this (None on the request), so replays pay nothing for it."""

    node_selector: tuple[tuple[str, str], ...] = ()
    affinity_terms: tuple[SelectorTerm, ...] = ()  # ORed, as requiredDuringScheduling nodeSelectorTerms
    tolerations: tuple[Toleration, ...] = ()
    model_filters: tuple[ModelFilter, ...] = ()  # GPU-model constraints, each by its spelling's rule (`models`)
    uuids: tuple[str, ...] = ()  # allowed GPU UUIDs (empty: any)
    exclude_uuids: tuple[str, ...] = ()
    extended: tuple[tuple[str, int], ...] = ()  # counted node resources (time-slicing replicas, ...)
    affinity_group: str = ""  # KubeShare: prefer a GPU already holding this group
    gpu_policy: str = ""  # HAMi gpu-scheduler-policy: binpack (the policy's choice) or spread
    anti_affinity_group: str = ""  # never a GPU holding this group
    exclusion_group: str = ""  # only GPUs holding this group or nothing exclusive


@dataclass(frozen=True, slots=True)
class Request:
    """What one pod asks for. `gpu_models` empty means any GPU model is fine."""

    name: str
    cpu_milli: int
    memory_mib: int = 0
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_models: tuple[str, ...] = ()
    gpu_mem_mib: int = 0
    sm_pct: int = 0
    priority: int = 0
    qos: str = ""
    gpu_mem_pct: int = 0  # memory per GPU as a percentage of the device's (0: gpu_mem_mib or the share)
    mig_profile: str = ""  # a MIG instance of this profile per GPU asked (num_gpu instances)
    constraints: Constraints | None = None
    slo: float = 0.0  # a protected pod's slowdown bound (docs/qos.md); 0: best-effort, no bound
    duty: float = 0.0  # busy fraction alone (its workload class); 0: its GPU share
    guard_slo: bool = False  # place it only where no co-runner's SLO breaks (the QoS filter, `slo_filter`)
    slo_margin: float = 0.0  # the filter's allowance for the model's error in this attempt (`slo_guard.margin_first`)

    @property
    def is_share(self) -> bool:
        """A fraction of each of its GPUs (one, or several distinct ones): the only case that may share a device
        with other pods (a MIG request's `gpu_milli`, where given, is only the share it stands for)."""
        return self.num_gpu > 0 and 0 < self.gpu_milli < MILLI and not self.mig_profile

    @property
    def is_mig(self) -> bool:
        return bool(self.mig_profile) and self.num_gpu > 0

    @property
    def explicit_memory(self) -> bool:
        """Memory not implied by the GPU share: the fit rule must then check memory on its own."""
        return bool(self.gpu_mem_mib or self.gpu_mem_pct)

    @property
    def wants_gpu(self) -> bool:
        """A share or whole GPUs, placed on GPUs by the core (a MIG instance is placed apart)."""
        return self.num_gpu > 0 and self.gpu_milli > 0 and not self.mig_profile

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli if self.wants_gpu else 0

    @property
    def affinity_tag(self) -> int | None:
        if not self.wants_gpu:
            return None
        return SHARE_TAG if self.is_share else min(self.num_gpu, MAX_TAGS - 1)

    @property
    def spec(self) -> tuple[int, int, int, tuple[str, ...]]:
        """The shape that placement depends on (FGD's "pod resource"): CPU, GPU fraction, GPU count, models.

        CPU-less requests count as 100 milli-cores, as kube-scheduler's non-zero defaults do for scoring."""
        return (self.cpu_milli or 100, self.gpu_milli if self.wants_gpu else 0,
                self.num_gpu if self.wants_gpu else 0, self.gpu_models)


@dataclass(frozen=True, slots=True)
class MigSlot:
    """A MIG instance of a node's GPU: fixed by the node config, or re-laid by the dynamic-MIG planner
    (`mig_plan`) on a GPU marked `mig_dynamic`. `start` is its first memory slice (-1: not reported)."""

    uuid: str
    profile: str
    mem_mib: int = 0
    sms: int = 0
    healthy: bool = True
    start: int = -1


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU of a live node, as its device plugin publishes it (the inventory)."""

    uuid: str
    model: str
    mem_mib: int = 0  # 0: from the model (trace table, then simgpu's catalog)
    sms: int = 0
    sharing: str = "fractional"  # fractional | exclusive | timeSlicing | mps
    healthy: bool = True
    mig: tuple[MigSlot, ...] = ()
    mig_dynamic: bool = False  # in MIG mode, its idle instances may be re-laid on demand (mig_plan)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A node. Traces give CPU, memory and `num_gpu` GPUs of `model`; live nodes also list each GPU (`gpus`)
    and what kube-scheduler's node filters read (labels, taints, cordon, counted resources, pod limit)."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    model: str = ""
    gpus: tuple[GpuInfo, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    extended: tuple[tuple[str, int], ...] = ()  # allocatable counted resources (name, amount)
    max_pods: int = 0  # 0: no limit (traces)

    def gpu_list(self) -> tuple[GpuInfo, ...]:
        """Every GPU of the node: the listed ones, or `num_gpu` anonymous fractional GPUs of `model`."""
        if self.gpus:
            return self.gpus
        return tuple(GpuInfo(f"{self.name}/{i}", self.model) for i in range(self.num_gpu))


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a request went: the node index and the GPU indices it uses (empty for CPU-only requests), and
    for a MIG request the instance UUIDs it holds."""

    request: Request
    node: int
    gpus: tuple[int, ...]
    mig: tuple[str, ...] = ()


@dataclass
class Cluster:
    """Mutable cluster state as arrays over nodes (N) and GPU slots (N x G, padded slots have capacity 0).

    `reserve` and `release` are the only mutations of allocations; a live cluster also flips GPU health
    (`set_gpu_health`). Every mutation bumps the node's `version`, which policies use to cache scores."""

    nodes: list[NodeSpec]
    models: list[str] = field(init=False)
    model_idx: np.ndarray = field(init=False)
    gpu_count: np.ndarray = field(init=False)
    cpu_cap: np.ndarray = field(init=False)
    mem_cap: np.ndarray = field(init=False)
    cpu_left: np.ndarray = field(init=False)
    mem_left: np.ndarray = field(init=False)
    gpu_left: np.ndarray = field(init=False)
    gpu_mem_cap: np.ndarray = field(init=False)
    gpu_mem_left: np.ndarray = field(init=False)
    gpu_left_total: np.ndarray = field(init=False)
    affinity: np.ndarray = field(init=False)
    version: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        if not self.nodes:
            raise PlacementInputError("the node list is empty", field="nodes")
        self.models = sorted({n.model for n in self.nodes} | {g.model for n in self.nodes for g in n.gpus})
        index = {m: i for i, m in enumerate(self.models)}
        n = len(self.nodes)
        gpu_lists = [node.gpu_list() for node in self.nodes]
        width = max(1, max(len(g) for g in gpu_lists))
        self.model_idx = np.array([index[node.model] for node in self.nodes], dtype=np.int32)
        self.gpu_count = np.array([len(g) for g in gpu_lists], dtype=np.int32)
        self.cpu_cap = np.array([node.cpu_milli for node in self.nodes], dtype=np.int64)
        self.mem_cap = np.array([node.memory_mib for node in self.nodes], dtype=np.int64)
        self.gpu_model_idx = np.full((n, width), -1, dtype=np.int32)
        self.gpu_mem_cap = np.zeros((n, width), dtype=np.int64)
        self.gpu_mode = np.full((n, width), "", dtype=object)
        self.gpu_healthy = np.zeros((n, width), dtype=bool)
        self.gpu_uuid: list[list[str]] = []
        per_model_mem = {m: gpu_memory_mib(m) for m in self.models}
        for i, gpus in enumerate(gpu_lists):
            self.gpu_uuid.append([g.uuid for g in gpus])
            for j, g in enumerate(gpus):
                self.gpu_model_idx[i, j] = index[g.model]
                self.gpu_mem_cap[i, j] = g.mem_mib or per_model_mem[g.model]
                self.gpu_mode[i, j] = "mig" if g.mig or g.mig_dynamic else g.sharing
                self.gpu_healthy[i, j] = g.healthy
        self.uuid_index = {u: (i, j) for i, uuids in enumerate(self.gpu_uuid) for j, u in enumerate(uuids)}
        self.affinity = np.zeros((n, MAX_TAGS), dtype=np.int32)
        self.version = np.zeros(n, dtype=np.int64)
        self.pods_cap = np.array([node.max_pods for node in self.nodes], dtype=np.int64)
        self.extended_cap = {name: np.zeros(n, dtype=np.int64)
                             for name in sorted({k for node in self.nodes for k, _ in node.extended})}
        for i, node in enumerate(self.nodes):
            for name, amount in node.extended:
                self.extended_cap[name][i] = amount
        self.unschedulable = np.array([node.unschedulable for node in self.nodes], dtype=bool)
        self.tainted = np.array([bool(node.taints) for node in self.nodes], dtype=bool)
        self.mig_profiles = sorted({m.profile for node in self.nodes for g in node.gpus for m in g.mig})
        self._model_allowed: dict[tuple, np.ndarray] = {}  # (trace models, filters) -> allowed per model
        self.mig_dynamic_any = np.array([any(g.mig_dynamic for g in node.gpus) for node in self.nodes], dtype=bool)
        self.reset()

    def reset(self) -> None:
        """Empty the cluster (every node back to full capacity)."""
        self.cpu_left = self.cpu_cap.copy()
        self.mem_left = self.mem_cap.copy()
        self.refresh_gpu_masks()
        self.gpu_left = np.where(self.gpu_slots, MILLI, 0).astype(np.int32)
        self.gpu_mem_left = self.gpu_mem_cap.copy()
        self.gpu_left_total = self.gpu_left.sum(axis=1).astype(np.int64)
        self.affinity[:] = 0
        self.pods_left = np.where(self.pods_cap > 0, self.pods_cap, np.iinfo(np.int64).max // 2)
        self.extended_left = {name: cap.copy() for name, cap in self.extended_cap.items()}
        #: MIG instances: uuid -> (node, profile, healthy); free ones per profile counted per node.
        self.mig_slots = {m.uuid: (i, m.profile, m.healthy) for i, node in enumerate(self.nodes)
                          for g in node.gpus for m in g.mig}
        self.mig_taken: dict[str, str] = {}  # instance uuid -> request name
        self.mig_gpu = {m.uuid: j for node in self.nodes for j, g in enumerate(node.gpus) for m in g.mig}
        self.mig_free = {p: np.zeros(self.size, dtype=np.int64) for p in self.mig_profiles}
        for node, profile, healthy in self.mig_slots.values():
            if healthy:
                self.mig_free[profile][node] += 1
        #: GPU memory is implied by the GPU share until some reservation names its own.
        self.explicit_memory = False
        # KubeShare groups (live pods only): pods per GPU, the exclusion group holding a GPU and its pods,
        # and the GPUs each anti-affinity / affinity group is on.
        self.gpu_pods = np.zeros(self.gpu_left.shape, dtype=np.int32)
        self.gpu_excl = np.zeros(self.gpu_left.shape, dtype=np.int32)
        self.gpu_excl_pods = np.zeros(self.gpu_left.shape, dtype=np.int32)
        self.exclusion_ids: dict[str, int] = {}
        self.group_gpus: dict[str, dict[tuple[int, int], int]] = {}  # "a:grp" / "n:grp" -> {(node, gpu): pods}
        #: Shares on each GPU (node, gpu) -> {request name: request}: the co-runners the QoS filter prices.
        self.gpu_tenants: dict[tuple[int, int], dict[str, Request]] = {}
        self.plugin_state: dict[str, object] = {}  # caches of filter plug-ins, stamped with node versions
        self.facts_version = 0  # bumped when any node's labels, taints or cordon may have changed
        self.version += 1

    def refresh_gpu_masks(self) -> None:
        """Which GPU slots exist, and which take shares / whole-GPU requests (healthy, right sharing mode)."""
        width = self.gpu_model_idx.shape[1]
        self.gpu_slots = np.arange(width)[None, :] < self.gpu_count[:, None]
        self.gpu_shareable = self.gpu_slots & self.gpu_healthy & np.isin(self.gpu_mode, SHAREABLE_MODES)
        self.gpu_wholeable = self.gpu_slots & self.gpu_healthy & np.isin(self.gpu_mode, WHOLE_MODES)

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def total_gpus(self) -> int:
        return int(self.gpu_count.sum())

    def model_mask(self, request: Request) -> np.ndarray | None:
        """(N, G): GPUs whose own model the request allows (a trace's model list, a live pod's model filters;
        mixed-model nodes are judged GPU by GPU); None when it allows every model."""
        c = request.constraints
        filters = c.model_filters if c is not None else ()
        if not request.gpu_models and not filters:
            return None
        key = (request.gpu_models, filters)
        allowed = self._model_allowed.get(key)
        if allowed is None:
            allowed = np.array([m != "" and (not request.gpu_models or m in request.gpu_models)
                                and admits_all(filters, m) for m in self.models] + [False])
            self._model_allowed[key] = allowed
        return allowed[self.gpu_model_idx]  # index -1 (no GPU) reads the trailing False

    def gpu_memory_need(self, request: Request, rows=slice(None)) -> np.ndarray | int:
        """GPU memory (MiB) the request holds on each GPU of `rows`: its own figure, a percentage of the
        device, or its GPU share of the device's memory."""
        if request.gpu_mem_mib:
            return request.gpu_mem_mib
        cap = self.gpu_mem_cap[rows]
        if request.gpu_mem_pct:
            return cap * request.gpu_mem_pct // 100
        return cap * request.gpu_milli // MILLI

    # --- reserve / release: the only two mutations of allocations -------------------------------------
    def reserve(self, request: Request, node: int, gpus: Sequence[int], mig: Sequence[str] = ()) -> Placement:
        """Take the request's resources on `node` and the given GPUs (or MIG instances); the framework
        checked they fit."""
        self._apply(request, node, gpus, mig, -1)
        return Placement(request, node, tuple(int(g) for g in gpus), tuple(mig))

    def release(self, placement: Placement) -> None:
        """Give a placement's resources back (pods departing in timeline mode, deleted pods live)."""
        self._apply(placement.request, placement.node, placement.gpus, placement.mig, +1)

    def _apply(self, request: Request, node: int, gpus: Sequence[int], mig: Sequence[str], sign: int) -> None:
        self.cpu_left[node] += sign * request.cpu_milli
        self.mem_left[node] += sign * request.memory_mib
        self.pods_left[node] += sign
        if request.wants_gpu:
            if request.explicit_memory:
                self.explicit_memory = True
            for g in gpus:
                self.gpu_left[node, g] += sign * request.gpu_milli
                self.gpu_mem_left[node, g] += sign * int(self.gpu_memory_need(request, (node, g)))
            self.gpu_left_total[node] += sign * request.gpu_milli * len(gpus)
            if request.is_share:
                for g in gpus:
                    tenants = self.gpu_tenants.setdefault((node, g), {})
                    if sign < 0:
                        tenants[request.name] = request
                    else:
                        tenants.pop(request.name, None)
            self.affinity[node, request.affinity_tag] -= sign
        for uuid in mig:
            _, profile, healthy = self.mig_slots[uuid]
            if sign < 0:
                self.mig_taken[uuid] = request.name
            else:
                self.mig_taken.pop(uuid, None)
            if healthy:
                self.mig_free[profile][node] += sign
        c = request.constraints
        if c is not None:
            for name, amount in c.extended:
                if name in self.extended_left:
                    self.extended_left[name][node] += sign * amount
            if request.wants_gpu:
                self._count_groups(c, node, gpus, -sign)
        self.version[node] += 1

    def _count_groups(self, c: Constraints, node: int, gpus: Sequence[int], delta: int) -> None:
        """Keep the per-GPU group counts the KubeShare filters read (delta +1 on reserve, -1 on release)."""
        excl = self.exclusion_ids.setdefault(c.exclusion_group, len(self.exclusion_ids) + 1) \
            if c.exclusion_group else 0
        for g in gpus:
            self.gpu_pods[node, g] += delta
            if excl:
                self.gpu_excl_pods[node, g] += delta
                self.gpu_excl[node, g] = excl if self.gpu_excl_pods[node, g] > 0 else 0
            for key in (f"a:{c.affinity_group}" if c.affinity_group else "",
                        f"n:{c.anti_affinity_group}" if c.anti_affinity_group else ""):
                if key:
                    held = self.group_gpus.setdefault(key, {})
                    held[(node, g)] = held.get((node, g), 0) + delta
                    if held[(node, g)] <= 0:
                        del held[(node, g)]

    def set_mig_layout(self, node: int, gpu: int, slots: Sequence[MigSlot]) -> None:
        """Replace the MIG instances of one GPU (a re-layout). An instance that a placement holds must be
        kept as it is: taking it away would lose an allocation, so that is refused, not done."""
        spec = self.nodes[node]
        old = spec.gpus[gpu]
        kept = {m.uuid for m in slots}
        for m in old.mig:
            if m.uuid in self.mig_taken and (m.uuid not in kept or m not in slots):
                raise PlacementInputError(f"MIG instance {m.uuid} is held by {self.mig_taken[m.uuid]}",
                                          field="layout", allowed=["a layout that keeps every held instance"])
        for m in old.mig:
            del self.mig_slots[m.uuid]
            del self.mig_gpu[m.uuid]
            if m.healthy and m.uuid not in self.mig_taken:
                self.mig_free[m.profile][node] -= 1
        for m in slots:
            self.mig_slots[m.uuid] = (node, m.profile, m.healthy)
            self.mig_gpu[m.uuid] = gpu
            if m.profile not in self.mig_free:
                self.mig_free[m.profile] = np.zeros(self.size, dtype=np.int64)
                self.mig_profiles = sorted(self.mig_free)
            if m.healthy and m.uuid not in self.mig_taken:
                self.mig_free[m.profile][node] += 1
        gpus = list(spec.gpus)
        gpus[gpu] = replace(old, mig=tuple(slots))
        self.nodes[node] = replace(spec, gpus=tuple(gpus))
        self.version[node] += 1

    def update_node_facts(self, node: int, spec: NodeSpec) -> None:
        """A node's labels, taints or cordon changed (nothing the arrays count): take the new spec in place."""
        self.nodes[node] = spec
        self.unschedulable[node] = spec.unschedulable
        self.tainted[node] = bool(spec.taints)
        self.version[node] += 1
        self.facts_version += 1

    def set_gpu_health(self, uuid: str, healthy: bool) -> bool:
        """Mark a GPU or MIG instance (un)healthy; its pods keep their shares, new pods avoid it. True if
        anything changed."""
        if uuid in self.uuid_index:
            node, g = self.uuid_index[uuid]
            if bool(self.gpu_healthy[node, g]) == healthy:
                return False
            self.gpu_healthy[node, g] = healthy
            self.refresh_gpu_masks()
        elif uuid in self.mig_slots:
            node, profile, was = self.mig_slots[uuid]
            if was == healthy:
                return False
            self.mig_slots[uuid] = (node, profile, healthy)
            if uuid not in self.mig_taken:
                self.mig_free[profile][node] += 1 if healthy else -1
        else:
            return False
        self.version[node] += 1
        return True

