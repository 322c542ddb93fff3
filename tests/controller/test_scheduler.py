"""The scheduler loop over a fake API: a pod that fits nowhere is explained, re-explained when a node's
inventory arrives, and bound once room frees; the Binding carries the hand-off annotation."""
import asyncio
import copy
import json

from fgpu_operator.controller.scheduler import Scheduler
from fgpu_operator.placement.live import LiveCluster
from inventories import fractional_inventory
from scheduler_fakes import FakeApi, FakeEvents

from fgpu_contracts import keys
from fgpu_contracts.request import ContainerRequest, GpuRequest, dump_request

GIB = 1 << 30


def pod(name: str, milli: int, mem_gib: int = 0, priority: str = "low") -> dict:
    req = GpuRequest(containers=[ContainerRequest(container="main", milli_gpu=milli, mem_bytes=mem_gib * GIB or None)],
                     priority=priority)
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "annotations": {keys.REQUEST: dump_request(req)}},
            "spec": {"schedulerName": keys.SCHEDULER_NAME, "containers": [{"name": "main"}]}}


def test_explained_reexplained_on_inventory_then_bound_after_release():
    async def scenario():
        api, events = FakeApi(), FakeEvents()
        s = Scheduler(LiveCluster(policy="binpack"), api, events)
        loop = asyncio.create_task(s.run())
        node = {"metadata": {"name": "n", "annotations": {}},
                "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}}}
        s.on_node("ADDED", node)
        s.on_pod("ADDED", pod("big", 300, 100))
        s.on_pod("ADDED", pod("a", 900))
        await asyncio.sleep(0.05)
        assert ("big", "FailedScheduling", "0/1 nodes are available: 1 node(s) had no GPU.") in events.messages
        with_gpu = copy.deepcopy(node)
        with_gpu["metadata"]["annotations"][keys.INVENTORY] = fractional_inventory("n", 1, uuid=lambda i: f"GPU-{i}")
        s.on_node("MODIFIED", with_gpu)
        await asyncio.sleep(0.05)
        await s.drain()
        assert ("big", "FailedScheduling", "0/1 nodes are available: 1 Insufficient GPU memory.") in events.messages
        binds = [c for c in api.calls if c[1].endswith("/binding")]
        assert [b[1] for b in binds] == ["/api/v1/namespaces/ns/pods/a/binding"]
        (device,) = json.loads(binds[0][2]["metadata"]["annotations"][keys.ASSIGNMENT])["containers"][0]["devices"]
        assert (device["uuid"], device["milliGpu"]) == ("GPU-0", 900)
        s.on_pod("ADDED", pod("b", 300))
        await asyncio.sleep(0.05)
        assert ("b", "FailedScheduling", "0/1 nodes are available: 1 Insufficient GPU.") in events.messages
        s.on_pod("DELETED", pod("a", 900))  # frees 0.9: b fits now, big still does not
        await asyncio.sleep(0.05)
        await s.drain()
        assert [c[1] for c in api.calls if c[1].endswith("/binding")][-1] == "/api/v1/namespaces/ns/pods/b/binding"
        assert "big" in s.parked
        loop.cancel()

    asyncio.run(scenario())


def test_queue_orders_by_kube_priority_then_fgpu_priority_then_arrival():
    from fgpu_operator.controller.queue import ActiveQueue, sort_key

    q = ActiveQueue()
    pods = {"low-late": ({}, False), "high-late": ({}, True), "kube-100-low": ({"priority": 100}, False),
            "high-early": ({}, True)}
    for name in ("high-early", "low-late", "kube-100-low", "high-late"):
        spec, high = pods[name]
        q.push(name, name, sort_key({"spec": spec}, high))
    q.push("high-early", "high-early", sort_key({}, True))  # re-pushed: goes behind high-late
    q.remove("low-late")
    assert "low-late" not in q and len(q) == 3
    assert [q.pop()[0] for _ in range(3)] == ["kube-100-low", "high-late", "high-early"]
    assert not q


def test_room_freed_goes_to_the_high_priority_pod_that_waited_less():
    async def scenario():
        api, events = FakeApi(), FakeEvents()
        s = Scheduler(LiveCluster(policy="binpack"), api, events)
        loop = asyncio.create_task(s.run())
        s.on_node("ADDED", {"metadata": {"name": "n", "annotations": {
            keys.INVENTORY: fractional_inventory("n", 1, uuid=lambda i: f"GPU-{i}")}},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}}})
        s.on_pod("ADDED", pod("full", 1000))
        await asyncio.sleep(0.05)
        low = pod("low", 600)
        low["metadata"]["annotations"][keys.REQUEST] = dump_request(GpuRequest(
            containers=[ContainerRequest(container="main", milli_gpu=600)], priority="low"))
        s.on_pod("ADDED", low)
        await asyncio.sleep(0.05)
        s.on_pod("ADDED", pod("high", 600, priority="high"))
        await asyncio.sleep(0.05)
        assert set(s.parked) == {"low", "high"}
        s.on_pod("DELETED", pod("full", 1000))
        await asyncio.sleep(0.05)
        await s.drain()
        binds = [c[1].split("/")[-2] for c in api.calls if c[1].endswith("/binding")]
        assert binds == ["full", "high"] and "low" in s.parked
        loop.cancel()

    asyncio.run(scenario())


