"""fgpu's DeviceClasses (pure): one for whole GPUs, one for shares, one for any MIG instance and one per MIG
profile simgpu knows, each a CEL selector on the driver and the device's kind (and profile); and, opt-in, the
class that serves a classic `nvidia.com/gpu: N` request with whole GPUs (KEP-5004's extendedResourceName).
deploy/dra/deviceclasses.yaml and deploy/dra/extended-resource.yaml are these rendered
(tests/dra/test_slices.py keeps them equal).

    python -m deviceplugin.dra.classes > deploy/dra/deviceclasses.yaml
    python -m deviceplugin.dra.classes --extended-resource > deploy/dra/extended-resource.yaml
"""
from __future__ import annotations

import sys

import yaml

from fgpu_contracts import dra as names
from fgpu_contracts.keys import GPU_RESOURCE
from simgpu import mig


def _selector(kind: str, profile: str | None = None) -> str:
    attrs = f'device.attributes["{names.DRIVER}"]'
    expr = f'device.driver == "{names.DRIVER}" && {attrs}.{names.ATTR_KIND} == "{kind}"'
    if profile is not None:
        expr += f' && {attrs}.{names.ATTR_MIG_PROFILE} == "{profile}"'
    return expr


def _device_class(name: str, kind: str, profile: str | None = None) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "fgpu"}},
        "spec": {"selectors": [{"cel": {"expression": _selector(kind, profile)}}]},
    }


def mig_profiles() -> list[str]:
    """Every MIG profile of every MIG-capable GPU simgpu emulates, in a stable order."""
    return sorted({p.name for gpu in mig.mig_gpus() for p in mig.profiles(gpu)})


def device_classes() -> list[dict]:
    out = [_device_class(names.CLASS_GPU, names.KIND_GPU),
           _device_class(names.CLASS_SHARE, names.KIND_SHARE),
           _device_class(names.CLASS_MIG, names.KIND_MIG)]
    out += [_device_class(names.mig_class(p), names.KIND_MIG, p) for p in mig_profiles()]
    return out


def extended_resource_class() -> dict:
    """Whole GPUs of fgpu-dra for a pod's `nvidia.com/gpu: N`: kube-scheduler writes the claim itself, on
    nodes whose allocatable does not list nvidia.com/gpu (where no device plugin runs)."""
    cls = _device_class(names.CLASS_EXTENDED, names.KIND_GPU)
    cls["spec"]["extendedResourceName"] = GPU_RESOURCE
    return cls


def render(extended: bool = False) -> str:
    if extended:
        header = ("# Opt-in (KEP-5004): classic `nvidia.com/gpu: N` pods get whole GPUs from fgpu-dra on nodes with no\n"
                  "# device plugin (generated: python -m deviceplugin.dra.classes --extended-resource; docs/dra.md)\n")
        return header + yaml.safe_dump_all([extended_resource_class()], sort_keys=False, explicit_start=True)
    header = ("# fgpu's DeviceClasses for DRA (generated: python -m deviceplugin.dra.classes; see docs/dra.md)\n")
    return header + yaml.safe_dump_all(device_classes(), sort_keys=False, explicit_start=True)


if __name__ == "__main__":
    sys.stdout.write(render(extended="--extended-resource" in sys.argv[1:]))
