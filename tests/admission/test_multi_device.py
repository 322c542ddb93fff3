"""A share on each of several GPUs, in every spelling that has one: HAMi's `nvidia.com/gpu: N` beside a
per-device amount, fgpu's `fgpu.io/gpu-count`, KAI's `gpu-fraction-num-devices` (KubeShare has none: a
`gpu_request` above 1 is whole GPUs). Each becomes `count` devices of one share; what no node could ever take
is refused with one line."""
from __future__ import annotations

import json

import pytest
from admission_util import CONFIG, GIB, MIB, apply_patch, envelope, patch_of, pod
from fgpu_operator.admission import parse_pod, review

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.request import ContainerRequest, load_request

HALF = {"milli_gpu": 500, "mem_pct": 50, "sm_pct": 100}

SPELLINGS = {
    "hami gpumem-percentage": ("""
        spec:
          containers:
            - name: tp
              resources: {limits: {nvidia.com/gpu: 2, nvidia.com/gpumem-percentage: 50}}
        """, ContainerRequest(container="tp", count=2, **HALF)),
    "hami gpumem": ("""
        spec:
          containers:
            - name: tp
              resources: {limits: {nvidia.com/gpu: 2, nvidia.com/gpumem: 20480}}
        """, ContainerRequest(container="tp", count=2, milli_gpu=250, mem_bytes=20 * GIB, sm_pct=100)),
    "hami gpucores and gpumem": ("""
        spec:
          containers:
            - name: tp
              resources: {limits: {nvidia.com/gpu: 4, nvidia.com/gpucores: 30, nvidia.com/gpumem: 10000}}
        """, ContainerRequest(container="tp", count=4, milli_gpu=300, mem_bytes=10000 * MIB)),
    "fgpu gpu-count with a fraction": ("""
        metadata: {annotations: {fgpu.io/gpu-count: "2", fgpu.io/gpu-fraction: "0.5"}}
        spec: {containers: [{name: tp}]}
        """, ContainerRequest(container="tp", count=2, milli_gpu=500)),
    "fgpu gpu-count with memory": ("""
        metadata: {annotations: {fgpu.io/gpu-count: "3", fgpu.io/gpu-memory: 16Gi}}
        spec: {containers: [{name: tp}]}
        """, ContainerRequest(container="tp", count=3, milli_gpu=200, mem_bytes=16 * GIB, sm_pct=100)),
    "fgpu gpu-count alone is whole GPUs": ("""
        metadata: {annotations: {fgpu.io/gpu-count: "2"}}
        spec: {containers: [{name: tp}]}
        """, ContainerRequest(container="tp", count=2)),
    "fgpu gpu-count agreeing with a whole-GPU fraction": ("""
        metadata: {annotations: {fgpu.io/gpu-count: "2", fgpu.io/gpu-fraction: "2"}}
        spec: {containers: [{name: tp}]}
        """, ContainerRequest(container="tp", count=2)),
    "fgpu gpu-count of MIG instances": ("""
        metadata: {annotations: {fgpu.io/gpu-count: "2", fgpu.io/mig-profile: 1g.10gb}}
        spec: {containers: [{name: tp}]}
        """, ContainerRequest(container="tp", count=2, mig_profile="1g.10gb")),
    "kai gpu-fraction-num-devices": ("""
        metadata: {annotations: {gpu-fraction: "0.5", gpu-fraction-num-devices: "2"}}
        spec: {schedulerName: kai-scheduler, containers: [{name: tp}]}
        """, ContainerRequest(container="tp", count=2, milli_gpu=500)),
}


@pytest.mark.parametrize("name", list(SPELLINGS))
def test_each_spelling_asks_for_a_share_on_each_of_n_gpus(name):
    text, expected = SPELLINGS[name]
    got = parse_pod(pod(text), CONFIG)
    assert got.containers == (expected,)


@pytest.mark.parametrize("name", list(SPELLINGS))
def test_the_admitted_pod_carries_n_devices_for_the_kubelet_and_reads_the_same_again(name):
    raw = pod(SPELLINGS[name][0])
    answer = review(envelope(raw), CONFIG)["response"]
    assert answer["allowed"], answer
    mutated = apply_patch(raw, patch_of({"response": answer}))
    expected = SPELLINGS[name][1]
    resource = keys.mig_resource_name(expected.mig_profile) if expected.mig_profile else keys.GPU_RESOURCE
    limits = mutated["spec"]["containers"][0]["resources"]["limits"]
    assert {k: str(v) for k, v in limits.items()} == {resource: str(expected.count)}  # per-device amounts are fgpu's to account, not the kubelet's
    request = load_request(mutated["metadata"]["annotations"][keys.REQUEST])
    assert request.containers == (expected,)
    assert parse_pod(mutated, CONFIG).containers == (expected,)  # idempotent: a second pass changes nothing
    assert patch_of(review(envelope(mutated), CONFIG)) == []


