"""fgpu's admission webhook, pure: raw pod dicts in (as an AdmissionReview carries them), decisions out. The
Kopf handlers are thin shells over these; nothing here imports kopf or a Kubernetes client.

    parse_pod(pod, config) -> GpuRequest | None   the canonical request, whatever spelling the pod used
    classify_pod(pod, config) -> Classified       the same, with why a pod is left alone
    mutate(pod, request, config) -> list[dict]     the RFC 6902 patch for an admitted GPU pod
    review(admission_review, config) -> dict       the whole AdmissionReview response (never raises)

Modules: config (AdmissionConfig), quantity (numbers as users write them), podview (a raw pod read
defensively), gpus (simgpu's catalog facts), forms/* (one module per spelling: fgpu, HAMi, KubeShare, KAI,
Aliyun, NVIDIA, the canonical annotation, refused peers), claims (spellings must agree; the request is
built), placeable (a request no node could ever take is refused), handoff (who may write the hand-off annotations), parse, patch, review,
dra (with DRA on: shares and MIG as a ResourceClaimTemplate of fgpu-dra's classes; `dra.admit`).
"""
from .config import DEFAULT_CONFIG, AdmissionConfig, ResourceNames
from .handoff import HandoffError
from .parse import Classified, classify_pod, parse_pod
from .patch import mutate
from .review import review

__all__ = ["DEFAULT_CONFIG", "AdmissionConfig", "Classified", "HandoffError", "ResourceNames", "classify_pod",
           "mutate", "parse_pod", "review"]
