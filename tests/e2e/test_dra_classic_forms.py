"""The classic spellings on DRA, KEP-5004 pods of fgpu-scheduler and shared claims (docs/dra.md), against a real
1.37 apiserver, controller-manager and kube-scheduler, on KWOK nodes whose fgpu-dra slices are published:

- with `--dra-claims fgpu-scheduler`, the webhook writes a HAMi share (gpumem + gpucores) and a KAI fraction as
  claim templates; the controller-manager makes the claims, fgpu allocates them with the share asked, and binds;
  a form a claim cannot say is refused in one line; with `--dra-claims kube-scheduler` the same HAMi pod goes to
  kube-scheduler, whose DRA plugin allocates it on the pool it owns;
- a `nvidia.com/gpu: 2` pod of fgpu-scheduler on a DRA node (with fgpu-dra's extended-resource class) gets the
  claim kube-scheduler would make: `<pod>-extended-resources-*`, annotated, owned by the pod, allocated with two
  whole GPUs, named in the pod's status.extendedResourceClaimStatus;
- one claim named by three pods is allocated once, reserved for all three, all on its node; when they are gone
  the controller-manager deallocates it.
The invariant checker over slices, claims and pods finds nothing wrong after each.
"""
from __future__ import annotations

import yaml
from fgpu_operator.inspect.claims import claim_violations
from operator_proc import create_admitted, operator_with_own_webhook, stop
from polling import wait_for
from test_dra_fgpu_allocator import _objects, classes  # noqa: F401 - `classes` is a fixture

from deviceplugin.dra.classes import extended_resource_class
from deviceplugin.dra.devices import node_devices
from deviceplugin.dra.kube import GROUP, VERSION, SlicePublisher
from deviceplugin.dra.slices import resource_slices
from fgpu_contracts import dra as names
from fgpu_contracts import keys
from simgpu.nodeconfig import parse_node_config

CONFIG = """
version: v1
gpus:
  - {model: A100-80GB, count: 2, sharing: fractional}
"""


def _publish(api, node: str, allocator: str) -> SlicePublisher:
    publisher = SlicePublisher(api, node)
    devices = node_devices(parse_node_config(yaml.safe_load(CONFIG)), node)
    publisher.publish(lambda g: resource_slices(node, devices, {}, "default", g, allocator=allocator))
    return publisher


def _pod(name: str, resources: dict | None = None, annotations: dict | None = None, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"tolerations": [{"operator": "Exists"}], **spec,
                     "containers": [{"name": "main", "image": "busybox", "resources": {
                         "limits": {"cpu": "100m", **(resources or {})}}}]}}


def _clean(api, objs, core, namespace: str) -> None:
    slices = objs.list_cluster_custom_object(GROUP, VERSION, "resourceslices")["items"]
    all_claims = objs.list_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims")["items"]
    pods = api.sanitize_for_serialization(core.list_namespaced_pod(namespace).items)
    assert claim_violations(slices, all_claims, pods) == []


def _tear_down(operator, core, namespace: str, publishers: list[SlicePublisher]) -> None:
    stop(operator)
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    for p in publishers:
        p.withdraw()


def _claim(objs, core, namespace: str, pod: str) -> dict | None:
    status = core.read_namespaced_pod(pod, namespace).status
    name = next((s.resource_claim_name for s in status.resource_claim_statuses or () if s.resource_claim_name), None)
    return objs.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", name) if name else None


def _bound(core, namespace: str, *pods: str) -> bool:
    return all(core.read_namespaced_pod(p, namespace).spec.node_name for p in pods)


HAMI = {keys.GPU_RESOURCE: "1", "nvidia.com/gpumem": "8192", "nvidia.com/gpucores": "30"}


def test_share_spellings_become_claims_that_both_allocators_place(
        k8s, classes, controller_manager, kube_scheduler, make_kwok_node, namespace, tmp_path):  # noqa: F811
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    make_kwok_node("dra-forms-fgpu", {})
    with k8s.api() as api:
        objs, core = _objects(api), client.CoreV1Api(api)
        publishers = [_publish(api, "dra-forms-fgpu", names.ALLOCATOR_FGPU)]
        operator = operator_with_own_webhook(k8s, core, namespace, tmp_path, "--dra-claims", "fgpu-scheduler")
        try:
            create_admitted(core, namespace, _pod("hami", HAMI))
            create_admitted(core, namespace, _pod("kai", annotations={keys.KAI_FRACTION: "0.5"}))
            admitted = core.read_namespaced_pod("hami", namespace)
            assert admitted.spec.scheduler_name == keys.SCHEDULER_NAME
            assert admitted.spec.containers[0].resources.limits == {"cpu": "100m"}  # the claim carries the GPU
            wait_for(lambda: _bound(core, namespace, "hami", "kai"), 60, "both rewritten pods bound by fgpu")
            (hami,) = _claim(objs, core, namespace, "hami")["status"]["allocation"]["devices"]["results"]
            (kai,) = _claim(objs, core, namespace, "kai")["status"]["allocation"]["devices"]["results"]
            assert hami["consumedCapacity"] == {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "30"}
            assert kai["consumedCapacity"] == {names.CAP_MEMORY: "40Gi", names.CAP_SM_SHARE: "50"}
            templates = objs.list_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaimtemplates")
            assert len(templates["items"]) == 2  # one per shape; the dry-run probes wrote none
            try:
                core.create_namespaced_pod(namespace, _pod("bad", annotations={
                    keys.FGPU_FRACTION: "0.5", keys.FGPU_SM: "80"}))
                raise AssertionError("a fraction with another SM limit was admitted on DRA")
            except ApiException as e:
                assert e.status == 400 and "a claim's smShare is both" in e.body
            _clean(api, objs, core, namespace)
        finally:
            stop(operator)

        make_kwok_node("dra-forms-kube", {})
        publishers.append(_publish(api, "dra-forms-kube", names.ALLOCATOR_KUBE))
        operator = operator_with_own_webhook(k8s, core, namespace, tmp_path, "--dra-claims", "kube-scheduler")
        try:
            create_admitted(core, namespace, _pod("hami-kube", HAMI, schedulerName="hami-scheduler"))
            assert core.read_namespaced_pod("hami-kube", namespace).spec.scheduler_name == keys.DEFAULT_SCHEDULER
            wait_for(lambda: _bound(core, namespace, "hami-kube"), 90, "kube-scheduler binds the rewritten pod")
            assert core.read_namespaced_pod("hami-kube", namespace).spec.node_name == "dra-forms-kube"
            (r,) = _claim(objs, core, namespace, "hami-kube")["status"]["allocation"]["devices"]["results"]
            assert r["pool"] == "dra-forms-kube" and r["device"].endswith("-shared")
            assert r["consumedCapacity"] == {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "30"}
            _clean(api, objs, core, namespace)
        finally:
            _tear_down(operator, core, namespace, publishers)


