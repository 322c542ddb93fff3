"""Smoke tests proving the control plane is real: stock scheduling of an extended resource on a KWOK node,
a Kopf operator watching the apiserver, a CRD with schema validation, and the pinned binary versions."""

from __future__ import annotations

import re
import subprocess
import textwrap
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from polling import wait_for

pytestmark = pytest.mark.e2e

GPU = "nvidia.com/gpu"


def gpu_pod(name: str, node: str, gpus: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "gpu-smoke"}},
        "spec": {
            # pinned to our node so other tests' nodes cannot change the outcome
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": {GPU: str(gpus)}},
            }],
        },
    }


def test_scheduler_places_gpu_pods_by_capacity(k8s, kube_scheduler, make_kwok_node, namespace):
    node = make_kwok_node("smoke-gpu-node", {GPU: 8})
    assert node.status.allocatable[GPU] == "8"

    with k8s.api() as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(namespace, gpu_pod("fits", "smoke-gpu-node", 2))
        core.create_namespaced_pod(namespace, gpu_pod("too-big", "smoke-gpu-node", 9))

        bound = wait_for(lambda: core.read_namespaced_pod("fits", namespace).spec.node_name, 60,
                         "pod 'fits' (2 GPUs) to be bound")
        assert bound == "smoke-gpu-node"
        # KWOK plays the kubelet: the bound pod becomes Running
        wait_for(lambda: core.read_namespaced_pod("fits", namespace).status.phase == "Running", 60,
                 "KWOK to mark pod 'fits' Running")

        def failed_scheduling():
            events = core.list_namespaced_event(
                namespace, field_selector="involvedObject.name=too-big,reason=FailedScheduling").items
            return [e.message for e in events]

        messages = wait_for(failed_scheduling, 60, "a FailedScheduling event for pod 'too-big' (9 GPUs)")
        assert any(f"Insufficient {GPU}" in m for m in messages), messages
        pod = core.read_namespaced_pod("too-big", namespace)
        assert pod.status.phase == "Pending"
        assert pod.spec.node_name is None


OPERATOR = textwrap.dedent('''
    import kopf

    @kopf.on.login()  # the test gives this operator a registry of its own, without Kopf's default login
    def login(**kwargs):
        return kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.create("v1", "pods", labels={"fgpu-smoke": "kopf"})
    def saw_pod(patch, name, **_):
        patch.metadata.annotations["fgpu.io/kopf-saw"] = name
''')


def test_kopf_operator_sees_pod_create(k8s, namespace, tmp_path, kubeconfig_env):
    import kopf
    from kopf.testing import KopfRunner

    operator = tmp_path / "smoke_operator.py"
    operator.write_text(OPERATOR)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "watched", "labels": {"fgpu-smoke": "kopf"}},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    }
    with k8s.api() as api:
        core = client.CoreV1Api(api)
        # A registry of its own: in one pytest run other tests import fgpu's handlers into Kopf's default one.
        previous = kopf.get_default_registry()
        try:
            with KopfRunner(["run", "--standalone", "--namespace", namespace, str(operator)], timeout=60,
                            registry=kopf.OperatorRegistry()) as runner:
                core.create_namespaced_pod(namespace, pod)
                saw = wait_for(
                    lambda: (core.read_namespaced_pod("watched", namespace).metadata.annotations or {}).get(
                        "fgpu.io/kopf-saw"),
                    60, "the Kopf handler to annotate the pod")
                assert saw == "watched"
        finally:
            kopf.set_default_registry(previous)
    assert runner.exception is None
    assert runner.exit_code == 0
    assert "saw_pod" in runner.output and "succeeded" in runner.output


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.smoke.fgpu.io"},
    "spec": {
        "group": "smoke.fgpu.io",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [{
            "name": "v1",
            "served": True,
            "storage": True,
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {
                    "type": "object",
                    "required": ["gpus"],
                    "properties": {"gpus": {"type": "integer", "minimum": 1, "maximum": 8}},
                }},
            }},
        }],
    },
}


def test_crd_can_be_applied_and_used(k8s, namespace):
    with k8s.api() as api:
        ext = client.ApiextensionsV1Api(api)
        try:
            ext.create_custom_resource_definition(CRD)
        except ApiException as e:
            if e.status != 409:
                raise

        def established():
            crd = ext.read_custom_resource_definition("widgets.smoke.fgpu.io")
            return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

        wait_for(established, 30, "the CRD to be Established")
        custom = client.CustomObjectsApi(api)

        def create(name: str, gpus: int):
            body = {"apiVersion": "smoke.fgpu.io/v1", "kind": "Widget",
                    "metadata": {"name": name}, "spec": {"gpus": gpus}}
            return custom.create_namespaced_custom_object("smoke.fgpu.io", "v1", namespace, "widgets", body)

        # discovery of a fresh CRD can lag Established by a moment
        wait_for(lambda: _created(create, "w1", 3), 30, "the Widget kind to accept objects")
        got = custom.get_namespaced_custom_object("smoke.fgpu.io", "v1", namespace, "widgets", "w1")
        assert got["spec"] == {"gpus": 3}
        # the schema is enforced by the apiserver, not just stored
        with pytest.raises(ApiException) as bad:
            create("w2", 9)
        assert bad.value.status == 422
        assert "spec.gpus" in bad.value.body


def _created(create, name: str, gpus: int) -> bool:
    try:
        create(name, gpus)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def _pinned(testbin) -> dict[str, str]:
    """Versions from the build stamp, e.g. k8s-v1.35.4_etcd-v3.5.35_kwok-v0.8.0_helm-v3.21.4."""
    stamp = (testbin / ".stamp").read_text().strip()
    return dict(part.split("-", 1) for part in stamp.split("_"))


@pytest.mark.parametrize("binary", ["kube-apiserver", "kube-controller-manager", "kube-scheduler",
                                    "etcd", "kwok", "helm"])
def test_binary_reports_pinned_version(testbin, binary):
    pinned = _pinned(testbin)
    want = {"etcd": pinned["etcd"], "kwok": pinned["kwok"], "helm": pinned["helm"]}.get(binary, pinned["k8s"])
    args = ["version"] if binary == "helm" else ["--version"]
    out = subprocess.run([str(testbin / binary), *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    # etcd prints "etcd Version: 3.5.35", the others a v-prefixed version
    assert re.search(rf"\bv?{re.escape(want.lstrip('v'))}\b", out.stdout), out.stdout


def test_controller_manager_runs_namespace_lifecycle(k8s, controller_manager):
    """With kube-controller-manager, a bare namespace gets its `default` ServiceAccount and deleting it
    completes (neither happens with etcd + apiserver alone)."""
    name = f"cm-smoke-{uuid.uuid4().hex[:6]}"
    with k8s.api() as api:
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": name}})  # not k8s.create_namespace: no SA made for it
        wait_for(lambda: [s.metadata.name for s in core.list_namespaced_service_account(name).items
                          if s.metadata.name == "default"], 60, f"the default ServiceAccount in {name}")
        core.delete_namespace(name)

        def gone():
            try:
                core.read_namespace(name)
            except ApiException as e:
                return e.status == 404
            return False

        wait_for(gone, 90, f"namespace {name} to finish deleting")
