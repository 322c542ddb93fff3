"""A raw pod dict (as an AdmissionReview carries it) read defensively: every accessor either returns strings
or raises one InputError naming the field, so the request forms never meet a wrong type.

Field names in messages follow Kubernetes' paths, with containers by name:
`metadata.annotations[fgpu.io/gpu-fraction]`, `spec.containers[main].resources[nvidia.com/gpumem]`.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError
from fgpu_contracts.quantity import as_text, show

DEFAULT_SCHEDULER = "default-scheduler"


def annotation_field(key: str) -> str:
    return f"metadata.annotations[{key}]"


def label_field(key: str) -> str:
    return f"metadata.labels[{key}]"


def _mapping(value: object, field: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{show(value)} is not a mapping", field=field)
    return value


def _strings(value: object, field: str) -> dict[str, str]:
    out = _mapping(value, field)
    for k, v in out.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InputError(f"{show(v)} is not a string", field=f"{field}[{k if isinstance(k, str) else show(k)}]")
    return out


@dataclass(frozen=True)
class ContainerView:
    """One container or init container: its name, where it sits (for patches) and its GPU resources."""

    name: str
    kind: str  # "containers" | "initContainers"
    index: int
    raw: dict

    @property
    def field(self) -> str:
        return f"spec.{self.kind}[{self.name}]"

    @property
    def pointer(self) -> str:
        """The container's JSON pointer (names never go in pointers: indexes do)."""
        return f"/spec/{self.kind}/{self.index}"

    def resource_field(self, key: str) -> str:
        return f"{self.field}.resources[{key}]"

    @cached_property
    def _sections(self) -> tuple[dict, dict]:
        res = _mapping(self.raw.get("resources"), f"{self.field}.resources")
        return (_mapping(res.get("limits"), f"{self.field}.resources.limits"),
                _mapping(res.get("requests"), f"{self.field}.resources.requests"))

    def resource_keys(self) -> list[str]:
        limits, requests = self._sections
        return list(dict.fromkeys([*limits, *requests]))

    def resource(self, key: str) -> str | None:
        """An extended resource's value: the limit, else the request. Kubernetes requires the two to be equal
        for extended resources; a webhook sees the pod before that check, so it is made here."""
        limits, requests = self._sections
        field = self.resource_field(key)
        limit = as_text(limits[key], field) if key in limits else None
        request = as_text(requests[key], field) if key in requests else None
        if limit is not None and request is not None and limit.strip() != request.strip():
            raise InputError(f"limit {show(limit)} and request {show(request)} differ", field=field,
                             allowed=["equal limit and request: extended resources cannot be overcommitted"])
        return limit if limit is not None else request

    @property
    def privileged(self) -> bool:
        ctx = self.raw.get("securityContext")
        return isinstance(ctx, dict) and ctx.get("privileged") is True


class PodView:
    """The parts of a pod that admission reads."""

    def __init__(self, pod: object):
        if not isinstance(pod, dict):
            raise InputError(f"{show(pod)} is not a pod object", field="object")
        meta = _mapping(pod.get("metadata"), "metadata")
        self.spec = _mapping(pod.get("spec"), "spec")
        self.annotations = _strings(meta.get("annotations"), "metadata.annotations")
        self.labels = _strings(meta.get("labels"), "metadata.labels")
        self.containers = self._containers()
        if not any(c.kind == "containers" for c in self.containers):
            raise InputError("a pod needs at least one container", field="spec.containers")

    def _containers(self) -> tuple[ContainerView, ...]:
        out: list[ContainerView] = []
        for kind in ("initContainers", "containers"):  # execution order
            items = self.spec.get(kind) or []
            if not isinstance(items, list):
                raise InputError(f"{show(items)} is not a list", field=f"spec.{kind}")
            for i, raw in enumerate(items):
                name = raw.get("name") if isinstance(raw, dict) else None
                if not isinstance(name, str) or not name:
                    raise InputError("a container needs a name", field=f"spec.{kind}[{i}].name")
                out.append(ContainerView(name, kind, i, raw))
        names = [c.name for c in out]
        for name in names:
            if names.count(name) > 1:
                raise InputError(f"container name {show(name)} is used twice", field="spec.containers")
        return tuple(out)

    def _string(self, key: str) -> str:
        value = self.spec.get(key) or ""
        if not isinstance(value, str):
            raise InputError(f"{show(value)} is not a string", field=f"spec.{key}")
        return value

    @property
    def scheduler_name(self) -> str:
        return self._string("schedulerName") or DEFAULT_SCHEDULER

    @property
    def node_name(self) -> str:
        return self._string("nodeName")

    def container(self, name: str) -> ContainerView | None:
        return next((c for c in self.containers if c.name == name), None)

    def meta(self, key: str) -> tuple[str, str] | None:
        """(value, field) of a key that may be a label (KubeShare 2.0) or an annotation (1.0's spelling)."""
        label, note = self.labels.get(key), self.annotations.get(key)
        if label is not None and note is not None and label != note:
            raise InputError(f"{show(label)} disagrees with {annotation_field(key)}={show(note)}",
                             field=label_field(key),
                             allowed=["one of the two, or equal values"])
        if label is not None:
            return label, label_field(key)
        return (note, annotation_field(key)) if note is not None else None

    def target(self) -> ContainerView:
        """The container that pod-level requests (fgpu's and KAI's annotations, KubeShare's labels) are for:
        `fgpu.io/container` or KAI's `gpu-fraction-container-name` (which may name an init container), else
        the first container."""
        ours, kai = self.annotations.get(keys.FGPU_CONTAINER), self.annotations.get(keys.KAI_CONTAINER)
        if ours is not None and kai is not None and ours != kai:
            raise InputError(f"{show(ours)} disagrees with {annotation_field(keys.KAI_CONTAINER)}={show(kai)}",
                             field=annotation_field(keys.FGPU_CONTAINER),
                             allowed=["one of the two, or equal values"])
        name, key = (ours, keys.FGPU_CONTAINER) if ours is not None else (kai, keys.KAI_CONTAINER)
        if name is None:
            return next(c for c in self.containers if c.kind == "containers")
        found = self.container(name)
        if found is None:
            raise InputError(f"the pod has no container {show(name)}", field=annotation_field(key),
                             allowed=[c.name for c in self.containers])
        return found
