"""The invariant checker (`fgpu inspect check`, reused by the crash and resilience tests): a consistent cluster
passes; each kind of violation is found and said in one line naming the object."""
from __future__ import annotations

from fgpu_operator.inspect.audit import Handed, audit, check, handed_from_daemon_metrics, handed_from_env
from fgpu_operator.inspect.render import render
from inspect_objects import GIB, a100_mig, assignment, h100, node, pod

from fgpu_contracts import keys


def share(uuid: str, milli: int, mem_gib: int) -> str:
    return assignment("gpu-a", ("main", 1, [{"uuid": uuid, "milli_gpu": milli, "mem_bytes": mem_gib * GIB}]))


def bound(name: str, uuid: str = "GPU-a0", milli: int = 500, mem_gib: int = 40, **kw) -> dict:
    p = pod(name, node_name="gpu-a", assigned=share(uuid, milli, mem_gib), **kw)
    p["metadata"]["annotations"][keys.REQUEST] = "{}"  # asked fgpu for a GPU (the checker reads only the key)
    return p


NODES = [node("gpu-a", h100(0, "GPU-a0"), h100(1, "GPU-a1", sharing="exclusive")),
         node("gpu-m", a100_mig(0, "GPU-m0"), mig_strategy="mixed")]


def test_a_consistent_cluster_passes_and_says_what_it_checked():
    pods = [bound("a"), bound("b"), bound("done", milli=1000, phase="Succeeded"),
            pod("waiting", annotations={keys.REQUEST: "{}"}, phase="Pending")]
    report = check(NODES, pods)
    assert report.ok and report.violations == ()
    assert render(report) == ("ok: 2 pods hold shares of 3 GPUs on 2 nodes; no GPU over-allocated, no bound pod "
                              "without its allocation, no allocation without its binding\n")


def test_over_allocated_compute_and_memory():
    assert audit(NODES, [bound("a", milli=600, mem_gib=50), bound("b", milli=500, mem_gib=40)]) == [
        "node gpu-a GPU 0 (GPU-a0): 1100 milli-GPU allocated, more than 1000",
        f"node gpu-a GPU 0 (GPU-a0): {90 * GIB} bytes of memory allocated, more than its {80 * GIB}"]


def test_an_exclusive_gpu_and_a_mig_instance_hold_one_pod_each():
    mig = assignment("gpu-m", ("main", 1, [{"uuid": "MIG-3g-4", "mig_profile": "3g.20gb"}]))
    pods = [bound("x", "GPU-a1", 100, 1), bound("y", "GPU-a1", 100, 1),
            pod("m1", node_name="gpu-m", assigned=mig), pod("m2", node_name="gpu-m", assigned=mig)]
    violations = audit(NODES, pods)
    assert "node gpu-a GPU 1 (GPU-a1): exclusive, held by 2 pods: default/x, default/y" in violations
    assert "node gpu-m MIG MIG-3g-4 (3g.20gb): held by 2 pods: default/m1, default/m2" in violations
    assert any(v.startswith("node gpu-m MIG MIG-3g-4 (3g.20gb): 2000 milli-GPU") for v in violations)


def test_bound_without_allocation_and_allocation_without_binding():
    naked = pod("naked", node_name="gpu-a", annotations={keys.REQUEST: "{}"})
    floating = pod("floating", assigned=share("GPU-a0", 300, 8), phase="Pending")
    web = pod("web", node_name="gpu-a")  # asked for no GPU: holds nothing, owes nothing
    assert audit(NODES, [naked, floating, web]) == [
        "pod default/naked: bound to gpu-a without its allocation (fgpu.io/assignment missing)",
        "pod default/floating: holds an allocation (fgpu.io/assignment) but is not bound"]


def test_unreadable_or_misplaced_allocations_are_violations_too():
    ghost = pod("ghost", node_name="gpu-a", assigned=share("GPU-gone", 300, 8))
    broken = pod("broken", node_name="gpu-a", assigned="{not json")
    violations = audit(NODES, [ghost, broken])
    assert violations[0] == "pod default/ghost: fgpu.io/assignment gives container main GPU-gone, not a device of " \
                            "node gpu-a"
    assert violations[1].startswith("pod default/broken: fgpu.io/assignment")
    assert len(violations) == 2


