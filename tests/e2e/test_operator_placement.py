"""Every request form through the running operator on the real apiserver: the pod is created as its peer's
users write it, the admission webhook rewrites it, fgpu's scheduler binds it, and the hand-off annotation
(`fgpu.io/assignment`) gives the container the share it asked for on the right node and device. Every denial
the webhook has reaches the user as one line naming the field and the value. One operator serves the whole
module; constraints (models, UUIDs, groups, MIG, health, cordons, taints, policies) are in
test_operator_placement_constraints.py."""
from __future__ import annotations

import json
from typing import NamedTuple

import pytest
from inventories import fractional_inventory, mig_inventory
from kubernetes import client
from placement_util import GIB, Pods, denial, inventory_node, operator_with_webhook, pod, set_inventory

from fgpu_contracts import keys

pytestmark = pytest.mark.e2e

FRAC, MIG = "pl-frac", "pl-mig"  # 2 fractional H100s (80 GiB, the cluster's largest); a MIG-cut H100
BASE = (FRAC, MIG)
FRAC_GPUS = {f"GPU-{FRAC}-0", f"GPU-{FRAC}-1"}
WHOLE = 80 * GIB  # memory of a whole GPU of FRAC, and the largest any GPU here has (memory-only shares' base)


@pytest.fixture(scope="module")
def op(k8s, kwok, tmp_path_factory):
    def base(core):
        def publish(name, inventory):
            set_inventory(core, name, inventory)
        return [inventory_node(kwok.make_kwok_node, FRAC, fractional_inventory(FRAC, 2, mem_bytes=WHOLE), publish),
                inventory_node(kwok.make_kwok_node, MIG, mig_inventory(MIG, ["3g.40gb", "1g.10gb", "1g.10gb"]),
                               publish)]
    yield from operator_with_webhook(k8s, tmp_path_factory.mktemp("placement"), base)


@pytest.fixture
def pods(op):
    made = Pods(op.core, op.namespace)
    yield made
    made.cleanup()


class Form(NamedTuple):
    """A pod in one spelling, and what must come of it: the canonical request's source, and for container
    `container` its devices (count), each's share (milli-GPU, memory bytes, SM %) or MIG profile, the
    priority the device plugin is told (0 high, 1 low), and the countable resource the kubelet will see."""

    pod: dict
    source: str
    milli: int = 1000
    mem: int | None = None
    sm: int | None = None
    mig: str | None = None
    count: int = 1
    container: str = "main"
    priority: int = 1  # best-effort unless the pod asks for high priority (docs/qos.md)
    resource: tuple[str, str] = (keys.GPU_RESOURCE, "1")


def _form(name: str, **kw) -> dict:
    return pod(name, BASE, **kw)


