"""The QoS filter as a plug-in after GpuFit: nodes where the share fits but every GPU it fits on would break
a co-runner's SLO (or its own), in kube-scheduler's words: "0/3 nodes are available: 3 would break a
co-runner's SLO." Its `detail` names whose SLO blocked which GPU, for the pod's explanation and
`fgpu inspect pod`."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .fit import FULL, SLO, fitting_gpus, gpu_fit
from .model import Cluster, Request
from .slo_feedback import hold_mask, holds_apply
from .slo_guard import blockers, guards, margin_matters, model_of, slo_cost

REASON = "would break a co-runner's SLO"
HELD_REASON = "had only GPUs held: a protected pod measured over its SLO"
MAX_NAMED = 3  # GPUs named in an explanation; the count says how many more


class SloFit:
    name = "SloFit"

    def applies(self, cluster: Cluster, request: Request) -> bool:
        return guards(request) or holds_apply(cluster, request)

    def passes(self, cluster: Cluster, request: Request, rows) -> np.ndarray:
        return fitting_gpus(cluster, request, rows, SLO) >= request.num_gpu

    def failures(self, cluster: Cluster, request: Request, rows) -> list[tuple[str, np.ndarray]]:
        """Nodes whose fitting GPUs are all held (measured), then those refused by the prediction."""
        full = gpu_fit(cluster, request, rows, FULL)
        held = (full & hold_mask(cluster, request, rows)).sum(axis=-1) < request.num_gpu
        return [(HELD_REASON, held), (REASON, ~held & ~self.passes(cluster, request, rows))]

    def detail(self, cluster: Cluster, request: Request, rows) -> str:
        """Whose SLO blocked which GPU, on the nodes of `rows` this filter rejected (GPUs that fit but for
        an SLO; the first MAX_NAMED named, the rest counted)."""
        nodes = np.arange(cluster.size)[rows]
        fits = gpu_fit(cluster, request, nodes, FULL).any(axis=1)
        found, total = blockers(cluster, request, nodes[fits], MAX_NAMED) if guards(request) else ([], 0)
        if not found:
            return ""
        named = [f"{'its own' if b.pod == request.name else b.pod + chr(39) + 's'} SLO on "
                 f"{cluster.nodes[b.node].name} GPU {b.gpu} (predicted {b.predicted:.2f}x > {b.bound:g}x)"
                 for b in found]
        more = f" and {total - len(found)} more GPU(s)" if total > len(found) else ""
        return "blocked by " + "; ".join(named) + more

def least_slack_lost(cluster: Cluster, request: Request, top: np.ndarray) -> np.ndarray:
    """The QoS score, as a tie-break among the policy's top nodes: those whose best allowed GPU costs its
    protected co-runners the least slack (`slo_guard.slo_cost`). The policy's own ranking stays first, so
    binpack, spread and FGD keep their meaning."""
    cost = np.where(gpu_fit(cluster, request, top), slo_cost(cluster, request, top), np.inf).min(axis=1)
    return top[cost == cost.min()]


def margin_first(cluster: Cluster, request: Request, feasible: np.ndarray) -> tuple[Request, np.ndarray]:
    """The request and nodes the policy scores: where some fitting GPUs keep every bound even with the model's
    known error (`SloModel.error`: a slowdown s counted as 1 + (s - 1)(1 + error)), if any node has them,
    with the request marked so that the policy's GPU choice keeps to those GPUs; else the plain ones. The bound
    stays the promise (nothing is refused for the margin); the margin is taken wherever the cluster has room,
    so a prediction just under a bound is the last resort, not a tie."""
    error = model_of(cluster).error
    if not guards(request) or error <= 0 or not feasible.any():
        return request, feasible
    careful = replace(request, slo_margin=error)
    if not margin_matters(cluster, request, careful):
        return request, feasible
    rows = np.flatnonzero(feasible)
    keeps = fitting_gpus(cluster, careful, rows, SLO) >= request.num_gpu
    if not keeps.any():
        return request, feasible
    narrowed = np.zeros_like(feasible)
    narrowed[rows[keeps]] = True
    return careful, narrowed