def test_a_node_heartbeat_is_not_parsed_again(monkeypatch):
    from fgpu_operator.controller import translate

    calls = []
    real = translate.node_spec
    monkeypatch.setattr(translate, "node_spec", lambda *a: calls.append(a) or real(*a))
    s = Scheduler(LiveCluster(policy="binpack"), FakeApi(), FakeEvents())
    node = {"metadata": {"name": "n", "annotations": {keys.INVENTORY: fractional_inventory("n", 1)},
                         "managedFields": [{"time": "t0"}]},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t0"}]}}
    s.on_node("ADDED", node)
    beat = copy.deepcopy(node)
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "t1"
    beat["metadata"]["managedFields"][0]["time"] = "t1"
    s.on_node("MODIFIED", beat)
    assert len(calls) == 1
    cordoned = copy.deepcopy(beat)
    cordoned["spec"] = {"unschedulable": True}
    s.on_node("MODIFIED", cordoned)
    assert len(calls) == 2 and s.live.specs["n"].unschedulable


def test_a_pod_decided_just_before_losing_the_lease_is_placed_once_leading_again():
    async def scenario():
        api, events = FakeApi(), FakeEvents()
        answers = iter([True, False])  # leader when popped, not by the time its Binding would go out
        leading = {"now": False}
        s = Scheduler(LiveCluster(policy="binpack"), api, events,
                      is_leader=lambda: next(answers, leading["now"]))
        loop = asyncio.create_task(s.run())
        node = {"metadata": {"name": "n", "annotations": {
            keys.INVENTORY: fractional_inventory("n", 1, uuid=lambda i: f"GPU-{i}")}},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}}}
        s.on_node("ADDED", node)
        s.on_pod("ADDED", pod("a", 300))
        await asyncio.sleep(0.05)
        await s.drain()
        assert not [c for c in api.calls if c[1].endswith("/binding")]
        assert "a" not in s.live.allocations  # its reservation is given back ...
        assert "a" in s.queue  # ... and the pod kept, not dropped
        leading["now"] = True
        s.retry_waiting()  # what the leadership watcher calls on acquiring the lease
        await asyncio.sleep(0.05)
        await s.drain()
        assert [c[1] for c in api.calls if c[1].endswith("/binding")] == ["/api/v1/namespaces/ns/pods/a/binding"]
        loop.cancel()

    asyncio.run(scenario())


