"""How much any scheduler could allocate at 100% arrival: an offline packing bound for the replay protocol.

At the moment arrivals reach 100% of the cluster's GPU capacity, idle GPU capacity equals the GPU demand of
the pods that failed (plus the sliver by which arrivals fall short of 100%). Idle capacity can only be lower
than the waste of the best possible packing of the shared GPUs if pods were turned away, so an exact
packing of the arrived sharing pods bounds every policy from above. The bound relaxes everything else in the
scheduler's favour: no nodes (whole-GPU pods take any free GPUs), no CPU, host or GPU memory, no GPU
models, no arrival order.

The packing is a configuration integer program (Gilmore-Gomory): a *filling* is a multiset of sharing
fractions that fits one GPU and has no room left for another pod that exists; choose how many GPUs use
each filling so that every pod is covered. Solved with HiGHS through `scipy.optimize.milp`; the bound
reported is the solver's proven lower bound on idle capacity, so it stays valid if a time limit cuts the
search short.

Two questions are answered:

* `all_placed`: every arrived sharing pod is placed (what a scheduler that places whatever fits does,
  except for the few pods that fail once the cluster is full);
* `any_subset`: the scheduler may also turn sharing pods away so that whole-GPU pods take their GPUs
  (idle = max(packing waste, failed sharing demand)); the optimum says which pods it would refuse.

Which class each covers: `all_placed` bounds only schedulers that place every arriving sharing pod — no
policy measured is one (each fails ~140-150 sharing pods once the cluster is full); `any_subset` bounds every
scheduler. The class between them, schedulers that never refuse a pod that fits when it arrives (every
policy here), is bounded by `online_bound.py`; `summarise_ceilings` reports all three.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from fgpu_operator.placement.errors import PlacementInputError
from fgpu_operator.placement.model import MILLI, Cluster, NodeSpec, Request
from scipy.optimize import Bounds, LinearConstraint, milp

from .fillings import maximal_fillings
from .replay import tune_workload
from .trace import Trace

#: Enumerating fillings is exponential in the number of distinct small fractions; openb needs ~1,400.
TIME_LIMIT_S = 60.0


def arrivals_until(nodes: Sequence[NodeSpec], trace: Trace, seed: int, tune: float = 1.3,
                   pct: float = 100.0) -> tuple[list[Request], int]:
    """The pods that have arrived when GPU demand first would exceed `pct`% of capacity, in the replay's
    order for `seed` (same shuffle and tuning as `replay`), and the cluster's GPU count."""
    total_gpus = Cluster(list(nodes)).total_gpus
    capacity = total_gpus * MILLI
    requests = tune_workload(trace.requests, capacity, tune, np.random.default_rng(seed))
    arrived, limit, out = 0, pct / 100.0 * capacity, []
    for request in requests:
        if arrived + request.total_gpu_milli > limit:
            break
        arrived += request.total_gpu_milli
        out.append(request)
    return out, total_gpus


@dataclass(frozen=True)
class Ceiling:
    """Upper bounds on the allocation ratio at the arrival point, and what limits them (GPUs, not milli)."""

    total_gpus: int
    arrived_gpus: float
    share_pods: int
    share_gpus: float
    min_share_gpus: int  # GPUs the sharing pods need at best
    idle_all_placed: float
    idle_any_subset: float
    refused: dict[int, int]  # fraction (milli) -> pods the any-subset optimum turns away
    exact: bool  # both programs solved to optimality (else the solver's proven bounds are used)

    @property
    def alloc_all_placed_pct(self) -> float:
        return 100.0 * (1.0 - self.idle_all_placed / self.total_gpus)

    @property
    def alloc_any_subset_pct(self) -> float:
        return 100.0 * (1.0 - self.idle_any_subset / self.total_gpus)


