"""fgpu's own namespace on a pod: every `fgpu.io/` annotation, label and container resource must be one fgpu
knows (fgpu_contracts.keys), because fgpu is the only reader of that namespace and an unknown key there is a
typo that would otherwise be ignored: `fgpu.io/gpu-memroy: 8Gi` gave a pod the default share, not 8 GiB.
Refused with the closest known key. (`examples.fgpu.io/...` and other subdomains are not fgpu's keys.)
"""
from __future__ import annotations

import difflib

from fgpu_contracts import keys
from fgpu_contracts.errors import InputError

from .config import AdmissionConfig
from .podview import PodView, annotation_field, label_field

_PREFIX = f"{keys.GROUP}/"


def _closest(key: str, known: tuple[str, ...]) -> str | None:
    """The known key most like `key`, compared without the shared `fgpu.io/` (which would make every key
    look alike)."""
    names = {k.removeprefix(_PREFIX): k for k in known}
    found = difflib.get_close_matches(key.removeprefix(_PREFIX), list(names), n=1, cutoff=0.6)
    return names[found[0]] if found else None


def _refuse(kind: str, key: str, field: str, known: tuple[str, ...], elsewhere: dict[str, str]) -> None:
    """`elsewhere`: known keys of another kind (an annotation written as a label) -> that kind."""
    if key in elsewhere:
        raise InputError(f"{key} is an {elsewhere[key]}, not a {kind}", field=field,
                         allowed=[f"metadata.annotations[{key}]"])
    hint = _closest(key, known)
    other = None if hint else _closest(key, tuple(elsewhere))
    suggestion = f"; did you mean {hint}?" if hint else (f"; did you mean the {elsewhere[other]} {other}?"
                                                          if other else "")
    raise InputError(f"unknown {kind} {key}{suggestion}", field=field,
                     allowed=None if hint or other else (list(known) or [f"no {kind} under {_PREFIX}"]))


def refuse_unknown_keys(view: PodView, config: AdmissionConfig) -> None:
    """One line for the first unknown `fgpu.io/` key: its field, and the known key it most likely meant."""
    annotations = {k: "annotation" for k in keys.POD_ANNOTATIONS}
    for key in view.annotations:
        if key.startswith(_PREFIX) and key not in annotations:
            _refuse("annotation", key, annotation_field(key), keys.POD_ANNOTATIONS, {})
    for key in view.labels:
        if key.startswith(_PREFIX) and key not in keys.POD_LABELS:
            _refuse("label", key, label_field(key), keys.POD_LABELS, annotations)
    resources = tuple(name for name in config.resources.model_dump().values() if name.startswith(_PREFIX))
    for c in view.containers:
        for key in c.resource_keys():
            if key.startswith(_PREFIX) and key not in resources:
                _refuse("resource", key, c.resource_field(key), resources, annotations)
