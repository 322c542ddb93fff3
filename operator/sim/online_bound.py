"""The ceiling at 100% arrival for schedulers that never refuse a pod that fits when it arrives.

`ceiling.py` bounds two classes: schedulers that place every arriving sharing pod (`all_placed`; no measured
policy is in it: each fails some sharing pods once the cluster is full), and every scheduler (`any_subset`,
which may turn pods away). This module bounds the class between them, the one every online policy in the
table belongs to: a pod fails only if no node can hold it at its arrival ("non-refusing"). The bound also
holds for a non-refusing scheduler that knows the whole future trace, so it covers every online one.

Why non-refusal binds. In the replay pods never depart, so a node's free CPU, memory and GPU room only
shrink. If pod p fails at time t (no node can hold it) and a later pod q *dominates* p (any node that can
hold q could hold p: at least p's CPU and memory, GPU need at least p's — a whole GPU dominates any
share —, GPU models a subset of p's), then q fails too. The 0.81-GPU pods ask 3.2 cores and 5.6 GiB, less
than nearly every whole-GPU pod, so a non-refusing scheduler cannot fail 0.81-GPU pods to keep GPUs for
the whole-GPU pods that come after them — the trade `any_subset` makes.

The program (a relaxation: every run of a non-refusing scheduler is a feasible point with the same idle):

* f[A, b] in {0, 1}: shape A fits nowhere at boundary b (arrival-time windows, finer near 100%);
  f[A, b] <= f[A, b+1] (resources only shrink) and f[A, b] <= f[B, b] for every B dominating A;
  f[A, 0] = 0 where A fits an empty node of the cluster;
* c[A, w] failed pods of shape A in window w: n[A, w] f[A, w] <= c[A, w] <= n[A, w] f[A, w+1];
* the placed sharing pods fill GPUs (the configuration program of `ceiling.py`: y GPUs per maximal
  filling, continuous by default — the packing's LP bound, within about a GPU of its optimum, which only
  loosens the bound and solves in a minute instead of many), and those GPUs plus the placed whole-GPU pods'
  GPUs are at most the cluster's;
* minimise the failed GPU demand; idle at 100% = slack + failed demand.

Nodes, CPU and memory totals and the arrival order within a window are relaxed in the scheduler's favour,
so the result is an upper bound on allocation; the solver's proven bound is used if a time limit cuts it.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from fgpu_operator.placement.model import MILLI, NodeSpec, Request
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from .fillings import maximal_fillings

#: Window boundaries, in % of the cluster's GPU capacity arrived (0 and the 100% cut are added).
BOUNDARIES_PCT = (50, 70, 80, 85, 88, 90, 91, 92, 93, 94, 95, 95.5, 96, 96.5, 97, 97.5, 98, 98.5, 99, 99.25,
                  99.5, 99.75)
TIME_LIMIT_S = 600.0

Shape = tuple[int, int, int, int, tuple[str, ...]]  # (share milli or 0, whole GPUs or 0, cpu, memory, models)


def shape_of(r: Request) -> Shape:
    if r.is_share:
        return (r.gpu_milli, 0, r.cpu_milli, r.memory_mib, tuple(sorted(r.gpu_models)))
    return (0, r.num_gpu, r.cpu_milli, r.memory_mib, tuple(sorted(r.gpu_models)))


def dominates(q: Shape, p: Shape) -> bool:
    """Any node that can hold a q pod could have held a p pod (so once p fits nowhere, neither does q)."""
    share_q, whole_q, cpu_q, mem_q, models_q = q
    share_p, whole_p, cpu_p, mem_p, models_p = p
    if cpu_q < cpu_p or mem_q < mem_p:
        return False
    if models_p and not (models_q and set(models_q) <= set(models_p)):
        return False
    if share_p:
        return whole_q >= 1 or share_q >= share_p
    return whole_q >= whole_p


def fits_empty(shape: Shape, nodes: Sequence[NodeSpec]) -> bool:
    share, whole, cpu, mem, models = shape
    return any(n.cpu_milli >= cpu and n.memory_mib >= mem and n.num_gpu >= max(whole, 1)
               and (not models or n.model in models) for n in nodes)


@dataclass(frozen=True)
class OnlineBound:
    total_gpus: int
    idle: float  # GPUs, proven lower bound on idle capacity at the 100% cut
    failed_share_pods: int  # in the solver's best solution (what the optimum fails)
    failed_whole_gpus: float
    exact: bool

    @property
    def alloc_pct(self) -> float:
        return 100.0 * (1.0 - self.idle / self.total_gpus)


def online_bound(requests: Sequence[Request], nodes: Sequence[NodeSpec], boundaries_pct: Sequence[float] =
                 BOUNDARIES_PCT, time_limit_s: float = TIME_LIMIT_S, rel_gap: float = 0.001,
                 integer_fillings: bool = False) -> OnlineBound:
    """Upper bound on allocation at the cut for non-refusing schedulers, `requests` in arrival order (the
    pods arrived by the cut, as `ceiling.arrivals_until` gives them)."""
    total_gpus = sum(n.num_gpu for n in nodes)
    capacity = total_gpus * MILLI
    gpu_pods = [r for r in requests if r.wants_gpu]
    arrived = sum(r.total_gpu_milli for r in gpu_pods)
    slack = capacity - arrived
    # window of each pod: by GPU demand arrived before it
    cuts = np.array([b / 100.0 * capacity for b in boundaries_pct])
    before = np.cumsum([0] + [r.total_gpu_milli for r in gpu_pods])[:-1]
    window = np.searchsorted(cuts, before, side="right")
    nw = len(cuts) + 1
    shapes = sorted({shape_of(r) for r in gpu_pods})
    sid = {s: i for i, s in enumerate(shapes)}
    ns = len(shapes)
    n = np.zeros((ns, nw), dtype=int)
    for r, w in zip(gpu_pods, window, strict=True):
        n[sid[shape_of(r)], w] += 1
    dom = np.array([[dominates(q, p) and q != p for q in shapes] for p in shapes])  # dom[p, q]: q dominates p
    # transitive reduction: keep p -> q unless some r sits between
    between = (dom.astype(np.int32) @ dom.astype(np.int32)) > 0
    edges = np.argwhere(dom & ~between)

    sizes = sorted({s[0] for s in shapes if s[0]}, reverse=True)
    share_count = Counter(r.gpu_milli for r in gpu_pods if r.is_share)
    fillings = maximal_fillings(sizes, [min(share_count[s], MILLI // s) for s in sizes]) if sizes else []
    nf = len(fillings)
    # variable layout: y (fillings) | c (shape, window) where n > 0 | f (shape, boundary 0..nw)
    cells = [(a, w) for a in range(ns) for w in range(nw) if n[a, w] > 0]
    c0 = nf
    f0 = c0 + len(cells)
    nvar = f0 + ns * (nw + 1)

    def fv(a: int, b: int) -> int:
        return f0 + a * (nw + 1) + b

    rows, cols, vals, lo, hi = [], [], [], [], []
    row = 0

    def add(entries: list[tuple[int, float]], lb: float, ub: float) -> None:
        nonlocal row
        for col, val in entries:
            rows.append(row)
            cols.append(col)
            vals.append(val)
        lo.append(lb)
        hi.append(ub)
        row += 1

    for a in range(ns):
        for b in range(nw):
            add([(fv(a, b), 1.0), (fv(a, b + 1), -1.0)], -np.inf, 0.0)
    for p, q in edges:
        for b in range(nw + 1):
            add([(fv(p, b), 1.0), (fv(q, b), -1.0)], -np.inf, 0.0)
    for k, (a, w) in enumerate(cells):
        add([(fv(a, w), float(n[a, w])), (c0 + k, -1.0)], -np.inf, 0.0)
        add([(c0 + k, 1.0), (fv(a, w + 1), -float(n[a, w]))], -np.inf, 0.0)
    for i, s in enumerate(sizes):
        entries = [(j, float(fill[i])) for j, fill in enumerate(fillings) if fill[i]]
        entries += [(c0 + k, 1.0) for k, (a, _) in enumerate(cells) if shapes[a][0] == s]
        add(entries, float(share_count[s]), np.inf)
    whole_gpus = sum(r.num_gpu for r in gpu_pods if not r.is_share)
    entries = [(j, 1.0) for j in range(nf)]
    entries += [(c0 + k, -float(shapes[a][1])) for k, (a, _) in enumerate(cells) if shapes[a][1]]
    add(entries, -np.inf, float(total_gpus - whole_gpus))

    a_mat = coo_matrix((vals, (rows, cols)), shape=(row, nvar)).tocsr()
    cost = np.zeros(nvar)
    for k, (a, _) in enumerate(cells):
        cost[c0 + k] = shapes[a][0] or MILLI * shapes[a][1]
    upper = np.full(nvar, np.inf)
    upper[c0:f0] = [n[a, w] for a, w in cells]
    upper[f0:] = 1.0
    lower = np.zeros(nvar)
    for a, s in enumerate(shapes):
        if fits_empty(s, nodes):
            upper[fv(a, 0)] = 0.0
    integral = np.ones(nvar)
    if not integer_fillings:
        integral[:nf] = 0  # GPUs per filling continuous: the packing's LP bound, within a GPU or so of its optimum
    res = milp(cost, constraints=LinearConstraint(a_mat, lo, hi), integrality=integral,
               bounds=Bounds(lower, upper), options={"time_limit": time_limit_s, "mip_rel_gap": rel_gap})
    bound = getattr(res, "mip_dual_bound", None)
    if bound is None or not np.isfinite(bound):
        bound = res.fun if res.status == 0 else 0.0  # no proven bound yet: idle >= slack is all that is known
    failed_share = failed_whole = 0.0
    if res.x is not None:
        for k, (a, _) in enumerate(cells):
            v = round(res.x[c0 + k])
            if shapes[a][0]:
                failed_share += v
            else:
                failed_whole += v * shapes[a][1]
    return OnlineBound(total_gpus, (slack + float(bound)) / MILLI, int(failed_share), failed_whole,
                       res.status == 0)
