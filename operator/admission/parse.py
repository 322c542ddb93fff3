"""A pod spec to fgpu's canonical GPU request, or to a reason to leave the pod alone.

Which pods are fgpu's: those naming `fgpu-scheduler`, and GPU pods naming a scheduler in
`AdmissionConfig.takeover_schedulers` (HAMi's, KAI's, KubeShare's, and `default-scheduler` explicitly or by
default, as HAMi's webhook takes default-scheduler pods). A GPU pod naming any other scheduler (Volcano, a
custom one) is left alone: someone chose that scheduler on purpose, and two schedulers must not place one
pod. So is a pod created with `spec.nodeName` set: it is placed already, and a scheduler never sees it.
"""
from __future__ import annotations

from dataclasses import dataclass

from fgpu_contracts.request import GpuRequest

from .claims import build
from .config import DEFAULT_CONFIG, AdmissionConfig
from .forms import container_claims, hint_claims, refuse_foreign, refuse_zero_beside_share
from .handoff import check_create
from .ownkeys import refuse_unknown_keys
from .podview import PodView


@dataclass(frozen=True)
class Classified:
    """What admission makes of a pod: its request, or None and why (for the webhook's log)."""

    request: GpuRequest | None
    reason: str = ""
    scheduler: str = ""  # the schedulerName the pod arrived with


def classify_pod(pod: dict, config: AdmissionConfig = DEFAULT_CONFIG) -> Classified:
    """Raises InputError (one line: field, value, what is allowed) for a request fgpu must refuse or an
    unknown `fgpu.io/` key, and handoff.HandoffError for hand-off annotations on a new pod."""
    view = PodView(pod)
    check_create(view)
    refuse_unknown_keys(view, config)  # whoever schedules it: fgpu's namespace is fgpu's alone
    scheduler = view.scheduler_name
    ours = scheduler == config.scheduler_name
    if not ours and scheduler not in config.takeover_schedulers:
        return Classified(None, f"schedulerName {scheduler!r} is not one fgpu takes over: left alone", scheduler)
    if view.node_name:
        return Classified(None, "spec.nodeName is set: the pod is placed already", scheduler)
    claims = container_claims(view, config)
    refuse_zero_beside_share(view, config, claims)
    if not claims:
        if ours:
            refuse_foreign(view)
        return Classified(None, "the pod asks for no GPU", scheduler)
    refuse_foreign(view)
    return Classified(build(claims + hint_claims(view, config), view, config), "", scheduler)


def parse_pod(pod: dict, config: AdmissionConfig = DEFAULT_CONFIG) -> GpuRequest | None:
    """The pod's canonical GPU request; None for pods that fgpu leaves untouched (see `classify_pod`)."""
    return classify_pod(pod, config).request
