"""The chart's `dra` block (docs/dra.md): `dra.enabled` runs fgpu-dra instead of the device plugin on every node
pool that does not opt out (`nodePools[].dra: false` keeps the device plugin beside it), installs the DeviceClasses
from deploy/dra (their one home) and the driver's RBAC; the rendered driver arguments are ones fgpu-dra accepts."""
from __future__ import annotations

import pytest
import yaml
from helmchart import CHART, ROOT, find, helm, helm_available, one, render

from deviceplugin.dra.cli import build_parser
from fgpu_contracts import dra as names

pytestmark = pytest.mark.skipif(not helm_available(), reason="helm from the testbin (FGPU_TESTBIN)")
TWO_POOLS = ["--set", "nodePools[0].name=dra-pool", "--set", "nodePools[0].config.version=v1",
             "--set", "nodePools[0].config.gpus[0].model=A100-80GB",
             "--set", "nodePools[1].name=classic", "--set", "nodePools[1].dra=false",
             "--set", "nodePools[1].config.version=v1", "--set", "nodePools[1].config.gpus[0].model=T4"]


def _containers(ds: dict) -> dict[str, dict]:
    return {c["name"]: c for c in ds["spec"]["template"]["spec"]["containers"]}


def test_off_by_default_nothing_of_dra():
    objects = render()
    assert not find(objects, "DeviceClass")
    assert set(_containers(one(objects, "DaemonSet", "fgpu-node-default"))) == {"device-plugin", "daemon"}
    node_rules = one(objects, "ClusterRole", "fgpu-node")["rules"]
    assert not [r for r in node_rules if "resource.k8s.io" in r["apiGroups"]]


def test_enabled_runs_the_driver_per_pool_instead_of_the_device_plugin_or_beside_it():
    objects = render("--set", "dra.enabled=true", "--set", f"dra.allocator={names.ALLOCATOR_FGPU}", *TWO_POOLS)
    dra_ds, classic = one(objects, "DaemonSet", "fgpu-node-dra-pool"), one(objects, "DaemonSet", "fgpu-node-classic")
    assert set(_containers(dra_ds)) == {"dra-driver", "daemon"}
    assert set(_containers(classic)) == {"device-plugin", "daemon"}
    driver = _containers(dra_ds)["dra-driver"]
    args = build_parser().parse_args(driver["args"])
    assert (args.pool, args.allocator, args.cdi_dir) == ("dra-pool", names.ALLOCATOR_FGPU, "/var/run/cdi")
    assert args.registry_dir == "/var/lib/kubelet/plugins_registry" and args.plugins_dir == "/var/lib/kubelet/plugins"
    volumes = {v["name"]: v for v in dra_ds["spec"]["template"]["spec"]["volumes"]}
    mounted = {m["name"] for m in driver["volumeMounts"]}
    assert {"cdi", "plugins-registry", "plugins", "socket-dir", "state"} <= mounted <= set(volumes)
    assert "device-plugins" not in volumes and "handoff-key" not in volumes
    committed = [d for d in yaml.safe_load_all((ROOT / "deploy" / "dra" / "deviceclasses.yaml").read_text()) if d]
    rendered = find(objects, "DeviceClass")
    # the committed classes, with the release's labels added (as every object of the chart carries them)
    assert [d["metadata"]["labels"]["app.kubernetes.io/instance"] for d in rendered] == ["fgpu"] * len(committed)
    for d in rendered:
        d["metadata"]["labels"] = {k: v for k, v in d["metadata"]["labels"].items()
                                   if k == "app.kubernetes.io/part-of"}
    assert rendered == committed
    rules = one(objects, "ClusterRole", "fgpu-node")["rules"]
    slices = next(r for r in rules if r["resources"] == ["resourceslices"])
    assert {"create", "update", "delete"} <= set(slices["verbs"])
    assert {"get"} <= set(next(r for r in rules if r["resources"] == ["resourceclaims"])["verbs"])


def test_the_extended_resource_class_only_when_asked():
    with_it = render("--set", "dra.enabled=true", "--set", "dra.extendedResource=true")
    extended = one(with_it, "DeviceClass", names.CLASS_EXTENDED)
    assert extended["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert not find(render("--set", "dra.enabled=true"), "DeviceClass", names.CLASS_EXTENDED)


def test_a_dra_pool_needs_dra_enabled_and_the_allocator_is_checked(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"nodePools": [
        {"name": "default", "dra": True, "config": {"version": "v1", "gpus": [{"model": "T4"}]}}]}))
    out = helm("template", "fgpu", str(CHART), "-f", str(values), check=False)
    assert out.returncode != 0
    assert "nodePools[default].dra: true needs dra.enabled: true" in out.stderr
    out = helm("template", "fgpu", str(CHART), "--set", "dra.allocator=volcano", check=False)
    assert out.returncode != 0 and "at '/dra/allocator': value must be one of 'kube-scheduler'" in out.stderr