def test_kubeshare_has_no_share_on_several_gpus_its_request_above_one_is_whole_gpus():
    got = parse_pod(pod("""
        metadata: {labels: {sharedgpu/gpu_request: "2", sharedgpu/gpu_limit: "2"}}
        spec: {schedulerName: kubeshare-scheduler, containers: [{name: tp}]}
        """), CONFIG)
    assert got.containers == (ContainerRequest(container="tp", count=2),)


DENIALS = {
    "two containers, two shapes": ("""
        spec:
          containers:
            - {name: trainer, resources: {limits: {nvidia.com/gpu: 2}}}
            - {name: server, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 8192}}}
        """, "spec.containers: containers trainer and server ask for different GPU shares (1000 milli-GPU vs "
             "100 milli-GPU, 8192 MiB, 100% SMs) (allowed: one share (fraction, memory, SM limit or MIG profile) "
             "for every GPU container of a pod)"),
    "fewer UUIDs than devices": ("""
        metadata: {annotations: {nvidia.com/use-gpuuuid: "GPU-a,GPU-b", nvidia.com/nouse-gpuuuid: GPU-b}}
        spec:
          containers:
            - {name: tp, resources: {limits: {nvidia.com/gpu: 2, nvidia.com/gpumem-percentage: 50}}}
        """, "metadata.annotations[nvidia.com/use-gpuuuid]: 'GPU-a,GPU-b' allows 1 GPU(s) but the pod asks for 2 "
             "devices, one per GPU (allowed: at least 2 GPU UUIDs not excluded)"),
    "more memory than the allowed model has": ("""
        metadata: {annotations: {fgpu.io/gpu-count: "2", fgpu.io/gpu-memory: 20Gi, fgpu.io/gpu-model: T4}}
        spec: {containers: [{name: tp}]}
        """, "metadata.annotations[fgpu.io/gpu-memory]: '20Gi' per device is more than any allowed GPU model has "
             "(allowed: at most 15109 MiB per device)"),
    "a MIG profile the allowed model lacks": ("""
        metadata: {annotations: {fgpu.io/mig-profile: 1g.18gb, fgpu.io/gpu-model: A100-40GB}}
        spec: {containers: [{name: tp}]}
        """, "metadata.annotations[fgpu.io/mig-profile]: MIG profile '1g.18gb' exists on none of the GPU models "
             "allowed (allowed: H200-SXM-141GB)"),
    "every allowed model excluded": ("""
        metadata: {annotations: {fgpu.io/gpu-model: T4, nvidia.com/nouse-gputype: T4}}
        spec: {containers: [{name: tp, resources: {limits: {nvidia.com/gpu: 1}}}]}
        """, "metadata.annotations[fgpu.io/gpu-model]: 'T4' leaves no GPU model to run on "
             "(allowed: an allow-list with a model the deny-list does not name)"),
    "gpu-count disagreeing with a whole-GPU fraction": ("""
        metadata: {annotations: {fgpu.io/gpu-count: "4", fgpu.io/gpu-fraction: "2"}}
        spec: {containers: [{name: tp}]}
        """, "metadata.annotations[fgpu.io/gpu-fraction]: '2' disagrees with metadata.annotations[fgpu.io/gpu-count]"
             "='4' on the device count for container 'tp' (2 vs 4 devices); give one of them, or equal values"),
    "gpu-count zero": ("""
        metadata: {annotations: {fgpu.io/gpu-count: "0", fgpu.io/gpu-fraction: "0.5"}}
        spec: {containers: [{name: tp}]}
        """, "metadata.annotations[fgpu.io/gpu-count]: '0' is not a device count in 1..64 (allowed: 1..64)"),
}


@pytest.mark.parametrize("name", list(DENIALS))
def test_a_shape_no_node_could_take_is_refused_in_one_line(name):
    text, message = DENIALS[name]
    with pytest.raises(InputError) as err:
        parse_pod(pod(text), CONFIG)
    assert str(err.value) == message
    answer = review(envelope(pod(text)), CONFIG)["response"]
    assert not answer["allowed"] and answer["status"]["code"] == 400
    assert answer["status"]["message"] == message


def test_the_request_annotation_round_trips_the_device_count():
    text, expected = SPELLINGS["hami gpumem-percentage"]
    request = parse_pod(pod(text), CONFIG)
    assert json.loads(request.model_dump_json(by_alias=True))["containers"][0]["count"] == expected.count
