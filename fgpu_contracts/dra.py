"""The names fgpu's DRA driver puts on the wire (resource.k8s.io/v1): the driver, its device attributes and
capacities, device kinds, counter names, DeviceClasses, the health taint and the CDI kind. The driver
(deviceplugin.dra) publishes them, users' ResourceClaims and CEL selectors name them, the simulator's kube-dra
allocator and docs/dra.md read them: one spelling, here.
"""
from __future__ import annotations

DRIVER = "gpu.fgpu.io"  # ResourceSlice.spec.driver; also the domain of every attribute and capacity below

# device kinds (attribute "kind"): what a device hands out
KIND_GPU = "gpu"  # a whole GPU, to one claim
KIND_SHARE = "share"  # a GPU shared by several claims, each consuming some memory and SM share
KIND_MIG = "mig"  # one MIG instance (a placement of a profile on the GPU's memory slices)
KINDS = (KIND_GPU, KIND_SHARE, KIND_MIG)

# attributes (device.attributes["gpu.fgpu.io"].<name> in CEL)
ATTR_KIND = "kind"
ATTR_MODEL = "model"  # fgpu's short model name, e.g. "A100-80GB"
ATTR_PRODUCT = "productName"  # the full product name, e.g. "NVIDIA A100-SXM4-80GB"
ATTR_UUID = "uuid"  # the device the container sees: GPU-... or MIG-...
ATTR_PARENT_UUID = "parentUUID"  # MIG devices: their GPU
ATTR_ARCH = "architecture"
ATTR_SM_COUNT = "smCount"
ATTR_MEMORY = "memory"  # bytes, as an int (the capacity of the same name is the consumable quantity)
ATTR_MIG_CAPABLE = "migCapable"
ATTR_MIG_PROFILE = "profile"  # MIG devices: "1g.10gb"
ATTR_MIG_START = "memorySliceStart"  # MIG devices: the first memory slice of the placement
ATTR_INDEX = "index"  # the GPU's index on its node
ATTR_POOL = "pool"  # fgpu's node pool (the chart's nodePools[].name)

# capacities, published under their full names: a claim's capacity.requests and the allocation's
# consumedCapacity match them by the literal key, so a user writes "gpu.fgpu.io/memory: 8Gi" (CEL reads them
# as device.capacity["gpu.fgpu.io"].memory)
CAP_MEMORY = f"{DRIVER}/memory"
CAP_SM_SHARE = f"{DRIVER}/smShare"  # percent of the GPU's SMs: 100 is all of them

MEMORY_STEP = 256 << 20  # shares' memory is consumed in 256Mi steps

# counters of one GPU's counter set: memory slices (one per MIG memory slice, one for a GPU without MIG),
# compute slices, and the single media-extensions engine a "+me" MIG profile takes
COUNTER_MEMORY_SLICE = "memory-slice-{}"
COUNTER_COMPUTE = "compute-slices"
COUNTER_MEDIA = "media-extensions"

# DeviceClasses (deploy/dra/deviceclasses.yaml)
CLASS_GPU = "gpu.fgpu.io"
CLASS_SHARE = "gpu-share.fgpu.io"
CLASS_MIG = "mig.fgpu.io"
# KEP-5004: whole GPUs for a classic `nvidia.com/gpu: N` pod, on nodes where no device plugin advertises it
# (deploy/dra/extended-resource.yaml, opt-in: one class per cluster may claim an extended resource name)
CLASS_EXTENDED = "gpu-extended.fgpu.io"


def mig_class(profile: str) -> str:
    """The DeviceClass of one MIG profile: "mig-1g.10gb.fgpu.io"; "+me" becomes "-me" (a DNS subdomain)."""
    return f"mig-{profile.replace('+', '-')}.fgpu.io"


def mig_class_profile(cls: str) -> str | None:
    """The profile `mig_class` named: "mig-1g.10gb-me.fgpu.io" -> "1g.10gb+me"; None for any other class."""
    if not (cls.startswith("mig-") and cls.endswith(".fgpu.io")) or cls == CLASS_MIG:
        return None
    profile = cls[len("mig-"):-len(".fgpu.io")]
    return profile[:-3] + "+me" if profile.endswith("-me") else profile


# opaque device configuration a claim (or class) may give the driver, in spec.devices.config[].opaque:
# {"driver": "gpu.fgpu.io", "parameters": {"apiVersion": "gpu.fgpu.io/v1", "kind": "GpuConfig",
#  "priority": "high"|"low", "sloSlowdown": 1.5}}; HAMi's CUDA_TASK_PRIORITY and fgpu's fgpu.io/slo-slowdown
CONFIG_API_VERSION = f"{DRIVER}/v1"
CONFIG_KIND = "GpuConfig"

# device taints (health)
TAINT_UNHEALTHY = "gpu.fgpu.io/unhealthy"  # value: "xid-<n>"; effect NoSchedule
# Who allocates a pool (docs/dra.md "Two allocators, one rule"): a node whose fgpu-dra runs with
# `--allocator fgpu-scheduler` taints every device of its pool with this key (value ALLOCATOR_FGPU, effect
# NoSchedule). kube-scheduler allocates no tainted device unless a claim tolerates the taint, and fgpu-scheduler
# allocates only devices that carry it: no device is ever offered to both.
TAINT_ALLOCATOR = "gpu.fgpu.io/allocator"
ALLOCATOR_FGPU = "fgpu-scheduler"
ALLOCATOR_KUBE = "kube-scheduler"
ALLOCATORS = (ALLOCATOR_KUBE, ALLOCATOR_FGPU)
# The finalizer kube-scheduler puts on a claim it allocates; the controller-manager removes it on deallocation
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
# The annotation the controller-manager puts on a claim it makes from a pod's template: the pod's claim name
# (spec.resourceClaims[].name); with the pod as controlling owner, it finds the claim before the pod's status says
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
# KEP-5004: the claim a scheduler makes for a pod's extended resources (`nvidia.com/gpu: N` on a DRA node) carries
# this annotation ("true"), is named <pod>-extended-resources-<random>, is owned by the pod, and is named in the
# pod's status.extendedResourceClaimStatus; its requests are "container-<i>-request-<j>"
EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"

# CDI: devices the driver prepares are injected as "<CDI_KIND>=<name>"
CDI_KIND = "fgpu.io/gpu"
