"""The webhook's Kopf shell answers as the pure admission core does: a hand-off annotation on a new pod is
forbidden (403) and a bad request is refused (400); fgpu's own service accounts may edit a pod's hand-off
annotations with no flag given; a memory request is checked against the largest GPU of the cluster the
scheduler sees."""
import kopf
import pytest
from fgpu_operator.admission import AdmissionConfig
from fgpu_operator.controller import webhook
from fgpu_operator.controller.translate import node_spec
from fgpu_operator.placement.live import LiveCluster
from inventories import fractional_inventory

from fgpu_contracts import keys

GIB = 1 << 30


def pod(annotations: dict) -> dict:
    return {"metadata": {"name": "p", "annotations": annotations}, "spec": {"containers": [{"name": "main"}]}}


def memo_with_gpus(mem_gib: int) -> kopf.Memo:
    live = LiveCluster(policy="binpack")
    live.upsert_node(node_spec({"metadata": {"name": "n", "annotations": {
        keys.INVENTORY: fractional_inventory("n", 1, mem_bytes=mem_gib * GIB)}}}))
    memo = kopf.Memo()
    memo.scheduler = type("Scheduler", (), {"live": live})()
    return memo


def admit(annotations: dict, memo: kopf.Memo | None = None) -> kopf.Patch:
    patch = kopf.Patch()
    webhook.normalise_pod(body=kopf.Body(pod(annotations)), patch=patch, memo=memo or kopf.Memo())
    return patch


def test_handoff_annotation_on_a_new_pod_is_forbidden_and_a_bad_request_refused():
    with pytest.raises(kopf.AdmissionError) as forbidden:
        admit({keys.ASSIGNMENT: "{}", keys.FGPU_FRACTION: "0.5"})
    assert forbidden.value.code == 403
    assert str(forbidden.value).startswith("metadata.annotations[fgpu.io/assignment]: is written by fgpu's")
    with pytest.raises(kopf.AdmissionError) as refused:
        admit({keys.FGPU_FRACTION: "1.5"})
    assert refused.value.code == 400


def test_memory_is_checked_against_the_largest_gpu_the_scheduler_sees():
    memo = memo_with_gpus(24)
    with pytest.raises(kopf.AdmissionError) as refused:
        admit({keys.FGPU_MEMORY: "32Gi"}, memo)
    assert str(refused.value) == ("metadata.annotations[fgpu.io/gpu-memory]: '32Gi' is more than the cluster's "
                                  "largest GPU has (allowed: at most 24576 MiB per device)")
    patch = admit({keys.FGPU_MEMORY: "6Gi"}, memo)  # a memory-only share is sized against that GPU: 1/4
    assert '"milliGpu":250' in patch["metadata"]["annotations"][keys.REQUEST]
    admit({keys.FGPU_MEMORY: "32Gi"})  # no model yet (start-up): no cluster to check against


def test_cluster_config_keeps_a_configured_size_and_ignores_an_empty_cluster():
    configured = AdmissionConfig(max_gpu_memory_bytes=40 * GIB)
    assert webhook.cluster_config(configured, 81920) is configured
    assert webhook.cluster_config(AdmissionConfig(), 0) == AdmissionConfig()
    assert webhook.cluster_config(AdmissionConfig(), 81920).max_gpu_memory_bytes == 80 * GIB


@pytest.mark.parametrize("user", ["system:serviceaccount:fgpu-system:fgpu-device-plugin",
                                  "system:serviceaccount:fgpu-system:fgpu-operator"])
def test_fgpus_service_accounts_may_edit_handoff_annotations_without_flags(user):
    old, new = pod({keys.ASSIGNMENT: "{}"}), pod({keys.ASSIGNMENT: "{}", keys.ALLOCATED: '["main"]'})
    webhook.protect_handoff(body=kopf.Body(new), old=kopf.Body(old), userinfo={"username": user})
    with pytest.raises(kopf.AdmissionError) as forbidden:
        webhook.protect_handoff(body=kopf.Body(new), old=kopf.Body(old), userinfo={"username": "alice"})
    assert forbidden.value.code == 403
