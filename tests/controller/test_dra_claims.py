"""fgpu-scheduler allocating DRA claims (operator/controller/claims.py, the scheduler's PreBind): claims onto the
canonical request, fgpu-dra's slices onto the core's GPUs, the decision as status.allocation, read back after a
restart; a fake API that keeps the claims."""
from __future__ import annotations

import asyncio
import copy
import itertools

import pytest
from dra_support import node_config
from fgpu_operator.controller import claims, translate
from fgpu_operator.controller.scheduler import Scheduler
from fgpu_operator.inspect.claims import claim_violations
from fgpu_operator.kube.outcome import Outcome, Result
from fgpu_operator.placement.filters import node_matches
from fgpu_operator.placement.live import LiveCluster
from fgpu_operator.placement.model import Request
from scheduler_fakes import FakeEvents

from deviceplugin.dra.devices import node_devices
from deviceplugin.dra.slices import resource_slices
from fgpu_contracts import dra as names
from fgpu_contracts import keys
from fgpu_contracts.errors import InputError

GIB = 1 << 30
TWO_A100 = """
version: v1
gpus:
  - {model: A100-80GB, count: 2, sharing: fractional}
  - {model: H100, mig: {layout: [4g.40gb, 3g.40gb]}}
"""


def slices(node: str, allocator: str = names.ALLOCATOR_FGPU) -> list[dict]:
    return resource_slices(node, node_devices(node_config(TWO_A100), node), {}, "default", allocator=allocator)


def claim(name: str, cls: str = names.CLASS_SHARE, caps: dict | None = None, **exactly) -> dict:
    req = {"deviceClassName": cls, **exactly}
    if caps is not None:
        req["capacity"] = {"requests": caps}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": req}]}}}


def claimed_pod(name: str, claim_name: str | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {"schedulerName": keys.SCHEDULER_NAME,
                     "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
                     "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}]},
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": claim_name}]
                       if claim_name else []}}


def share(mem="8Gi", sm="30"):
    return {names.CAP_MEMORY: mem, names.CAP_SM_SHARE: sm}


def test_a_pool_is_placed_on_only_when_fgpu_scheduler_owns_it():
    pool = claims.dra_pool("n", slices("n"))
    assert pool.owned and pool.pool == "n"
    a100s, h100 = pool.gpus[:2], pool.gpus[2]
    assert [(g.info.model, g.info.mem_mib, g.info.sharing, g.whole, g.shared) for g in a100s] == [
        ("A100-SXM4-80GB", 80 * 1024, "fractional", "gpu-0", "gpu-0-shared"),
        ("A100-SXM4-80GB", 80 * 1024, "fractional", "gpu-1", "gpu-1-shared")]
    assert not a100s[0].info.mig and not a100s[0].mig  # a fractional GPU's MIG placements are no instances
    assert sorted(s.profile for s in h100.info.mig) == ["3g.40gb", "4g.40gb"] and not h100.whole
    assert not claims.dra_pool("n", slices("n", names.ALLOCATOR_KUBE)).owned
    assert claims.dra_pool("other", slices("n")) is None


@pytest.mark.parametrize(("caps", "mem", "milli", "sm"), [
    (share(), 8 * GIB, 300, 30),
    (share("1000Mi", "12.5"), 1024 << 20, 130, 13),  # the request policy's steps: 256Mi, whole percent
    ({names.CAP_MEMORY: "8Gi"}, 8 * GIB, 1, None),  # no SM share: none reserved, not throttled
])
def test_a_share_claim_is_the_canonical_share(caps, mem, milli, sm):
    plan = claims.claim_plan(claimed_pod("p", "c"), {("ns", "c"): claim("c", caps=caps)})
    (c,) = plan.gpu_request.containers
    assert (plan.kind, plan.claim, plan.request, c.container) == (names.KIND_SHARE, "c", "gpu", "main")
    assert (c.mem_bytes, c.milli_gpu, c.sm_pct, plan.mem_bytes) == (mem, milli, sm, mem)


def test_whole_and_mig_classes():
    whole = claims.claim_plan(claimed_pod("p", "c"), {("ns", "c"): claim("c", names.CLASS_GPU, count=2)})
    assert (whole.kind, whole.gpu_request.containers[0].count, whole.gpu_request.containers[0].is_share) == (
        names.KIND_GPU, 2, False)
    mig = claims.claim_plan(claimed_pod("p", "c"), {("ns", "c"): claim("c", names.mig_class("1g.10gb+me"))})
    assert (mig.kind, mig.gpu_request.containers[0].mig_profile) == (names.KIND_MIG, "1g.10gb+me")


def test_claims_not_created_yet_wait():
    with pytest.raises(claims.ClaimsNotReady):
        claims.claim_plan(claimed_pod("p"), {})
    with pytest.raises(claims.ClaimsNotReady):
        claims.claim_plan(claimed_pod("p", "c"), {})


