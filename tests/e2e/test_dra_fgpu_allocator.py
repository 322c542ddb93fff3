"""fgpu-scheduler allocates the DRA claims of its pods (docs/dra.md "fgpu's own allocator"), against a real 1.37
apiserver, controller-manager (claims from templates) and kube-scheduler, on a KWOK node whose fgpu-dra slices
are published for fgpu-scheduler (`--allocator fgpu-scheduler`):

- two pods of fgpu-scheduler with a claim template for "8Gi and 30%" get their claims allocated by fgpu
  (status.allocation with shareID and consumedCapacity, reservedFor, the delete-protection finalizer) and are
  bound; they share one GPU with distinct shareIDs;
- kube-scheduler allocates nothing there: its pod's claim for the same share stays unallocated;
- after an operator restart the model has the claims back: of two 70Gi shares, one goes to the other GPU and
  the second waits (the first GPU has 64Gi left), and the invariant checker over slices, claims and pods
  finds nothing wrong.
"""
from __future__ import annotations

import pytest
import yaml
from fgpu_operator.inspect.claims import claim_violations
from operator_proc import start_operator, stop
from polling import wait_for

from deviceplugin.dra.classes import device_classes
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
NODE = "dra-fgpu-0"


def _objects(api):
    from kubernetes import client

    return client.CustomObjectsApi(api)


@pytest.fixture
def classes(k8s):
    from kubernetes.client.rest import ApiException

    made = []
    with k8s.api() as api:
        for cls in device_classes():
            try:
                _objects(api).create_cluster_custom_object(GROUP, VERSION, "deviceclasses", cls)
                made.append(cls["metadata"]["name"])
            except ApiException as e:
                if e.status != 409:
                    raise
    yield
    with k8s.api() as api:
        for name in made:
            _objects(api).delete_cluster_custom_object(GROUP, VERSION, "deviceclasses", name)


def _template(name: str, memory: str, sm: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": names.CLASS_SHARE,
                "capacity": {"requests": {names.CAP_MEMORY: memory, names.CAP_SM_SHARE: sm}}}}]}}}}


def _pod(name: str, template: str, scheduler: str = keys.SCHEDULER_NAME) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": scheduler, "tolerations": [{"operator": "Exists"}],
                     "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
                     "containers": [{"name": "main", "image": "busybox", "resources": {
                         "requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]}}]}}


def _claim_of(objs, core, namespace: str, pod: str) -> dict | None:
    statuses = core.read_namespaced_pod(pod, namespace).status.resource_claim_statuses or []
    if not statuses or not statuses[0].resource_claim_name:
        return None
    return objs.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims",
                                             statuses[0].resource_claim_name)


def test_fgpu_allocates_claims_of_its_pods_and_learns_them_back(
        k8s, classes, controller_manager, kube_scheduler, make_kwok_node, namespace, tmp_path):
    from kubernetes import client

    make_kwok_node(NODE, {})
    with k8s.api() as api:
        objs, core = _objects(api), client.CoreV1Api(api)
        publisher = SlicePublisher(api, NODE)
        devices = node_devices(parse_node_config(yaml.safe_load(CONFIG)), NODE)
        publisher.publish(lambda g: resource_slices(NODE, devices, {}, "default", g,
                                                    allocator=names.ALLOCATOR_FGPU))
        operator = start_operator(k8s, tmp_path, log_name="first.log")
        try:
            for name, memory, sm in (("share-8g-30", "8Gi", "30"), ("share-70g", "70Gi", "10")):
                objs.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaimtemplates",
                                                     _template(name, memory, sm))
            for pod in ("a", "b"):
                core.create_namespaced_pod(namespace, _pod(pod, "share-8g-30"))
            core.create_namespaced_pod(namespace, _pod("kube", "share-8g-30", scheduler="default-scheduler"))
            wait_for(lambda: all(core.read_namespaced_pod(p, namespace).spec.node_name == NODE for p in "ab"), 60,
                     "both fgpu-scheduler pods bound")
            claims = {p: _claim_of(objs, core, namespace, p) for p in "ab"}
            results = [claims[p]["status"]["allocation"]["devices"]["results"] for p in "ab"]
            assert [len(r) for r in results] == [1, 1]
            ra, rb = results[0][0], results[1][0]
            assert ra["device"] == rb["device"] and ra["device"].endswith("-shared")  # binpack: one GPU
            assert (ra["driver"], ra["pool"], ra["request"]) == (names.DRIVER, NODE, "gpu")
            assert ra["shareID"] != rb["shareID"]
            assert ra["consumedCapacity"] == {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "30"}
            for p in "ab":
                uid = core.read_namespaced_pod(p, namespace).metadata.uid
                assert claims[p]["status"]["reservedFor"] == [{"resource": "pods", "name": p, "uid": uid}]
                assert names.DELETE_PROTECTION in claims[p]["metadata"]["finalizers"]

            # kube-scheduler keeps off fgpu-scheduler's pool (every device carries its allocator taint)
            def kube_refused() -> bool:
                conds = core.read_namespaced_pod("kube", namespace).status.conditions or []
                return any(c.type == "PodScheduled" and c.status == "False" for c in conds)

            wait_for(kube_refused, 60, "kube-scheduler's pod refused")
            kube_claim = _claim_of(objs, core, namespace, "kube")
            assert kube_claim is not None and not (kube_claim.get("status") or {}).get("allocation")
            assert core.read_namespaced_pod("kube", namespace).spec.node_name is None
        finally:
            stop(operator)

        operator = start_operator(k8s, tmp_path, log_name="second.log")
        try:
            for pod in ("c", "d"):
                core.create_namespaced_pod(namespace, _pod(pod, "share-70g"))

            def one_bound_one_refused() -> bool:
                got = [core.read_namespaced_pod(p, namespace) for p in "cd"]
                refused = [p for p in got if any(c.type == "PodScheduled" and c.status == "False"
                                                 for c in p.status.conditions or ())]
                return sum(p.spec.node_name == NODE for p in got) == 1 and len(refused) == 1

            wait_for(one_bound_one_refused, 60, "one 70Gi share bound, the other refused")
            bound = next(p for p in "cd" if core.read_namespaced_pod(p, namespace).spec.node_name)
            (rc,) = _claim_of(objs, core, namespace, bound)["status"]["allocation"]["devices"]["results"]
            assert rc["device"] != ra["device"]  # the first GPU holds 16Gi: the restarted model knows it
            slices = objs.list_cluster_custom_object(GROUP, VERSION, "resourceslices")["items"]
            all_claims = objs.list_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims")["items"]
            pods = api.sanitize_for_serialization(core.list_namespaced_pod(namespace).items)
            assert claim_violations(slices, all_claims, pods) == []
        finally:
            stop(operator)
            core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
            publisher.withdraw()
