"""Preemption in the scheduler shell, over a fake API: the preemptor is nominated and holds the freed room,
the victim gets DisruptionTarget, a Preempted Event naming the preemptor and a graceful delete, and the
preemptor binds only once the victim is gone; same-priority and Never pods evict nobody; no second round."""
import asyncio
import copy

from fgpu_operator.controller.scheduler import Scheduler
from fgpu_operator.placement.live import LiveCluster
from inventories import fractional_inventory
from scheduler_fakes import FakeApi, FakeEvents

from fgpu_contracts import keys
from fgpu_contracts.request import ContainerRequest, GpuRequest, dump_request

NODE = {"metadata": {"name": "n", "annotations": {keys.INVENTORY: fractional_inventory("n", 1, uuid=lambda i: "GPU-0")}},
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}}}


def pod(name: str, milli: int, priority: int | None = None, policy: str | None = None) -> dict:
    req = GpuRequest(containers=[ContainerRequest(container="main", milli_gpu=milli)])
    spec = {"schedulerName": keys.SCHEDULER_NAME, "containers": [{"name": "main"}]}
    if priority is not None:
        spec["priority"] = priority
    if policy:
        spec["preemptionPolicy"] = policy
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "annotations": {keys.REQUEST: dump_request(req)}},
            "spec": spec}


def bound(api: FakeApi, p: dict) -> dict:
    """The pod as the watch shows it after our Binding: on the node, with the Binding's annotations."""
    name = p["metadata"]["name"]
    body = next(b for m, path, b in api.calls if path.endswith(f"/pods/{name}/binding"))
    out = copy.deepcopy(p)
    out["metadata"]["annotations"].update(body["metadata"]["annotations"])
    out["spec"]["nodeName"] = body["target"]["name"]
    return out


async def start(*pods):
    api, events = FakeApi(), FakeEvents()
    s = Scheduler(LiveCluster(policy="binpack"), api, events)
    loop = asyncio.create_task(s.run())
    s.on_node("ADDED", NODE)
    for p in pods:
        s.on_pod("ADDED", p)
        await asyncio.sleep(0.02)
        await s.drain()
        s.on_pod("MODIFIED", bound(api, p))
    return s, api, events, loop


def test_a_high_priority_share_evicts_a_low_one_and_binds_once_it_is_gone():
    async def scenario():
        low, peer = pod("low", 500, 0), pod("peer", 400, 1000)
        s, api, events, loop = await start(low, peer)
        s.on_pod("ADDED", pod("high", 600, 1000))
        await asyncio.sleep(0.05)
        await s.drain()
        writes = [(m, path) for m, path, _ in api.calls if "/pods/high" in path or "/pods/low" in path]
        assert ("PATCH", "/api/v1/namespaces/ns/pods/high/status") in writes
        assert ("DELETE", "/api/v1/namespaces/ns/pods/low") in writes
        assert not any(path.endswith("/pods/high/binding") for _, path in writes)  # not while low still runs
        nominated = next(b for m, path, b in api.calls if path.endswith("/pods/high/status"))
        assert nominated == {"status": {"nominatedNodeName": "n"}}
        condition = next(b for m, path, b in api.calls if path.endswith("/pods/low/status"))["status"]["conditions"][0]
        assert (condition["type"], condition["reason"]) == ("DisruptionTarget", "PreemptionByScheduler")
        assert ("low", "Preempted", "Preempted by pod ns/high (high) on node n") in events.messages
        assert s.live.violations() == [] and "low" not in s.live.allocations and "high" in s.live.allocations
        s.on_pod("MODIFIED", {**bound(api, low), "metadata": {**bound(api, low)["metadata"],
                                                              "deletionTimestamp": "2026-12-02T00:00:00Z"}})
        assert "low" not in s.live.allocations  # terminating: never taken back into the model
        s.on_pod("ADDED", pod("late-low", 500, 0))  # the held room is not for it
        await asyncio.sleep(0.05)
        s.on_pod("DELETED", low)
        await asyncio.sleep(0.05)
        await s.drain()
        binds = [path for _, path, _ in api.calls if path.endswith("/binding")]
        assert binds[-1] == "/api/v1/namespaces/ns/pods/high/binding" and not any("late-low" in b for b in binds)
        assert sum(1 for m, path, _ in api.calls if m == "DELETE") == 1  # one round only
        loop.cancel()

    asyncio.run(scenario())


def test_same_priority_and_never_policy_evict_nobody():
    async def scenario():
        s, api, events, loop = await start(pod("low", 500, 0), pod("peer", 400, 1000))
        s.on_pod("ADDED", pod("same", 600, 0))
        s.on_pod("ADDED", pod("polite", 600, 1000, "Never"))
        await asyncio.sleep(0.05)
        await s.drain()
        assert not any(m == "DELETE" for m, _, _ in api.calls)
        assert {"same", "polite"} <= set(s.parked)
        loop.cancel()

    asyncio.run(scenario())


def test_a_victim_that_cannot_be_deleted_is_taken_back_and_the_preemptor_waits_again():
    from fgpu_operator.kube.outcome import Outcome, Result

    class NoDelete(FakeApi):
        async def request(self, method, path, **kw):
            if method == "DELETE":
                self.calls.append((method, path, kw.get("body")))
                return Outcome(Result.DENIED, 403, "forbidden")
            return await super().request(method, path, **kw)

    async def scenario():
        api, events = NoDelete(), FakeEvents()
        s = Scheduler(LiveCluster(policy="binpack"), api, events)
        loop = asyncio.create_task(s.run())
        s.on_node("ADDED", NODE)
        low = pod("low", 500, 0)
        s.on_pod("ADDED", low)
        await asyncio.sleep(0.02)
        await s.drain()
        s.on_pod("MODIFIED", bound(api, low))
        s.on_pod("ADDED", pod("high", 600, 1000))
        await asyncio.sleep(0.05)
        await s.drain()
        assert "low" in s.live.allocations and s.live.violations() == []  # taken back; the hold released
        assert not any(path.endswith("/pods/high/binding") for _, path, _ in api.calls)
        assert "high" in s.parked and sum(1 for m, _, _ in api.calls if m == "DELETE") == 1  # tried once
        assert any(reason == "FailedScheduling" and "could not delete ns/low" in message
                   for name, reason, message in events.messages if name == "high")
        loop.cancel()

    asyncio.run(scenario())