@pytest.mark.parametrize(("obj", "said"), [
    (claim("c", "gpu.nvidia.com"), "device class 'gpu.nvidia.com': fgpu-scheduler allocates gpu.fgpu.io's"),
    (claim("c", selectors=[{"cel": {"expression": "true"}}]), "exactly.selectors: selectors is not evaluated"),
    (claim("c", caps=share(sm="150")), "'150'; allowed: 0 to 100"),
    (claim("c", caps={"gpu.fgpu.io/cores": "3"}), "capacity 'gpu.fgpu.io/cores'; allowed"),
    (claim("c", names.CLASS_MIG), "names no MIG profile"),
    (claim("c", allocationMode="All"), "allocationMode 'All'; allowed: ExactCount"),
])
def test_what_fgpu_scheduler_does_not_allocate_is_said_in_one_line(obj, said):
    with pytest.raises(InputError) as err:
        claims.claim_plan(claimed_pod("p", "c"), {("ns", "c"): obj})
    assert said in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("ResourceClaim ns/c spec.devices.requests[gpu]")


class ClaimApi:
    """Keeps claims; merge-patches metadata and status like the apiserver (a resourceVersion or uid given is a
    precondition)."""

    def __init__(self, objs: dict[str, dict]):
        self.claims, self.calls, self.rv = objs, [], itertools.count(2)

    async def request(self, method, path, **kw):
        body = copy.deepcopy(kw.get("body"))
        self.calls.append((method, path, body))
        if "/resourceclaims/" not in path:
            return Outcome(Result.OK, 201)
        name = path.split("/resourceclaims/")[1].split("/")[0]
        obj = self.claims[name]
        pre = body["metadata"]
        if ("resourceVersion" in pre or "uid" not in pre) and pre.get("resourceVersion") != obj["metadata"][
                "resourceVersion"] or "uid" in pre and pre["uid"] != obj["metadata"].get("uid"):
            return Outcome(Result.CONFLICT, 409, "the object has been modified")
        if path.endswith("/status"):
            obj.setdefault("status", {}).update(body["status"])
        elif "strategic" in kw.get("content_type", ""):  # finalizers: a merge list
            have = obj["metadata"].setdefault("finalizers", [])
            have += [f for f in body["metadata"]["finalizers"] if f not in have]
        else:
            obj["metadata"]["finalizers"] = body["metadata"]["finalizers"]
        obj["metadata"]["resourceVersion"] = str(next(self.rv))
        return Outcome(Result.OK, 200, body=copy.deepcopy(obj))


def _scheduler(api, policy="fgd", node: str = "n", allocator: str = names.ALLOCATOR_FGPU) -> Scheduler:
    """A scheduler that knows one node and its fgpu-dra slices."""
    s = Scheduler(LiveCluster(policy=policy), api, FakeEvents())
    share_ids = itertools.count()
    s.new_share_id = lambda: f"00000000-0000-0000-0000-{next(share_ids):012d}"
    for sl in slices(node, allocator):
        s.on_resourceslice("ADDED", sl)
    s.on_node("ADDED", _node(node))
    return s


def _node(name: str) -> dict:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}}}


