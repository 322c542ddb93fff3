"""Every refusal is one line naming the field, the value and what is allowed, answered 400 by `review`
(hand-off annotations: 403). The texts are frozen here on purpose: they are what users read."""
from __future__ import annotations

import pytest
from admission_util import CONFIG, envelope, pod
from fgpu_operator.admission import HandoffError, parse_pod, review

from fgpu_contracts.errors import InputError

DENIALS = {
    # --- zero means zero: an explicit request for no GPU beside a share, in any spelling ---------------------
    'gpu 0 beside gpumem': (
        "spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 0, nvidia.com/gpumem: 1000}}}]}",
        "spec.containers[main].resources[nvidia.com/gpu]: '0' asks for no GPU, but spec.containers[main].resources[nvidia.com/gpumem]='1000' asks for a share of one (allowed: nvidia.com/gpu >= 1 with nvidia.com/gpumem, or no nvidia.com/gpumem)"),
    'gpu 0 beside gpucores': (
        "spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: '0', nvidia.com/gpucores: 30}}}]}",
        "spec.containers[main].resources[nvidia.com/gpu]: '0' asks for no GPU, but spec.containers[main].resources[nvidia.com/gpucores]='30' asks for a share of one (allowed: nvidia.com/gpu >= 1 with nvidia.com/gpucores, or no nvidia.com/gpucores)"),
    'gpu 0 beside gpumem-percentage': (
        "spec: {containers: [{name: main, resources: {requests: {nvidia.com/gpu: 0, nvidia.com/gpumem-percentage: 50}}}]}",
        "spec.containers[main].resources[nvidia.com/gpu]: '0' asks for no GPU, but spec.containers[main].resources[nvidia.com/gpumem-percentage]='50' asks for a share of one (allowed: nvidia.com/gpu >= 1 with nvidia.com/gpumem-percentage, or no nvidia.com/gpumem-percentage)"),
    'gpu 0 beside an fgpu annotation for that container': (
        "metadata: {annotations: {fgpu.io/gpu-memory: 8Gi}}\nspec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 0}}}]}",
        "spec.containers[main].resources[nvidia.com/gpu]: '0' asks for no GPU, but metadata.annotations[fgpu.io/gpu-memory]='8Gi' asks for a share of one (allowed: nvidia.com/gpu >= 1 with fgpu.io/gpu-memory, or no fgpu.io/gpu-memory)"),
    'gpu 0 beside KAI gpu-fraction': (
        "metadata: {annotations: {gpu-fraction: '0.5'}}\nspec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 0}}}]}",
        "spec.containers[main].resources[nvidia.com/gpu]: '0' asks for no GPU, but metadata.annotations[gpu-fraction]='0.5' asks for a share of one (allowed: nvidia.com/gpu >= 1 with gpu-fraction, or no gpu-fraction)"),
    'gpu 0 beside Aliyun gpu-mem': (
        "spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 0, aliyun.com/gpu-mem: 4}}}]}",
        "spec.containers[main].resources[nvidia.com/gpu]: '0' asks for no GPU, but spec.containers[main].resources[aliyun.com/gpu-mem]='4' asks for a share of one (allowed: nvidia.com/gpu >= 1 with aliyun.com/gpu-mem, or no aliyun.com/gpu-mem)"),
    'KubeShare request and limit 0 beside gpu_mem': (
        "metadata: {labels: {sharedgpu/gpu_request: '0', sharedgpu/gpu_limit: '0', sharedgpu/gpu_mem: '1073741824'}}\nspec: {containers: [{name: main}]}",
        "metadata.labels[sharedgpu/gpu_mem]: '1073741824' bytes of GPU memory, but metadata.labels[sharedgpu/gpu_request]='0' and metadata.labels[sharedgpu/gpu_limit]='0' ask for no GPU (allowed: a request and limit above 0, or no gpu_mem)"),
    'fraction zero': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '0'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/gpu-fraction]: '0' is not a share of one GPU or a whole number of GPUs (allowed: 0 < f <= 1, a whole number of GPUs 1..64)"),
    'fraction above one, not whole': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '1.5'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/gpu-fraction]: '1.5' is not a share of one GPU or a whole number of GPUs (allowed: 0 < f <= 1, a whole number of GPUs 1..64)"),
    'fraction NaN': (
        'metadata: {annotations: {fgpu.io/gpu-fraction: NaN}}\nspec: {containers: [{name: main}]}',
        "metadata.annotations[fgpu.io/gpu-fraction]: 'NaN' is not a non-negative number (allowed: 0 < f <= 1, a whole number of GPUs 1..64)"),
    'fraction too many GPUs': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '65'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/gpu-fraction]: '65' is not a share of one GPU or a whole number of GPUs (allowed: 0 < f <= 1, a whole number of GPUs 1..64)"),
    'memory negative': (
        "metadata: {annotations: {fgpu.io/gpu-memory: '-8Gi'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/gpu-memory]: '-8Gi' is not a non-negative Kubernetes quantity (allowed: e.g. 8Gi, 8192Mi, 8G, 1.5, 500m, 3e3)"),
    'memory infinite': (
        "metadata: {annotations: {fgpu.io/gpu-memory: 'Infinity'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/gpu-memory]: 'Infinity' is not a non-negative Kubernetes quantity (allowed: e.g. 8Gi, 8192Mi, 8G, 1.5, 500m, 3e3)"),
    'memory zero': (
        "metadata: {annotations: {fgpu.io/gpu-memory: '0Gi'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/gpu-memory]: '0Gi' is no memory (allowed: a positive quantity, e.g. 8Gi)"),
    'memory above the largest GPU': (
        "metadata: {annotations: {fgpu.io/gpu-memory: '96Gi'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/gpu-memory]: '96Gi' is more than the cluster's largest GPU has (allowed: at most 81920 MiB per device)"),
    'sm alone': (
        "metadata: {annotations: {fgpu.io/gpu-sm: '30'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/gpu-sm]: '30' limits a share but does not size one (allowed: with a fraction or a memory amount)"),
    'sm above 100': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '0.5', fgpu.io/gpu-sm: '130'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/gpu-sm]: '130' is not an SM percentage in 1..100 (allowed: 1..100)"),
    'unknown MIG profile annotation': (
        'metadata: {annotations: {fgpu.io/mig-profile: 5g.50gb}}\nspec: {containers: [{name: main}]}',
        "metadata.annotations[fgpu.io/mig-profile]: unknown MIG profile '5g.50gb' (allowed: 1g.10gb, 1g.10gb+me, 1g.18gb, 1g.18gb+me, 1g.20gb, 1g.35gb, 1g.5gb, 1g.5gb+me, 1g.6gb, 1g.6gb+me, 2g.10gb, 2g.12gb, 2g.12gb+me, 2g.20gb, 2g.35gb, 3g.20gb, 3g.40gb, 3g.71gb, 4g.20gb, 4g.24gb, 4g.40gb, 4g.71gb, 7g.141gb, 7g.40gb, 7g.80gb)"),
    'unknown MIG resource': (
        'spec: {containers: [{name: main, resources: {limits: {nvidia.com/mig-9g.90gb: 1}}}]}',
        "spec.containers[main].resources[nvidia.com/mig-9g.90gb]: unknown MIG profile '9g.90gb' (allowed: 1g.10gb, 1g.10gb+me, 1g.18gb, 1g.18gb+me, 1g.20gb, 1g.35gb, 1g.5gb, 1g.5gb+me, 1g.6gb, 1g.6gb+me, 2g.10gb, 2g.12gb, 2g.12gb+me, 2g.20gb, 2g.35gb, 3g.20gb, 3g.40gb, 3g.71gb, 4g.20gb, 4g.24gb, 4g.40gb, 4g.71gb, 7g.141gb, 7g.40gb, 7g.80gb)"),
    'MIG with a fraction': (
        "metadata: {annotations: {fgpu.io/mig-profile: 1g.10gb, fgpu.io/gpu-fraction: '0.5'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/gpu-fraction]: '0.5' cannot be combined with metadata.annotations[fgpu.io/mig-profile]: a MIG instance is a fixed slice with no fraction, memory or SM limit of its own (allowed: a MIG profile alone, or a share without one)"),
    'MIG beside whole GPUs': (
        'spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/mig-1g.10gb: 1}}}]}',
        "spec.containers[main].resources[nvidia.com/gpu]: '1' cannot be combined with nvidia.com/mig-1g.10gb in one container (allowed: whole GPUs or MIG instances in one container, not both)"),
    'malformed model': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '0.5', fgpu.io/gpu-model: 'A100;rm -rf'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/gpu-model]: 'A100;rm -rf' is not a GPU model name (allowed: comma-separated GPU model names (letters, digits, spaces, ._+()-), e.g. A100,H100-PCIe)"),
    'bad priority': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '0.5', fgpu.io/priority: urgent}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/priority]: 'urgent' is not supported (allowed: high, low)"),
    'bad policy': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '0.5', fgpu.io/policy: random}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/policy]: 'random' is not supported (allowed: binpack, spread, fgd, fgpu)"),
    'bad group': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '0.5', fgpu.io/affinity: 'team a'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/affinity]: 'team a' is not a group name (allowed: 1-63 letters, digits, '-', '_', '.'; alphanumeric at both ends)"),
    'bad slowdown': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '0.5', fgpu.io/slo-slowdown: '1'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/slo-slowdown]: '1' is not a slowdown bound (allowed: 1 < s <= 100)"),
    'no such container': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '0.5', fgpu.io/container: gpu}}\nspec: {containers: [{name: main}, {name: side}]}",
        "metadata.annotations[fgpu.io/container]: the pod has no container 'gpu' (allowed: main, side)"),
    'two container selectors': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '0.5', fgpu.io/container: main, gpu-fraction-container-name: side}}\nspec: {containers: [{name: main}, {name: side}]}",
        "metadata.annotations[fgpu.io/container]: 'main' disagrees with metadata.annotations[gpu-fraction-container-name]='side' (allowed: one of the two, or equal values)"),
    'fgpu and hami disagree': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '0.3'}}\nspec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpucores: 50}}}]}",
        "metadata.annotations[fgpu.io/gpu-fraction]: '0.3' disagrees with spec.containers[main].resources[nvidia.com/gpucores]='50' on the compute share for container 'main' (300 vs 500 milli-GPU); give one of them, or equal values"),
    'kai and fgpu disagree': (
        "metadata: {annotations: {gpu-fraction: '0.5', fgpu.io/gpu-fraction: '0.25'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/gpu-fraction]: '0.25' disagrees with metadata.annotations[gpu-fraction]='0.5' on the compute share for container 'main' (250 vs 500 milli-GPU); give one of them, or equal values"),
    'count disagrees': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '2'}}\nspec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 3}}}]}",
        "metadata.annotations[fgpu.io/gpu-fraction]: '2' disagrees with spec.containers[main].resources[nvidia.com/gpu]='3' on the device count for container 'main' (2 vs 3 devices); give one of them, or equal values"),
    'priority disagrees': (
        'metadata: {annotations: {fgpu.io/priority: low}}\nspec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/priority: 0}}}]}',
        "metadata.annotations[fgpu.io/priority]: 'low' disagrees with spec.containers[main].resources[nvidia.com/priority]='0' on the priority (low vs high); give one of them, or equal values"),
    'memory in bytes and percent': (
        'spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpumem: 1000, nvidia.com/gpumem-percentage: 50}}}]}',
        "spec.containers[main].resources[nvidia.com/gpumem]: '1000' cannot be combined with spec.containers[main].resources[nvidia.com/gpumem-percentage] (allowed: memory in bytes or in percent, not both)"),
    'hami cores above 100': (
        'spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpucores: 150}}}]}',
        "spec.containers[main].resources[nvidia.com/gpucores]: '150' is not a whole number in 0..100 (allowed: 0..100)"),
    'hami fractional gpu count': (
        'spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 500m}}}]}',
        "spec.containers[main].resources[nvidia.com/gpu]: '500m' is not a whole number of devices in 0..64 (allowed: 0..64)"),
    'hami limit and request differ': (
        'spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpumem: 3000}, requests: {nvidia.com/gpumem: 2000}}}]}',
        "spec.containers[main].resources[nvidia.com/gpumem]: limit '3000' and request '2000' differ (allowed: equal limit and request: extended resources cannot be overcommitted)"),
    'hami priority 2': (
        'spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/priority: 2}}}]}',
        "spec.containers[main].resources[nvidia.com/priority]: '2' is not a HAMi priority (0 high, 1 low) in 0..1 (allowed: 0..1)"),
    'hami topology-aware': (
        'metadata: {annotations: {hami.io/gpu-scheduler-policy: topology-aware}}\nspec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1}}}]}',
        "metadata.annotations[hami.io/gpu-scheduler-policy]: 'topology-aware' is not supported: fgpu does not score NVLink topology (allowed: binpack, spread)"),
    'hami vgpu-mode mps': (
        'metadata: {annotations: {nvidia.com/vgpu-mode: mps}}\nspec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}}]}',
        "metadata.annotations[nvidia.com/vgpu-mode]: 'mps' is not supported: in fgpu, MPS is a node's sharing mode: ask for that node's replica resource (e.g. nvidia.com/gpu.shared); fractional shares run under fgpu's quotas (allowed: hami-core, mig)"),
    'hami vgpu-mode mig with cores': (
        'metadata: {annotations: {nvidia.com/vgpu-mode: mig}}\nspec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000, nvidia.com/gpucores: 30}}}]}',
        "spec.containers[main].resources[nvidia.com/gpucores]: '30' has no meaning in vgpu-mode mig: a MIG instance is a fixed slice (allowed: nvidia.com/gpumem (MiB), which picks the profile)"),
    'hami vgpu-mode mig without memory': (
        'metadata: {annotations: {nvidia.com/vgpu-mode: mig}}\nspec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1}}}]}',
        "spec.containers[main].resources[nvidia.com/gpumem]: vgpu-mode mig needs the memory per instance, which picks the MIG profile (allowed: MiB, e.g. 8000)"),
    'hami vgpu-mode mig, more than any instance': (
        'metadata: {annotations: {nvidia.com/vgpu-mode: mig}}\nspec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 200000}}}]}',
        "spec.containers[main].resources[nvidia.com/gpumem]: '200000' MiB is more than any MIG instance holds (allowed: at most 143360 MiB (7g.141gb on H200-SXM-141GB))"),
    'hami bad uuid list': (
        "metadata: {annotations: {nvidia.com/use-gpuuuid: 'GPU-1; rm -rf'}}\nspec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1}}}]}",
        "metadata.annotations[nvidia.com/use-gpuuuid]: 'GPU-1; rm -rf' is not a list of GPU UUIDs (allowed: comma-separated GPU UUIDs, e.g. GPU-8d2f...,GPU-77a1...)"),
    'kubeshare request above limit': (
        "metadata: {labels: {sharedgpu/gpu_request: '0.8', sharedgpu/gpu_limit: '0.5'}}\nspec: {containers: [{name: main}]}",
        "metadata.labels[sharedgpu/gpu_request]: '0.8' does not fit metadata.labels[sharedgpu/gpu_limit]='0.5' (allowed: 0 < request <= limit <= 1, or request = limit, a whole number of GPUs)"),
    'kubeshare multi-gpu limit differs': (
        "metadata: {labels: {sharedgpu/gpu_request: '2', sharedgpu/gpu_limit: '3'}}\nspec: {containers: [{name: main}]}",
        "metadata.labels[sharedgpu/gpu_request]: '2' does not fit metadata.labels[sharedgpu/gpu_limit]='3' (allowed: 0 < request <= limit <= 1, or request = limit, a whole number of GPUs)"),
    'kubeshare multi-gpu not whole': (
        "metadata: {labels: {sharedgpu/gpu_request: '1.5', sharedgpu/gpu_limit: '1.5'}}\nspec: {containers: [{name: main}]}",
        "metadata.labels[sharedgpu/gpu_request]: '1.5' is not a whole number of GPUs in 2..64 (allowed: 2..64)"),
    'kubeshare limit without request': (
        "metadata: {labels: {sharedgpu/gpu_limit: '0.5'}}\nspec: {containers: [{name: main}]}",
        'metadata.labels[sharedgpu/gpu_request]: is missing: KubeShare asks for a GPU with both gpu_request and gpu_limit (allowed: 0 < request <= limit <= 1, or request = limit, a whole number of GPUs)'),
    'kubeshare request without limit': (
        "metadata: {labels: {sharedgpu/gpu_request: '0.5'}}\nspec: {containers: [{name: main}]}",
        'metadata.labels[sharedgpu/gpu_limit]: is missing: KubeShare asks for a GPU with both gpu_request and gpu_limit (allowed: 0 < request <= limit <= 1, or request = limit, a whole number of GPUs)'),
    'kubeshare opportunistic': (
        "metadata: {labels: {sharedgpu/gpu_request: '0', sharedgpu/gpu_limit: '0.5'}}\nspec: {containers: [{name: main}]}",
        "metadata.labels[sharedgpu/gpu_request]: '0' guarantees no share: KubeShare's opportunistic pods are not supported (allowed: 0 < request <= limit <= 1, or request = limit, a whole number of GPUs)"),
    'kubeshare label and annotation disagree': (
        "metadata: {labels: {sharedgpu/gpu_request: '0.5', sharedgpu/gpu_limit: '1'}, annotations: {sharedgpu/gpu_request: '0.4'}}\nspec: {containers: [{name: main}]}",
        "metadata.labels[sharedgpu/gpu_request]: '0.5' disagrees with metadata.annotations[sharedgpu/gpu_request]='0.4' (allowed: one of the two, or equal values)"),
    'kai fraction and memory': (
        "metadata: {annotations: {gpu-fraction: '0.5', gpu-memory: '2000'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[gpu-fraction]: '0.5' cannot be combined with metadata.annotations[gpu-memory] (KAI's rule) (allowed: gpu-fraction or gpu-memory, not both)"),
    'kai fraction with whole gpus': (
        "metadata: {annotations: {gpu-fraction: '0.5'}}\nspec: {containers: [{name: main}, {name: side, resources: {limits: {nvidia.com/gpu: 1}}}]}",
        "metadata.annotations[gpu-fraction]: '0.5' cannot be combined with spec.containers[side].resources[nvidia.com/gpu] in the same pod (KAI's rule) (allowed: a fraction, or whole GPUs)"),
    'kai devices without amount': (
        "metadata: {annotations: {gpu-fraction-num-devices: '2'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[gpu-fraction-num-devices]: '2' devices, but not how much of each (allowed: with gpu-fraction or gpu-memory)"),
    'kai fraction above one': (
        "metadata: {annotations: {gpu-fraction: '2'}}\nspec: {containers: [{name: main}]}",
        "metadata.annotations[gpu-fraction]: '2' is not a share of one GPU (allowed: 0 < f <= 1)"),
    'kai memory with unit': (
        'metadata: {annotations: {gpu-memory: 2Gi}}\nspec: {containers: [{name: main}]}',
        "metadata.annotations[gpu-memory]: '2Gi' is not a non-negative number (allowed: a number of MiB, e.g. 2000)"),
    'volcano for fgpu': (
        'spec: {schedulerName: fgpu-scheduler, containers: [{name: main, resources: {limits: {volcano.sh/vgpu-number: 1}}}]}',
        "spec.containers[main].resources[volcano.sh/vgpu-number]: fgpu does not read volcano.sh's GPU resources (allowed: nvidia.com/gpu (same meaning))"),
    'tencent beside a gpu': (
        'spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1, tencent.com/vcuda-memory: 20}}}]}',
        "spec.containers[main].resources[tencent.com/vcuda-memory]: fgpu does not read tencent.com's GPU resources (allowed: fgpu.io/gpu-memory = vcuda-memory x 256Mi)"),
    'privileged share': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '0.5'}}\nspec: {containers: [{name: main, securityContext: {privileged: true}}]}",
        'spec.containers[main].securityContext.privileged: a privileged container sees every GPU of its node, so it cannot hold a share of one (allowed: false, or a whole GPU)'),
    'bad canonical annotation': (
        'metadata: {annotations: {fgpu.io/request: \'{"version": "v2"}\'}}\nspec: {containers: [{name: main}]}',
        "metadata.annotations[fgpu.io/request]: is not a valid fgpu request: Input should be 'v1' at version (allowed: what fgpu's webhook writes, or no fgpu.io/request)"),
    'canonical names another container': (
        'metadata: {annotations: {fgpu.io/request: \'{"containers": [{"container": "gone"}]}\'}}\nspec: {containers: [{name: main}]}',
        "metadata.annotations[fgpu.io/request]: names container 'gone', which the pod does not have (allowed: main)"),
    'no containers': (
        'spec: {containers: []}',
        'spec.containers: a pod needs at least one container'),
    'duplicate container names': (
        'spec: {containers: [{name: a}, {name: a}]}',
        "spec.containers: container name 'a' is used twice"),
    'bound on a low-priority pod': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '0.3', fgpu.io/priority: low, fgpu.io/slo-slowdown: '1.5'}}\n"
        "spec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/slo-slowdown]: '1.5' is a slowdown bound, which protects a high-priority pod "
        "only, and metadata.annotations[fgpu.io/priority] is 'low' (allowed: no bound on a low-priority pod, or "
        "priority high)"),
    'duty cycle above one': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '0.3', fgpu.io/duty-cycle: '1.5'}}\n"
        "spec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/duty-cycle]: '1.5' is not a duty cycle (allowed: 0 < d <= 1)"),
    'slo filter not a boolean': (
        "metadata: {annotations: {fgpu.io/gpu-fraction: '0.3', fgpu.io/slo-filter: 'yes'}}\n"
        "spec: {containers: [{name: main}]}",
        "metadata.annotations[fgpu.io/slo-filter]: 'yes' is not supported (allowed: true, false)"),
    'annotation not a string': (
        'metadata: {annotations: {fgpu.io/gpu-fraction: 0.5}}\nspec: {containers: [{name: main}]}',
        'metadata.annotations[fgpu.io/gpu-fraction]: 0.5 is not a string'),
}