def ceiling(requests: Sequence[Request], total_gpus: int, time_limit_s: float = TIME_LIMIT_S) -> Ceiling:
    """Both bounds for the arrived `requests` on a cluster of `total_gpus` GPUs."""
    shares = Counter(r.gpu_milli for r in requests if r.is_share)
    arrived = sum(r.total_gpu_milli for r in requests)
    slack = total_gpus * MILLI - arrived  # idle even if every pod is placed
    if slack < 0:
        raise PlacementInputError(f"arrived demand {arrived / MILLI:.1f} GPUs exceeds the cluster's {total_gpus}",
                                  field="pods", allowed=["arrivals up to the cluster's GPU capacity"])
    sizes = sorted(shares, reverse=True)
    counts = np.array([shares[s] for s in sizes], dtype=float)
    share_milli = int(sum(s * shares[s] for s in sizes))
    if not sizes:
        return Ceiling(total_gpus, arrived / MILLI, 0, 0.0, 0, slack / MILLI, slack / MILLI, {}, True)
    fillings = maximal_fillings(sizes, [min(shares[s], MILLI // s) for s in sizes])
    cover = np.array(fillings, dtype=float).T  # (sizes, fillings)
    nf, ns = cover.shape[1], len(sizes)
    options = {"time_limit": time_limit_s}

    # All placed: the fewest GPUs that hold every sharing pod.
    res = milp(np.ones(nf), constraints=LinearConstraint(cover, lb=counts), integrality=np.ones(nf),
               bounds=Bounds(0, np.inf), options=options)
    min_bins = int(np.ceil(_proven(res) - 1e-6))
    idle_all = max(min_bins * MILLI - share_milli, slack)

    # Any subset: x fillings, r refused pods per size, t idle milli. Minimise t subject to
    # cover x + r >= n;  t >= slack + sizes.r (refused demand is idle);  t >= MILLI*sum(x) - (S - sizes.r).
    sz = np.array(sizes, dtype=float)
    a_cover = np.hstack([cover, np.eye(ns), np.zeros((ns, 1))])
    a_refused = np.concatenate([np.zeros(nf), sz, [-1.0]])[None]
    a_waste = np.concatenate([np.full(nf, float(MILLI)), sz, [-1.0]])[None]
    cost = np.zeros(nf + ns + 1)
    cost[-1] = 1.0
    res2 = milp(cost, constraints=[LinearConstraint(a_cover, lb=counts),
                                   LinearConstraint(a_refused, ub=-slack),
                                   LinearConstraint(a_waste, ub=share_milli)],
                integrality=np.concatenate([np.ones(nf + ns), [0]]),
                bounds=Bounds(0, np.concatenate([np.full(nf, np.inf), counts, [np.inf]])), options=options)
    idle_any = max(_proven(res2), float(slack))
    refused = {}
    if res2.x is not None:
        refused = {s: round(v) for s, v in zip(sizes, res2.x[nf:nf + ns], strict=True) if round(v) > 0}
    return Ceiling(total_gpus, arrived / MILLI, int(counts.sum()), share_milli / MILLI, min_bins,
                   idle_all / MILLI, idle_any / MILLI, refused, res.status == 0 and res2.status == 0)


def _proven(res) -> float:
    """The solver's proven lower bound on the optimum (equal to it when solved to optimality)."""
    bound = getattr(res, "mip_dual_bound", None)
    if bound is None or not np.isfinite(bound):
        if res.status != 0:
            raise PlacementInputError(f"packing bound not solved: {res.message}", field="pods",
                                      allowed=["a workload HiGHS can bound within the time limit"])
        return float(res.fun)
    return float(bound)


@dataclass(frozen=True)
class CeilingSummary:
    """Both ceilings for one trace, averaged over seeds (what `fgpu simulate --ceiling` reports)."""

    trace: str
    seeds: list[int]
    alloc_all_placed_pct: float  # bounds schedulers that place every arriving sharing pod (none measured)
    alloc_any_subset_pct: float  # bounds every scheduler
    refused_pods: float  # pods the any-subset optimum turns away, mean over seeds
    alloc_non_refusing_pct: float | None = None  # bounds schedulers that never refuse a pod that fits

    def as_json(self) -> dict:
        return {"trace": self.trace, "seeds": self.seeds, "alloc_all_placed_pct": self.alloc_all_placed_pct,
                "alloc_non_refusing_pct": self.alloc_non_refusing_pct,
                "alloc_any_subset_pct": self.alloc_any_subset_pct, "refused_pods": self.refused_pods}


def _one(args: tuple[Sequence[NodeSpec], Trace, int, float]) -> tuple[Ceiling, float]:
    from .online_bound import online_bound

    nodes, trace, seed, tune = args
    arrived, total = arrivals_until(nodes, trace, seed, tune)
    return ceiling(arrived, total), online_bound(arrived, nodes).alloc_pct


def check_bounded(traces: Sequence[Trace]) -> None:
    """The packings model each share on one GPU: a trace with a share on several GPUs is refused."""
    for trace in traces:
        several = sum(1 for r in trace.requests if r.is_share and r.num_gpu > 1)
        if several:
            raise PlacementInputError(f"trace {trace.name}: {several} pod(s) ask for a share on several GPUs, and "
                                      "the ceiling's packings model each share on one GPU", field="--ceiling",
                                      allowed=["traces whose shares are on one GPU each, as openb's"])


def summarise_ceilings(nodes: Sequence[NodeSpec], traces: Sequence[Trace], seeds: Sequence[int], tune: float,
                       workers: int = 1, on_done: Callable[[str], None] | None = None) -> list[CeilingSummary]:
    """Per trace: mean ceilings over `seeds` (each seed: two exact packings, a few seconds, and the
    non-refusing program, tens of seconds to minutes); `on_done` is
    called after each packing with what it was ("default seed 42")."""
    check_bounded(traces)
    jobs = [(list(nodes), trace, seed, tune) for trace in traces for seed in seeds]
    if workers > 1 and len(jobs) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
            results = []
            for job, result in zip(jobs, pool.map(_one, jobs), strict=True):
                results.append(result)
                if on_done:
                    on_done(f"{job[1].name} seed {job[2]}")
    else:
        results = []
        for job in jobs:
            results.append(_one(job))
            if on_done:
                on_done(f"{job[1].name} seed {job[2]}")
    out = []
    for i, trace in enumerate(traces):
        mine = results[i * len(seeds):(i + 1) * len(seeds)]
        out.append(CeilingSummary(trace.name, list(seeds),
                                  round(float(np.mean([c.alloc_all_placed_pct for c, _ in mine])), 2),
                                  round(float(np.mean([c.alloc_any_subset_pct for c, _ in mine])), 2),
                                  float(np.mean([sum(c.refused.values()) for c, _ in mine])),
                                  round(float(np.mean([nr for _, nr in mine])), 2)))
    return out
