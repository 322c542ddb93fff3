"""fgpu_operator.kube against the real kube-apiserver: Binding with hand-off annotations, the answers the
scheduler branches on, PodScheduled=False, deduplicated events, and Lease leader election."""
from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from fgpu_operator.kube import (
    ApiSession,
    EventRecorder,
    LeaderElector,
    Result,
    bind,
    load_kubeconfig,
    set_unschedulable,
)
from kubernetes import client, watch

pytestmark = pytest.mark.e2e
HANDOFF = {"fgpu.io/assignment": '{"version":"v1","gpus":["GPU-0"]}', "fgpu.io/assigned-at": "2026-01-01T00:00:00Z"}


@pytest.fixture
async def api(k8s):
    async with ApiSession(load_kubeconfig(k8s.kubeconfig)) as session:
        yield session


async def make_pod(api: ApiSession, namespace: str, name: str) -> dict:
    """A pending pod that only these tests bind: its scheduler name is one no scheduler in the session serves
    (the stock kube-scheduler other e2e tests start would otherwise race them for it)."""
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": "kube-io-test", "containers": [{"name": "main", "image": "busybox"}]}}
    out = await api.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=body)
    assert out.ok, out
    return out.body


async def read_pod(api: ApiSession, namespace: str, name: str) -> dict:
    out = await api.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    assert out.ok, out
    return out.body


def first_change(k8s, namespace: str, name: str, since: str) -> dict:
    """The pod as the first watch event after resourceVersion `since` shows it."""
    with k8s.api() as api:
        core = client.CoreV1Api(api)
        for event in watch.Watch().stream(core.list_namespaced_pod, namespace, resource_version=since,
                                          field_selector=f"metadata.name={name}", timeout_seconds=5):
            return api.sanitize_for_serialization(event["object"])
    raise AssertionError(f"no change to pod {name} after resourceVersion {since}")