@pytest.mark.parametrize("name", list(DENIALS))
def test_refusal_is_one_exact_line(name):
    text, message = DENIALS[name]
    with pytest.raises(InputError) as err:
        parse_pod(pod(text), CONFIG)
    assert err.value.message == message
    answer = review(envelope(pod(text)), CONFIG)["response"]
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 400
    assert answer["status"]["message"] == message


HANDOFF = ("metadata: {annotations: {fgpu.io/assignment: '{\"version\":\"v1\"}'}}\n"
           "spec: {containers: [{name: main}]}")
HANDOFF_MESSAGE = (
    "metadata.annotations[fgpu.io/assignment]: is written by fgpu's scheduler and device plugin only; remove it "
    "(a manifest copied from a running pod carries it) (allowed: no fgpu.io/assignment, assigned-at, allocated "
    "or assignment-signature on a new pod)")


@pytest.mark.parametrize("extra", ["", "  nodeName: node-1\n", "  schedulerName: volcano\n"])
def test_new_pod_with_an_allocation_is_forbidden_whatever_its_scheduler_or_node(extra):
    text = HANDOFF.replace("spec: {containers: [{name: main}]}", "spec:\n  containers: [{name: main}]\n" + extra)
    with pytest.raises(HandoffError) as err:
        parse_pod(pod(text), CONFIG)
    assert err.value.message == HANDOFF_MESSAGE
    answer = review(envelope(pod(text)), CONFIG)["response"]
    assert (answer["allowed"], answer["status"]["code"], answer["status"]["reason"]) == (False, 403, "Forbidden")
    assert answer["status"]["message"] == HANDOFF_MESSAGE


