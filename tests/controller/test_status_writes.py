"""A pod that can be placed is bound without being parked first: no PodScheduled=False write, no
FailedScheduling Event; only a pod that fits nowhere gets them (once). Counted on the fake API."""
import asyncio

from fgpu_operator.controller.scheduler import Scheduler
from fgpu_operator.placement.live import LiveCluster
from inventories import fractional_inventory
from scheduler_fakes import FakeApi, FakeEvents

from fgpu_contracts import keys
from fgpu_contracts.request import ContainerRequest, GpuRequest, dump_request


def share_pod(name: str, milli: int) -> dict:
    req = GpuRequest(containers=[ContainerRequest(container="main", milli_gpu=milli)])
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "annotations": {keys.REQUEST: dump_request(req)}},
            "spec": {"schedulerName": keys.SCHEDULER_NAME, "containers": [{"name": "main"}]}}


def node(name: str, gpus: int) -> dict:
    return {"metadata": {"name": name, "annotations": {keys.INVENTORY: fractional_inventory(name, gpus)}},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}


def test_placeable_pods_are_bound_without_a_status_write_and_only_the_unplaceable_one_is_parked():
    async def scenario():
        api, events = FakeApi(), FakeEvents()
        s = Scheduler(LiveCluster(policy="fgpu"), api, events)
        loop = asyncio.create_task(s.run())
        for n in ("a", "b", "c"):
            s.on_node("ADDED", node(n, 2))
        for i in range(18):  # 3 nodes x 2 GPUs x 3 shares of 300 milli: every one fits
            s.on_pod("ADDED", share_pod(f"p{i}", 300))
        await asyncio.sleep(0.05)
        await s.drain()
        s.on_pod("ADDED", share_pod("late", 300))  # 100 milli left on every GPU: fits nowhere
        await asyncio.sleep(0.05)
        await s.drain()
        loop.cancel()
        status = [path for method, path, _ in api.calls if path.endswith("/status")]
        binds = {path.split("/")[-2] for method, path, _ in api.calls if path.endswith("/binding")}
        reasons = [(name, reason) for name, reason, _, _ in events.emitted]
        assert binds == {f"p{i}" for i in range(18)}
        assert status == ["/api/v1/namespaces/ns/pods/late/status"]
        assert [r for r in reasons if r[1] == "FailedScheduling"] == [("late", "FailedScheduling")]
        assert sorted(name for name, reason in reasons if reason == "Scheduled") == sorted(binds)

    asyncio.run(scenario())