async def test_binding_sets_node_and_annotations_in_one_update(k8s, api, namespace, make_kwok_node):
    make_kwok_node("kio-bind-1", {"nvidia.com/gpu": 8})
    pod = await make_pod(api, namespace, "p1")
    out = await bind(api, namespace, "p1", pod["metadata"]["uid"], "kio-bind-1", HANDOFF)
    assert (out.result, out.status) == (Result.OK, 201), out
    changed = first_change(k8s, namespace, "p1", pod["metadata"]["resourceVersion"])
    assert changed["spec"]["nodeName"] == "kio-bind-1"
    assert HANDOFF.items() <= changed["metadata"]["annotations"].items()  # the same write, not a later one
    scheduled = [c for c in changed["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert scheduled and scheduled[0]["status"] == "True"


async def test_second_bind_is_a_conflict_and_changes_nothing(api, namespace):
    pod = await make_pod(api, namespace, "p2")
    uid = pod["metadata"]["uid"]
    assert (await bind(api, namespace, "p2", uid, "node-a")).ok
    again = await bind(api, namespace, "p2", uid, "node-b", {"fgpu.io/assignment": "other"})
    assert (again.result, again.status, again.attempts) == (Result.CONFLICT, 409, 1)
    assert 'already assigned to node "node-a"' in again.message
    now = await read_pod(api, namespace, "p2")
    assert now["spec"]["nodeName"] == "node-a" and "fgpu.io/assignment" not in now["metadata"].get("annotations", {})


async def test_bind_with_a_stale_uid_is_gone(api, namespace):
    await make_pod(api, namespace, "p3")
    out = await bind(api, namespace, "p3", "00000000-0000-0000-0000-000000000000", "node-a")
    assert (out.result, out.status) == (Result.GONE, 409), out
    assert not (await read_pod(api, namespace, "p3"))["spec"].get("nodeName")


async def test_bind_of_a_deleted_pod_is_gone(api, namespace):
    pod = await make_pod(api, namespace, "p4")
    gone = await api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/p4", body={"gracePeriodSeconds": 0})
    assert gone.ok, gone
    out = await bind(api, namespace, "p4", pod["metadata"]["uid"], "node-a")
    assert (out.result, out.status, out.attempts) == (Result.GONE, 404, 1), out


async def test_set_unschedulable_shows_the_condition(api, namespace):
    await make_pod(api, namespace, "p5")
    message = "0/3 nodes are available: 3 Insufficient GPU memory."
    out = await set_unschedulable(api, namespace, "p5", message)
    assert out.ok, out
    pod = await read_pod(api, namespace, "p5")
    (cond,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", message)
    again = await set_unschedulable(api, namespace, "p5", message, pod=pod)
    assert (again.result, again.attempts) == (Result.OK, 0)


async def test_a_hundred_failures_make_one_event(api, namespace):
    pod = await make_pod(api, namespace, "p6")
    recorder = EventRecorder(api, instance="e2e", interval_s=3600)
    for i in range(100):
        out = await recorder.emit(namespace, "p6", pod["metadata"]["uid"], "FailedScheduling", f"0/{i} nodes")
        assert out.ok, out
    await recorder.aclose()
    listed = await api.request("GET", f"/api/v1/namespaces/{namespace}/events",
                               params={"fieldSelector": "involvedObject.name=p6"})
    (event,) = listed.body["items"]
    assert (event["reason"], event["type"], event["count"], event["message"]) == (
        "FailedScheduling", "Warning", 100, "0/99 nodes")
    assert event["involvedObject"]["uid"] == pod["metadata"]["uid"]


# ---- leader election ------------------------------------------------------------------------------------
class Watchdog:
    """Samples two electors every 10 ms and remembers any moment both claimed to lead."""

    def __init__(self, *electors: LeaderElector):
        self.electors = electors
        self.overlaps = 0
        self.samples = 0

    async def run(self) -> None:
        while True:
            self.samples += 1
            self.overlaps += sum(e.is_leader for e in self.electors) > 1
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def two_electors(k8s, namespace: str):
    """Two candidates for one Lease, each with its own session (as two replicas would have)."""
    async with contextlib.AsyncExitStack() as stack:
        electors = []
        for i in range(2):
            session = await stack.enter_async_context(ApiSession(load_kubeconfig(k8s.kubeconfig)))
            electors.append(LeaderElector(session, "fgpu-scheduler", namespace, identity=f"replica-{i}"))
        dog = Watchdog(*electors)
        task = asyncio.create_task(dog.run())
        stack.callback(task.cancel)
        runs = []  # one stack per replica: closing it is that replica stopping
        for elector in electors:
            runs.append(await stack.enter_async_context(contextlib.AsyncExitStack()))
            await runs[-1].enter_async_context(elector.running())
        leader = await first_leader(electors, timeout=10)
        yield electors, leader, runs[electors.index(leader)], dog
        assert dog.overlaps == 0, f"two leaders in {dog.overlaps} of {dog.samples} samples"


async def first_leader(electors: list[LeaderElector], timeout: float) -> LeaderElector:
    waits = {asyncio.ensure_future(e.became_leader.wait()): e for e in electors}
    done, pending = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for w in pending:
        w.cancel()
    assert done, f"no leader within {timeout} s"
    return waits[next(iter(done))]


async def until(check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not true within {timeout} s"
        await asyncio.sleep(0.02)


async def read_lease(api: ApiSession, namespace: str) -> dict:
    out = await api.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/fgpu-scheduler")
    assert out.ok, out
    return out.body["spec"]


@pytest.mark.slow
async def test_standby_takes_over_within_the_lease_after_the_leader_dies(k8s, api, namespace):
    async with two_electors(k8s, namespace) as (electors, leader, leader_run, _):
        standby = next(e for e in electors if e is not leader)
        await until(lambda: standby.holder == leader.identity, timeout=5)  # it has seen the lease held
        assert not standby.is_leader
        assert (await read_lease(api, namespace))["leaseTransitions"] == 0
        # Die mid-term, not at the instant of a renew: the guarantee is "within lease_s of the last
        # renew", which is within 15 s of the death only when the death comes a little after a renew.
        await asyncio.sleep(1.0)
        leader.release_on_cancel = False  # die: stop renewing, leave the lease as it is
        died = time.monotonic()
        await leader_run.aclose()
        await asyncio.wait_for(standby.became_leader.wait(), timeout=20)
        took = time.monotonic() - died
        print(f"takeover {took:.2f} s after the leader died")
        assert took < 15.0, f"takeover after {took:.1f} s"
        spec = await read_lease(api, namespace)
        assert (spec["holderIdentity"], spec["leaseTransitions"]) == (standby.identity, 1)
        assert standby.transitions == 1


@pytest.mark.slow
async def test_clean_release_hands_over_within_3_s(k8s, api, namespace):
    async with two_electors(k8s, namespace) as (electors, leader, leader_run, _):
        standby = next(e for e in electors if e is not leader)
        released = time.monotonic()
        await leader_run.aclose()  # release_on_cancel: holder cleared, duration 1 s
        assert leader.lost_leadership.is_set() and not leader.is_leader
        await asyncio.wait_for(standby.became_leader.wait(), timeout=10)
        took = time.monotonic() - released
        print(f"takeover {took:.2f} s after the leader released")
        assert took < 3.0, f"takeover after {took:.1f} s"
        spec = await read_lease(api, namespace)
        assert (spec["holderIdentity"], spec["leaseTransitions"], spec["leaseDurationSeconds"]) == (
            standby.identity, 1, 15)
