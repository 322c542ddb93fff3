"""The invariants fgpu keeps whatever happens to it (a SIGKILL mid-burst, a restart, two replicas, bad input),
checked on what the API server holds: the same report `fgpu inspect` prints, read by a sceptic.

- No GPU is over-allocated: the compute shares on a fractional or exclusive GPU add up to at most one GPU,
  their memory to at most its memory; an exclusive GPU or a MIG instance holds at most one pod.
- No bound pod is without its allocation: a bound, running pod that asked fgpu for a GPU carries the hand-off
  annotation, for the node it is bound to, naming devices that node has.
- No allocation is without its binding: an unbound pod carries no hand-off annotation.
- No pod holds a share it did not ask for: each container's assignment is its request (same devices, compute,
  SMs, memory when asked in bytes, MIG profile).

And, given what the nodes report (`grants`: per node, every share its device plugin handed a container at
Allocate, read back from the signed context tokens, and every context its node daemon holds open):

- The device plugin handed each container the allocation the scheduler gave it: every grant is in the
  container it was made for (where the kubelet's record says) and matches that pod's assignment on that node
  (device, memory, SMs), and a container the plugin says it allocated (or of a running pod) was handed each of
  its devices.
- No context outlives its pod: the daemon holds none for a pod that no longer exists or is finished.

And, given the cluster's ResourceSlices and ResourceClaims, the DRA invariants of `claims.py`: no device or
counter is allocated past what its slice publishes, whichever allocator wrote the claim.

Pure, on raw JSON dicts; `fgpu inspect check` runs it against a cluster and exits 1 on any violation; the
resilience tests and bench/chaos.py run it with the nodes' grants too.
"""
from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fgpu_contracts import keys
from fgpu_contracts.assignment import Assignment, parse_assignment
from fgpu_contracts.errors import InputError
from fgpu_contracts.request import GpuRequest, load_request

from ..objects import pod_key
from .claims import claim_violations
from .model import CheckReport, GpuView, Share, Usage
from .view import FINISHED, cluster_report

#: Sharing modes whose GPUs fgpu hands out by share (time-sliced / MPS replicas oversubscribe by design).
ALLOTTED = ("fractional", "exclusive")


@dataclass(frozen=True)
class Handed:
    """One device's share as a node handed it to a container: a grant the device plugin signed at Allocate
    (`live=False`), or a context the node daemon holds open now (`live=True`)."""

    node: str
    namespace: str
    pod: str
    container: str
    device_uuid: str
    mem_bytes: int | None = None  # None: the whole device
    sm_pct: int | None = None  # None: 100
    live: bool = False
    to: tuple[str, str, str] | None = None  # (namespace, pod, container) the kubelet gave it to; None: unknown

    @classmethod
    def of_grant(cls, node: str, grant, live: bool = False, to: tuple[str, str, str] | None = None) -> Handed:
        """From a `simgpu.token.Grant` (a verified context token)."""
        return cls(node, grant.pod_namespace, grant.pod_name, grant.container, grant.device_uuid,
                   grant.mem_limit_bytes, grant.sm_limit_pct, live, to)

    @property
    def recipient(self) -> tuple[str, str, str]:
        """The container that holds it: where the kubelet put it, else whom it was made for."""
        return self.to or (self.namespace, self.pod, self.container)

    @property
    def where(self) -> str:
        return f"node {self.node} {'context' if self.live else 'grant'} for {self.namespace}/{self.pod} " \
               f"container {self.container} on {self.device_uuid}"


def audit(nodes: Iterable[dict], pods: Iterable[dict], gpunodes: Iterable[dict] = (),
          grants: Mapping[str, Iterable[Handed]] | None = None,
          contexts: Mapping[str, Iterable[Handed]] | None = None,
          slices: Iterable[dict] = (), claims: Iterable[dict] = ()) -> list[str]:
    """Every violation, one line each (empty: all invariants hold)."""
    return list(check(nodes, pods, gpunodes, grants, contexts, slices, claims).violations)


