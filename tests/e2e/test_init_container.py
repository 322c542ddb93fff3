"""KAI's init-container form on the whole path: `gpu-fraction` with `gpu-fraction-container-name` naming an
init container goes through the real apiserver's admission (fgpu's webhook takes the kai-scheduler pod over
and gives the share to that init container), is bound by the operator, and the stub kubelet's pod admission
(devcluster.kubelets, which allocates as the kubelet does: init containers first) has the node's device
plugin hand the share to the init container; the app container gets no GPU."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from operator_proc import create_admitted, operator_with_own_webhook, stop
from plugin_proc import report_ready, running_plugin
from polling import wait_for

from devcluster import fgpu
from devcluster.kubelets import ALLOCATED, Kubelets
from fgpu_contracts import keys
from simgpu.token import verify_token

pytestmark = pytest.mark.e2e
NODE = "init-container-node"
SECRET = b"init-container-secret-0123456789"
CONFIG = "version: v1\ngpus: [{model: A100-80GB, count: 1, sharing: fractional}]\nfractional: {splitCount: 4}\n"


def test_kai_fraction_for_an_init_container_reaches_that_container(k8s, namespace, tmp_path):
    key = ("--handoff-key-file", str(fgpu.handoff_key_file(k8s.kubeconfig)))
    with running_plugin(k8s, NODE, CONFIG, SECRET, labels={"fgpu-e2e": "init"}, args=key) as (core, kubelet, cfg):
        wait_for(lambda: keys.INVENTORY in (core.read_node(NODE).metadata.annotations or {}), 30,
                 "the plugin to publish the inventory")
        kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 4, timeout=20)
        kubelets = Kubelets(core, {NODE: Path(kubelet.dir)})
        node = kubelets.nodes[NODE]
        node.kubelet = kubelet  # the plugin registered with this one (running_plugin's)
        slots = len(node.resources()["nvidia.com/gpu"])
        report_ready(core, NODE, slots)
        node.reported = {"nvidia.com/gpu": slots}  # what Node.report_capacity would have written
        proc = operator_with_own_webhook(k8s, core, namespace, tmp_path)
        try:
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "prep-then-serve", "annotations": {
                       keys.KAI_FRACTION: "0.5", keys.KAI_CONTAINER: "prep"}},
                   "spec": {"schedulerName": "kai-scheduler", "nodeSelector": {"fgpu-e2e": "init"},
                            "initContainers": [{"name": "prep", "image": "busybox"}],
                            "containers": [{"name": "main", "image": "busybox"}]}}
            created = create_admitted(core, namespace, pod)
            assert created.spec.scheduler_name == keys.SCHEDULER_NAME
            assert created.spec.init_containers[0].resources.limits == {"nvidia.com/gpu": "1"}  # the share's slot
            assert not (created.spec.containers[0].resources.limits or {})
            bound = wait_for(lambda: (p := core.read_namespaced_pod(pod["metadata"]["name"], namespace))
                             .spec.node_name and p, what="the pod bound")
            (given,) = json.loads(bound.metadata.annotations[keys.ASSIGNMENT])["containers"]
            assert given["name"] == "prep"

            raw = json.loads(core.read_namespaced_pod(pod["metadata"]["name"], namespace,
                                                      _preload_content=False).data)
            kubelets.on_pod("ADDED", raw)  # what the kubelet's pod watch delivers
            uid = raw["metadata"]["uid"]
            wait_for(lambda: (kubelets.step(), uid in kubelets.done)[1], 30, "the stub kubelet to admit the pod")
            records = {c: json.loads((node.pods_dir / f"{namespace}.{pod['metadata']['name']}.{c}.json").read_text())
                       for c in ("prep", "main")}
            env = records["prep"]["env"]
            assert env["NVIDIA_VISIBLE_DEVICES"] == given["devices"][0]["uuid"]
            assert env["CUDA_DEVICE_SM_LIMIT"] == "50"  # KAI's fraction
            grant = verify_token(SECRET, env["FGPU_CONTEXT_TOKEN"])
            assert (grant.pod_namespace, grant.pod_name, grant.container) == (namespace, "prep-then-serve", "prep")
            assert records["main"]["devices"] == {} and "FGPU_CONTEXT_TOKEN" not in records["main"]["env"]
            # the plugin writes its record after answering Allocate: wait for it, as the kubelet does not
            after = wait_for(lambda: (a := core.read_namespaced_pod(pod["metadata"]["name"], namespace)
                                      .metadata.annotations or {}) and keys.ALLOCATED in a and a, 30,
                             "the plugin's allocation record")
            assert json.loads(after[keys.ALLOCATED]) == ["prep"]  # the plugin's record: the init container
            assert json.loads(after[ALLOCATED]) == {"main": {}, "prep": {"nvidia.com/gpu": records["prep"]["devices"][
                "nvidia.com/gpu"]}}
        finally:
            stop(proc)
