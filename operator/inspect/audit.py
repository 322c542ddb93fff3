"""The invariants fgpu keeps whatever happens to it (a SIGKILL mid-burst, a restart, two replicas, bad input),
checked on what the API server holds: the same report `fgpu inspect` prints, read by a sceptic.

- No GPU is over-allocated: the compute shares on a fractional or exclusive GPU add up to at most one GPU,
  their memory to at most its memory; an exclusive GPU or a MIG instance holds at most one pod.
- No bound pod is without its allocation: a bound, running pod that asked fgpu for a GPU carries the hand-off
  annotation, for the node it is bound to, naming devices that node has.
- No allocation is without its binding: an unbound pod carries no hand-off annotation.

Pure, on raw JSON dicts; `fgpu inspect check` runs it against a cluster and exits 1 on any violation.
"""
from __future__ import annotations

from collections.abc import Iterable

from fgpu_contracts import keys

from ..objects import pod_key
from .model import CheckReport, GpuView, Share, Usage
from .view import FINISHED, cluster_report

#: Sharing modes whose GPUs fgpu hands out by share (time-sliced / MPS replicas oversubscribe by design).
ALLOTTED = ("fractional", "exclusive")


def audit(nodes: Iterable[dict], pods: Iterable[dict], gpunodes: Iterable[dict] = ()) -> list[str]:
    """Every violation, one line each (empty: all invariants hold)."""
    return list(check(nodes, pods, gpunodes).violations)


def check(nodes: Iterable[dict], pods: Iterable[dict], gpunodes: Iterable[dict] = ()) -> CheckReport:
    pods = list(pods)
    report = cluster_report(nodes, pods, gpunodes)
    violations = [f"{p.object}: {p.message}" for p in report.problems]
    for node in report.nodes:
        for gpu in node.gpus:
            violations += _gpu_violations(node.name, gpu)
    violations += _binding_violations(pods)
    return CheckReport(ok=not violations, summary=report.summary, violations=tuple(violations))


def _gpu_violations(node: str, gpu: GpuView) -> list[str]:
    where = f"node {node} GPU {gpu.index} ({gpu.uuid})"
    out: list[str] = []
    if gpu.sharing in ALLOTTED:
        out += _over(where, gpu.allocated, gpu.mem_bytes)
        holders = _pods(gpu.shares)
        if gpu.sharing == "exclusive" and len(holders) > 1:
            out.append(f"{where}: exclusive, held by {len(holders)} pods: {', '.join(sorted(holders))}")
    for mig in gpu.mig:
        mig_where = f"node {node} MIG {mig.uuid} ({mig.profile})"
        out += _over(mig_where, mig.allocated, mig.mem_bytes)
        holders = _pods(mig.shares)
        if len(holders) > 1:
            out.append(f"{mig_where}: held by {len(holders)} pods: {', '.join(sorted(holders))}")
    return out


def _over(where: str, used: Usage, mem_bytes: int) -> list[str]:
    out = []
    if used.milli_gpu > 1000:
        out.append(f"{where}: {used.milli_gpu} milli-GPU allocated, more than 1000")
    if used.mem_bytes > mem_bytes:
        out.append(f"{where}: {used.mem_bytes} bytes of memory allocated, more than its {mem_bytes}")
    return out


def _pods(shares: Iterable[Share]) -> set[str]:
    return {f"{s.namespace}/{s.pod}" for s in shares}


def _binding_violations(pods: Iterable[dict]) -> list[str]:
    out = []
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if (pod.get("status") or {}).get("phase") in FINISHED:
            continue
        annotations = meta.get("annotations") or {}
        handed_off = keys.ASSIGNMENT in annotations
        if spec.get("nodeName") and keys.REQUEST in annotations and not handed_off:
            out.append(f"pod {pod_key(pod)}: bound to {spec['nodeName']} without its allocation "
                       f"({keys.ASSIGNMENT} missing)")
        elif handed_off and not spec.get("nodeName"):
            out.append(f"pod {pod_key(pod)}: holds an allocation ({keys.ASSIGNMENT}) but is not bound")
    return out
