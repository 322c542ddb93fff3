"""The fit rule: which GPUs can give a request its share. Written once, used by the filters (which nodes
fit), by every policy's GPU choice (which GPUs on the chosen node), by failure explanations and by the
timeline simulator's departure check — so none of them can drift from the others.

A GPU fits a request when it takes that kind of request (healthy, and in a sharing mode that offers shares
or whole GPUs), its model is allowed, it has the compute share left and the GPU memory left, and the pod's
GPU-UUID and KubeShare group rules allow it, and, for a share that guards SLOs, no co-runner's SLO (nor its
own) would break there (`slo_guard`), and, for a low-priority share, its protected pod has not been measured
over its SLO (`slo_feedback`). Memory is checked only once some reservation named its own
memory: while every pod's memory is its GPU share of the device, compute room implies memory room.
"""
from __future__ import annotations

import numpy as np

from .model import Cluster, Request
from .slo_feedback import hold_mask
from .slo_guard import guards, slo_mask

#: Stages of the rule, in the order a failure is explained (each stage adds checks to the previous ones):
#: KIND is a GPU the request may use at all (kind, health, model), whatever it holds now; FULL is every
#: capacity and constraint rule, SLO adds the QoS filter's.
KIND, COMPUTE, MEMORY, FULL, SLO = 0, 1, 2, 3, 4


def gpu_fit(cluster: Cluster, request: Request, rows=slice(None), stage: int = SLO) -> np.ndarray:
    """(M, G) mask over the GPUs of node `rows`: True where one device of the request fits. A request for
    several devices needs that many distinct fitting GPUs on one node (`fitting_gpus`)."""
    usable = (cluster.gpu_shareable if request.is_share else cluster.gpu_wholeable)[rows]
    fits = usable & (cluster.gpu_left[rows] >= request.gpu_milli) if stage >= COMPUTE else usable.copy()
    c = request.constraints
    models = cluster.model_mask(request)
    if models is not None:
        fits &= models[rows]
    if stage >= MEMORY and (request.explicit_memory or cluster.explicit_memory):
        fits &= cluster.gpu_mem_left[rows] >= cluster.gpu_memory_need(request, rows)
    if stage >= FULL and c is not None:
        allowed = _constraint_mask(cluster, request)
        if allowed is not None:
            fits &= allowed[rows]
    if stage >= SLO:
        fits &= hold_mask(cluster, request, rows)
        if guards(request):
            fits &= slo_mask(cluster, request, rows)
    return fits


def _constraint_mask(cluster: Cluster, request: Request) -> np.ndarray | None:
    """(N, G): GPUs the pod's UUID lists and KubeShare groups allow; None when they allow every GPU."""
    c = request.constraints
    if not (c.uuids or c.exclude_uuids or c.anti_affinity_group or c.exclusion_group or cluster.exclusion_ids):
        return None
    ok = np.ones(cluster.gpu_left.shape, dtype=bool)
    if c.uuids:
        ok[:] = False
        for uuid in c.uuids:
            if uuid in cluster.uuid_index:
                ok[cluster.uuid_index[uuid]] = True
    for uuid in c.exclude_uuids:
        if uuid in cluster.uuid_index:
            ok[cluster.uuid_index[uuid]] = False
    if c.anti_affinity_group:
        for where in cluster.group_gpus.get(f"n:{c.anti_affinity_group}", {}):
            ok[where] = False
    if c.exclusion_group:
        mine = cluster.exclusion_ids.get(c.exclusion_group, -1)
        ok &= ((cluster.gpu_excl == 0) & (cluster.gpu_pods == 0)) | (
            (cluster.gpu_excl == mine) & (cluster.gpu_excl_pods == cluster.gpu_pods))
    elif cluster.exclusion_ids:
        ok &= cluster.gpu_excl == 0
    return ok


def fitting_gpus(cluster: Cluster, request: Request, rows=slice(None), stage: int = SLO) -> np.ndarray:
    """Per node of `rows`: how many GPUs could each take one device of the request."""
    return gpu_fit(cluster, request, rows, stage).sum(axis=-1)