def test_two_shares_on_one_gpu_written_before_the_binding_and_learnt_back_after_a_restart():
    async def scenario():
        objs = {f"c{i}": claim(f"c{i}", caps=share("8Gi", "30")) for i in range(2)}
        objs["big"] = claim("big", caps=share("70Gi", "10"))
        objs["big2"] = claim("big2", caps=share("70Gi", "10"))
        api = ClaimApi(objs)
        s = _scheduler(api)
        loop = asyncio.create_task(s.run())
        s.on_pod("ADDED", claimed_pod("p0"))  # its claim is not made yet: waits, says nothing
        await asyncio.sleep(0.02)
        assert "p0" in s.parked and not api.calls
        for c in ("c0", "c1"):
            s.on_resourceclaim("ADDED", objs[c])
        s.on_pod("MODIFIED", claimed_pod("p0", "c0"))
        s.on_pod("ADDED", claimed_pod("p1", "c1"))
        await asyncio.sleep(0.05)
        await s.drain()
        paths = [(m, p.rsplit("/", 2)[-2:]) for m, p, _ in api.calls]
        assert sorted(paths) == sorted([("PATCH", ["resourceclaims", "c0"]), ("PATCH", ["c0", "status"]),
                                        ("POST", ["p0", "binding"]), ("PATCH", ["resourceclaims", "c1"]),
                                        ("PATCH", ["c1", "status"]), ("POST", ["p1", "binding"])])
        for i in range(2):  # a fresh claim's finalizer and status go out together, both before the pod's Binding
            bind = paths.index(("POST", [f"p{i}", "binding"]))
            assert max(paths.index(("PATCH", ["resourceclaims", f"c{i}"])),
                       paths.index(("PATCH", [f"c{i}", "status"]))) < bind
        results = [objs[c]["status"]["allocation"]["devices"]["results"][0] for c in ("c0", "c1")]
        assert {r["device"] for r in results} == {"gpu-0-shared"}  # fgd packs the second onto the first's GPU
        assert results[0]["shareID"] != results[1]["shareID"]
        assert results[0]["consumedCapacity"] == {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "30"}
        assert objs["c0"]["status"]["reservedFor"] == [{"resource": "pods", "name": "p0", "uid": "p0"}]
        assert objs["c0"]["metadata"]["finalizers"] == [names.DELETE_PROTECTION]
        assert objs["c0"]["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0][
            "values"] == ["n"]
        binding = next(b for m, p, b in api.calls if p.endswith("p0/binding"))
        assert binding["target"]["name"] == "n" and keys.ASSIGNMENT not in binding["metadata"]["annotations"]
        assert claim_violations(slices("n"), objs.values()) == []
        loop.cancel()

        # a fresh scheduler learns both shares back from the claims: of two 70Gi shares, one fits (the other GPU)
        s2 = _scheduler(api)
        loop = asyncio.create_task(s2.run())
        for c in objs.values():
            s2.on_resourceclaim("ADDED", c)
        for i in range(2):
            bound = claimed_pod(f"p{i}", f"c{i}")
            bound["spec"]["nodeName"] = "n"
            s2.on_pod("ADDED", bound)
        s2.on_pod("ADDED", claimed_pod("p2", "big"))
        s2.on_pod("ADDED", claimed_pod("p3", "big2"))
        await asyncio.sleep(0.05)
        await s2.drain()
        assert objs["big"]["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-1-shared"
        assert "status" not in objs["big2"] and "p3" in s2.parked
        assert claim_violations(slices("n"), objs.values()) == []
        loop.cancel()

    asyncio.run(scenario())


def test_an_allocated_claim_keeps_its_devices_when_the_binding_is_retried():
    """Allocated, then the process died before the Binding: the pod is bound where its claim is, not again."""
    async def scenario():
        objs = {"c0": claim("c0", caps=share())}
        api = ClaimApi(objs)
        s = _scheduler(api)
        done = copy.deepcopy(objs["c0"])
        done["metadata"]["finalizers"] = [names.DELETE_PROTECTION]
        done["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": names.DRIVER, "pool": "n", "device": "gpu-1-shared",
             "shareID": "00000000-0000-0000-0000-000000000009",
             "consumedCapacity": {names.CAP_MEMORY: "8Gi", names.CAP_SM_SHARE: "30"}}]}},
            "reservedFor": [{"resource": "pods", "name": "p0", "uid": "p0"}]}
        objs["c0"] = done
        s.on_resourceclaim("ADDED", done)
        loop = asyncio.create_task(s.run())
        s.on_pod("ADDED", claimed_pod("p0", "c0"))
        await asyncio.sleep(0.05)
        await s.drain()
        assert [p.rsplit("/", 1)[-1] for _, p, _ in api.calls] == ["binding"]
        assert s.live.allocations["p0"].gpus == (claims.dra_pool("n", slices("n")).gpus[1].info.uuid,)
        loop.cancel()

    asyncio.run(scenario())


def test_claims_go_only_to_fgpu_owned_pools_and_annotated_gpu_pods_never_there():
    async def scenario():
        objs = {"c0": claim("c0", caps=share())}
        api = ClaimApi(objs)
        s = _scheduler(api, "binpack", "kube", names.ALLOCATOR_KUBE)
        s.on_resourceclaim("ADDED", objs["c0"])
        loop = asyncio.create_task(s.run())
        s.on_pod("ADDED", claimed_pod("p0", "c0"))
        await asyncio.sleep(0.05)
        await s.drain()
        assert not [c for c in api.calls if "resourceclaims" in c[1] or c[1].endswith("binding")]
        assert "p0" in s.parked
        loop.cancel()

    asyncio.run(scenario())
    dra_node = claims.with_pool(translate.node_spec(_node("n")), claims.dra_pool("n", slices("n")))
    assert claims.DRA_LABEL in dra_node.labels and len(dra_node.gpus) == 3
    annotated = claims.kept_apart(Request("ns/a", 100, num_gpu=1, gpu_milli=500), claimed=False)
    plain = Request("ns/cpu", 100)
    c = annotated.constraints
    assert not node_matches(dra_node, c.node_selector, c.affinity_terms)
    assert node_matches(translate.node_spec(_node("m")), c.node_selector, c.affinity_terms)
    assert claims.kept_apart(plain, claimed=False) is plain
