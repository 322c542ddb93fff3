"""The operator against the real control plane: `fgpu operator` as a process, KWOK nodes carrying a GPU
inventory, pods that ask for shares. Fractional pods are packed as the core decides, bound with their
hand-off annotation in the same write, a pod that fits nowhere stays Pending with kube-scheduler's words,
and is bound once a deletion frees room."""
from __future__ import annotations

import json

import pytest
from operator_proc import gpu_node, share_pod, start_operator, stop, wait_webhook_live
from polling import wait_for

from fgpu_contracts import keys

pytestmark = pytest.mark.e2e
GIB = 1 << 30


@pytest.fixture
def operator_process(k8s, kubeconfig_env, tmp_path, make_kwok_node):
    gpu_node(make_kwok_node, k8s, "op-h100")  # inventory in place before the operator lists nodes
    proc = start_operator(k8s, tmp_path)
    yield proc
    stop(proc)


def test_fractional_pods_packed_bound_atomically_pending_explained_then_placed(
        k8s, kwok, make_kwok_node, namespace, operator_process):
    from kubernetes import client

    with k8s.api() as api:
        core = client.CoreV1Api(api)

        def condition(name):
            status = core.read_namespaced_pod(name, namespace).status
            return next((c for c in status.conditions or () if c.type == "PodScheduled"), None)

        core.create_namespaced_pod(namespace, share_pod("big", 300, 100))  # more memory than an H100 has
        memory = "0/1 nodes are available: 1 Insufficient GPU memory."  # (once the inventory is seen)
        big = wait_for(lambda: (c := condition("big")) is not None and c.message == memory and c,
                       what="big's PodScheduled condition", show=lambda: condition("big"))
        assert (big.status, big.reason) == ("False", "Unschedulable")
        for i in range(6):
            core.create_namespaced_pod(namespace, share_pod(f"s{i}", 300, 8))

        def bound():
            pods = core.list_namespaced_pod(namespace).items
            pods = [p for p in pods if p.metadata.name != "big"]
            return pods if len(pods) == 6 and all(p.spec.node_name for p in pods) else None

        pods = wait_for(bound, what="6 pods bound")
        per_gpu: dict[str, int] = {}
        for p in pods:
            a = json.loads(p.metadata.annotations[keys.ASSIGNMENT])  # landed with the binding itself
            assert a["node"] == "op-h100" == p.spec.node_name
            (device,) = a["containers"][0]["devices"]
            assert (device["milliGpu"], device["memBytes"], device["smPct"]) == (300, 8 * GIB, 30)
            per_gpu[device["uuid"]] = per_gpu.get(device["uuid"], 0) + 300
        assert sorted(per_gpu.values()) == [900, 900]  # three 0.3 shares per GPU: packed

        core.create_namespaced_pod(namespace, share_pod("late", 300))  # fits no GPU now (0.1 left on each)
        late = wait_for(lambda: condition("late"), what="late's condition")
        assert late.message == "0/1 nodes are available: 1 Insufficient GPU."
        assert condition("big").message == memory  # not re-explained as full: it never fit
        # the Event is posted after the condition is written, on the operator's side session: wait for it too
        wait_for(lambda: any(e.reason == "FailedScheduling" and e.message == late.message for e in
                             core.list_namespaced_event(namespace, field_selector="involvedObject.name=late").items),
                 what="late's FailedScheduling event")

        core.delete_namespaced_pod("s0", namespace, grace_period_seconds=0)
        node = wait_for(lambda: core.read_namespaced_pod("late", namespace).spec.node_name,
                        what="late bound after a deletion freed 0.3 of a GPU")
        assert node == "op-h100"
        assert core.read_namespaced_pod("big", namespace).spec.node_name is None


def test_webhook_normalises_a_hami_pod_and_denies_a_bad_one(k8s, kwok, make_kwok_node, namespace, tmp_path):
    """The real apiserver calls the operator's webhook: a HAMi-spelled pod for the default scheduler is taken
    over and bound with the share it asked for; a bad request is refused with one line."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from devcluster.kubeplane import free_port

    gpu_node(make_kwok_node, k8s, "wh-a100", model="A100-SXM4-80GB", count=1)
    proc = start_operator(k8s, tmp_path, "--webhook-port", str(free_port()), "--webhook-host", "127.0.0.1",
                          "--manage-webhook-config")
    try:
        with k8s.api() as api:
            core = client.CoreV1Api(api)
            reg = client.AdmissionregistrationV1Api(api)
            wait_for(lambda: reg.list_mutating_webhook_configuration().items, what="webhook configuration")
            wait_webhook_live(core, namespace)
            hami = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hami"},
                    "spec": {"containers": [{"name": "cuda", "image": "busybox", "resources": {"limits": {
                        "nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192", "nvidia.com/gpucores": "30"}}}]}}

            def create():
                try:
                    return core.create_namespaced_pod(namespace, hami)
                except ApiException as e:  # the webhook may take a moment to answer after its config exists
                    if "fgpu" in (e.body or "") and e.status == 400:
                        raise
                    return None

            created = wait_for(create, what="pod admitted")
            assert created.spec.scheduler_name == keys.SCHEDULER_NAME
            assert keys.REQUEST in created.metadata.annotations
            node = wait_for(lambda: core.read_namespaced_pod("hami", namespace).spec.node_name, what="bound")
            pod = core.read_namespaced_pod("hami", namespace)
            (device,) = json.loads(pod.metadata.annotations[keys.ASSIGNMENT])["containers"][0]["devices"]
            assert (node, device["memBytes"], device["smPct"]) == ("wh-a100", 8192 << 20, 30)

            bad = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "bad", "annotations": {keys.FGPU_FRACTION: "1.5"}},
                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
            with pytest.raises(ApiException) as denied:
                core.create_namespaced_pod(namespace, bad)
            message = json.loads(denied.value.body)["message"]
            assert "fgpu.io/gpu-fraction" in message and "1.5" in message and "\n" not in message
    finally:
        stop(proc)
    assert proc.returncode == 0  # SIGTERM: a clean exit, not the SIGKILL after the grace
    assert not list(tmp_path.glob("fgpu-webhook-*"))  # its self-signed certificate and key went with it
