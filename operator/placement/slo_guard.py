"""Which GPUs a guarded share may join without breaking an SLO, and what joining costs (docs/qos.md).

A GPU is refused when, with the new pod added, any protected pod there (its own bound, `Request.slo`) or the
new pod itself, if protected, would run slower than its bound by `slo.SloModel`'s prediction. The cost of a
GPU that is allowed is the slack its protected co-runners lose: the rise of each one's predicted slowdown
over its room (bound - 1), added up; policies break ties by it, so best-effort pods fill the gaps beside the
protected pods that a small co-runner hurts least.

Results are cached per request class (duty, priority, bound) over every GPU, stamped with the node's version:
a node is priced again only after it changed, so a decision reprices the few nodes changed since that class
was last placed (a trace replay: one).
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


class _ClassCache:
    def __init__(self, shape: tuple[int, int]):
        self.version = np.full(shape[0], -1, dtype=np.int64)
        self.ok = np.ones(shape, dtype=bool)
        self.cost = np.zeros(shape, dtype=np.float64)
        self.blocker: dict[tuple[int, int], Blocker] = {}


def judge(model: SloModel, gpu_model: str, sharing: str, tenants: list[Request], request: Request
          ) -> tuple[float, Blocker | None, float, float]:
    """(cost, the first SLO broken or None, the new pod's predicted slowdown, its bound) of adding `request`
    to a GPU holding `tenants`. Blocker node/gpu are filled in by the caller."""
    if not tenants:
        return 0.0, None, 1.0, request.slo
    together = [tenant_of(t) for t in tenants] + [tenant_of(request)]
    after = model.slowdowns(gpu_model, sharing, together)
    before = model.slowdowns(gpu_model, sharing, together[:-1]) if len(tenants) > 1 else (1.0,)
    cost, broken = 0.0, None
    for t, was, now in zip(tenants, before, after, strict=False):
        if t.slo > 0:
            if now > t.slo + 1e-9 and broken is None:
                broken = Blocker(-1, -1, t.name, now, t.slo)
            cost += max(0.0, now - was) / (t.slo - 1.0)
    if request.slo > 0 and after[-1] > request.slo + 1e-9 and broken is None:
        broken = Blocker(-1, -1, request.name, after[-1], request.slo)
    return cost, broken, after[-1], request.slo


def class_key(request: Request) -> tuple[Tenant, float] | None:
    """What the filter's answer for a request depends on besides the GPUs' state (None: not guarded)."""
    return (tenant_of(request), request.slo) if guards(request) else None


def _refresh(cluster: Cluster, request: Request, rows, model: SloModel) -> _ClassCache:
    state = cluster.plugin_state.setdefault(_STATE_KEY, {})
    key = class_key(request)
    cache = state.get(key)
    if cache is None or cache.ok.shape != cluster.gpu_left.shape:
        cache = state[key] = _ClassCache(cluster.gpu_left.shape)
    wanted = np.zeros(cluster.size, dtype=bool)
    wanted[rows] = True
    stale = np.flatnonzero(wanted & (cache.version != cluster.version))
    for n in stale:
        n = int(n)
        cache.ok[n] = True
        cache.cost[n] = 0.0
        for g in range(int(cluster.gpu_count[n])):
            cache.blocker.pop((n, g), None)
            tenants = cluster.gpu_tenants.get((n, g))
            if not tenants:
                continue
            gpu_model = cluster.models[cluster.gpu_model_idx[n, g]]
            cost, broken, _, _ = judge(model, gpu_model, cluster.gpu_mode[n, g], list(tenants.values()), request)
            cache.cost[n, g] = cost
            if broken is not None:
                cache.ok[n, g] = False
                cache.blocker[(n, g)] = Blocker(n, g, broken.pod, broken.predicted, broken.bound)
        cache.version[n] = cluster.version[n]
    return cache


def slo_mask(cluster: Cluster, request: Request, rows=slice(None), model: SloModel | None = None) -> np.ndarray:
    """GPUs of `rows` the request may join without breaking an SLO (shape as `cluster.gpu_left[rows]`)."""
    return _refresh(cluster, request, rows, model or default_model()).ok[rows]


def slo_cost(cluster: Cluster, request: Request, rows=slice(None), model: SloModel | None = None) -> np.ndarray:
    """Slack the protected co-runners of each GPU of `rows` would lose (0 where there are none)."""
    return _refresh(cluster, request, rows, model or default_model()).cost[rows]


def blockers(cluster: Cluster, request: Request, nodes, model: SloModel | None = None) -> list[Blocker]:
    """Every GPU of `nodes` refused for an SLO, and whose, by node and GPU."""
    cache = _refresh(cluster, request, nodes, model or default_model())
    chosen = set(int(n) for n in np.atleast_1d(np.arange(cluster.size)[nodes]))
    return [b for (n, g), b in sorted(cache.blocker.items()) if n in chosen]
