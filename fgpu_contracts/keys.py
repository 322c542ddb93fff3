"""Every key and name on the wire: annotations, labels, resource names, the scheduler name, and each peer's
spelling of a GPU request that fgpu accepts (where each comes from: docs/compatibility.md).

Only constants and tiny pure helpers live here; formats (JSON bodies) are in `assignment` and `inventory`.
"""
from __future__ import annotations

GROUP = "fgpu.io"
SCHEDULER_NAME = "fgpu-scheduler"

# --- hand-off: written by the scheduler (on the Binding), read by the device plugin ----------------------
ASSIGNMENT = "fgpu.io/assignment"  # JSON, assignment.Assignment (v1)
ASSIGNED_AT = "fgpu.io/assigned-at"  # RFC 3339; oldest first wins at Allocate
ALLOCATED = "fgpu.io/allocated"  # JSON list of container names the plugin has allocated
REQUEST = "fgpu.io/request"  # JSON, request.GpuRequest (v1): what the mutating webhook understood
ASSIGNMENT_SIGNATURE = "fgpu.io/assignment-signature"  # signature.sign: the scheduler's HMAC over the hand-off
#: Annotations only fgpu's own components may set; the webhook strips or denies them on user pods.
HANDOFF_KEYS = (ASSIGNMENT, ASSIGNED_AT, ALLOCATED, REQUEST, ASSIGNMENT_SIGNATURE)

# --- node: written by the device plugin -------------------------------------------------------------------
INVENTORY = "fgpu.io/gpu-inventory"  # JSON, inventory.Inventory (v1)
EMULATED = "fgpu.io/emulated"  # label "true" on nodes whose GPUs simgpu emulates
SHARING_MODE_LABEL = "fgpu.io/sharing-mode"


def model_label_prefix(model_value: str) -> str:
    """fgpu's per-model labels `fgpu.io/gpu-<product>.{count,memory}` (model_value already label-safe)."""
    return f"fgpu.io/gpu-{model_value}"


# --- resource names (NVIDIA / HAMi conventions; all configurable where the peer makes them so) ------------
GPU_RESOURCE = "nvidia.com/gpu"
GPU_MEMORY_RESOURCE = "nvidia.com/gpumem"  # HAMi: MiB per GPU
GPU_MEMORY_PCT_RESOURCE = "nvidia.com/gpumem-percentage"  # HAMi: 0-100 of the GPU's memory
GPU_CORES_RESOURCE = "nvidia.com/gpucores"  # HAMi: 0-100 % of SMs
GPU_PRIORITY_RESOURCE = "nvidia.com/priority"  # HAMi: 0 = high, 1 = low
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def mig_resource_name(profile: str) -> str:
    """NVIDIA's resource for a MIG profile: `nvidia.com/mig-<g>g.<mem>gb` (a `+me` suffix becomes `.me`)."""
    return f"{MIG_RESOURCE_PREFIX}{profile.replace('+', '.')}"


# --- fgpu's own request annotations -----------------------------------------------------------------------
FGPU_FRACTION = "fgpu.io/gpu-fraction"  # 0 < f <= 1, or an integer count of whole GPUs
FGPU_COUNT = "fgpu.io/gpu-count"  # devices, each on its own GPU with the share above (default 1)
FGPU_MEMORY = "fgpu.io/gpu-memory"  # a quantity, e.g. 8Gi
FGPU_SM = "fgpu.io/gpu-sm"  # SM share in percent (default: the fraction)
FGPU_MODEL = "fgpu.io/gpu-model"  # comma-separated allowed models (fgpu's rule: docs/requests.md)
FGPU_MODEL_EXCLUDE = "fgpu.io/gpu-model-exclude"  # comma-separated excluded models
FGPU_PRIORITY = "fgpu.io/priority"  # high (protected: a slowdown bound) | low (best-effort, the default)
FGPU_MIG_PROFILE = "fgpu.io/mig-profile"
FGPU_POLICY = "fgpu.io/policy"  # per-pod placement policy
FGPU_AFFINITY = "fgpu.io/affinity"  # KubeShare-style group names
FGPU_ANTI_AFFINITY = "fgpu.io/anti-affinity"
FGPU_EXCLUSION = "fgpu.io/exclusion"
FGPU_SLO_SLOWDOWN = "fgpu.io/slo-slowdown"  # a high-priority pod's slowdown bound (default 1.2); implies high
FGPU_DUTY_CYCLE = "fgpu.io/duty-cycle"  # 0 < d <= 1: busy fraction alone (workload class; default: the share)
FGPU_SLO_FILTER = "fgpu.io/slo-filter"  # "true" | "false": keep co-runners' SLOs when placing this pod
FGPU_CONTAINER = "fgpu.io/container"  # which container the annotations' share is for (default: the first)
#: Every `fgpu.io/` annotation a pod may carry: fgpu's request spelling, the canonical request (read back),
#: and the hand-offs (known, but only fgpu's components write them). Any other `fgpu.io/` key on a pod, as an
#: annotation, a label or a resource, is a mistake the webhook refuses (a typo would otherwise be ignored).
POD_ANNOTATIONS = (FGPU_FRACTION, FGPU_MEMORY, FGPU_SM, FGPU_COUNT, FGPU_MODEL, FGPU_MODEL_EXCLUDE, FGPU_PRIORITY,
                   FGPU_MIG_PROFILE, FGPU_POLICY, FGPU_AFFINITY, FGPU_ANTI_AFFINITY, FGPU_EXCLUSION,
                   FGPU_SLO_SLOWDOWN, FGPU_DUTY_CYCLE, FGPU_SLO_FILTER, FGPU_CONTAINER, *HANDOFF_KEYS)
