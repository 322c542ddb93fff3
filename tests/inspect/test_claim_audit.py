"""The invariant checker on DRA allocations (`operator/inspect/claims.py`): fgpu-dra's slices and claims as
kube-scheduler writes them pass; the same silicon handed out twice, shares past a capacity, an unpublished
device or a share without its shareID are each one line naming the claims."""
from __future__ import annotations

import yaml
from fgpu_operator.inspect.audit import check
from fgpu_operator.inspect.claims import claim_violations

from deviceplugin.dra.devices import node_devices
from deviceplugin.dra.slices import resource_slices
from simgpu.nodeconfig import parse_node_config

NODE = "gpu-a"
CONFIG = """version: v1
gpus: [{model: A100-80GB, count: 2, sharing: fractional}]
fractional: {resources: {gpu: fgpu.io/vgpu}}
"""
SLICES = resource_slices(NODE, node_devices(parse_node_config(yaml.safe_load(CONFIG)), NODE), {}, "default")


def claim(name: str, device: str, memory: str | None = None, sm: str | None = None, share: str | None = "auto",
          pool: str = NODE) -> dict:
    result = {"request": "gpu", "driver": "gpu.fgpu.io", "pool": pool, "device": device}
    if memory is not None:
        result["shareID"] = f"share-{name}" if share == "auto" else share
        result["consumedCapacity"] = {"gpu.fgpu.io/memory": memory, "gpu.fgpu.io/smShare": sm}
        if result["shareID"] is None:
            del result["shareID"]
    return {"metadata": {"namespace": "ns", "name": name},
            "status": {"allocation": {"devices": {"results": [result]}}}}


def test_consistent_allocations_pass():
    claims = [claim("a", "gpu-0-shared", "8Gi", "30"), claim("b", "gpu-0-shared", "8Gi", "70"),
              claim("c", "gpu-1-mig-3g-40gb-4"), claim("d", "gpu-1-mig-4g-40gb-0"),
              {"metadata": {"namespace": "ns", "name": "pending"}, "status": {}}]
    assert claim_violations(SLICES, claims) == []


def test_shares_past_a_capacity():
    [line] = claim_violations(SLICES, [claim("a", "gpu-0-shared", "8Gi", "60"), claim("b", "gpu-0-shared", "8Gi", "50")])
    assert "gpu-0-shared" in line and "110 of gpu.fgpu.io/smShare" in line and "ns/a, ns/b" in line
    [line] = claim_violations(SLICES, [claim("a", "gpu-0-shared", "70Gi", "10"), claim("b", "gpu-0-shared", "20Gi", "10")])
    assert "of gpu.fgpu.io/memory" in line


def test_the_same_silicon_twice():
    [line] = claim_violations(SLICES, [claim("a", "gpu-0"), claim("b", "gpu-0")])
    assert line.startswith("device gpu-0 of pool gpu-a (gpu.fgpu.io) is allocated to 2 claims: ns/a, ns/b")
    # a whole GPU beside a share of it, a MIG instance overlapping another: the counters say so
    [line] = claim_violations(SLICES, [claim("a", "gpu-0"), claim("b", "gpu-0-shared", "1Gi", "1")])
    assert "counter gpu-0/" in line and "gpu-0 (ns/a)" in line and "gpu-0-shared (ns/b)" in line
    [line] = claim_violations(SLICES, [claim("a", "gpu-1-mig-4g-40gb-0"), claim("b", "gpu-1-mig-1g-10gb-3")])
    assert "counter gpu-1/" in line


def test_unpublished_device_and_missing_share_id():
    lines = claim_violations(SLICES, [claim("a", "gpu-7"), claim("b", "gpu-0", pool="other"),
                                      claim("c", "gpu-0-shared", "1Gi", "1", share=None)])
    assert len(lines) == 3
    assert lines[0] == "claim ns/a: device gpu-7 of pool gpu-a (gpu.fgpu.io) is not published in any ResourceSlice"
    assert "pool other" in lines[1] and "no shareID" in lines[2]


def test_only_the_newest_generation_counts():
    old = [dict(s, spec=dict(s["spec"], pool=dict(s["spec"]["pool"], generation=1))) for s in SLICES]
    new = [dict(s, spec=dict(s["spec"], pool=dict(s["spec"]["pool"], generation=2),
                             devices=[d for d in s["spec"].get("devices", []) if d["name"] != "gpu-1"]))
           if "devices" in s["spec"] else dict(s, spec=dict(s["spec"], pool=dict(s["spec"]["pool"], generation=2)))
           for s in SLICES]
    [line] = claim_violations(old + new, [claim("a", "gpu-1")])
    assert "not published" in line


def test_check_reports_claim_violations_beside_the_rest():
    report = check([], [], slices=SLICES, claims=[claim("a", "gpu-0"), claim("b", "gpu-0")])
    assert not report.ok and any("allocated to 2 claims" in v for v in report.violations)


def test_one_allocator_per_device():
    """fgpu-scheduler's pool (fgpu-dra --allocator fgpu-scheduler) serves its pods only, and its pods only it."""
    owned = resource_slices(NODE, node_devices(parse_node_config(yaml.safe_load(CONFIG)), NODE), {}, "default",
                            allocator="fgpu-scheduler")

    def reserved(c: dict, uid: str) -> dict:
        c["status"]["reservedFor"] = [{"resource": "pods", "name": uid, "uid": uid}]
        return c

    pods = [{"metadata": {"namespace": "ns", "name": n, "uid": n}, "spec": {"schedulerName": s}}
            for n, s in (("mine", "fgpu-scheduler"), ("kube", "default-scheduler"))]
    mine, kube = reserved(claim("a", "gpu-0-shared", "8Gi", "30"), "mine"), reserved(claim("b", "gpu-1"), "kube")
    [line] = claim_violations(owned, [mine, kube], pods)
    assert line == ("claim ns/b: device gpu-1 of pool gpu-a (gpu.fgpu.io) is fgpu-scheduler's "
                    "(gpu.fgpu.io/allocator) but reserved for pod ns/kube of default-scheduler")
    [line] = claim_violations(SLICES, [mine, kube], pods)
    assert "ns/a: device gpu-0-shared" in line and "reserved for pod ns/mine of fgpu-scheduler" in line
    assert claim_violations(owned, [mine], pods) == [] and claim_violations(SLICES, [kube], pods) == []
