"""The JSON patch applies cleanly to the pod as the apiserver sends it, gives the pod fgpu wants (and
nothing else changes), round-trips through `load_request`, and is a fixed point: admitting the patched pod
again changes nothing."""
from __future__ import annotations

import copy

import pytest
from admission_util import CONFIG, apply_patch, envelope, patch_of, pod
from fgpu_operator.admission import mutate, parse_pod, review
from fgpu_operator.admission.patch import escape

from fgpu_contracts.request import dump_request, load_request

# As the apiserver hands them to a webhook: defaulted, quantities as canonical strings.
HAMI = pod("""
    apiVersion: v1
    kind: Pod
    metadata: {name: gpu-pod, namespace: ml, labels: {app: train}}
    spec:
      schedulerName: hami-scheduler
      containers:
        - name: ubuntu-container
          image: ubuntu:22.04
          resources:
            limits: {cpu: "1", nvidia.com/gpu: "2", nvidia.com/gpumem: 3k, nvidia.com/gpucores: "30"}
            requests: {cpu: "1", nvidia.com/gpu: "2", nvidia.com/gpumem: 3k, nvidia.com/gpucores: "30"}
        - name: sidecar
          image: busybox
          resources:
            limits: {nvidia.com/priority: "1"}
            requests: {nvidia.com/priority: "1"}
""")
KAI = pod("""
    metadata: {name: gpu-sharing, annotations: {gpu-fraction: "0.5"}, labels: {kai.scheduler/queue: test}}
    spec: {schedulerName: kai-scheduler, containers: [{name: sleep, image: busybox}]}
""")
NVIDIA = pod("""
    metadata: {name: whole}
    spec: {containers: [{name: cuda, resources: {limits: {nvidia.com/gpu: "1"}}}]}
""")
MIG_BY_ANNOTATION = pod("""
    metadata: {name: mig, annotations: {fgpu.io/mig-profile: 3g.40gb}}
    spec:
      schedulerName: fgpu-scheduler
      containers: [{name: main, resources: {limits: {nvidia.com/gpu: "1"}, requests: {nvidia.com/gpu: "1"}}}]
""")
ALIYUN = pod("""
    spec:
      containers:
        - {name: binpack-1, resources: {limits: {aliyun.com/gpu-mem: "3"}}}
""")
KUBESHARE_INIT = pod("""
    metadata:
      labels: {sharedgpu/gpu_request: "0.5", sharedgpu/gpu_limit: "1.0"}
      annotations: {fgpu.io/container: prep}
    spec:
      schedulerName: kubeshare-scheduler
      initContainers: [{name: prep, resources: {}}]
      containers: [{name: main}]
""")


def _patched(original: dict) -> tuple[dict, list[dict]]:
    request = parse_pod(original, CONFIG)
    ops = mutate(original, request, CONFIG)
    return apply_patch(original, ops), ops


def test_hami_pod_becomes_fgpus():
    patched, _ = _patched(HAMI)
    request = parse_pod(HAMI, CONFIG)
    expected = copy.deepcopy(HAMI)
    expected["spec"]["schedulerName"] = "fgpu-scheduler"
    expected["metadata"]["annotations"] = {"fgpu.io/request": dump_request(request)}
    main, side = expected["spec"]["containers"]
    main["resources"] = {"limits": {"cpu": "1", "nvidia.com/gpu": "2"}, "requests": {"cpu": "1", "nvidia.com/gpu": "2"}}
    side["resources"] = {"limits": {}, "requests": {}}
    assert patched == expected


def test_kai_pod_gets_a_device_resource_and_keeps_its_annotations():
    patched, ops = _patched(KAI)
    assert patched["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert patched["metadata"]["annotations"]["gpu-fraction"] == "0.5"
    assert patched["metadata"]["labels"] == {"kai.scheduler/queue": "test"}
    assert {"op": "add", "path": "/metadata/annotations/fgpu.io~1request",
            "value": dump_request(parse_pod(KAI, CONFIG))} in ops


def test_pod_without_annotations_or_scheduler_name_gets_both():
    patched, ops = _patched(NVIDIA)
    assert ops[0] == {"op": "add", "path": "/spec/schedulerName", "value": "fgpu-scheduler"}
    assert ops[1]["op"] == "add" and ops[1]["path"] == "/metadata/annotations"
    assert load_request(patched["metadata"]["annotations"]["fgpu.io/request"]) == parse_pod(NVIDIA, CONFIG)
    assert patched["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}


def test_pod_without_metadata():
    bare = {"spec": copy.deepcopy(NVIDIA["spec"])}
    patched, _ = _patched(bare)
    assert set(patched["metadata"]["annotations"]) == {"fgpu.io/request"}


def test_mig_by_annotation_swaps_the_whole_gpu_for_the_mig_resource():
    patched, _ = _patched(MIG_BY_ANNOTATION)
    assert patched["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/mig-3g.40gb": "1"}, "requests": {"nvidia.com/mig-3g.40gb": "1"}}


def test_aliyun_memory_becomes_one_device_slot():
    patched, _ = _patched(ALIYUN)
    assert patched["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}


def test_init_container_gets_the_share():
    patched, _ = _patched(KUBESHARE_INIT)
    assert patched["spec"]["initContainers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert "resources" not in patched["spec"]["containers"][0]


def test_mutate_strips_allocation_handoffs_with_escaped_pointers():
    stale = copy.deepcopy(NVIDIA)
    stale["metadata"]["annotations"] = {"fgpu.io/assignment": "{}", "fgpu.io/allocated": "[]", "keep/me": "x"}
    ops = mutate(stale, parse_pod(NVIDIA, CONFIG), CONFIG)
    assert {"op": "remove", "path": "/metadata/annotations/fgpu.io~1assignment"} in ops
    assert {"op": "remove", "path": "/metadata/annotations/fgpu.io~1allocated"} in ops
    assert set(apply_patch(stale, ops)["metadata"]["annotations"]) == {"keep/me", "fgpu.io/request"}


def test_escape_follows_rfc6901():
    assert escape("a/b~c") == "a~1b~0c"
    assert escape("~1") == "~01"  # "~" first, or "~1" would read back as "/"


@pytest.mark.parametrize("original", [HAMI, KAI, NVIDIA, MIG_BY_ANNOTATION, ALIYUN, KUBESHARE_INIT],
                         ids=["hami", "kai", "nvidia", "mig", "aliyun", "kubeshare-init"])
def test_admission_is_a_fixed_point(original):
    """The patched pod parses to the same request, and admitting it again patches nothing."""
    request = parse_pod(original, CONFIG)
    patched = apply_patch(original, patch_of(review(envelope(original), CONFIG)))
    assert parse_pod(patched, CONFIG) == request
    assert mutate(patched, request, CONFIG) == []
    again = review(envelope(patched), CONFIG)["response"]
    assert again["allowed"] is True and "patch" not in again
