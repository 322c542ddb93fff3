"""Operator configuration where users look, through the real apiserver: `fgpu operator --takeover-schedulers`
decides which peers' GPU pods the webhook takes over and `--aliyun-memory-unit` what `aliyun.com/gpu-mem`
counts; a SchedulingPolicy `default` that sets the unit wins over the flag live, the flag's takeover list
staying (field by field), and deleting the object goes back to the flag."""
from __future__ import annotations

import pytest
from operator_proc import install_crds, operator_with_own_webhook, stop
from polling import wait_for

from fgpu_contracts import keys
from fgpu_contracts.request import load_request

pytestmark = pytest.mark.e2e
GROUP, VERSION, PLURAL = keys.CRD_GROUP, keys.CRD_VERSION, keys.SCHEDULING_POLICY_PLURAL
MIB, GIB = 1 << 20, 1 << 30


def dry_run(core, namespace: str, scheduler: str, limits: dict):
    """The pod as admission leaves it (dry-run: mutated and validated, not created)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
           "spec": {"schedulerName": scheduler, "containers": [{"name": "main", "image": "busybox",
                                                                "resources": {"limits": limits}}]}}
    return core.create_namespaced_pod(namespace, pod, dry_run="All")


def aliyun_bytes(core, namespace: str) -> int:
    made = dry_run(core, namespace, "default-scheduler", {keys.ALIYUN_MEMORY: "8"})
    return load_request(made.metadata.annotations[keys.REQUEST]).containers[0].mem_bytes


def test_flags_set_takeover_and_unit_and_the_policy_object_wins_field_by_field(k8s, namespace, tmp_path):
    from kubernetes import client

    install_crds(k8s)
    with k8s.api() as api:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        proc = operator_with_own_webhook(k8s, core, namespace, tmp_path,
                                         "--takeover-schedulers=default-scheduler,kai-scheduler",
                                         "--aliyun-memory-unit=MiB")
        try:
            hami = dry_run(core, namespace, "hami-scheduler", {keys.GPU_RESOURCE: "1", keys.GPU_CORES_RESOURCE: "30"})
            assert hami.spec.scheduler_name == "hami-scheduler"  # not in the flag's list: left alone
            assert keys.REQUEST not in (hami.metadata.annotations or {})
            kai = dry_run(core, namespace, "kai-scheduler", {keys.GPU_RESOURCE: "1"})
            assert kai.spec.scheduler_name == keys.SCHEDULER_NAME
            assert aliyun_bytes(core, namespace) == 8 * MIB  # the flag's unit

            custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, {
                "apiVersion": keys.CRD_API_VERSION, "kind": keys.SCHEDULING_POLICY_KIND,
                "metadata": {"name": "default"}, "spec": {"aliyunMemoryUnit": "GiB"}})
            wait_for(lambda: aliyun_bytes(core, namespace) == 8 * GIB, what="the object's unit in force")
            hami = dry_run(core, namespace, "hami-scheduler", {keys.GPU_RESOURCE: "1", keys.GPU_CORES_RESOURCE: "30"})
            assert hami.spec.scheduler_name == "hami-scheduler"  # the object left takeover out: the flag's

            custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "default")
            wait_for(lambda: aliyun_bytes(core, namespace) == 8 * MIB, what="back to the flag's unit")
        finally:
            stop(proc)
            for obj in custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]:
                custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, obj["metadata"]["name"])
