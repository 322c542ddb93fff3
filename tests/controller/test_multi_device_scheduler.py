"""A pod asking half of each of two GPUs through the real scheduler over a fake API: bound with a hand-off of
two devices on different GPUs, each half of its memory; the metrics and `fgpu inspect` show the pod's share
on each GPU; a third such pod waits with the reason; deleting the first frees both GPUs."""
import asyncio
import json

import pytest
from fgpu_operator.controller.metrics import OperatorMetrics
from fgpu_operator.controller.scheduler import Scheduler
from fgpu_operator.inspect.model import Usage
from fgpu_operator.inspect.view import cluster_report, pod_report
from fgpu_operator.placement.live import LiveCluster
from fgpu_operator.placement.policies import LIVE_POLICIES
from inventories import fractional_inventory
from promcheck import matching, series, value
from scheduler_fakes import FakeApi, FakeEvents

from fgpu_contracts import keys
from fgpu_contracts.request import ContainerRequest, GpuRequest, dump_request

GIB = 1 << 30
HALF_OF_TWO = GpuRequest(source="hami", containers=[
    ContainerRequest(container="tp", count=2, milli_gpu=500, mem_pct=50, sm_pct=100)])


def pod(name: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": name,
                         "annotations": {keys.REQUEST: dump_request(HALF_OF_TWO)}},
            "spec": {"schedulerName": keys.SCHEDULER_NAME, "containers": [{"name": "tp"}]}}


NODE = {"metadata": {"name": "n", "annotations": {
    keys.INVENTORY: fractional_inventory("n", 2, uuid=lambda i: f"GPU-{i}")}},
    "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}}}


@pytest.mark.parametrize("policy", LIVE_POLICIES)
def test_a_half_of_two_gpus_pod_is_bound_shown_per_gpu_and_released(policy):
    async def scenario():
        api, events, metrics = FakeApi(), FakeEvents(), OperatorMetrics()
        s = Scheduler(LiveCluster(policy=policy), api, events, metrics=metrics)
        metrics.attach(s, "replica-1", s.is_leader, asyncio.get_running_loop())
        loop = asyncio.create_task(s.run())
        s.on_node("ADDED", NODE)
        for name in ("a", "b", "c"):
            s.on_pod("ADDED", pod(name))
        await asyncio.sleep(0.05)
        await s.drain()
        binds = {c[1].split("/")[-2]: c[2] for c in api.calls if c[1].endswith("/binding")}
        scraped = series((await asyncio.to_thread(metrics.exposition)).decode())
        s.on_pod("DELETED", pod("a"))
        await asyncio.sleep(0.05)
        await s.drain()
        late = [c[1].split("/")[-2] for c in api.calls if c[1].endswith("/binding")]
        loop.cancel()
        return binds, scraped, events.messages, late

    binds, scraped, messages, late = asyncio.run(scenario())
    assert sorted(binds) == ["a", "b"]
    handoff = json.loads(binds["a"]["metadata"]["annotations"][keys.ASSIGNMENT])
    [container] = handoff["containers"]
    assert [(d["uuid"], d["milliGpu"], d["memBytes"], d["smPct"]) for d in container["devices"]] == [
        ("GPU-0", 500, 40 * GIB, 100), ("GPU-1", 500, 40 * GIB, 100)]
    assert ("c", "FailedScheduling",
            "0/1 nodes are available: 1 node(s) had fewer than 2 GPUs with 500 milli-GPU free.") in messages
    for uuid, index in (("GPU-0", "0"), ("GPU-1", "1")):  # each GPU: a's half and b's half
        gpu = dict(node="n", device_uuid=uuid, device_index=index, device_type="H100-SXM5-80GB")
        assert value(scraped, "fgpu_scheduler_gpu_allocated_ratio", **gpu, sharing="fractional") == 1.0
        assert value(scraped, "fgpu_scheduler_gpu_containers", **gpu, sharing="fractional") == 2
        assert value(scraped, "hami_vgpu_memory_allocated_bytes", namespace="ns", node="n", pod="a",
                     container_index="tp", device_uuid=uuid) == 40 * GIB
    assert len(matching(scraped, "hami_vgpu_memory_allocated_bytes", pod="a")) == 2
    assert late[-1] == "c"  # a's two halves freed: c takes them


def test_inspect_shows_the_pods_share_on_each_of_its_gpus():
    async def bind():
        api = FakeApi()
        s = Scheduler(LiveCluster(policy="spread"), api, FakeEvents())
        loop = asyncio.create_task(s.run())
        s.on_node("ADDED", NODE)
        s.on_pod("ADDED", pod("a"))
        await asyncio.sleep(0.05)
        await s.drain()
        loop.cancel()
        [body] = [c[2] for c in api.calls if c[1].endswith("/binding")]
        return body["metadata"]["annotations"]

    bound = pod("a")
    bound["metadata"]["annotations"].update(asyncio.run(bind()))
    bound["spec"]["nodeName"] = "n"
    bound["status"] = {"phase": "Running"}
    node = {**NODE, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    report = pod_report(bound, node)
    assert [(d.container, d.gpu_index, d.uuid, d.usage) for d in report.devices] == [
        ("tp", 0, "GPU-0", Usage(500, 40 * GIB, 100)), ("tp", 1, "GPU-1", Usage(500, 40 * GIB, 100))]
    [view] = cluster_report([node], [bound]).nodes
    assert [[(sh.pod, sh.usage) for sh in g.shares] for g in view.gpus] == [[("a", Usage(500, 40 * GIB, 100))]] * 2
