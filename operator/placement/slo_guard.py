"""Which GPUs a guarded share may join without breaking an SLO, and what joining costs (docs/qos.md).

A GPU is refused when, with the new pod added, any protected pod there (its own bound, `Request.slo`) or the
new pod itself, if protected, would run slower than its bound by `slo.SloModel`'s prediction. The cost of a
GPU that is allowed is the slack its protected co-runners lose: the rise of each one's predicted slowdown
over its room (bound - 1), added up; policies break ties by it, so best-effort pods fill the gaps beside the
protected pods that a small co-runner hurts least. A request with `slo_margin` m (the framework's first try,
`slo_filter.margin_first`) is refused where a bound breaks with the model's error allowed: 1 + (s - 1)(1 + m).

Each GPU's state is reduced to a signature (GPU model, sharing mode, its shares' classes and bounds), kept as
a small integer per GPU and refreshed only for nodes whose version changed; answers are cached per (request
class, signature). GPUs repeat few signatures, so a decision is a vectorised gather plus pricing the
signatures never seen before (a warm cluster: none or a handful).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import Cluster, Request
from .slo import SloModel, Tenant, default_model, tenant_of

_STATE_KEY = "slo_guard"


@dataclass(frozen=True, slots=True)
class Blocker:
    """Why one GPU was refused: the pod whose SLO would break there, its predicted slowdown and its bound."""

    node: int
    gpu: int
    pod: str  # the co-runner, or the new pod itself when its own bound would break
    predicted: float
    bound: float


def guards(request: Request) -> bool:
    """The filter checks guarded shares only: whole GPUs have no co-runners and MIG instances isolate."""
    return request.guard_slo and request.is_share


#: A GPU's state as the model prices it: (GPU model, sharing mode, its shares' (tenant, bound), sorted).
Signature = tuple[str, str, tuple[tuple[Tenant, float], ...]]


class _Signatures:
    """Each GPU's signature as a small integer (-1: no shares), kept per node version. GPUs repeat a few
    signatures, so a request class is priced once per signature, not once per GPU."""

    def __init__(self, shape: tuple[int, int]):
        self.version = np.full(shape[0], -1, dtype=np.int64)
        self.ids = np.full(shape, -1, dtype=np.int64)
        self.index: dict[Signature, int] = {}
        self.list: list[Signature] = []

    def refresh(self, cluster: Cluster) -> np.ndarray:
        for n in np.flatnonzero(self.version != cluster.version):
            n = int(n)
            for g in range(int(cluster.gpu_count[n])):
                tenants = cluster.gpu_tenants.get((n, g))
                if not tenants:
                    self.ids[n, g] = -1
                    continue
                sig = (cluster.models[cluster.gpu_model_idx[n, g]], str(cluster.gpu_mode[n, g]),
                       tuple(sorted((tenant_of(t), t.slo) for t in tenants.values())))
                sid = self.index.get(sig)
                if sid is None:
                    sid = self.index[sig] = len(self.list)
                    self.list.append(sig)
                self.ids[n, g] = sid
            self.version[n] = cluster.version[n]
        return self.ids


class _ClassAnswers:
    """Per request class: allowed and cost per signature id (grown as new signatures appear)."""

    def __init__(self):
        self.ok = np.ones(0, dtype=bool)
        self.cost = np.zeros(0, dtype=np.float64)

    def extend(self, sigs: list[Signature], new: Tenant, bound: float, margin: float, model: SloModel) -> None:
        start = self.ok.size
        if start == len(sigs):
            return
        ok, cost = np.ones(len(sigs) - start, dtype=bool), np.zeros(len(sigs) - start)
        for k, (gpu_model, sharing, pairs) in enumerate(sigs[start:]):
            c, broken, _ = judge(model, gpu_model, sharing, pairs, new, bound, margin)
            ok[k], cost[k] = broken is None, c
        self.ok, self.cost = np.concatenate([self.ok, ok]), np.concatenate([self.cost, cost])


def judge(model: SloModel, gpu_model: str, sharing: str, pairs, new: Tenant, bound: float, margin: float = 0.0
          ) -> tuple[float, int | None, tuple[float, ...]]:
    """(cost, index of the first pod whose SLO breaks or None, predicted slowdowns after) of adding a pod of
    class (new, bound) to a GPU holding `pairs` (tenant, bound); index len(pairs) is the new pod itself.
    `margin`: a bound breaks when 1 + (s - 1)(1 + margin) exceeds it (what co-location adds, that much more)."""
    if not pairs:
        return 0.0, None, (1.0,)
    together = [t for t, _ in pairs] + [new]
    after = model.slowdowns(gpu_model, sharing, together)
    before = model.slowdowns(gpu_model, sharing, together[:-1])
    cost, broken = 0.0, None

    def breaks(s: float, slo: float) -> bool:
        return 1.0 + (s - 1.0) * (1.0 + margin) > slo + 1e-9

    for k, ((_, slo), was, now) in enumerate(zip(pairs, before, after, strict=False)):
        if slo > 0:
            if broken is None and breaks(now, slo):
                broken = k
            cost += max(0.0, now - was) / (slo - 1.0)
    if bound > 0 and broken is None and breaks(after[-1], bound):
        broken = len(pairs)
    return cost, broken, after


def model_of(cluster: Cluster) -> SloModel:
    """The model a cluster's decisions price with: simgpu's (`slo.default_model`), unless a caller set
    another in `plugin_state["slo_model"]` (the simulator's naive rule)."""
    return cluster.plugin_state.get("slo_model") or default_model()


def class_key(request: Request) -> tuple[Tenant, float, float] | None:
    """What the filter's answer for a request depends on besides the GPUs' state (None: not guarded)."""
    return (tenant_of(request), request.slo, request.slo_margin) if guards(request) else None


def _answers(cluster: Cluster, request: Request, model: SloModel) -> tuple[np.ndarray, _ClassAnswers]:
    state = cluster.plugin_state.setdefault(_STATE_KEY, {})
    sigs = state.get("signatures")
    if sigs is None or sigs.ids.shape != cluster.gpu_left.shape:
        sigs = state["signatures"] = _Signatures(cluster.gpu_left.shape)
        state["classes"] = {}
    ids = sigs.refresh(cluster)
    key = (class_key(request), model)  # a test may price with its own model
    answers = state["classes"].setdefault(key, _ClassAnswers())
    answers.extend(sigs.list, *key[0], model)
    return ids, answers


def margin_matters(cluster: Cluster, request: Request, careful: Request, model: SloModel | None = None) -> bool:
    """Whether the margin could refuse what the bound allows for this request class on any GPU state seen:
    False on a cluster without protected pods for a best-effort share, so the preference costs nothing there."""
    model = model or model_of(cluster)
    _, plain = _answers(cluster, request, model)
    _, strict = _answers(cluster, careful, model)
    return not np.array_equal(plain.ok, strict.ok)


def slo_mask(cluster: Cluster, request: Request, rows=slice(None), model: SloModel | None = None) -> np.ndarray:
    """GPUs of `rows` the request may join without breaking an SLO (shape as `cluster.gpu_left[rows]`)."""
    ids, answers = _answers(cluster, request, model or model_of(cluster))
    ids = ids[rows]
    return np.where(ids < 0, True, answers.ok[np.maximum(ids, 0)] if answers.ok.size else True)


def slo_cost(cluster: Cluster, request: Request, rows=slice(None), model: SloModel | None = None) -> np.ndarray:
    """Slack the protected co-runners of each GPU of `rows` would lose (0 where there are none)."""
    ids, answers = _answers(cluster, request, model or model_of(cluster))
    ids = ids[rows]
    return np.where(ids < 0, 0.0, answers.cost[np.maximum(ids, 0)] if answers.cost.size else 0.0)


def blockers(cluster: Cluster, request: Request, nodes, limit: int | None = None,
             model: SloModel | None = None) -> tuple[list[Blocker], int]:
    """GPUs of `nodes` refused for an SLO, and whose (the first `limit`, by node and GPU), with how many GPUs
    were refused in all. Whose is priced from the pods there, for the few GPUs named only."""
    model = model or model_of(cluster)
    nodes = np.atleast_1d(np.arange(cluster.size)[nodes])
    refused = ~slo_mask(cluster, request, nodes, model) & cluster.gpu_slots[nodes]
    rows, gpus = np.nonzero(refused)
    new, out = tenant_of(request), []
    for r, g in list(zip(rows, gpus, strict=True))[:limit]:
        n, g = int(nodes[r]), int(g)
        tenants = sorted(cluster.gpu_tenants[(n, g)].values(), key=lambda t: (tenant_of(t), t.slo))
        pairs = [(tenant_of(t), t.slo) for t in tenants]
        _, broken, after = judge(model, cluster.models[cluster.gpu_model_idx[n, g]], str(cluster.gpu_mode[n, g]),
                                 pairs, new, request.slo)
        who = tenants[broken] if broken < len(tenants) else request
        out.append(Blocker(n, g, who.name, after[broken], who.slo))
    return out, int(rows.size)
