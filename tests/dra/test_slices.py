"""ResourceSlices from the device model: the API's limits, one generation per pool, health as taints, and the
committed DeviceClasses equal to their generator. (tests/e2e/test_dra_slices.py has a 1.37 apiserver check
the same objects.)"""
from __future__ import annotations

from pathlib import Path

import yaml
from dra_support import NODE, node_config

from deviceplugin.dra.classes import device_classes, render
from deviceplugin.dra.devices import node_devices
from deviceplugin.dra.slices import resource_slices
from deviceplugin.labels import Health
from fgpu_contracts import dra as names

REPO = Path(__file__).resolve().parents[2]
BIG = """
version: v1
gpus:
  - model: A100-80GB
    count: 12
    sharing: fractional
fractional:
  resources:
    gpu: fgpu.io/vgpu
"""


def _all_devices(slices):
    return [d for s in slices for d in s["spec"].get("devices", [])]


def test_limits_and_pool_bookkeeping():
    devs = node_devices(node_config(BIG), NODE)
    slices = resource_slices(NODE, devs, {}, "pool-a", generation=7)
    counters = [s for s in slices if "sharedCounters" in s["spec"]]
    devices = [s for s in slices if "devices" in s["spec"]]
    assert [len(s["spec"]["sharedCounters"]) for s in counters] == [8, 4]  # 12 GPUs, 8 counter sets a slice
    assert all(len(s["spec"]["devices"]) <= 64 for s in devices)
    assert sum(len(s["spec"]["devices"]) for s in devices) == len(devs.devices)
    assert all("devices" not in s["spec"] for s in counters)
    assert {s["spec"]["pool"]["name"] for s in slices} == {NODE}
    assert {s["spec"]["pool"]["generation"] for s in slices} == {7}
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(slices)}
    assert len({s["metadata"]["name"] for s in slices}) == len(slices)
    for d in _all_devices(slices):
        assert len(d["consumesCounters"]) == 1
        assert len(d["attributes"]) + len(d["capacity"]) <= 32
        assert d["attributes"][names.ATTR_POOL] == {"string": "pool-a"}


def test_share_device_policy():
    devs = node_devices(node_config(), NODE)
    share = next(d for d in _all_devices(resource_slices(NODE, devs, {}, "p")) if d["name"] == "gpu-0-shared")
    assert share["allowMultipleAllocations"] is True
    mem = share["capacity"][names.CAP_MEMORY]
    assert mem["value"] == "80Gi"
    assert mem["requestPolicy"] == {"default": "80Gi", "validRange": {"min": "256Mi", "max": "80Gi", "step": "256Mi"}}
    sm = share["capacity"][names.CAP_SM_SHARE]
    assert sm["requestPolicy"]["validRange"] == {"min": "0", "max": "100", "step": "1"}
    whole = next(d for d in _all_devices(resource_slices(NODE, devs, {}, "p")) if d["name"] == "gpu-0")
    assert "allowMultipleAllocations" not in whole and "requestPolicy" not in whole["capacity"][names.CAP_MEMORY]


def test_unhealthy_gpu_taints_every_device_over_it():
    devs = node_devices(node_config(), NODE)
    gpu0 = devs.devices[0].gpu.uuid
    slices = resource_slices(NODE, devs, {gpu0: Health(False, 79)}, "p")
    tainted = {d["name"] for d in _all_devices(slices) if d.get("taints")}
    assert tainted == {d.name for d in devs.devices if d.gpu.uuid == gpu0}
    taint = next(d for d in _all_devices(slices) if d.get("taints"))["taints"]
    assert taint == [{"key": names.TAINT_UNHEALTHY, "value": "xid-79", "effect": "NoSchedule"}]
    # one MIG instance failing taints that instance only
    h100 = next(d for d in devs.devices if d.gpu.index == 3)
    slices = resource_slices(NODE, devs, {h100.uuid: Health(False, 48)}, "p")
    assert {d["name"] for d in _all_devices(slices) if d.get("taints")} == {h100.name}


def test_committed_device_classes_are_generated():
    assert (REPO / "deploy" / "dra" / "deviceclasses.yaml").read_text() == render()
    assert (REPO / "deploy" / "dra" / "extended-resource.yaml").read_text() == render(extended=True)
    classes = {c["metadata"]["name"]: c for c in device_classes()}
    assert {names.CLASS_GPU, names.CLASS_SHARE, names.CLASS_MIG, names.mig_class("1g.10gb")} <= set(classes)
    expr = classes[names.mig_class("3g.40gb")]["spec"]["selectors"][0]["cel"]["expression"]
    assert '"3g.40gb"' in expr and '"mig"' in expr and names.DRIVER in expr


def test_class_and_device_names_are_what_the_apiserver_accepts():
    """DeviceClass names are DNS subdomains ("+me" profiles included), device names DNS labels."""
    import re

    subdomain = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
    label = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
    assert all(subdomain.fullmatch(c["metadata"]["name"]) for c in device_classes())
    assert names.mig_class("1g.10gb+me") == "mig-1g.10gb-me.fgpu.io"
    devs = node_devices(node_config(BIG), NODE)
    assert all(label.fullmatch(d.name) and len(d.name) <= 63 for d in devs.devices)


def test_committed_examples_parse():
    for path in sorted((REPO / "deploy" / "dra").glob("*.yaml")):
        assert list(yaml.safe_load_all(path.read_text())), path


def test_slice_names_stay_valid_for_long_node_names():
    from deviceplugin.dra.slices import slice_name

    a, b = "n" * 240 + "a", "n" * 240 + "b"
    assert len(slice_name(a, "devices", 3)) <= 253 and slice_name(a, "devices", 3) != slice_name(b, "devices", 3)
    assert slice_name("node-1", "counters", 0) == "node-1-gpu.fgpu.io-counters-0"