def check(nodes: Iterable[dict], pods: Iterable[dict], gpunodes: Iterable[dict] = (),
          grants: Mapping[str, Iterable[Handed]] | None = None,
          contexts: Mapping[str, Iterable[Handed]] | None = None,
          slices: Iterable[dict] = (), claims: Iterable[dict] = ()) -> CheckReport:
    """`grants`: node name -> everything that node's device plugin handed out (and its daemon holds open);
    the nodes named are the ones whose grants are checked both ways (a node left out is not checked).
    `contexts`: node name -> only what its daemon holds open (`fgpu inspect check --daemon-metrics`), checked
    one way: a pod that opened no context (yet) owes none. `slices`, `claims`: resource.k8s.io/v1
    ResourceSlices and ResourceClaims (claims.claim_violations)."""
    pods = list(pods)
    report = cluster_report(nodes, pods, gpunodes)
    violations = [f"{p.object}: {p.message}" for p in report.problems]
    for node in report.nodes:
        for gpu in node.gpus:
            violations += _gpu_violations(node.name, gpu)
    violations += _binding_violations(pods)
    violations += _request_violations(pods)
    if grants is not None:
        violations += _grant_violations(pods, {n: list(g) for n, g in grants.items()})
    if contexts is not None:
        violations += _grant_violations(pods, {n: list(g) for n, g in contexts.items()}, both_ways=False)
    violations += claim_violations(slices, claims, pods)
    return CheckReport(ok=not violations, summary=report.summary, violations=tuple(violations),
                       daemons=tuple(sorted(contexts or ())))


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


def _parsed(pod: dict) -> tuple[Assignment | None, GpuRequest | None]:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    assignment = request = None
    with contextlib.suppress(InputError):  # cluster_report names it
        assignment = parse_assignment(annotations[keys.ASSIGNMENT]) if keys.ASSIGNMENT in annotations else None
    with contextlib.suppress(ValueError):  # never admitted as such: the scheduler does not place it
        request = load_request(annotations[keys.REQUEST]) if keys.REQUEST in annotations else None
    return assignment, request


def _request_violations(pods: Iterable[dict]) -> list[str]:
    """Each container's assignment is exactly what it asked for."""
    out = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in FINISHED:
            continue
        assignment, request = _parsed(pod)
        if assignment is None or request is None:
            continue
        asked = {c.container: c for c in request.containers}
        for c in assignment.containers:
            where = f"pod {pod_key(pod)} container {c.name}"
            want = asked.get(c.name)
            if want is None:
                out.append(f"{where}: holds {len(c.devices)} device(s) but asked for none")
                continue
            if len(c.devices) != want.count:
                out.append(f"{where}: holds {len(c.devices)} device(s), asked for {want.count}")
            for d in c.devices:
                if want.is_mig:
                    if d.mig_profile != want.mig_profile:
                        out.append(f"{where}: holds {d.uuid} as MIG {d.mig_profile}, asked for {want.mig_profile}")
                    continue
                got = (d.milli_gpu, d.sm_pct, d.mem_bytes if want.mem_bytes is not None else None)
                exp = (want.milli_gpu, want.effective_sm_pct, want.mem_bytes)
                if got != exp:
                    out.append(f"{where}: holds {_share(*got)} of {d.uuid}, asked for {_share(*exp)}")
    return out


def _share(milli: int, sm: int | None, mem: int | None) -> str:
    return f"{milli} milli-GPU, {sm if sm is not None else 100}% SMs" + (f", {mem} bytes" if mem is not None else "")


