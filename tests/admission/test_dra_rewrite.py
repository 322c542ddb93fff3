"""With DRA on, each classic share spelling becomes a ResourceClaimTemplate of fgpu-dra's classes with the same
capacity; the old resources leave the container; whole GPUs stay a count (KEP-5004); what a claim cannot say is
refused in one line. Each rewrite is fed back to fgpu-scheduler's claim reader (`claim_plan`), so what the
webhook admits is a claim the allocator places as the share the user asked for."""
from __future__ import annotations

import copy

import jsonpatch
import pytest
from admission_util import CONFIG, GIB, MIB
from fgpu_operator.admission import parse_pod
from fgpu_operator.admission.dra import POD_CLAIM, admit
from fgpu_operator.controller import claims

from fgpu_contracts import dra as names
from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.request import load_request

FGPU = CONFIG.model_copy(update={"dra_allocator": names.ALLOCATOR_FGPU, "dra_gpu_memory_bytes": 80 * GIB})
KUBE = FGPU.model_copy(update={"dra_allocator": names.ALLOCATOR_KUBE})


def _pod(resources: dict | None = None, annotations: dict | None = None, scheduler: str | None = None) -> dict:
    spec = {"containers": [{"name": "main", "image": "x", "resources": {"limits": {"cpu": "1", **(resources or {})}}},
                           {"name": "side", "image": "y"}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml", "uid": "u1",
                                                            "annotations": annotations or {}}, "spec": spec}


def _admit(p: dict, config=FGPU) -> tuple[dict, dict | None]:
    ops, template = admit(p, parse_pod(p, config), "ml", config)
    return jsonpatch.apply_patch(copy.deepcopy(p), ops), template


def _exactly(template: dict) -> dict:
    return template["spec"]["spec"]["devices"]["requests"][0]["exactly"]


def _as_claim(template: dict, pod_obj: dict) -> dict:
    """The claim the controller-manager makes from the template for the pod."""
    return {"metadata": {"name": "p-fgpu-gpu-x", "namespace": "ml",
                         "annotations": {names.POD_CLAIM_NAME: POD_CLAIM},
                         "ownerReferences": [{"kind": "Pod", "controller": True, "uid": pod_obj["metadata"]["uid"]}]},
            "spec": template["spec"]["spec"]}


SHARES = [  # (spelling, the claim's capacity requests, what fgpu-scheduler then places: milli, MiB, SM %)
    ("HAMi gpumem + gpucores", _pod({keys.GPU_RESOURCE: "1", "nvidia.com/gpumem": "8192", "nvidia.com/gpucores": "30"}),
     {names.CAP_MEMORY: "8192Mi", names.CAP_SM_SHARE: "30"}, (300, 8192, 30)),
    ("HAMi gpumem alone (not throttled)", _pod({keys.GPU_RESOURCE: "1", "nvidia.com/gpumem": "3000"}),
     {names.CAP_MEMORY: "3072Mi"}, (1, 3072, None)),
    ("HAMi gpumem-percentage", _pod({keys.GPU_RESOURCE: "1", "nvidia.com/gpumem-percentage": "25",
                                     "nvidia.com/gpucores": "20"}),
     {names.CAP_MEMORY: "20480Mi", names.CAP_SM_SHARE: "20"}, (200, 20480, 20)),
    ("fgpu fraction + memory", _pod(annotations={keys.FGPU_FRACTION: "0.3", keys.FGPU_MEMORY: "8Gi"}),
     {names.CAP_MEMORY: "8192Mi", names.CAP_SM_SHARE: "30"}, (300, 8192, 30)),
    ("fgpu fraction alone (memory in proportion)", _pod(annotations={keys.FGPU_FRACTION: "0.5"}),
     {names.CAP_MEMORY: "40960Mi", names.CAP_SM_SHARE: "50"}, (500, 40960, 50)),
    ("KAI gpu-fraction", _pod(annotations={keys.KAI_FRACTION: "0.25"}),
     {names.CAP_MEMORY: "20480Mi", names.CAP_SM_SHARE: "25"}, (250, 20480, 25)),
    ("KAI gpu-memory", _pod(annotations={keys.KAI_MEMORY: "10000"}),
     {names.CAP_MEMORY: "10240Mi"}, (1, 10240, None)),
    ("Aliyun gpu-mem", _pod({keys.ALIYUN_MEMORY: "8"}), {names.CAP_MEMORY: "8192Mi"}, (1, 8192, None)),
]


