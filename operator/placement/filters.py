"""Filters as plug-ins, in kube-scheduler's order and words: each keeps the nodes that can hold a request and
says, per rejected node, why ("0/12 nodes are available: 4 Insufficient GPU memory, 8 node(s) had untolerated
taint {gpu: h100}.").

A filter has `applies` (cheap: skip it when the request or cluster gives it nothing to check, so a trace
replay pays only for CPU, memory and GPUs) and `failures`: (reason, failing-node mask) pairs over the nodes
`rows`. A node is counted under the reasons of the first filter that rejects it; one filter may give one
node several reasons (cpu and memory both short), as NodeResourcesFit does.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .fit import COMPUTE, FULL, KIND, MEMORY, fitting_gpus
from .model import Cluster, NodeSpec, Request, SelectorTerm, Taint, Toleration
from .models import reason as model_reason
from .slo_filter import SloFit

Failures = list[tuple[str, np.ndarray]]
ALL = slice(None)  # every node: plain views, no gathering copies (the replay's hot path)


def _count(cluster: Cluster, rows) -> int:
    return cluster.size if isinstance(rows, slice) else len(rows)


def _indices(cluster: Cluster, rows) -> range | np.ndarray:
    return range(cluster.size) if isinstance(rows, slice) else rows


class NodeUnschedulable:
    """Cordoned nodes (`spec.unschedulable`) take no new pods unless the pod tolerates the cordon taint."""

    name = "NodeUnschedulable"
    reason = "node(s) were unschedulable"
    taint = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")

    def applies(self, cluster: Cluster, request: Request) -> bool:
        c = request.constraints
        return bool(cluster.unschedulable.any()) and not (c and any(tolerates(t, self.taint) for t in c.tolerations))

    def failures(self, cluster: Cluster, request: Request, rows: np.ndarray) -> Failures:
        return [(self.reason, cluster.unschedulable[rows])]


class TaintToleration:
    """NoSchedule / NoExecute taints the pod does not tolerate (PreferNoSchedule only steers scoring)."""

    name = "TaintToleration"

    def applies(self, cluster: Cluster, request: Request) -> bool:
        return bool(cluster.tainted.any())

    def failures(self, cluster: Cluster, request: Request, rows: np.ndarray) -> Failures:
        tolerations = request.constraints.tolerations if request.constraints else ()
        out: dict[str, np.ndarray] = {}
        nodes = _indices(cluster, rows)
        for k in np.flatnonzero(cluster.tainted[rows]):  # untainted nodes tolerate everything
            taint = untolerated(cluster.nodes[nodes[k]].taints, tolerations)
            if taint is not None:
                reason = f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
                out.setdefault(reason, np.zeros(_count(cluster, rows), dtype=bool))[k] = True
        return list(out.items())


#: Distinct (selector, affinity) masks NodeAffinity keeps per node-facts version: a cluster has few.
AFFINITY_MASKS_KEPT = 256


class NodeAffinity:
    """`nodeSelector` and required node affinity (terms ORed, expressions ANDed; `metadata.name` fields).

    Matching runs in Python per node, so the mask over every node is kept per selector until a node's labels
    may have changed (`Cluster.facts_version`): every GPU pod without DRA claims carries one (kept off
    fgpu's DRA nodes), and matching 1,000 nodes per decision cost more than the rest of the decision."""

    name = "NodeAffinity"
    reason = "node(s) didn't match Pod's node affinity/selector"

    def applies(self, cluster: Cluster, request: Request) -> bool:
        c = request.constraints
        return c is not None and bool(c.node_selector or c.affinity_terms)

    def failures(self, cluster: Cluster, request: Request, rows: np.ndarray) -> Failures:
        c = request.constraints
        key = (c.node_selector, c.affinity_terms)
        state = cluster.plugin_state.get(self.name)
        if state is None or state[0] != cluster.facts_version:
            state = cluster.plugin_state[self.name] = (cluster.facts_version, {})
        masks = state[1]
        matched = masks.get(key)
        if matched is None and not isinstance(rows, slice) and len(rows) < cluster.size:  # a few nodes: no pass
            return [(self.reason, np.array([not node_matches(cluster.nodes[i], *key) for i in rows], dtype=bool))]
        if matched is None:
            if len(masks) >= AFFINITY_MASKS_KEPT:
                masks.clear()
            matched = masks[key] = np.array([node_matches(n, *key) for n in cluster.nodes], dtype=bool)
        return [(self.reason, ~matched[rows])]


class NodeResourcesFit:
    """CPU, memory, pod count and counted extended resources (time-slicing / MPS replicas, device slots)."""

    name = "NodeResourcesFit"

    def applies(self, cluster: Cluster, request: Request) -> bool:
        return True

    def failures(self, cluster: Cluster, request: Request, rows: np.ndarray) -> Failures:
        out = [("Insufficient cpu", cluster.cpu_left[rows] < request.cpu_milli),
               ("Insufficient memory", cluster.mem_left[rows] < request.memory_mib)]
        if request.constraints is not None:
            out.append(("Too many pods", cluster.pods_left[rows] < 1))
            for name, amount in request.constraints.extended:
                left = cluster.extended_left.get(name)
                out.append((f"Insufficient {name}",
                            np.ones(_count(cluster, rows), dtype=bool) if left is None else left[rows] < amount))
        return out


class GpuModel:
    """Nodes with no GPU at all, or none of a model the pod allows: a trace's model list, or a live pod's
    model filters, each by its spelling's rule (`models`); the reason names the models ("GPU model not in
    [A100]"), so a pod waiting for a model no node has says which."""

    name = "GpuModel"

    def applies(self, cluster: Cluster, request: Request) -> bool:
        return request.wants_gpu

    def failures(self, cluster: Cluster, request: Request, rows: np.ndarray) -> Failures:
        no_gpu = cluster.gpu_count[rows] == 0
        out = [("node(s) had no GPU", no_gpu)]
        models = cluster.model_mask(request)
        if models is not None:
            out.append((self._reason(request), ~no_gpu & ~models[rows].any(axis=1)))
        return out

    @staticmethod
    def _reason(request: Request) -> str:
        c = request.constraints
        if c is not None and c.model_filters:
            return model_reason(c.model_filters)
        return "node(s) had no GPU of the requested model"


class GpuFit:
    """Enough GPUs that take this kind of request and have the share left (the fit rule in `fit`). A request
    for N devices needs N distinct such GPUs on the node; a node with fewer than N GPUs it may use at all
    says so apart from one whose GPUs are merely busy."""

    name = "GpuFit"

    def applies(self, cluster: Cluster, request: Request) -> bool:
        return request.wants_gpu

    def passes(self, cluster: Cluster, request: Request, rows: np.ndarray) -> np.ndarray:
        return fitting_gpus(cluster, request, rows, FULL) >= request.num_gpu

    def failures(self, cluster: Cluster, request: Request, rows: np.ndarray) -> Failures:
        need = request.num_gpu
        few = fitting_gpus(cluster, request, rows, KIND) < need if need > 1 else np.zeros(
            _count(cluster, rows), dtype=bool)
        compute = ~few & (fitting_gpus(cluster, request, rows, COMPUTE) < need)
        memory = ~few & ~compute & (fitting_gpus(cluster, request, rows, MEMORY) < need)
        out = [(f"node(s) had fewer than {need} GPUs the pod may use", few),
               (self._compute_reason(request), compute), ("Insufficient GPU memory", memory)]
        if request.constraints is not None:
            rest = ~few & ~compute & ~memory & (fitting_gpus(cluster, request, rows, FULL) < need)
            out.append(("node(s) had no GPU allowed by the pod's GPU UUID or sharing-group rules", rest))
        return out

    @staticmethod
    def _compute_reason(request: Request) -> str:
        if request.num_gpu > 1:
            free = f"GPUs with {request.gpu_milli} milli-GPU free" if request.is_share else "free GPUs"
            return f"node(s) had fewer than {request.num_gpu} {free}"
        return "Insufficient GPU" if request.is_share else "Insufficient whole GPU"


class MigSlot:
    """A free, healthy MIG instance of the profile asked for (NVIDIA's `nvidia.com/mig-<profile>`)."""

    name = "MigSlot"

    def applies(self, cluster: Cluster, request: Request) -> bool:
        return request.is_mig

    def failures(self, cluster: Cluster, request: Request, rows: np.ndarray) -> Failures:
        free = cluster.mig_free.get(request.mig_profile)
        short = np.ones(_count(cluster, rows), dtype=bool) if free is None else free[rows] < request.num_gpu
        return [(f"Insufficient nvidia.com/mig-{request.mig_profile}", short)]


#: kube-scheduler's order (NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit), then ours.
FILTERS = (NodeUnschedulable(), TaintToleration(), NodeAffinity(), NodeResourcesFit(), GpuModel(), GpuFit(),
           SloFit(), MigSlot())


def filter_nodes(cluster: Cluster, request: Request, rows: np.ndarray | slice = ALL) -> np.ndarray:
    """Feasible-node mask over `rows` (default: every node); the hot path: no explanations kept."""
    ok = np.ones(_count(cluster, rows), dtype=bool)
    for plugin in FILTERS:
        if not plugin.applies(cluster, request):
            continue
        if hasattr(plugin, "passes"):  # one combined check where the reasons cost extra passes
            ok &= plugin.passes(cluster, request, rows)
            continue
        for _, failed in plugin.failures(cluster, request, rows):
            ok &= ~failed
    return ok


def fits_node(cluster: Cluster, request: Request, node: int) -> bool:
    """Whether one node can hold the request now (every filter, for that node alone)."""
    return bool(filter_nodes(cluster, request, np.array([node]))[0])


def rejection_counts(cluster: Cluster, request: Request, details: list[str] | None = None) -> dict[str, int]:
    """Why no node fits: each node counted under the reasons of the first filter that rejects it (and, into
    `details`, what a filter with a `detail` says about the nodes it rejected)."""
    alive = np.arange(cluster.size)
    counts: dict[str, int] = {}
    for plugin in FILTERS:
        if alive.size == 0:
            break
        if not plugin.applies(cluster, request):
            continue
        rejected = np.zeros(alive.size, dtype=bool)
        for reason, failed in plugin.failures(cluster, request, alive):
            if failed.any():
                counts[reason] = counts.get(reason, 0) + int(failed.sum())
                rejected |= failed
        said = plugin.detail(cluster, request, alive[rejected]) if (
            details is not None and rejected.any() and hasattr(plugin, "detail")) else ""
        if said:
            details.append(said)
        alive = alive[~rejected]
    return counts


# --- core/v1 matching rules -----------------------------------------------------------------------------
def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """core/v1 Toleration.ToleratesTaint."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return bool(toleration.key) and toleration.value == taint.value


def untolerated(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> Taint | None:
    tolerations = tuple(tolerations)
    for taint in taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _expression_matches(node: NodeSpec, labels: dict[str, str], key: str, op: str, values: tuple[str, ...]) -> bool:
    value = node.name if key == "metadata.name" else labels.get(key)
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        try:
            a, b = int(value), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def node_matches(node: NodeSpec, selector: tuple[tuple[str, str], ...], terms: tuple[SelectorTerm, ...]) -> bool:
    labels = dict(node.labels)
    if any(labels.get(k) != v for k, v in selector):
        return False
    if not terms:
        return True
    return any(term.expressions and all(_expression_matches(node, labels, *e) for e in term.expressions)
               for term in terms)
