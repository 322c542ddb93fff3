"""HAMi's share on each of two GPUs, end to end: a pod asking `nvidia.com/gpu: 2` with
`nvidia.com/gpumem-percentage: 50` (as for a tensor-parallel model that needs half of two GPUs) goes through the
real apiserver's admission, is bound by the operator to two different GPUs of the node with half of each one's
memory in its signed hand-off, and the device plugin's Allocate (the stub kubelet's call for that node) gives
the container both devices, each with its own memory limit and daemon token."""
from __future__ import annotations

import json

import pytest
from operator_proc import create_admitted, start_operator, stop, wait_webhook_live
from plugin_proc import ready_node, running_plugin
from polling import wait_for

from devcluster import fgpu
from devcluster.kubeplane import free_port
from deviceplugin.api import api_pb2
from fgpu_contracts import keys
from simgpu.env import read_container_env
from simgpu.token import verify_token

pytestmark = pytest.mark.e2e
NODE = "multi-gpu-node"
SECRET = b"multi-gpu-share-secret-0123456789"
CONFIG = "version: v1\ngpus: [{model: A100-80GB, count: 2, sharing: fractional}]\nfractional: {splitCount: 4}\n"
GIB = 1 << 30


def test_hami_half_of_two_gpus_is_bound_to_both_and_allocated_both(k8s, namespace, tmp_path):
    key = ("--handoff-key-file", str(fgpu.handoff_key_file(k8s.kubeconfig)))
    with running_plugin(k8s, NODE, CONFIG, SECRET, labels={"fgpu-e2e": "multi-gpu"}, args=key) as (
            core, kubelet, cfg):
        slots = ready_node(core, kubelet, NODE, 8)
        proc = start_operator(k8s, tmp_path, "--webhook-port", str(free_port()), "--webhook-host", "127.0.0.1",
                              "--manage-webhook-config", "--trusted-user", "admin")
        try:
            wait_webhook_live(core, namespace)
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tp"},
                   "spec": {"nodeSelector": {"fgpu-e2e": "multi-gpu"}, "containers": [{
                       "name": "model", "image": "vllm/vllm-openai",
                       "resources": {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50"}}}]}}
            created = create_admitted(core, namespace, pod)
            assert created.spec.scheduler_name == keys.SCHEDULER_NAME
            assert created.spec.containers[0].resources.limits == {"nvidia.com/gpu": "2"}
            bound = wait_for(lambda: (p := core.read_namespaced_pod("tp", namespace)).spec.node_name and p,
                             what="the pod bound",
                             show=lambda: core.read_namespaced_pod("tp", namespace).status.conditions)
            assert bound.spec.node_name == NODE
            [container] = json.loads(bound.metadata.annotations[keys.ASSIGNMENT])["containers"]
            gpus = [g.uuid for g in cfg.gpu_devices(NODE)]
            devices = container["devices"]
            assert sorted(d["uuid"] for d in devices) == sorted(gpus)  # two different GPUs
            assert [(d["milliGpu"], d["memBytes"]) for d in devices] == [(500, 40 * GIB)] * 2

            response = kubelet.plugin("nvidia.com/gpu").Allocate(api_pb2.AllocateRequest(container_requests=[
                api_pb2.ContainerAllocateRequest(devices_ids=[s.ID for s in slots[:2]])]), timeout=10)
            env = dict(response.container_responses[0].envs)
            seen = read_container_env(env)
            assert seen.visible_devices == [d["uuid"] for d in devices]
            assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == env["CUDA_DEVICE_MEMORY_LIMIT_1"] == "40960m"
            grants = [verify_token(SECRET, token) for token in seen.tokens]
            assert [(g.device_uuid, g.vdevice_index, g.mem_limit_bytes) for g in grants] == [
                (d["uuid"], i, 40 * GIB) for i, d in enumerate(devices)]
            assert {(g.pod_namespace, g.pod_name, g.container) for g in grants} == {(namespace, "tp", "model")}
            recorded = wait_for(lambda: core.read_namespaced_pod("tp", namespace).metadata.annotations.get(
                keys.ALLOCATED), what="the plugin's allocation record")
            assert json.loads(recorded) == ["model"]
        finally:
            stop(proc)