def test_gpu_zero_alone_or_beside_another_containers_share_is_no_contradiction():
    alone = pod("spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 0, nvidia.com/gpucores: 0}}}]}")
    assert parse_pod(alone, CONFIG) is None  # HAMi: 0 means not asked, for cores as for devices
    sidecar = pod("metadata: {annotations: {fgpu.io/gpu-fraction: '0.5', fgpu.io/container: main}}\n"
                  "spec: {containers: [{name: main}, {name: side, resources: {limits: {nvidia.com/gpu: 0}}}]}")
    assert [c.container for c in parse_pod(sidecar, CONFIG).containers] == ["main"]
    mig = pod("spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: 0, nvidia.com/mig-1g.10gb: 1}}}]}")
    assert parse_pod(mig, CONFIG).containers[0].mig_profile == "1g.10gb"  # no whole GPU, one MIG instance


@pytest.mark.parametrize(("priority", "annotations", "expected"), [
    (1000, {}, "high"),  # at the cluster's protectedPriority: protected
    (999, {}, "low"),
    (5000, {"fgpu.io/priority": "low"}, "low"),  # the pod's own word wins
    (None, {}, "low"),
])
def test_a_priority_class_at_the_threshold_protects_a_pod_that_names_no_priority(priority, annotations, expected):
    from fgpu_operator.admission import AdmissionConfig

    body = pod("metadata: {annotations: {fgpu.io/gpu-fraction: '0.3'}}\nspec: {containers: [{name: main}]}")
    body["metadata"]["annotations"].update(annotations)
    if priority is not None:
        body["spec"]["priority"] = priority
    config = AdmissionConfig(max_gpu_memory_bytes=CONFIG.max_gpu_memory_bytes, protected_priority=1000)
    assert parse_pod(body, config).priority == expected
