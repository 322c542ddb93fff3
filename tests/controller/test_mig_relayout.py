"""Dynamic MIG through the scheduler over a fake API: a 3g.40gb pod on an all-1g.10gb idle GPU waits for a
re-layout (status.migChanges written, the destroyed instances unavailable, the new one held), and is bound to
the real instance once the node reports Done; a busy instance in the way is named; a node's Failed report
parks the pod with the node's reason until capacity changes; a new leader adopts a change from the GPUNode and finishes it."""
import asyncio
import copy
import json

from fgpu_operator.controller.gpunodes import StatusWriter
from fgpu_operator.controller.scheduler import Scheduler
from fgpu_operator.placement.live import LiveCluster
from scheduler_fakes import FakeApi, FakeEvents

from fgpu_contracts import keys
from fgpu_contracts.inventory import GpuInfo, Inventory, MigDevice, gpunode
from fgpu_contracts.request import ContainerRequest, GpuRequest, dump_request
from simgpu import mig
from simgpu.catalog import get_gpu

MODEL = "A100-SXM4-80GB"


def layout_gpu(node: str, k: int, layout: list[tuple[str, int]], report: dict | None = None) -> GpuInfo:
    spec = get_gpu(MODEL)
    inst = tuple(MigDevice(uuid=f"MIG-{node}-{k}-{p}-{s}", profile=p, start=s,
                           mem_bytes=mig.get_profile(spec, p).mem_bytes, sms=mig.get_profile(spec, p).sms)
                 for p, s in layout)
    return GpuInfo(index=k, uuid=f"GPU-{node}-{k}", model=spec.name, short_name=spec.short_name,
                   mem_bytes=spec.mem_bytes, sms=spec.sms, sharing="exclusive", replicas=1, mig=inst,
                   mig_dynamic=True, mig_change=report)


def gpunode_obj(node: str, gpus: list[GpuInfo], status: dict | None = None) -> dict:
    inv = Inventory(node=node, mig_strategy="mixed", memory_quota="hard", time_dilation=1.0, resources={},
                    node_resources={}, gpus=tuple(gpus))
    doc = gpunode(inv).model_dump(mode="json", by_alias=True, exclude_none=True)
    if status is not None:
        doc["status"] = status
    return doc


def node_obj(name: str) -> dict:
    """A node whose kubelet advertises the all-1g layout's instances (none of the profiles asked for below)."""
    return {"metadata": {"name": name, "annotations": {}},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/mig-1g.10gb": "7"}}}


def mig_pod(name: str, profile: str = "3g.40gb") -> dict:
    req = GpuRequest(containers=[ContainerRequest(container="main", mig_profile=profile)])
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "annotations": {keys.REQUEST: dump_request(req)}},
            "spec": {"schedulerName": keys.SCHEDULER_NAME, "containers": [
                {"name": "main", "resources": {"limits": {f"nvidia.com/mig-{profile}": "1"}}}]}}


ALL_1G = [("1g.10gb", s) for s in range(7)]


def bound_device(api: FakeApi, pod: str) -> str | None:
    for _, path, body in api.calls:
        if path == f"/api/v1/namespaces/ns/pods/{pod}/binding":
            return json.loads(body["metadata"]["annotations"][keys.ASSIGNMENT])["containers"][0]["devices"][0]["uuid"]
    return None


def start(s: Scheduler, gpus: list[GpuInfo], status: dict | None = None) -> None:
    s.on_gpunode("ADDED", gpunode_obj("n", gpus, status))
    s.on_node("ADDED", node_obj("n"))


