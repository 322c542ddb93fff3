"""NVIDIA's device plugin resources: `nvidia.com/gpu: N` (N devices; whole GPUs unless another spelling on
the container gives each device a share, as HAMi reads it) and `nvidia.com/mig-<g>g.<mem>gb: N` (N MIG
instances; NVIDIA's `+me` profiles are spelled `.me` in resource names)."""
from __future__ import annotations

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import parse_quantity, show, whole

from ..claims import Claim
from ..config import AdmissionConfig
from ..gpus import is_mig_profile_name, mig_profile
from ..podview import ContainerView, PodView
from .common import MAX_DEVICES, Claims

SOURCE = "nvidia"


def device_count(c: ContainerView, key: str) -> tuple[int, str, str] | None:
    """(count, text, field) of a countable resource; 0 counts as not asked."""
    text = c.resource(key)
    if text is None:
        return None
    field = c.resource_field(key)
    count = whole(parse_quantity(text, field), text, field, 0, MAX_DEVICES, "a whole number of devices")
    return (count, text, field) if count else None


def mig_resources(c: ContainerView) -> list[tuple[str, str]]:
    """(resource name, profile) of the container's MIG resources. Names that are not shaped like a profile
    (`nvidia.com/mig-1g.10gb.shared`: time-sliced replicas) are not MIG requests."""
    out = []
    for key in c.resource_keys():
        if not key.startswith(keys.MIG_RESOURCE_PREFIX):
            continue
        name = key[len(keys.MIG_RESOURCE_PREFIX):]
        name = name[:-3] + "+me" if name.endswith(".me") else name
        if is_mig_profile_name(name):
            out.append((key, mig_profile(name, c.resource_field(key))))
    return out


def refuse_zero_beside_share(view: PodView, config: AdmissionConfig, claims: list[Claim]) -> None:
    """An explicit `nvidia.com/gpu: 0` asks for no GPU: a share asked for the same container in any spelling
    (HAMi's gpumem / gpucores, fgpu's or KAI's annotations, Aliyun's gpu-mem) contradicts it, and a request
    for no GPU must not become one. Refused, naming both fields. (A MIG instance beside it is another
    resource, not a contradiction.)"""
    gpu = config.resources.gpu
    for c in view.containers:
        if device_count(c, gpu) is not None or c.resource(gpu) is None:
            continue
        mine = [claim for claim in claims if claim.container == c.name]
        if any(claim.attr == "mig_profile" for claim in mine):
            continue  # no whole GPU and a MIG instance: two resources, no contradiction
        other = mine[0] if mine else None
        if other is not None:
            key = other.field.rsplit("[", 1)[-1].rstrip("]")
            raise InputError(f"{show(c.resource(gpu))} asks for no GPU, but {other.field}={show(other.text)} asks "
                             "for a share of one", field=c.resource_field(gpu),
                             allowed=[f"{gpu} >= 1 with {key}", f"or no {key}"])


def containers(view: PodView, config: AdmissionConfig) -> Claims:
    out = Claims(SOURCE)
    for c in view.containers:
        whole_gpus = device_count(c, config.resources.gpu)
        migs = [(key, profile, device_count(c, key)) for key, profile in mig_resources(c)]
        if whole_gpus and migs:
            raise InputError(f"{show(whole_gpus[1])} cannot be combined with {migs[0][0]} in one container",
                             field=whole_gpus[2],
                             allowed=["whole GPUs or MIG instances in one container, not both"])
        if whole_gpus:
            out.add("count", whole_gpus[0], *whole_gpus[1:], container=c.name)
        for key, profile, counted in migs:
            if counted:
                out.add("mig_profile", profile, key, counted[2], container=c.name)
                out.add("count", counted[0], *counted[1:], container=c.name)
    return out