_CANONICAL = json.dumps({"version": "v1", "containers": [{"container": "main", "milliGpu": 300, "memBytes": 8 * GIB}]})
FORMS = {
    "fgpu-fraction": Form(_form("fgpu-fraction", annotations={keys.FGPU_FRACTION: "0.3"}), "fgpu",
                          300, WHOLE * 3 // 10, 30),
    "fgpu-fraction-memory-sm-low": Form(
        _form("fgpu-fraction-memory-sm-low", annotations={keys.FGPU_FRACTION: "0.25", keys.FGPU_MEMORY: "8Gi",
                                                           keys.FGPU_SM: "40", keys.FGPU_PRIORITY: "low"}),
        "fgpu", 250, 8 * GIB, 40, priority=1),
    "fgpu-memory": Form(_form("fgpu-memory", annotations={keys.FGPU_MEMORY: "16Gi"}), "fgpu", 200, 16 * GIB, 100),
    "fgpu-two-gpus": Form(_form("fgpu-two-gpus", annotations={keys.FGPU_FRACTION: "2"}), "fgpu",
                          1000, WHOLE, 100, count=2, resource=(keys.GPU_RESOURCE, "2")),
    "fgpu-mig-profile": Form(_form("fgpu-mig-profile", annotations={keys.FGPU_MIG_PROFILE: "3g.40gb"}), "fgpu",
                             mig="3g.40gb", resource=("nvidia.com/mig-3g.40gb", "1")),
    "fgpu-request-canonical": Form(_form("fgpu-request-canonical", scheduler=keys.SCHEDULER_NAME,
                                         annotations={keys.REQUEST: _CANONICAL}), "fgpu", 300, 8 * GIB, 30),
    "hami-memory-cores": Form(_form("hami-memory-cores", scheduler="hami-scheduler", limits={
        keys.GPU_RESOURCE: "1", keys.GPU_MEMORY_RESOURCE: "8192", keys.GPU_CORES_RESOURCE: "30"}),
        "hami", 300, 8 * GIB, 30),
    "hami-memory-percentage-low": Form(_form("hami-memory-percentage-low", limits={
        keys.GPU_RESOURCE: "1", keys.GPU_MEMORY_PCT_RESOURCE: "25", keys.GPU_PRIORITY_RESOURCE: "1"}),
        "hami", 250, WHOLE // 4, 100, priority=1),
    "hami-memory-alone": Form(_form("hami-memory-alone", limits={keys.GPU_MEMORY_RESOURCE: "4096"}),
                              "hami", 50, 4 * GIB, 100),
    "kubeshare-request-limit-memory": Form(_form(
        "kubeshare-request-limit-memory", scheduler="kubeshare-scheduler", labels={
            keys.KUBESHARE_REQUEST: "0.4", keys.KUBESHARE_LIMIT: "0.6", keys.KUBESHARE_MEMORY: str(4 * GIB)}),
        "kubeshare", 400, 4 * GIB, 60),
    "kubeshare-priority-zero": Form(_form("kubeshare-priority-zero", scheduler="kubeshare-scheduler", labels={
        keys.KUBESHARE_REQUEST: "0.5", keys.KUBESHARE_LIMIT: "0.5", keys.KUBESHARE_PRIORITY: "0"}),
        "kubeshare", 500, WHOLE // 2, 50, priority=1),
    "kai-fraction": Form(_form("kai-fraction", scheduler="kai-scheduler", annotations={keys.KAI_FRACTION: "0.5"}),
                         "kai", 500, WHOLE // 2, 50),
    "kai-memory-named-container": Form(_form(
        "kai-memory-named-container", scheduler="kai-scheduler",
        annotations={keys.KAI_MEMORY: "4096", keys.KAI_CONTAINER: "worker"},
        containers=[{"name": "main", "image": "busybox"}, {"name": "worker", "image": "busybox"}]),
        "kai", 50, 4 * GIB, 100, container="worker"),
    "kai-init-container": Form(_form(
        "kai-init-container", scheduler="kai-scheduler",
        annotations={keys.KAI_FRACTION: "0.2", keys.KAI_CONTAINER: "prep"},
        init=[{"name": "prep", "image": "busybox"}]),
        "kai", 200, WHOLE // 5, 20, container="prep"),
    "aliyun-memory": Form(_form("aliyun-memory", limits={keys.ALIYUN_MEMORY: "8"}), "aliyun", 100, 8 * GIB, 100),
    "nvidia-whole-gpu": Form(_form("nvidia-whole-gpu", limits={keys.GPU_RESOURCE: "1"}), "nvidia",
                             1000, WHOLE, 100),
    "hami-dynamic-mig": Form(_form("hami-dynamic-mig", annotations={keys.HAMI_VGPU_MODE: "mig"}, limits={
        keys.GPU_RESOURCE: "1", keys.GPU_MEMORY_RESOURCE: "8000"}), "hami", mig="1g.10gb",
        resource=("nvidia.com/mig-1g.10gb", "1")),
    "nvidia-mig-resource": Form(_form("nvidia-mig-resource", limits={"nvidia.com/mig-1g.10gb": "1"}), "nvidia",
                                mig="1g.10gb", resource=("nvidia.com/mig-1g.10gb", "1")),
}


@pytest.mark.parametrize("name", list(FORMS))
def test_request_form_is_admitted_placed_and_handed_off_with_its_share(op, pods, name):
    form = FORMS[name]
    admitted = pods.create(form.pod)
    assert admitted.spec.scheduler_name == keys.SCHEDULER_NAME
    request = json.loads(admitted.metadata.annotations[keys.REQUEST])
    assert request["source"] == form.source
    gpu_container = next(c for c in (admitted.spec.init_containers or []) + admitted.spec.containers
                         if c.name == form.container)
    limits = gpu_container.resources.limits or {}
    assert limits.get(form.resource[0]) == form.resource[1]  # what the kubelet admits and Allocates
    assert not set(limits) & {keys.GPU_MEMORY_RESOURCE, keys.GPU_MEMORY_PCT_RESOURCE, keys.GPU_CORES_RESOURCE,
                              keys.GPU_PRIORITY_RESOURCE, keys.ALIYUN_MEMORY}  # per-device amounts dropped

    placed = pods.placed(name)
    assert set(placed.devices) == {form.container}  # only the asking container gets devices
    assert placed.priority == {form.container: form.priority}
    devices = placed.devices[form.container]
    assert len(devices) == form.count
    if form.mig:
        assert placed.node == MIG
        (device,) = devices
        assert device.mig == form.mig and device.uuid.startswith(f"MIG-{MIG}-{form.mig}-")
        return
    assert placed.node == FRAC
    assert len({d.uuid for d in devices}) == form.count and {d.uuid for d in devices} <= FRAC_GPUS
    for d in devices:
        assert (d.milli, d.mem, d.sm, d.mig) == (form.milli, form.mem, form.sm, None)


# --- every denial, one line through the real apiserver -----------------------------------------------------
def _main(limits: dict | None = None, **kw) -> dict:
    return {"name": "main", "image": "busybox", "resources": {"limits": limits or {}}, **kw}


MIG_ALLOWED = ("(allowed: 1g.10gb, 1g.10gb+me, 1g.18gb, 1g.18gb+me, 1g.20gb, 1g.35gb, 1g.5gb, 1g.5gb+me, 1g.6gb, "
               "1g.6gb+me, 2g.10gb, 2g.12gb, 2g.12gb+me, 2g.20gb, 2g.35gb, 3g.20gb, 3g.40gb, 3g.71gb, 4g.20gb, "
               "4g.24gb, 4g.40gb, 4g.71gb, 7g.141gb, 7g.40gb, 7g.80gb)")  # every catalogued GPU's profiles
DENIED = {  # name: (pod, HTTP status, the webhook's line)
    "fraction zero": (
        dict(annotations={keys.FGPU_FRACTION: "0"}), 400,
        "metadata.annotations[fgpu.io/gpu-fraction]: '0' is not a share of one GPU or a whole number of GPUs "
        "(allowed: 0 < f <= 1, a whole number of GPUs 1..64)"),
    "fraction above one": (
        dict(annotations={keys.FGPU_FRACTION: "1.5"}), 400,
        "metadata.annotations[fgpu.io/gpu-fraction]: '1.5' is not a share of one GPU or a whole number of GPUs "
        "(allowed: 0 < f <= 1, a whole number of GPUs 1..64)"),
    "memory above the cluster's largest GPU": (
        dict(annotations={keys.FGPU_MEMORY: "96Gi"}), 400,
        "metadata.annotations[fgpu.io/gpu-memory]: '96Gi' is more than the cluster's largest GPU has "
        "(allowed: at most 81920 MiB per device)"),
    "HAMi memory above the cluster's largest GPU": (
        dict(limits={keys.GPU_RESOURCE: "1", keys.GPU_MEMORY_RESOURCE: "81921"}), 400,
        "spec.containers[main].resources[nvidia.com/gpumem]: '81921' is more than the cluster's largest GPU has "
        "(allowed: at most 81920 MiB per device)"),
    "unknown MIG profile": (
        dict(annotations={keys.FGPU_MIG_PROFILE: "5g.50gb"}), 400,
        "metadata.annotations[fgpu.io/mig-profile]: unknown MIG profile '5g.50gb' " + MIG_ALLOWED),
    "unknown MIG resource": (
        dict(limits={"nvidia.com/mig-9g.90gb": "1"}), 400,
        "spec.containers[main].resources[nvidia.com/mig-9g.90gb]: unknown MIG profile '9g.90gb' " + MIG_ALLOWED),
    "fgpu and HAMi disagree": (
        dict(annotations={keys.FGPU_FRACTION: "0.3"},
             limits={keys.GPU_RESOURCE: "1", keys.GPU_CORES_RESOURCE: "50"}), 400,
        "metadata.annotations[fgpu.io/gpu-fraction]: '0.3' disagrees with "
        "spec.containers[main].resources[nvidia.com/gpucores]='50' on the compute share for container 'main' "
        "(300 vs 500 milli-GPU); give one of them, or equal values"),
    "explicit zero GPUs beside a HAMi memory share": (
        dict(limits={keys.GPU_RESOURCE: "0", keys.GPU_MEMORY_RESOURCE: "1500"}), 400,  # 1000 would read "1k"
        "spec.containers[main].resources[nvidia.com/gpu]: '0' asks for no GPU, but "
        "spec.containers[main].resources[nvidia.com/gpumem]='1500' asks for a share of one (allowed: "
        "nvidia.com/gpu >= 1 with nvidia.com/gpumem, or no nvidia.com/gpumem)"),
    "a typo in fgpu's namespace": (
        dict(annotations={"fgpu.io/gpu-memroy": "8Gi"}), 400,
        "metadata.annotations[fgpu.io/gpu-memroy]: unknown annotation fgpu.io/gpu-memroy; did you mean "
        "fgpu.io/gpu-memory?"),
    "user-set hand-off annotation": (
        dict(annotations={keys.ASSIGNMENT: '{"version":"v1"}', keys.FGPU_FRACTION: "0.5"}), 403,
        "metadata.annotations[fgpu.io/assignment]: is written by fgpu's scheduler and device plugin only; remove "
        "it (a manifest copied from a running pod carries it) (allowed: no fgpu.io/assignment, assigned-at, "
        "allocated or assignment-signature on a new pod)"),
    "KAI fraction with whole GPUs": (
        dict(annotations={keys.KAI_FRACTION: "0.5"}, scheduler="kai-scheduler",
             containers=[_main(), _main({keys.GPU_RESOURCE: "1"}, name="side")]), 400,
        "metadata.annotations[gpu-fraction]: '0.5' cannot be combined with "
        "spec.containers[side].resources[nvidia.com/gpu] in the same pod (KAI's rule) (allowed: a fraction, or "
        "whole GPUs)"),
    "KubeShare request above limit": (
        dict(labels={keys.KUBESHARE_REQUEST: "0.8", keys.KUBESHARE_LIMIT: "0.5"}, scheduler="kubeshare-scheduler"),
        400,
        "metadata.labels[sharedgpu/gpu_request]: '0.8' does not fit metadata.labels[sharedgpu/gpu_limit]='0.5' "
        "(allowed: 0 < request <= limit <= 1, or request = limit, a whole number of GPUs)"),
    "HAMi topology-aware policy": (
        dict(annotations={keys.HAMI_GPU_POLICY: "topology-aware"}, limits={keys.GPU_RESOURCE: "1"}), 400,
        "metadata.annotations[hami.io/gpu-scheduler-policy]: 'topology-aware' is not supported: fgpu does not "
        "score NVLink topology (allowed: binpack, spread)"),
    "HAMi MPS mode": (
        dict(annotations={keys.HAMI_VGPU_MODE: "mps"},
             limits={keys.GPU_RESOURCE: "1", keys.GPU_MEMORY_RESOURCE: "1000"}), 400,
        "metadata.annotations[nvidia.com/vgpu-mode]: 'mps' is not supported: in fgpu, MPS is a node's sharing "
        "mode: ask for that node's replica resource (e.g. nvidia.com/gpu.shared); fractional shares run under "
        "fgpu's quotas (allowed: hami-core, mig)"),
    "Volcano vGPU resource": (
        dict(scheduler=keys.SCHEDULER_NAME, limits={keys.VOLCANO_VGPU_NUMBER: "1"}), 400,
        "spec.containers[main].resources[volcano.sh/vgpu-number]: fgpu does not read volcano.sh's GPU resources "
        "(allowed: nvidia.com/gpu (same meaning))"),
    "privileged share": (
        dict(annotations={keys.FGPU_FRACTION: "0.5"}, containers=[_main(securityContext={"privileged": True})]),
        400,
        "spec.containers[main].securityContext.privileged: a privileged container sees every GPU of its node, so "
        "it cannot hold a share of one (allowed: false, or a whole GPU)"),
}


@pytest.mark.parametrize("name", list(DENIED))
def test_denial_is_one_line_naming_field_and_value(op, name):
    kw, status, line = DENIED[name]
    body = pod("denied", BASE, **kw)
    code, message = denial(lambda: op.core.create_namespaced_pod(op.namespace, body))
    assert (code, message) == (status, f'admission webhook "fgpu-request.fgpu.io" denied the request: {line}')


def test_bound_pods_handoff_annotations_are_edited_by_fgpus_components_only(k8s, op, pods):
    """A user (here the admin) cannot rewrite a bound pod's assignment or request; the device plugin's service
    account records what it allocated (`fgpu.io/allocated`) on the same pod."""
    pods.create(pod("edited", BASE, annotations={keys.FGPU_FRACTION: "0.1"}))
    placed = pods.placed("edited")
    for key in (keys.ASSIGNMENT, keys.REQUEST, keys.ALLOCATED):
        code, message = denial(lambda key=key: op.core.patch_namespaced_pod(
            "edited", op.namespace, {"metadata": {"annotations": {key: "[]"}}}))
        assert (code, message) == (403, f'admission webhook "fgpu-handoff.fgpu.io" denied the request: '
                                        f"metadata.annotations[{key}]: set by fgpu's scheduler and device plugin "
                                        "only; a pod cannot change its own GPU allocation")
    assert pods.placed("edited") == placed  # nothing changed
    with k8s.api() as api:  # the device plugin, as the chart runs it (RBAC aside: the admin's groups)
        api.set_default_header("Impersonate-User", "system:serviceaccount:fgpu-system:fgpu-device-plugin")
        api.set_default_header("Impersonate-Group", "system:masters")
        client.CoreV1Api(api).patch_namespaced_pod(
            "edited", op.namespace, {"metadata": {"annotations": {keys.ALLOCATED: '["main"]'}}})
    assert pods.read("edited").metadata.annotations[keys.ALLOCATED] == '["main"]'