def test_a_3g_pod_on_an_all_1g_idle_gpu_binds_to_the_new_instance_after_the_node_reports_done():
    async def scenario():
        api, events = FakeApi(), FakeEvents()
        s = Scheduler(LiveCluster(policy="binpack"), api, events)
        loop = asyncio.create_task(s.run())
        s.metrics.attach(s, "replica", lambda: True)
        start(s, [layout_gpu("n", 0, ALL_1G)])
        s.on_pod("ADDED", mig_pod("big"))
        await asyncio.sleep(0.05)
        gauge = 'fgpu_mig_reconfiguration_in_progress{device_uuid="GPU-n-0",node="n"}'
        assert f"{gauge} 1" in s.metrics.exposition().decode()
        (change,) = s.mig.status_rows("n")
        assert change["phase"] == "Pending" and change["pods"] == ["ns/big"] and change["podUids"] == ["big"]
        assert sorted((p["profile"], p["start"]) for p in change["layout"]) == [
            ("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)]
        assert change["targets"] == [{"profile": "3g.40gb", "start": 4}]
        reasons = [r for name, r, _ in events.messages if name == "big"]
        assert reasons == ["MigReconfiguring"], events.messages
        status = [c for c in api.calls if c[1] == "/api/v1/namespaces/ns/pods/big/status"]
        assert status and status[-1][2]["status"]["conditions"][0]["reason"] == "MigReconfiguring"
        assert bound_device(api, "big") is None
        # meanwhile the destroyed instances are gone from the model: a 1g pod takes a kept one, never 4-6
        s.on_pod("ADDED", mig_pod("small", "1g.10gb"))
        await asyncio.sleep(0.05)
        await s.drain()
        assert bound_device(api, "small") in {f"MIG-n-0-1g.10gb-{k}" for k in range(4)}
        # the node takes it up, then reports it done with the new instance
        s.on_gpunode("MODIFIED", gpunode_obj("n", [layout_gpu("n", 0, ALL_1G, {"id": change["id"],
                                                                               "phase": "Applying"})]))
        assert s.mig.status_rows("n")[0]["phase"] == "Applying"
        new = ALL_1G[:4] + [("3g.40gb", 4)]
        s.on_gpunode("MODIFIED", gpunode_obj("n", [layout_gpu("n", 0, new, {"id": change["id"], "phase": "Done"})]))
        await asyncio.sleep(0.05)
        await s.drain()
        assert bound_device(api, "big") == "MIG-n-0-3g.40gb-4"
        assert s.mig.status_rows("n")[0]["phase"] == "Done"
        assert s.live.violations() == [] and not s.mig.in_flight()
        text = s.metrics.exposition().decode()
        assert 'fgpu_mig_reconfigurations_total{result="done"} 1.0' in text
        assert "fgpu_mig_reconfiguration_seconds_count 1.0" in text and f"{gauge} 0" in text
        loop.cancel()

    asyncio.run(scenario())


def test_a_busy_instance_in_the_way_is_named_in_the_pending_reason():
    async def scenario():
        api, events = FakeApi(), FakeEvents()
        s = Scheduler(LiveCluster(policy="binpack"), api, events)
        loop = asyncio.create_task(s.run())
        # 4g.40gb fits only at slice 0 (and 3g at 0 or 4): busy 1g at 3 blocks a 4g; no 4g is possible elsewhere
        start(s, [layout_gpu("n", 0, [("1g.10gb", 3), ("3g.40gb", 4)])])
        s.on_pod("ADDED", mig_pod("one", "1g.10gb"))
        await asyncio.sleep(0.05)
        await s.drain()
        assert bound_device(api, "one") == "MIG-n-0-1g.10gb-3"
        s.on_pod("ADDED", mig_pod("four", "4g.40gb"))
        await asyncio.sleep(0.05)
        ((_, reason, message),) = [m for m in events.messages if m[0] == "four"]
        assert reason == "FailedScheduling"
        assert "busy instance 1g.10gb@3 blocks 4g.40gb" in message and "GPU-n-0" in message, message
        assert not s.mig.in_flight()
        loop.cancel()

    asyncio.run(scenario())


def test_a_failed_change_releases_the_hold_and_the_pod_is_decided_again():
    async def scenario():
        api, events = FakeApi(), FakeEvents()
        s = Scheduler(LiveCluster(policy="binpack"), api, events)
        loop = asyncio.create_task(s.run())
        start(s, [layout_gpu("n", 0, ALL_1G)])
        s.on_pod("ADDED", mig_pod("big"))
        await asyncio.sleep(0.05)
        first = s.mig.status_rows("n")[0]["id"]
        s.on_gpunode("MODIFIED", gpunode_obj("n", [layout_gpu("n", 0, ALL_1G, {
            "id": first, "phase": "Failed", "message": "instance 1g.10gb@5 has a live context"})]))
        await asyncio.sleep(0.05)
        (row,) = s.mig.status_rows("n")
        assert row["id"] == first and row["phase"] == "Failed"  # no new change in a loop
        assert "big" in s.parked and not s.mig.in_flight()
        (_, _, said) = [m for m in events.messages if m[0] == "big"][-1]
        assert f"re-layout {first} of GPU GPU-n-0 on node n failed: instance 1g.10gb@5 has a live context" in said
        assert 'fgpu_mig_reconfigurations_total{result="failed"} 1.0' in s.metrics.exposition().decode()
        assert s.live.violations() == []
        # capacity changes (a node update): it is decided again, with a new change
        s.on_node("MODIFIED", {**node_obj("n"), "metadata": {"name": "n", "annotations": {}, "labels": {"x": "y"}}})
        await asyncio.sleep(0.05)
        assert s.mig.status_rows("n")[0]["id"] != first
        loop.cancel()

    asyncio.run(scenario())


def test_a_new_leader_adopts_the_change_from_the_gpunode_holds_the_instance_and_binds_on_done():
    async def scenario():
        api, events = FakeApi(), FakeEvents()
        old = Scheduler(LiveCluster(policy="binpack"), api, events)
        start(old, [layout_gpu("n", 0, ALL_1G)])
        old.on_pod("ADDED", mig_pod("big"))
        loop = asyncio.create_task(old.run())
        await asyncio.sleep(0.05)
        loop.cancel()  # the old leader dies here: what it wrote to the GPUNode stays
        writer = StatusWriter(api, old.held, old.live.specs.get, lambda: True, mig_changes=old.mig.status_rows)
        writer.seen("n", True)
        await writer.flush()
        (patch,) = [c[2] for c in api.calls if c[1].endswith("/gpunodes/n/status")]
        status = copy.deepcopy(patch["status"])
        new_api, new_events = FakeApi(), FakeEvents()
        s = Scheduler(LiveCluster(policy="binpack"), new_api, new_events)
        loop = asyncio.create_task(s.run())
        start(s, [layout_gpu("n", 0, ALL_1G)], status)
        assert [c.phase for c in s.mig.in_flight()] == ["Pending"]
        # before the pod is seen, no one else may take the new instance or a destroyed one
        s.on_pod("ADDED", mig_pod("other", "3g.40gb"))
        await asyncio.sleep(0.05)
        assert bound_device(new_api, "other") is None
        s.on_pod("ADDED", mig_pod("big"))
        await asyncio.sleep(0.05)
        assert [r for n, r, _ in new_events.messages if n == "big"] == ["MigReconfiguring"]
        change_id = status["migChanges"][0]["id"]
        new = ALL_1G[:4] + [("3g.40gb", 4)]
        s.on_gpunode("MODIFIED", gpunode_obj("n", [layout_gpu("n", 0, new, {"id": change_id, "phase": "Done"})],
                                             status))
        await asyncio.sleep(0.05)
        await s.drain()
        assert bound_device(new_api, "big") == "MIG-n-0-3g.40gb-4"
        assert s.live.violations() == []
        loop.cancel()

    asyncio.run(scenario())
