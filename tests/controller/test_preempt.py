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


def labelled(p: dict, **labels) -> dict:
    p["metadata"]["labels"] = labels
    return p


def pdb(name: str, allowed: int, selector: dict | None, disrupted: tuple[str, ...] = (), ns: str = "ns") -> dict:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"selector": selector},
            "status": {"disruptionsAllowed": allowed, "disruptedPods": {p: "2026-12-02T00:00:00Z" for p in disrupted}}}


def test_budgets_match_selectors_in_the_pods_namespace_and_take_the_tightest():
    from fgpu_operator.controller.preempt import Budgets

    b = Budgets()
    b.on_event("ADDED", pdb("web", 1, {"matchLabels": {"app": "web"}}))
    b.on_event("ADDED", pdb("tight", 0, {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}]}))
    b.on_event("ADDED", pdb("all", 3, {}))  # policy/v1: an empty selector selects the whole namespace
    b.on_event("ADDED", pdb("none", 0, None))  # and a missing one nothing
    b.on_event("ADDED", pdb("elsewhere", 0, {}, ns="other"))
    b.on_event("ADDED", pdb("counted", 0, {"matchLabels": {"app": "batch"}}, disrupted=("b1",)))
    pods = {"w": labelled(pod("w1", 100), app="web"), "d": labelled(pod("d1", 100), app="web", tier="db"),
            "x": labelled(pod("x1", 100)), "b": labelled(pod("b1", 100), app="batch")}
    budgets, pdb_of = b.of(pods.items())
    assert pdb_of == {"w": "ns/web", "d": "ns/tight", "x": "ns/all", "b": "ns/all"}
    assert budgets == {"ns/web": 1, "ns/tight": 0, "ns/all": 3}
    b.on_event("DELETED", pdb("tight", 0, None))
    assert b.of(pods.items())[1]["d"] == "ns/web"
    b.on_event("MODIFIED", {**pdb("web", 0, {"matchLabels": {"app": "web"}}), "status": {}})  # not counted yet
    assert b.of(pods.items())[0]["ns/web"] == 0


def test_a_budget_with_no_disruption_left_turns_preemption_to_the_other_victim_and_it_is_counted():
    async def scenario(with_budget: bool):
        s, api, events, loop = await start(labelled(pod("guarded", 400, 0), app="keep"), pod("middle", 400, 500))
        if with_budget:
            s.preemptions.budgets.on_event("ADDED", pdb("keep", 0, {"matchLabels": {"app": "keep"}}))
        s.on_pod("ADDED", pod("high", 500, 1000))
        await asyncio.sleep(0.05)
        await s.drain()
        loop.cancel()
        deleted = [path.rsplit("/", 1)[1] for m, path, _ in api.calls if m == "DELETE"]
        return deleted, s.metrics.exposition().decode()

    deleted, _ = asyncio.run(scenario(False))
    assert deleted == ["guarded"]  # the lowest priority goes first
    deleted, text = asyncio.run(scenario(True))
    assert deleted == ["middle"]  # its budget has no disruption left: reprieved first, the other goes
    assert 'fgpu_scheduler_preemptions_total{result="nominated"} 1.0' in text
    assert "fgpu_scheduler_preemption_victims_total 1.0" in text
    assert "fgpu_scheduler_preemption_decision_seconds_count 1.0" in text


def test_never_and_fruitless_attempts_are_counted():
    async def scenario():
        s, api, events, loop = await start(pod("low", 500, 0), pod("peer", 400, 1000))
        s.on_pod("ADDED", pod("polite", 600, 1000, "Never"))
        s.on_pod("ADDED", pod("huge", 1000, 1000))  # even with low gone, peer leaves too little
        await asyncio.sleep(0.05)
        await s.drain()
        loop.cancel()
        return s.metrics.exposition().decode()

    text = asyncio.run(scenario())
    assert 'fgpu_scheduler_preemptions_total{result="never"} 1.0' in text
    assert 'fgpu_scheduler_preemptions_total{result="none"} 1.0' in text
    assert 'fgpu_scheduler_preemptions_total{result="nominated"} 0.0' in text