#: fgpu reads no label of its own on pods (its request keys are annotations).
POD_LABELS: tuple[str, ...] = ()

# --- HAMi ---------------------------------------------------------------------------------------------------
HAMI_USE_UUID = "nvidia.com/use-gpuuuid"
HAMI_NOUSE_UUID = "nvidia.com/nouse-gpuuuid"
HAMI_USE_TYPE = "nvidia.com/use-gputype"
HAMI_NOUSE_TYPE = "nvidia.com/nouse-gputype"
HAMI_VGPU_MODE = "nvidia.com/vgpu-mode"
HAMI_NODE_POLICY = "hami.io/node-scheduler-policy"
HAMI_GPU_POLICY = "hami.io/gpu-scheduler-policy"

# --- KubeShare (2.0 labels; 1.0 spelled the group keys as annotations) ---------------------------------------
KUBESHARE_REQUEST = "sharedgpu/gpu_request"
KUBESHARE_LIMIT = "sharedgpu/gpu_limit"
KUBESHARE_MEMORY = "sharedgpu/gpu_mem"  # bytes
KUBESHARE_MODEL = "sharedgpu/gpu_model"
KUBESHARE_PRIORITY = "sharedgpu/priority"
KUBESHARE_AFFINITY = "sharedgpu/sched_affinity"
KUBESHARE_ANTI_AFFINITY = "sharedgpu/sched_anti-affinity"
KUBESHARE_EXCLUSION = "sharedgpu/sched_exclusion"

# --- KAI scheduler -------------------------------------------------------------------------------------------
KAI_FRACTION = "gpu-fraction"
KAI_MEMORY = "gpu-memory"  # MiB
KAI_CONTAINER = "gpu-fraction-container-name"
KAI_NUM_DEVICES = "gpu-fraction-num-devices"

# --- Aliyun gpushare ----------------------------------------------------------------------------------------
ALIYUN_MEMORY = "aliyun.com/gpu-mem"  # GiB by default (gpushare's unit is configurable)

DEFAULT_SCHEDULER = "default-scheduler"  # kube-scheduler's name, and a pod's when it names none
#: Scheduler names whose pods fgpu takes over (configurable): peers' schedulers, and GPU pods that name
#: the default scheduler explicitly (HAMi's webhook does the same).
TAKEOVER_SCHEDULERS = ("hami-scheduler", "kai-scheduler", "kubeshare-scheduler", "default-scheduler")
#: What a scheduler name may be (a DNS subdomain, as Kubernetes validates spec.schedulerName's profiles).
SCHEDULER_NAME_PATTERN = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"

# --- the operator's own objects -------------------------------------------------------------------------------
CRD_GROUP = GROUP
CRD_VERSION = "v1alpha1"
CRD_API_VERSION = f"{CRD_GROUP}/{CRD_VERSION}"
GPUNODE_KIND = "GPUNode"  # one per node, named after it (deploy/crds/gpunode.yaml)
GPUNODE_PLURAL = "gpunodes"
SCHEDULING_POLICY_KIND = "SchedulingPolicy"  # cluster-wide defaults (deploy/crds/schedulingpolicy.yaml)
SCHEDULING_POLICY_PLURAL = "schedulingpolicies"
LEASE_NAME = "fgpu-scheduler"

# --- peers' spellings fgpu refuses, with the translation in the message (the admission webhook) ---------------
#: Volcano's vGPU resources (HAMi-core underneath): the same meaning as HAMi's gpu / gpumem (MiB) / gpucores.
VOLCANO_VGPU_NUMBER = "volcano.sh/vgpu-number"
VOLCANO_VGPU_MEMORY = "volcano.sh/vgpu-memory"
VOLCANO_VGPU_CORES = "volcano.sh/vgpu-cores"
#: tkestack gpu-manager: vcuda-core 100 = one GPU; vcuda-memory in 256 MiB units.
TENCENT_VCUDA_CORE = "tencent.com/vcuda-core"
TENCENT_VCUDA_MEMORY = "tencent.com/vcuda-memory"