def test_a_pod_whose_attempt_errs_is_retried_after_a_backoff_without_a_capacity_change(monkeypatch):
    """kube-scheduler's error backoff: an attempt that raised parks the pod, and the backoff (1 s doubling to 10 s
    there, shortened here) brings it back even though nothing in the cluster changed; a pod deleted meanwhile
    is not brought back."""
    from fgpu_operator.controller import scheduler as scheduler_module

    monkeypatch.setattr(scheduler_module, "ERROR_BACKOFF", (0.05, 0.2))

    async def scenario():
        api, events = FakeApi(), FakeEvents()
        live = LiveCluster(policy="binpack")
        failures = {"flaky": 2, "gone": 1}
        real_schedule = live.schedule

        def schedule(uid, request, policy=None):
            if failures.get(uid):
                failures[uid] -= 1
                raise RuntimeError(f"injected failure for {uid}")
            return real_schedule(uid, request, policy)

        live.schedule = schedule
        s = Scheduler(live, api, events)
        loop = asyncio.create_task(s.run())
        s.on_node("ADDED", {"metadata": {"name": "n", "annotations": {
            keys.INVENTORY: fractional_inventory("n", 2, uuid=lambda i: f"GPU-{i}")}},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}}})
        s.on_pod("ADDED", pod("flaky", 300))
        s.on_pod("ADDED", pod("gone", 300))
        await asyncio.sleep(0.01)
        assert set(s.parked) == {"flaky", "gone"} and s.parked["flaky"].reason == "Error"
        s.on_pod("DELETED", pod("gone", 300))
        await asyncio.sleep(0.4)  # two backoffs for flaky (0.05, then 0.1); gone's passes with no pod to retry
        await s.drain()
        binds = [c[1] for c in api.calls if c[1].endswith("/binding")]
        assert binds == ["/api/v1/namespaces/ns/pods/flaky/binding"]
        assert failures == {"flaky": 0, "gone": 0} and not s.parked and not s.queue
        loop.cancel()

    asyncio.run(scenario())


def test_a_waiting_pod_keeps_what_placement_and_its_messages_read_and_drops_the_rest():
    """The queue holds a slimmed pod (`_pending_fields`): the core's request from it equals the one from the
    whole pod, for a pod using every scheduling field; volumes, images, env and managedFields are not kept."""
    from fgpu_operator.controller import translate
    from fgpu_operator.controller.queue import sort_key
    from fgpu_operator.controller.scheduler import _pending_fields

    full = pod("p", 500, mem_gib=4)
    full["metadata"].update(managedFields=[{"manager": "kubectl"}], creationTimestamp="2026-11-28T00:00:00Z",
                            labels={"app": "x"})
    full["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "{" + "x" * 5000 + "}"
    spec = full["spec"]
    spec.update(
        nodeSelector={"pool": "a"}, priority=1000, overhead={"cpu": "50m"},
        tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]}}},
        initContainers=[{"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "2"}}}],
        volumes=[{"name": "data", "emptyDir": {}}])
    spec["containers"][0].update(env=[{"name": "A", "value": "1"}], command=["sleep", "1"], image="busybox",
                                 resources={"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "100m"}})
    full["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
    slim = _pending_fields(copy.deepcopy(full))
    request = translate.gpu_request(full)
    assert translate.core_request(slim, request) == translate.core_request(full, request)
    assert sort_key(slim, True) == sort_key(full, True) == (-1000, 0)
    assert slim["status"] == {"conditions": full["status"]["conditions"]}
    assert slim["spec"]["containers"] == [{"name": "main", "resources": spec["containers"][0]["resources"]}]
    assert "volumes" not in slim["spec"] and "managedFields" not in slim["metadata"]
    assert set(slim["metadata"]["annotations"]) == {keys.REQUEST}
    assert slim["metadata"]["creationTimestamp"] == "2026-11-28T00:00:00Z"


def test_a_pod_whose_claim_is_not_made_yet_waits_silently_and_is_never_bound():
    """Its ResourceClaim comes from a template (the controller-manager makes it): binding before the claim is
    allocated would have the kubelet refuse the pod, so it waits, without a FailedScheduling to read
    (tests/controller/test_dra_claims.py allocates the claim once it exists)."""
    async def scenario():
        api, events = FakeApi(), FakeEvents()
        s = Scheduler(LiveCluster(policy="binpack"), api, events)
        loop = asyncio.create_task(s.run())
        node = {"metadata": {"name": "n", "annotations": {
            keys.INVENTORY: fractional_inventory("n", 1, uuid=lambda i: f"GPU-{i}")}},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}}}
        s.on_node("ADDED", node)
        claimed = pod("claimed", 300)
        claimed["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "share"}]
        s.on_pod("ADDED", claimed)
        s.on_pod("ADDED", pod("plain", 300))
        await asyncio.sleep(0.05)
        await s.drain()
        assert [c[1] for c in api.calls if c[1].endswith("/binding")] == ["/api/v1/namespaces/ns/pods/plain/binding"]
        assert not [m for uid, reason, m in events.messages if uid == "claimed"]
        assert s.parked["claimed"].claims_pending
        loop.cancel()

    asyncio.run(scenario())
