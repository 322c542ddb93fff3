"""Signed hand-offs on a real apiserver: the operator signs each assignment on the Binding, the device plugin
(a real process, with the same key file devcluster gives both) hands a container only what verifies. A pod
whose assignment is edited after binding, with no admission webhook in the path, gets nothing it was not
given: while the operator runs, its Allocate is refused or (the guard having written the original back first)
answered with exactly the original; with the operator down nothing writes it back, so Allocate (once the
plugin's pod watch shows the edit) is refused, and the operator, restarted, does not take the forged assignment
at its word."""
from __future__ import annotations

import json
import re

import grpc
import pytest
from operator_proc import share_pod, start_operator, stop
from plugin_proc import running_plugin
from polling import wait_for

from devcluster import fgpu
from deviceplugin.api import api_pb2
from fgpu_contracts import keys
from fgpu_contracts.signature import load_key, problem

pytestmark = pytest.mark.e2e
NODE = "signed-handoff-node"
SECRET = b"signed-handoff-secret-0123456789"
CONFIG = "version: v1\ngpus: [{model: A100-80GB, count: 2, sharing: fractional}]\nfractional: {splitCount: 4}\n"
GIB = 1 << 30


def test_a_forged_assignment_is_never_handed_out(k8s, namespace, tmp_path):
    key_file = fgpu.handoff_key_file(k8s.kubeconfig)  # the one start_operator gives the operator
    key = load_key(str(key_file))
    plugin_log = tmp_path / "plugin.log"

    def plugin_saw(version: int) -> bool:
        """The plugin's pod cache (its watch or a list, logged at DEBUG) has reached resourceVersion `version`."""
        seen = [int(v) for v in re.findall(r"at resourceVersion (\d+)", plugin_log.read_text())]
        return bool(seen) and max(seen) >= version

    with running_plugin(k8s, NODE, CONFIG, SECRET, labels={"fgpu-e2e": "signed"}, log_file=plugin_log,
                        args=("--handoff-key-file", str(key_file), "--log-level", "DEBUG")) as (
            core, kubelet, _cfg):
        wait_for(lambda: keys.INVENTORY in (core.read_node(NODE).metadata.annotations or {}), 30,
                 "the plugin to publish the inventory")
        slots = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 8, timeout=20)
        capacity = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(len(slots))}
        core.patch_node_status(NODE, {"status": {"capacity": capacity, "allocatable": capacity, "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "stub kubelet"}]}})
        core.patch_node(NODE, {"spec": {"taints": None}})
        stub = kubelet.plugin("nvidia.com/gpu")

        def allocate(slot):
            return dict(stub.Allocate(api_pb2.AllocateRequest(container_requests=[
                api_pb2.ContainerAllocateRequest(devices_ids=[slot.ID])]), timeout=10).container_responses[0].envs)

        def bound(name):
            pod = share_pod(name, 300, 8)
            pod["spec"]["nodeSelector"] = {"fgpu-e2e": "signed"}
            core.create_namespaced_pod(namespace, pod)
            got = wait_for(lambda: (p := core.read_namespaced_pod(name, namespace)).spec.node_name and p,
                           what=f"{name} bound")
            notes = got.metadata.annotations
            assert problem(key, got.metadata.uid, NODE, notes) is None  # signed on the Binding
            return notes

        def grow(name, given):
            forged = json.loads(given[keys.ASSIGNMENT])
            forged["containers"][0]["devices"][0].update(milliGpu=1000, memBytes=80 * GIB, smPct=100)
            edited = core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {
                keys.ASSIGNMENT: json.dumps(forged)}}})
            return int(edited.metadata.resource_version)

        operator = start_operator(k8s, tmp_path)  # no --webhook-port: nothing refuses the edit at admission
        try:
            given = bound("first")
            grow("first", given)
            try:  # racing the guard's write-back: refused, or the original; never the forged share
                env = allocate(slots[0])
                outcome = "original"
            except grpc.RpcError as err:
                assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert f"{namespace}/first container main: not handed out" in err.details()
                assert "fgpu.io/assignment-signature does not match" in err.details()
                wait_for(lambda: core.read_namespaced_pod("first", namespace).metadata.annotations.get(
                    keys.ASSIGNMENT) == given[keys.ASSIGNMENT], what="the guard's write-back")
                env = allocate(slots[0])
                outcome = "refused, then the original"
            print("first pod's Allocate:", outcome)
            assert (env["CUDA_DEVICE_SM_LIMIT"], env["CUDA_DEVICE_MEMORY_LIMIT_0"]) == ("30", "8192m"), outcome
            second = bound("second")
        finally:
            stop(operator)

        version = grow("second", second)  # no operator: nothing writes it back
        # Allocate reads the plugin's watch cache: until the edit reaches it, the signed original is what it
        # would hand out (harmless, and the race the first pod covers); the refusal needs the edit seen
        wait_for(lambda: plugin_saw(version), what=f"the plugin's pod watch to reach resourceVersion {version}")
        with pytest.raises(grpc.RpcError) as err:
            allocate(slots[1])
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert f"{namespace}/second container main: not handed out: fgpu.io/assignment-signature does not match" \
            in err.value.details()
        assert "fgpu.io/allocated" not in (core.read_namespaced_pod("second", namespace).metadata.annotations or {})

        operator = start_operator(k8s, tmp_path, log_name="restarted.log")
        try:
            def event():
                items = core.list_namespaced_event(namespace, field_selector="involvedObject.name=second").items
                return next((e for e in items if e.reason == "AssignmentUnverified"), None)

            unverified = wait_for(event, what="an AssignmentUnverified event")
            assert unverified.type == "Warning"
            assert "fgpu.io/assignment-signature does not match" in unverified.message
            assert "its GPU share is not counted" in unverified.message
            # nothing verified to restore: the forged value stays, and stays refused
            assert core.read_namespaced_pod("second", namespace).metadata.annotations[keys.ASSIGNMENT] != \
                second[keys.ASSIGNMENT]
            with pytest.raises(grpc.RpcError):
                allocate(slots[1])
        finally:
            stop(operator)