def asked(name: str, milli: int = 500, mem_gib: int = 40, **kw) -> dict:
    """A bound pod whose fgpu.io/request is a real request, for the request-vs-allocation and grant checks."""
    from fgpu_contracts.request import ContainerRequest, GpuRequest, dump_request

    given = assignment("gpu-a", ("main", 0, [{"uuid": "GPU-a0", "milli_gpu": milli, "mem_bytes": mem_gib * GIB,
                                              "sm_pct": milli // 10}]))
    p = pod(name, node_name="gpu-a", assigned=given, **kw)
    p["metadata"]["annotations"][keys.REQUEST] = dump_request(GpuRequest(containers=[ContainerRequest(
        container="main", milli_gpu=500, mem_bytes=40 * GIB)]))
    return p


def test_a_share_other_than_the_one_asked_for_is_a_violation():
    assert audit(NODES, [asked("fair")]) == []
    assert audit(NODES, [asked("greedy", milli=600)]) == [
        "pod default/greedy container main: holds 600 milli-GPU, 60% SMs, 42949672960 bytes of GPU-a0, asked for "
        "500 milli-GPU, 50% SMs, 42949672960 bytes"]


def handed(pod_name: str, mem_gib: int | None = 40, sm: int | None = 50, **kw) -> Handed:
    return Handed(**{"node": "gpu-a", "namespace": "default", "pod": pod_name, "container": "main",
                     "device_uuid": "GPU-a0", "mem_bytes": mem_gib * GIB if mem_gib else None, "sm_pct": sm, **kw})


def test_what_the_device_plugin_handed_must_be_the_pods_allocation():
    pods = [asked("a"), asked("b", phase="Pending")]
    assert audit(NODES, pods, grants={"gpu-a": [handed("a")]}) == []  # b: not allocated yet, owes nothing
    assert audit(NODES, pods, grants={"gpu-a": [handed("a", mem_gib=80), handed("b", device_uuid="GPU-a1")]}) == [
        f"node gpu-a grant for default/a container main on GPU-a0: handed {80 * GIB} bytes and 50% SMs, its "
        f"allocation says {40 * GIB} bytes and 50% SMs",
        "node gpu-a grant for default/b container main on GPU-a1: not a device its allocation gives that container"]


def test_a_running_or_recorded_container_without_its_grant_and_a_context_without_its_pod():
    recorded = asked("rec", phase="Pending", annotations={keys.ALLOCATED: '["main"]'})
    violations = audit(NODES, [asked("run"), recorded], grants={"gpu-a": [handed("gone", live=True),
                                                                          handed("deleted-before-the-check")]})
    assert violations == [
        "node gpu-a context for default/gone container main on GPU-a0: still open, but the pod is gone",
        "pod default/run container main: allocated on gpu-a but its device plugin handed it no share of GPU-a0",
        "pod default/rec container main: allocated on gpu-a but its device plugin handed it no share of GPU-a0"]
    assert audit(NODES, [asked("run")], grants={"gpu-b": []}) == []  # only the nodes reported are checked


def test_a_grant_in_another_pods_container_is_a_violation_and_its_own_pod_was_handed_nothing():
    # the plugin matched a's Allocate to b: b's grant went into a's container, and a's into b's
    pods = [asked("a"), asked("b")]
    swapped = {"gpu-a": [handed("b", to=("default", "a", "main")), handed("a", to=("default", "b", "main"))]}
    assert audit(NODES, pods, grants=swapped) == [
        "node gpu-a grant for default/b container main on GPU-a0: the kubelet gave it to pod default/a container main",
        "node gpu-a grant for default/a container main on GPU-a0: the kubelet gave it to pod default/b container main"]
    # a deleted since (its record gone): b is marked allocated, but the grant it holds went to a
    only_b = {"gpu-a": [handed("a", to=("default", "b", "main"))]}
    assert audit(NODES, [asked("b")], grants=only_b) == [
        "node gpu-a grant for default/a container main on GPU-a0: the kubelet gave it to pod default/b container main"]
    assert audit(NODES, pods, grants={"gpu-a": [handed("a", to=("default", "a", "main")),
                                                handed("b", to=("default", "b", "main"))]}) == []


def test_grants_read_back_from_allocate_tokens_and_daemon_metrics():
    from simgpu.token import Grant, issue_token

    secret = b"s" * 32
    grant = Grant(device_uuid="GPU-a0", mem_limit_bytes=40 * GIB, sm_limit_pct=50, pod_namespace="default",
                  pod_name="a", container="main")
    envs = {"FGPU_CONTEXT_TOKEN_0": issue_token(secret, grant), "FGPU_CONTEXT_TOKEN": "ignored: same as _0"}
    assert handed_from_env("gpu-a", envs, secret) == [handed("a")]
    assert handed_from_env("gpu-a", envs, secret, to=("default", "b", "main")) == [
        handed("a", to=("default", "b", "main"))]
    scrape = ('# TYPE fgpu_pod_gpu_memory_limit_bytes gauge\nfgpu_pod_gpu_memory_limit_bytes{gpu="0",UUID="GPU-a0",'
              'namespace="default",pod="a",container="main"} 4.294967296e+10\n')
    assert handed_from_daemon_metrics("gpu-a", scrape) == [handed("a", None, None, live=True)]
    forged = issue_token(b"x" * 32, grant)
    import pytest

    from simgpu.errors import SimgpuError
    with pytest.raises(SimgpuError):
        handed_from_env("gpu-a", {"FGPU_CONTEXT_TOKEN_0": forged}, secret)