@pytest.mark.parametrize(("spelling", "p", "caps", "placed"), SHARES, ids=[s[0] for s in SHARES])
def test_each_share_spelling_becomes_a_share_claim_fgpu_scheduler_places_alike(spelling, p, caps, placed):
    out, template = _admit(p)
    exactly = _exactly(template)
    assert exactly["deviceClassName"] == names.CLASS_SHARE
    assert exactly["capacity"]["requests"] == caps
    name = template["metadata"]["name"]
    assert name.startswith("fgpu-share-") and template["metadata"]["namespace"] == "ml"
    assert out["spec"]["resourceClaims"] == [{"name": POD_CLAIM, "resourceClaimTemplateName": name}]
    main = out["spec"]["containers"][0]["resources"]
    assert main["claims"] == [{"name": POD_CLAIM}]
    assert main["limits"] == {"cpu": "1"}  # the GPU resources left: the claim carries them
    assert "resources" not in out["spec"]["containers"][1]
    assert out["spec"]["schedulerName"] == keys.SCHEDULER_NAME
    plan = claims.claim_plan(out, {("ml", "p-fgpu-gpu-x"): _as_claim(template, out)},
                             {("u1", POD_CLAIM): "p-fgpu-gpu-x"})
    (c,) = plan.gpu_request.containers
    milli, mib, sm = placed
    assert (c.milli_gpu, c.mem_bytes // MIB, c.sm_pct) == (milli, mib, sm)
    again, same = _admit(out)  # admitted again (a copy of the admitted pod): the same claim, nothing added
    assert same == template and again == out


def test_pods_that_ask_alike_share_one_template_and_priority_goes_in_the_config():
    a = _admit(_pod({keys.GPU_RESOURCE: "1", "nvidia.com/gpumem": "8192", "nvidia.com/gpucores": "30"}))[1]
    b = _admit(_pod(annotations={keys.FGPU_FRACTION: "0.3", keys.FGPU_MEMORY: "8Gi"}))[1]
    high = _admit(_pod(annotations={keys.FGPU_FRACTION: "0.3", keys.FGPU_MEMORY: "8Gi", keys.FGPU_PRIORITY: "high",
                                    keys.FGPU_SLO_SLOWDOWN: "1.5"}))[1]
    assert a["metadata"]["name"] == b["metadata"]["name"] != high["metadata"]["name"]
    (config,) = high["spec"]["spec"]["devices"]["config"]
    assert config["requests"] == ["gpu"] and config["opaque"]["driver"] == names.DRIVER
    assert config["opaque"]["parameters"] == {"apiVersion": names.CONFIG_API_VERSION, "kind": names.CONFIG_KIND,
                                              "priority": "high", "sloSlowdown": 1.5}
    assert a["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["priority"] == "low"


def test_mig_spellings_go_to_the_mig_classes():
    _, t = _admit(_pod({"nvidia.com/mig-1g.10gb": "2"}))
    assert _exactly(t) == {"deviceClassName": names.mig_class("1g.10gb"), "count": 2}
    out, t = _admit(_pod(annotations={keys.FGPU_MIG_PROFILE: "3g.40gb"}))
    assert _exactly(t) == {"deviceClassName": names.mig_class("3g.40gb"), "count": 1}
    assert t["metadata"]["name"].startswith("fgpu-mig-")
    plan = claims.claim_plan(out, {("ml", "c"): _as_claim(t, out)}, {("u1", POD_CLAIM): "c"})
    assert plan.kind == names.KIND_MIG and plan.gpu_request.containers[0].mig_profile == "3g.40gb"


def test_whole_gpus_stay_a_count_for_kep_5004():
    p = _pod({keys.GPU_RESOURCE: "2"})
    out, template = _admit(p)  # fgpu-scheduler: its usual patch; it makes the KEP-5004 claim itself
    assert template is None and out["spec"]["containers"][0]["resources"]["limits"][keys.GPU_RESOURCE] == "2"
    assert out["spec"]["schedulerName"] == keys.SCHEDULER_NAME and "resourceClaims" not in out["spec"]
    assert load_request(out["metadata"]["annotations"][keys.REQUEST]).containers[0].count == 2
    out, template = _admit(p, KUBE)  # kube-scheduler's pools: its own KEP-5004 path, untouched
    assert template is None and out == {**p, "spec": {**p["spec"], "schedulerName": keys.DEFAULT_SCHEDULER}}


def test_on_kube_scheduler_pools_the_pod_goes_to_kube_scheduler_without_fgpu_annotations():
    out, template = _admit(_pod({keys.GPU_RESOURCE: "1", "nvidia.com/gpucores": "30"}, scheduler="hami-scheduler"),
                           KUBE)
    assert out["spec"]["schedulerName"] == keys.DEFAULT_SCHEDULER
    assert keys.REQUEST not in out["metadata"]["annotations"] and template is not None


def test_fgpu_scheduler_keeps_the_pod_level_asks_beside_the_claim():
    out, _ = _admit(_pod(annotations={keys.FGPU_FRACTION: "0.3", keys.FGPU_MEMORY: "8Gi", keys.FGPU_POLICY: "spread"}))
    assert load_request(out["metadata"]["annotations"][keys.REQUEST]).node_policy == "spread"


@pytest.mark.parametrize(("p", "config", "said"), [
    (_pod({keys.GPU_RESOURCE: "2", "nvidia.com/gpucores": "30"}), FGPU, "2 GPUs each shared: a claim's share is "
     "of one GPU"),
    (_pod(annotations={keys.FGPU_FRACTION: "0.5", keys.FGPU_SM: "80"}), FGPU, "a compute share of 500 milli-GPU with an SM "
     "limit of 80%: a claim's smShare is both"),
    (_pod(annotations={keys.FGPU_FRACTION: "0.5"}), FGPU.model_copy(update={"dra_gpu_memory_bytes": None}),
     "50% of a GPU's memory: a claim's memory is an amount"),
    (_pod({keys.GPU_RESOURCE: "1", "nvidia.com/gpucores": "30"}, annotations={keys.FGPU_POLICY: "spread"}), KUBE,
     "a node policy: kube-scheduler's DRA plugin allocates these pools and would ignore it"),
    (_pod({keys.GPU_RESOURCE: "1"}, annotations={keys.FGPU_MODEL: "A100-80GB"}), KUBE, "a GPU-model filter"),
])
def test_what_a_claim_cannot_say_is_refused_in_one_line(p, config, said):
    with pytest.raises(InputError) as err:
        admit(p, parse_pod(p, config), "ml", config)
    assert said in str(err.value) and "\n" not in str(err.value)


def test_a_second_claim_beside_the_share_is_refused_for_fgpu_scheduler():
    p = _pod({keys.GPU_RESOURCE: "1", "nvidia.com/gpucores": "30"})
    p["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "nic"}]
    with pytest.raises(InputError, match="fgpu-scheduler allocates one claim per pod"):
        admit(p, parse_pod(p, FGPU), "ml", FGPU)
    ops, _ = admit(p, parse_pod(p, KUBE), "ml", KUBE)  # kube-scheduler allocates both
    out = jsonpatch.apply_patch(copy.deepcopy(p), ops)
    assert [c["name"] for c in out["spec"]["resourceClaims"]] == ["nic", POD_CLAIM]


def test_dra_off_is_the_device_plugin_patch():
    out, template = _admit(_pod({keys.GPU_RESOURCE: "1", "nvidia.com/gpucores": "30"}), CONFIG)
    assert template is None and "resourceClaims" not in out["spec"]
    assert out["spec"]["containers"][0]["resources"]["limits"][keys.GPU_RESOURCE] == "1"
