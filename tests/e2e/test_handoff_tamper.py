"""A bound pod's hand-off edited after binding, with no admission webhook in the path (the operator runs
without one, as when the webhook is down under failurePolicy Ignore): the operator writes the scheduler's
assignment back, says why in a Warning Event, and the invariant checker finds the pod holding only what it
asked for."""
from __future__ import annotations

import json

import pytest
from operator_proc import gpu_node, share_pod, start_operator, stop
from polling import wait_for

from fgpu_contracts import keys

pytestmark = pytest.mark.e2e
GIB = 1 << 30


def test_an_assignment_edited_after_binding_is_restored_with_an_event(
        k8s, kwok, make_kwok_node, namespace, kubeconfig_env, tmp_path):
    from fgpu_operator.inspect.audit import audit
    from kubernetes import client

    gpu_node(make_kwok_node, k8s, "tamper-h100", count=1)
    proc = start_operator(k8s, tmp_path)  # no --webhook-port: nothing refuses the edit at admission
    try:
        with k8s.api() as api:
            core = client.CoreV1Api(api)
            core.create_namespaced_pod(namespace, share_pod("greedy", 300, 8))
            wait_for(lambda: core.read_namespaced_pod("greedy", namespace).spec.node_name, what="greedy bound")
            given = core.read_namespaced_pod("greedy", namespace).metadata.annotations
            forged = json.loads(given[keys.ASSIGNMENT])
            forged["containers"][0]["devices"][0].update(milliGpu=1000, memBytes=80 * GIB, smPct=100)
            core.patch_namespaced_pod("greedy", namespace, {"metadata": {"annotations": {
                keys.ASSIGNMENT: json.dumps(forged), keys.ASSIGNED_AT: "2000-01-01T00:00:00Z"}}})

            def restored():
                now = core.read_namespaced_pod("greedy", namespace).metadata.annotations
                return all(now.get(k) == given[k] for k in (keys.ASSIGNMENT, keys.ASSIGNED_AT)) and now

            wait_for(restored, what="the scheduler's assignment written back",
                     show=lambda: core.read_namespaced_pod("greedy", namespace).metadata.annotations)

            def event():
                items = core.list_namespaced_event(namespace, field_selector="involvedObject.name=greedy").items
                return next((e for e in items if e.reason == "AssignmentRestored"), None)

            restoring = wait_for(event, what="an AssignmentRestored event")
            assert restoring.type == "Warning"
            assert restoring.message.startswith(f"{keys.ASSIGNMENT} was set to ")
            assert "not by fgpu's scheduler" in restoring.message
            assert f"main: 300 milli-GPU, 30% SMs, {8 * GIB} bytes of " in restoring.message

            # A GPU allocation added to a pod the operator saw bound without one is taken away again.
            core.create_namespaced_pod(namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"},
                                                   "spec": {"schedulerName": keys.SCHEDULER_NAME, "containers": [
                                                       {"name": "c", "image": "busybox"}]}})
            wait_for(lambda: core.read_namespaced_pod("plain", namespace).spec.node_name, what="plain bound")
            core.patch_namespaced_pod("plain", namespace, {"metadata": {"annotations": {
                keys.ASSIGNMENT: given[keys.ASSIGNMENT]}}})
            wait_for(lambda: keys.ASSIGNMENT not in (core.read_namespaced_pod("plain", namespace)
                                                     .metadata.annotations or {}), what="forged assignment removed")

            raw = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]
            nodes = [json.loads(core.read_node("tamper-h100", _preload_content=False).data)]
            assert audit(nodes, raw) == []
    finally:
        stop(proc)
