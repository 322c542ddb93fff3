"""Each peer's way of asking for a GPU, one module per spelling. A module turns a pod into `Claim`s:
`containers()` says what containers ask for (any claim makes the pod a GPU pod), and `hints()` (if the
spelling has pod-level ones) the constraints and preferences, read only for GPU pods so that a CPU pod with
a stray annotation is never refused."""
from __future__ import annotations

from ..claims import Claim
from ..config import AdmissionConfig
from ..podview import PodView
from . import aliyun, canonical, fgpu, hami, kai, kubeshare, nvidia
from .foreign import refuse as refuse_foreign
from .nvidia import refuse_zero_beside_share

FORMS = (canonical, fgpu, kai, kubeshare, hami, aliyun, nvidia)


def container_claims(view: PodView, config: AdmissionConfig) -> list[Claim]:
    return [c for form in FORMS for c in form.containers(view, config)]


def hint_claims(view: PodView, config: AdmissionConfig) -> list[Claim]:
    return [c for form in FORMS if hasattr(form, "hints") for c in form.hints(view, config)]


__all__ = ["FORMS", "container_claims", "hint_claims", "refuse_foreign", "refuse_zero_beside_share"]