def test_whole_gpus_of_fgpu_scheduler_get_kep_5004s_claim(
        k8s, classes, controller_manager, make_kwok_node, namespace, tmp_path):  # noqa: F811
    from kubernetes import client

    make_kwok_node("dra-extended", {})
    with k8s.api() as api:
        objs, core = _objects(api), client.CoreV1Api(api)
        objs.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", extended_resource_class())
        publisher = _publish(api, "dra-extended", names.ALLOCATOR_FGPU)
        operator = operator_with_own_webhook(k8s, core, namespace, tmp_path, "--dra-claims", "fgpu-scheduler")
        try:
            create_admitted(core, namespace, _pod("whole", {keys.GPU_RESOURCE: "2"}))
            wait_for(lambda: _bound(core, namespace, "whole"), 60, "the whole-GPU pod bound on the DRA node")
            pod = core.read_namespaced_pod("whole", namespace)
            status = api.sanitize_for_serialization(pod.status)["extendedResourceClaimStatus"]
            assert status["requestMappings"] == [{"containerName": "main", "resourceName": keys.GPU_RESOURCE,
                                                  "requestName": "container-0-request-1"}]  # [cpu, nvidia.com/gpu]
            claim = objs.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims",
                                                      status["resourceClaimName"])
            meta = claim["metadata"]
            assert meta["name"].startswith("whole-extended-resources-")
            assert meta["annotations"] == {names.EXTENDED_RESOURCE_CLAIM: "true"}
            assert [(o["kind"], o["uid"], o["controller"]) for o in meta["ownerReferences"]] == [
                ("Pod", pod.metadata.uid, True)]
            assert names.DELETE_PROTECTION in meta["finalizers"]
            (req,) = claim["spec"]["devices"]["requests"]
            assert req["exactly"]["deviceClassName"] == names.CLASS_EXTENDED and req["exactly"]["count"] == 2
            results = claim["status"]["allocation"]["devices"]["results"]
            assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1"]
            assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "whole", "uid": pod.metadata.uid}]
            _clean(api, objs, core, namespace)
        finally:
            stop(operator)
            core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
            objs.delete_cluster_custom_object(GROUP, VERSION, "deviceclasses", names.CLASS_EXTENDED)
            publisher.withdraw()


def test_one_claim_shared_by_three_pods_is_allocated_once(
        k8s, classes, controller_manager, make_kwok_node, namespace, tmp_path):  # noqa: F811
    from kubernetes import client
    from operator_proc import start_operator

    for node in ("dra-shared-0", "dra-shared-1"):
        make_kwok_node(node, {})
    with k8s.api() as api:
        objs, core = _objects(api), client.CoreV1Api(api)
        publishers = [_publish(api, n, names.ALLOCATOR_FGPU) for n in ("dra-shared-0", "dra-shared-1")]
        objs.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "shared"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": names.CLASS_SHARE,
                "capacity": {"requests": {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "30"}}}}]}}})
        operator = start_operator(k8s, tmp_path, policy="spread")  # spread: only the claim keeps them together
        try:
            pods = ("s0", "s1", "s2")
            for p in pods:
                body = _pod(p, schedulerName=keys.SCHEDULER_NAME,
                            resourceClaims=[{"name": "gpu", "resourceClaimName": "shared"}])
                body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
                core.create_namespaced_pod(namespace, body)
            wait_for(lambda: _bound(core, namespace, *pods), 60, "the three pods of one claim bound")
            claim = objs.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", "shared")
            assert len(claim["status"]["allocation"]["devices"]["results"]) == 1
            uids = {core.read_namespaced_pod(p, namespace).metadata.uid for p in pods}
            assert {r["uid"] for r in claim["status"]["reservedFor"]} == uids
            node = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"]
            assert {core.read_namespaced_pod(p, namespace).spec.node_name for p in pods} == set(node)
            _clean(api, objs, core, namespace)
            for p in pods[:2]:
                core.delete_namespaced_pod(p, namespace, grace_period_seconds=0)
            wait_for(lambda: len(objs.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims",
                                                                   "shared")["status"]["reservedFor"]) == 1, 60,
                     "the ended pods dropped from reservedFor")
            claim = objs.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", "shared")
            assert claim["status"].get("allocation")  # still in use by the last pod
            core.delete_namespaced_pod(pods[2], namespace, grace_period_seconds=0)
            wait_for(lambda: not objs.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims",
                                                                   "shared").get("status", {}).get("allocation"),
                     60, "the controller-manager deallocates the claim after its last pod")
            _clean(api, objs, core, namespace)
        finally:
            _tear_down(operator, core, namespace, publishers)
