"""Every spelling a user may arrive with, as the peer's own docs and examples write it, parses to the one
canonical request; pods fgpu leaves alone say why."""
from __future__ import annotations

import pytest
from admission_util import CONFIG, GIB, MIB, pod
from fgpu_operator.admission import AdmissionConfig, classify_pod, parse_pod

from fgpu_contracts.request import ContainerRequest, GpuRequest, ModelFilter, dump_request, load_request


def one(container: str = "main", source: str = "fgpu", **kw) -> tuple:
    """(container fields, request fields) split out of one flat keyword list."""
    pod_level = {k: kw.pop(k) for k in list(kw) if k in GpuRequest.model_fields}
    return GpuRequest(source=source, containers=(ContainerRequest(container=container, **kw),), **pod_level)


CASES = {
    # --- fgpu's own annotations ---------------------------------------------------------------------
    "fgpu fraction + memory": ("""
        metadata:
          annotations: {fgpu.io/gpu-fraction: "0.3", fgpu.io/gpu-memory: 8Gi}
        spec:
          schedulerName: fgpu-scheduler
          containers: [{name: main, image: pytorch/pytorch}]
        """, one(milli_gpu=300, mem_bytes=8 * GIB)),
    "fgpu everything": ("""
        metadata:
          annotations:
            fgpu.io/gpu-fraction: "0.25"
            fgpu.io/gpu-memory: 10000Mi
            fgpu.io/gpu-sm: "40"
            fgpu.io/gpu-model: "A100-80GB, H100"
            fgpu.io/priority: high
            fgpu.io/policy: fgd
            fgpu.io/affinity: team-a
            fgpu.io/anti-affinity: noisy
            fgpu.io/exclusion: tenant-1
            fgpu.io/slo-slowdown: "1.5"
            fgpu.io/duty-cycle: "0.4"
            fgpu.io/slo-filter: "true"
            fgpu.io/container: worker
        spec:
          containers: [{name: sidecar}, {name: worker}]
        """, one("worker", milli_gpu=250, mem_bytes=10000 * MIB, sm_pct=40, priority="high",
                 model_filters=(ModelFilter(rule="fgpu", allow=("A100-80GB", "H100")),), node_policy="fgd",
                 affinity="team-a", anti_affinity="noisy", exclusion="tenant-1", slo_slowdown=1.5, duty_cycle=0.4,
                 slo_filter=True)),
    "fgpu bound alone protects the pod": ("""
        metadata: {annotations: {fgpu.io/gpu-fraction: "0.3", fgpu.io/slo-slowdown: "1.3"}}
        spec: {containers: [{name: main}]}
        """, one(milli_gpu=300, priority="high", slo_slowdown=1.3)),
    "fgpu nothing asked is best-effort": ("""
        metadata: {annotations: {fgpu.io/gpu-fraction: "0.3"}}
        spec: {containers: [{name: main}], priority: 100000}
        """, one(milli_gpu=300, priority="low")),
    "fgpu whole GPUs with memory each": ("""
        metadata: {annotations: {fgpu.io/gpu-fraction: "2", fgpu.io/gpu-memory: 20G}}
        spec: {containers: [{name: main}]}
        """, one(count=2, milli_gpu=1000, mem_bytes=20 * 10**9)),
    "fgpu memory alone: sized by memory, unthrottled": ("""
        metadata: {annotations: {fgpu.io/gpu-memory: 20Gi}}
        spec: {containers: [{name: main}]}
        """, one(milli_gpu=250, mem_bytes=20 * GIB, sm_pct=100)),
    "fgpu MIG profile": ("""
        metadata: {annotations: {fgpu.io/mig-profile: "MIG 3g.40gb"}}
        spec: {containers: [{name: main}]}
        """, one(mig_profile="3g.40gb")),
    "fgpu tiny fraction rounds up": ("""
        metadata: {annotations: {fgpu.io/gpu-fraction: "1e-4"}}
        spec: {containers: [{name: main}]}
        """, one(milli_gpu=1)),
    # --- HAMi (examples/nvidia/*.yaml) ----------------------------------------------------------------
    "hami default_use": ("""
        apiVersion: v1
        kind: Pod
        metadata: {name: gpu-pod}
        spec:
          containers:
            - name: ubuntu-container
              image: ubuntu:22.04
              command: ["bash", "-c", "sleep 86400"]
              resources:
                limits:
                  nvidia.com/gpu: 2 # requesting 2 vGPUs
                  nvidia.com/gpumem: 3000 # Each vGPU contains 3000m device memory
                  nvidia.com/gpucores: 30 # Each vGPU uses 30% of the entire GPU
        """, one("ubuntu-container", "hami", count=2, milli_gpu=300, mem_bytes=3000 * MIB)),
    "hami use_exclusive_card": ("""
        metadata: {name: gpu-pod1}
        spec:
          containers:
            - name: ubuntu-container
              resources:
                limits: {nvidia.com/gpu: 2, nvidia.com/gpumem-percentage: 100, nvidia.com/gpucores: 100}
        """, one("ubuntu-container", "hami", count=2, milli_gpu=1000, mem_pct=100)),
    "hami memory percentage alone": ("""
        spec:
          containers:
            - name: main
              resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem-percentage: "50"}}
        """, one(source="hami", milli_gpu=500, mem_pct=50, sm_pct=100)),
    "hami gpumem without gpu (HAMi adds one device), canonical quantity 3k": ("""
        spec:
          schedulerName: hami-scheduler
          containers:
            - name: main
              resources:
                limits: {nvidia.com/gpumem: 3k}
                requests: {nvidia.com/gpumem: 3k}
        """, one(source="hami", milli_gpu=37, mem_bytes=3000 * MIB, sm_pct=100)),
    "hami card type, uuid, priority, policies": ("""
        metadata:
          annotations:
            nvidia.com/use-gputype: "A100,V100"
            nvidia.com/nouse-gpuuuid: "GPU-aaaa-1, GPU-bbbb-2"
            hami.io/node-scheduler-policy: spread
            hami.io/gpu-scheduler-policy: binpack
            nvidia.com/vgpu-mode: hami-core
        spec:
          containers:
            - name: main
              resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpucores: 50, nvidia.com/priority: 0}}
        """, one(source="hami", milli_gpu=500, priority="high",  # names as written: HAMi's rule matches them
                 model_filters=(ModelFilter(rule="hami", allow=("A100", "V100")),),
                 exclude_uuids=("GPU-aaaa-1", "GPU-bbbb-2"), node_policy="spread", gpu_policy="binpack")),
    "hami dynamic MIG (examples/nvidia/dynamic_mig_example.yaml): memory picks the smallest profile": ("""
        metadata: {annotations: {nvidia.com/vgpu-mode: "mig"}}
        spec:
          containers:
            - {name: main, resources: {limits: {nvidia.com/gpu: 2, nvidia.com/gpumem: 8000}}}
        """, one(source="hami", count=2, mig_profile="1g.10gb")),
    "hami dynamic MIG, 30 GiB": ("""
        metadata: {annotations: {nvidia.com/vgpu-mode: mig}}
        spec:
          containers:
            - {name: main, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 30720}}}
        """, one(source="hami", mig_profile="1g.35gb")),
    "hami low priority, avoid a type": ("""
        metadata: {annotations: {nvidia.com/nouse-gputype: "T4"}}
        spec:
          containers:
            - {name: main, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 4096, nvidia.com/priority: 1}}}
        """, one(source="hami", milli_gpu=50, mem_bytes=4 * GIB, sm_pct=100, priority="low",
                 model_filters=(ModelFilter(rule="hami", deny=("T4",)),))),
    # --- KubeShare 2.0 (labels) and 1.0 spelling (annotations) ---------------------------------------------
    "kubeshare 2.0 sharepod": ("""
        apiVersion: v1
        kind: Pod
        metadata:
          name: sharepod1
          labels:
            "sharedgpu/gpu_request": "0.5"
            "sharedgpu/gpu_limit": "1.0"
            "sharedgpu/gpu_mem": "1073741824"
            "sharedgpu/gpu_model": "NVIDIA-A10"
            "sharedgpu/priority": "100"
        spec:
          schedulerName: kubeshare-scheduler
          containers: [{name: pytorch, image: riyazhu/mnist:test}]
        """, one("pytorch", "kubeshare", milli_gpu=500, sm_pct=100, mem_bytes=GIB,
                 model_filters=(ModelFilter(rule="kubeshare", allow=("NVIDIA-A10",)),),
                 priority="high")),
    "kubeshare opportunistic priority and groups (1.0 annotations)": ("""
        metadata:
          annotations:
            sharedgpu/gpu_request: "0.3"
            sharedgpu/gpu_limit: "0.3"
            sharedgpu/priority: "0"
            sharedgpu/sched_affinity: red
            sharedgpu/sched_anti-affinity: blue
            sharedgpu/sched_exclusion: green
        spec:
          containers: [{name: main}]
        """, one(source="kubeshare", milli_gpu=300, priority="low", affinity="red", anti_affinity="blue",
                 exclusion="green")),
    "kubeshare two whole GPUs": ("""
        metadata: {labels: {sharedgpu/gpu_request: "2", sharedgpu/gpu_limit: "2.0"}}
        spec: {containers: [{name: main}]}
        """, one(source="kubeshare", count=2, milli_gpu=1000)),
    # --- KAI (docs/gpu-sharing) ------------------------------------------------------------------------------
    "kai gpu-fraction": ("""
        apiVersion: v1
        kind: Pod
        metadata:
          name: gpu-sharing
          labels: {runai/queue: test}
          annotations: {gpu-fraction: "0.5"}
        spec:
          tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
          schedulerName: kai-scheduler
          containers:
            - name: sleep
              image: busybox
              args: ["sh", "-c", "sleep infinity"]
        """, one("sleep", "kai", milli_gpu=500)),
    "kai gpu-memory on two devices": ("""
        metadata: {annotations: {gpu-memory: "2000", gpu-fraction-num-devices: "2"}}
        spec: {schedulerName: kai-scheduler, containers: [{name: main}]}
        """, one(source="kai", count=2, milli_gpu=25, mem_bytes=2000 * MIB, sm_pct=100)),
    "kai fraction for an init container": ("""
        metadata: {annotations: {gpu-fraction: "0.2", gpu-fraction-container-name: warmup}}
        spec:
          schedulerName: kai-scheduler
          initContainers: [{name: warmup}]
          containers: [{name: main}]
        """, one("warmup", "kai", milli_gpu=200)),
    "kai and fgpu agree": ("""
        metadata: {annotations: {gpu-fraction: "0.5", fgpu.io/gpu-fraction: ".5"}}
        spec: {containers: [{name: main}]}
        """, one(milli_gpu=500)),
    "kai fraction with its own device count on the same container": ("""
        metadata: {annotations: {gpu-fraction: "0.5"}}
        spec: {schedulerName: kai-scheduler, containers: [{name: main, resources: {limits: {nvidia.com/gpu: "1"}}}]}
        """, one(source="kai", milli_gpu=500)),
    # --- Aliyun gpushare ------------------------------------------------------------------------------------
    "aliyun gpu-mem GiB": ("""
        apiVersion: v1
        kind: Pod
        metadata: {name: binpack-1}
        spec:
          containers:
            - name: binpack-1
              image: cheyang/gpu-player:v2
              resources:
                limits:
                  # GiB
                  aliyun.com/gpu-mem: 3
        """, one("binpack-1", "aliyun", milli_gpu=38, mem_bytes=3 * GIB, sm_pct=100)),
    # --- NVIDIA ----------------------------------------------------------------------------------------------
    "nvidia whole GPU": ("""
        spec:
          restartPolicy: OnFailure
          containers:
            - name: cuda-vectoradd
              image: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda11.7.1-ubuntu20.04
              resources: {limits: {nvidia.com/gpu: 1}}
        """, one("cuda-vectoradd", "nvidia")),
    "nvidia MIG mixed strategy": ("""
        spec:
          containers:
            - name: cuda
              resources: {limits: {nvidia.com/mig-1g.10gb: 2}}
        """, one("cuda", "nvidia", count=2, mig_profile="1g.10gb")),
    "nvidia MIG +me profile": ("""
        spec:
          containers: [{name: cuda, resources: {limits: {nvidia.com/mig-1g.5gb.me: "1"}}}]
        """, one("cuda", "nvidia", mig_profile="1g.5gb+me")),
    "fgpu MIG annotation agrees with a whole-gpu count": ("""
        metadata: {annotations: {fgpu.io/mig-profile: 2g.20gb}}
        spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: "2"}}}]}
        """, one(count=2, mig_profile="2g.20gb")),
    "fgpu annotation with HAMi count: two devices of 0.5": ("""
        metadata: {annotations: {fgpu.io/gpu-fraction: "0.5"}}
        spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: "2"}}}]}
        """, one(count=2, milli_gpu=500)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_spelling_parses_to_the_canonical_request(name):
    text, expected = CASES[name]
    got = parse_pod(pod(text), CONFIG)
    assert got == expected
    assert load_request(dump_request(got)) == got


def test_several_gpu_containers_each_get_their_own_request():
    got = parse_pod(pod("""
        spec:
          containers:
            - {name: trainer, resources: {limits: {nvidia.com/gpu: 2, nvidia.com/gpumem: 8192}}}
            - {name: server, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 8192}}}
            - {name: logs}
        """), CONFIG)
    share = {"milli_gpu": 100, "mem_bytes": 8 * GIB, "sm_pct": 100}
    assert got.containers == (ContainerRequest(container="trainer", count=2, **share),
                              ContainerRequest(container="server", **share))
    assert got.source == "hami"


def test_memory_share_uses_catalog_largest_gpu_without_a_cluster_size():
    got = parse_pod(pod("""
        metadata: {annotations: {fgpu.io/gpu-memory: 14377Mi}}
        spec: {containers: [{name: main}]}
        """), AdmissionConfig())
    assert got.containers[0].milli_gpu == 100  # a tenth of the H200's 143771 MiB, rounded up


def test_aliyun_memory_unit_mib():
    got = parse_pod(pod("""
        spec: {containers: [{name: main, resources: {limits: {aliyun.com/gpu-mem: 2048}}}]}
        """), CONFIG.model_copy(update={"aliyun_memory_unit": "MiB"}))
    assert got.containers[0].mem_bytes == 2 * GIB


LEFT_ALONE = {
    "cpu pod": ("spec: {containers: [{name: web, resources: {limits: {cpu: '1'}}}]}",
                "the pod asks for no GPU"),
    "cpu pod with stray hints is never refused": (
        "metadata: {annotations: {fgpu.io/priority: urgent, hami.io/gpu-scheduler-policy: topology-aware}}\n"
        "spec: {containers: [{name: web}]}", "the pod asks for no GPU"),
    "gpu pod for volcano": (
        "spec: {schedulerName: volcano, containers: [{name: m, resources: {limits: {nvidia.com/gpu: 1}}}]}",
        "schedulerName 'volcano' is not one fgpu takes over: left alone"),
    "gpu pod already placed": (
        "spec: {nodeName: n1, containers: [{name: m, resources: {limits: {nvidia.com/gpu: 1}}}]}",
        "spec.nodeName is set: the pod is placed already"),
    "gpu-manager pod beside the default scheduler": (
        "spec: {containers: [{name: m, resources: {limits: {tencent.com/vcuda-core: 50}}}]}",
        "the pod asks for no GPU"),
    "time-sliced replicas are the node's counted resource": (
        "spec: {containers: [{name: m, resources: {limits: {nvidia.com/mig-1g.10gb.shared: 1}}}]}",
        "the pod asks for no GPU"),
    "kubeshare zero request and limit is a regular pod": (
        "metadata: {labels: {sharedgpu/gpu_request: '0', sharedgpu/gpu_limit: '0'}}\n"
        "spec: {containers: [{name: m}]}", "the pod asks for no GPU"),
}


@pytest.mark.parametrize("name", list(LEFT_ALONE))
def test_pods_left_alone_say_why(name):
    text, reason = LEFT_ALONE[name]
    seen = classify_pod(pod(text), CONFIG)
    assert seen.request is None
    assert seen.reason == reason


def test_takeover_list_is_configurable():
    gpu_pod = pod("spec: {containers: [{name: m, resources: {limits: {nvidia.com/gpu: 1}}}]}")
    assert parse_pod(gpu_pod, CONFIG) is not None  # default-scheduler by default: taken over
    mine_only = CONFIG.model_copy(update={"takeover_schedulers": ()})
    assert classify_pod(gpu_pod, mine_only).reason.startswith("schedulerName 'default-scheduler' is not")


def test_canonical_annotation_reads_back_as_itself():
    """A pod admitted once (resources rewritten, fgpu.io/request written) parses to the same request."""
    first = parse_pod(pod(CASES["hami default_use"][0]), CONFIG)
    again = pod("""
        spec:
          schedulerName: fgpu-scheduler
          containers: [{name: ubuntu-container, resources: {limits: {nvidia.com/gpu: "2"}}}]
        """)
    again["metadata"] = {"annotations": {"fgpu.io/request": dump_request(first)}}
    assert parse_pod(again, CONFIG) == first
