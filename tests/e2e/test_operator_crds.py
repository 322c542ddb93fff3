"""The operator's custom resources against the real apiserver: a node that publishes its inventory only as a
GPUNode gets pods; the SchedulingPolicy named `default` sets the cluster's node and GPU policy (and changing
it changes where the next pods go); each SchedulingPolicy's status says whether it applies; each GPUNode's
status lists what fgpu allocated on it and whether it is schedulable."""
from __future__ import annotations

import json

import pytest
from inventories import fractional_inventory
from operator_proc import install_crds, share_pod, start_operator, stop
from polling import wait_for

from fgpu_contracts import keys
from fgpu_contracts.inventory import gpunode, parse_inventory

pytestmark = pytest.mark.e2e
GROUP, VERSION = keys.CRD_GROUP, keys.CRD_VERSION


def policy(name: str, node_policy: str, gpu_policy: str) -> dict:
    return {"apiVersion": keys.CRD_API_VERSION, "kind": keys.SCHEDULING_POLICY_KIND, "metadata": {"name": name},
            "spec": {"nodePolicy": node_policy, "gpuPolicy": gpu_policy}}


@pytest.fixture
def crd_cluster(k8s, kwok, make_kwok_node):
    """crd-a publishes its 2 GPUs only as a GPUNode; crd-b only as the node annotation."""
    from kubernetes import client

    install_crds(k8s)
    with k8s.api() as api:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        make_kwok_node("crd-a", {"nvidia.com/gpu": 20})
        doc = gpunode(parse_inventory(fractional_inventory("crd-a", 2))).model_dump(mode="json", by_alias=True)
        custom.create_cluster_custom_object(GROUP, VERSION, keys.GPUNODE_PLURAL, doc)
        make_kwok_node("crd-b", {"nvidia.com/gpu": 20})
        core.patch_node("crd-b", {"metadata": {"annotations": {keys.INVENTORY: fractional_inventory("crd-b", 2)}}})
        default = policy("default", "spread", "spread")
        default["spec"]["defaultSloSlowdown"] = 1.5
        custom.create_cluster_custom_object(GROUP, VERSION, keys.SCHEDULING_POLICY_PLURAL, default)
        custom.create_cluster_custom_object(GROUP, VERSION, keys.SCHEDULING_POLICY_PLURAL,
                                            policy("other", "binpack", "binpack"))
    yield
    with k8s.api() as api:
        custom = client.CustomObjectsApi(api)
        custom.delete_cluster_custom_object(GROUP, VERSION, keys.GPUNODE_PLURAL, "crd-a")
        for name in ("default", "other"):
            custom.delete_cluster_custom_object(GROUP, VERSION, keys.SCHEDULING_POLICY_PLURAL, name)


def placed(core, namespace: str, names: list[str]) -> dict[str, tuple[str, str]] | None:
    """name -> (node, GPU uuid) once all of `names` are bound."""
    out = {}
    for name in names:
        pod = core.read_namespaced_pod(name, namespace)
        if not pod.spec.node_name:
            return None
        (device,) = json.loads(pod.metadata.annotations[keys.ASSIGNMENT])["containers"][0]["devices"]
        out[name] = (pod.spec.node_name, device["uuid"])
    return out


def accepted(custom, name: str):
    status = custom.get_cluster_custom_object(GROUP, VERSION, keys.SCHEDULING_POLICY_PLURAL, name).get("status")
    conds = (status or {}).get("conditions") or []
    return next(((c["status"], c["reason"]) for c in conds if c["type"] == "Accepted"), None)


def gpunode_status(custom, name: str) -> dict:
    return custom.get_cluster_custom_object(GROUP, VERSION, keys.GPUNODE_PLURAL, name).get("status") or {}