def _grant_violations(pods: list[dict], grants: dict[str, list[Handed]], both_ways: bool = True) -> list[str]:
    by_name = {(p.get("metadata") or {}).get("namespace", "") + "/" + (p.get("metadata") or {}).get("name", ""): p
               for p in pods}
    out: list[str] = []
    handed: set[tuple[str, str, str, str]] = set()  # (node, pod key, container, device)
    for node, items in grants.items():
        for h in items:
            if not h.pod:
                continue  # a whole GPU, MIG device or replica: no fgpu assignment behind it
            key = f"{h.namespace}/{h.pod}"
            to_ns, to_pod, to_container = h.recipient
            handed.add((node, f"{to_ns}/{to_pod}", to_container, h.device_uuid))
            if h.recipient != (h.namespace, h.pod, h.container):
                out.append(f"{h.where}: the kubelet gave it to pod {to_ns}/{to_pod} container {to_container}")
                continue
            pod = by_name.get(key)
            finished = pod is not None and (pod.get("status") or {}).get("phase") in FINISHED
            if pod is None or finished:
                if h.live:
                    out.append(f"{h.where}: still open, but the pod is {'finished' if finished else 'gone'}")
                continue  # a grant the kubelet got for a pod since deleted
            assignment, _ = _parsed(pod)
            if assignment is None:
                out.append(f"{h.where}: the pod holds no allocation ({keys.ASSIGNMENT})")
                continue
            if assignment.node != h.node or (pod.get("spec") or {}).get("nodeName") != h.node:
                out.append(f"{h.where}: the pod's allocation is on node {assignment.node}")
                continue
            if h.live:
                continue  # a context: its pod is live and placed here (its limits are the signed grant's)
            container = next((c for c in assignment.containers if c.name == h.container), None)
            share = next((d for d in container.devices if d.uuid == h.device_uuid), None) if container else None
            if share is None:
                out.append(f"{h.where}: not a device its allocation gives that container")
            elif (h.mem_bytes, h.sm_pct) != (share.mem_bytes, share.sm_pct):
                out.append(f"{h.where}: handed {_limits(h.mem_bytes, h.sm_pct)}, its allocation says "
                           f"{_limits(share.mem_bytes, share.sm_pct)}")
    for pod in pods:  # the other way: what the plugin allocated (or a running pod) was handed
        node = (pod.get("spec") or {}).get("nodeName")
        if not both_ways or node not in grants:
            continue
        assignment, _ = _parsed(pod)
        if assignment is None:
            continue
        status = (pod.get("status") or {}).get("phase")
        allocated = _allocated(pod) if status != "Running" else {c.name for c in assignment.containers}
        for c in assignment.containers:
            if c.name not in allocated:
                continue
            for d in c.devices:
                if (node, pod_key(pod), c.name, d.uuid) not in handed:
                    out.append(f"pod {pod_key(pod)} container {c.name}: allocated on {node} but its device plugin "
                               f"handed it no share of {d.uuid}")
    return out


def _allocated(pod: dict) -> set[str]:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.ALLOCATED) or "[]"
    try:
        value = json.loads(raw)
    except ValueError:
        return set()
    return {str(v) for v in value} if isinstance(value, list) else set()


def _limits(mem: int | None, sm: int | None) -> str:
    return f"{'all its memory' if mem is None else f'{mem} bytes'} and {sm if sm is not None else 100}% SMs"


def handed_from_env(node: str, envs: Mapping[str, str], secret: bytes,
                    to: tuple[str, str, str] | None = None) -> list[Handed]:
    """What one Allocate response handed a container, read from its context tokens (verified with the node's
    token secret: a token that does not verify is not a grant the plugin made, and raises). `to`: the
    (namespace, pod, container) the kubelet put the response in, when known: a grant made for another is a
    violation (the device plugin matched the Allocate to the wrong pod)."""
    from simgpu import env
    from simgpu.token import verify_token

    out, i = [], 0
    while (token := envs.get(env.context_token_var(i))) is not None:
        out.append(Handed.of_grant(node, verify_token(secret, token), to=to))
        i += 1
    return out


def handed_from_daemon_metrics(node: str, text: str) -> list[Handed]:
    """The contexts a node daemon holds open, from its Prometheus scrape (`fgpu_pod_gpu_memory_limit_bytes`:
    one series per pod, container and device). Which pod only: the daemon enforces the limits of the signed
    grant the context was opened with, which `handed_from_env` checks."""
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    for family in text_string_to_metric_families(text):
        if family.name != "fgpu_pod_gpu_memory_limit_bytes":
            continue
        for s in family.samples:
            labels = s.labels
            if labels.get("pod"):
                out.append(Handed(node, labels.get("namespace", ""), labels["pod"], labels.get("container", ""),
                                  labels.get("UUID", ""), live=True))
    return out
