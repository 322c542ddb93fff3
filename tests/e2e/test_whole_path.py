"""The whole path, once: a pod asking for part of a GPU in fgpu's own annotations goes through the real
apiserver's admission (fgpu's webhook normalises it and routes it to fgpu's scheduler), is placed and bound
by the operator with its signed hand-off annotation, and the device plugin of the node it was bound to
(verifying the signature) answers the kubelet's Allocate (the stub kubelet, acting for that node) with the
share the pod asked for in the env."""
from __future__ import annotations

import json

import pytest
from operator_proc import create_admitted, operator_with_own_webhook, stop
from plugin_proc import ready_node, running_plugin
from polling import wait_for

from devcluster import fgpu
from deviceplugin.api import api_pb2
from fgpu_contracts import keys
from simgpu.token import verify_token

pytestmark = pytest.mark.e2e
NODE = "whole-path-node"
SECRET = b"whole-path-secret-0123456789abcd"
CONFIG = "version: v1\ngpus: [{model: A100-80GB, count: 2, sharing: fractional}]\nfractional: {splitCount: 4}\n"


def test_pod_to_allocate_env(k8s, namespace, tmp_path):
    key = ("--handoff-key-file", str(fgpu.handoff_key_file(k8s.kubeconfig)))  # the operator's: signed hand-offs
    with running_plugin(k8s, NODE, CONFIG, SECRET, labels={"fgpu-e2e": "whole-path"}, args=key) as (
            core, kubelet, cfg):
        slots = ready_node(core, kubelet, NODE, 8)
        # The plugin logs in as the test's admin here (in a cluster: its own service account, which the chart
        # trusts): only trusted users may write the hand-off annotations, so trust it as the chart would.
        proc = operator_with_own_webhook(k8s, core, namespace, tmp_path)
        try:
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "infer", "annotations": {
                       keys.FGPU_FRACTION: "0.3", keys.FGPU_MEMORY: "6Gi"}},
                   "spec": {"nodeSelector": {"fgpu-e2e": "whole-path"},
                            "containers": [{"name": "main", "image": "busybox"}]}}
            created = create_admitted(core, namespace, pod)
            assert created.spec.scheduler_name == keys.SCHEDULER_NAME  # routed by the webhook
            bound = wait_for(lambda: (p := core.read_namespaced_pod("infer", namespace)).spec.node_name and p,
                             what="the pod bound",
                             show=lambda: (core.read_namespaced_pod("infer", namespace).status.conditions,
                                           core.read_namespaced_pod("infer", namespace).spec.scheduler_name))
            assert bound.spec.node_name == NODE
            (device,) = json.loads(bound.metadata.annotations[keys.ASSIGNMENT])["containers"][0]["devices"]
            assert device["uuid"] in {g.uuid for g in cfg.gpu_devices(NODE)}

            # The kubelet of NODE admits the pod: it asks the plugin for the countable resource the webhook set.
            count = int(created.spec.containers[0].resources.limits["nvidia.com/gpu"])
            response = kubelet.plugin("nvidia.com/gpu").Allocate(api_pb2.AllocateRequest(container_requests=[
                api_pb2.ContainerAllocateRequest(devices_ids=[s.ID for s in slots[:count]])]), timeout=10)
            env = dict(response.container_responses[0].envs)
            assert env["NVIDIA_VISIBLE_DEVICES"] == device["uuid"]
            assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "6144m"  # 6Gi, as asked
            assert env["CUDA_DEVICE_SM_LIMIT"] == "30"  # the SM share defaults to the fraction
            grant = verify_token(SECRET, env["FGPU_CONTEXT_TOKEN"])
            assert (grant.pod_namespace, grant.pod_name, grant.container) == (namespace, "infer", "main")
            recorded = wait_for(lambda: core.read_namespaced_pod("infer", namespace).metadata.annotations.get(
                keys.ALLOCATED), what="the plugin's allocation record")
            assert json.loads(recorded) == ["main"]
        finally:
            stop(proc)