def test_gpunode_inventory_policy_crd_and_status(k8s, crd_cluster, namespace, tmp_path):
    from kubernetes import client

    proc = start_operator(k8s, tmp_path, policy="binpack")  # the flag says binpack; the CRD says spread
    try:
        with k8s.api() as api:
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            spread = [f"s{i}" for i in range(4)]
            for name in spread:
                core.create_namespaced_pod(namespace, share_pod(name, 100, priority="high"))
            where = wait_for(lambda: placed(core, namespace, spread), what="4 pods bound")
            assert len({gpu for _, gpu in where.values()}) == 4  # spread over every GPU of both nodes
            assert {node for node, _ in where.values()} == {"crd-a", "crd-b"}  # crd-a: from its GPUNode only
            handoff = json.loads(core.read_namespaced_pod("s0", namespace).metadata.annotations[keys.ASSIGNMENT])
            assert handoff["containers"][0]["sloSlowdown"] == 1.5  # the cluster's bound, for a high-priority pod

            assert wait_for(lambda: accepted(custom, "default"), what="default's status") == ("True", "Applied")
            assert wait_for(lambda: accepted(custom, "other"), what="other's status") == ("False", "NotDefault")

            on_a = sorted(n for n, (node, _) in where.items() if node == "crd-a")
            status = wait_for(lambda: (s := gpunode_status(custom, "crd-a")).get("allocatedPods") == 2 and s,
                              what="crd-a's GPUNode status", show=lambda: gpunode_status(custom, "crd-a"))
            assert sorted(a["pod"] for a in status["allocations"]) == on_a
            assert {(a["milliGpu"], a["namespace"], a["container"]) for a in status["allocations"]} == {
                (100, namespace, "main")}
            (cond,) = status["conditions"]
            assert (cond["type"], cond["status"], cond["reason"]) == ("Schedulable", "True", "GPUsAvailable")

            core.patch_node("crd-a", {"spec": {"unschedulable": True}})
            core.delete_namespaced_pod(on_a[0], namespace, grace_period_seconds=0)
            # the cordon and the deletion reach the operator on two watches, in either order: wait for both
            status = wait_for(lambda: ((s := gpunode_status(custom, "crd-a")).get("allocatedPods") == 1
                                       and s["conditions"][0]["reason"] == "Cordoned" and s),
                              what="crd-a's status after a deletion, cordoned",
                              show=lambda: gpunode_status(custom, "crd-a"))
            assert [a["pod"] for a in status["allocations"]] == on_a[1:]

            # The cluster's policy changed live: binpack now, so the next two shares land on one GPU.
            custom.patch_cluster_custom_object(GROUP, VERSION, keys.SCHEDULING_POLICY_PLURAL, "default",
                                               {"spec": {"nodePolicy": "binpack", "gpuPolicy": "binpack"}})
            wait_for(lambda: custom.get_cluster_custom_object(GROUP, VERSION, keys.SCHEDULING_POLICY_PLURAL,
                                                              "default")["status"]["observedGeneration"] == 2,
                     what="generation 2 observed")
            packed = ["b0", "b1"]
            for name in packed:
                core.create_namespaced_pod(namespace, share_pod(name, 100))
            where = wait_for(lambda: placed(core, namespace, packed), what="2 more pods bound")
            assert len(set(where.values())) == 1, where
    finally:
        stop(proc)


def test_the_example_policy_is_what_the_crd_and_the_operator_accept(k8s):
    """deploy/examples/policy/default.yaml (the README's) passes the CRD's schema on the real apiserver (dry
    run) and reads as the operator reads a policy, every field as written."""
    from pathlib import Path

    import yaml
    from kubernetes import client

    from fgpu_contracts.policy import SchedulingPolicySpec

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "deploy/examples/policy/default.yaml").read_text())
    spec = SchedulingPolicySpec.model_validate(doc["spec"])
    assert (spec.node_policy, spec.gpu_policy, spec.default_slo_slowdown) == ("fgpu", "spread", 1.2)
    install_crds(k8s)
    with k8s.api() as api:
        created = client.CustomObjectsApi(api).create_cluster_custom_object(
            GROUP, VERSION, keys.SCHEDULING_POLICY_PLURAL, doc, dry_run="All")
    assert created["spec"] == doc["spec"]
