"""A bound pod's hand-off edited by anyone but the scheduler (the webhook not in the path) is written back with
a Warning Event: the decision (`compare`) and the scheduler doing it on a fake API."""
import asyncio
import copy
import json

from fgpu_operator.controller.handoff_guard import NONE, Handoff, HandoffGuard, compare
from fgpu_operator.controller.scheduler import Scheduler
from fgpu_operator.kube.outcome import Outcome, Result
from fgpu_operator.placement.live import LiveCluster
from inventories import fractional_inventory
from scheduler_fakes import FakeApi, FakeEvents

from fgpu_contracts import keys
from fgpu_contracts.assignment import Assignment, ContainerAssignment, DeviceShare, dump_assignment
from fgpu_contracts.request import ContainerRequest, GpuRequest, dump_request

GIB = 1 << 30


def assignment(milli: int, uuid: str = "GPU-0") -> str:
    share = DeviceShare(uuid=uuid, milli_gpu=milli, mem_bytes=8 * GIB, sm_pct=milli // 10)
    return dump_assignment(Assignment(node="n", containers=[ContainerAssignment(name="main", devices=[share])]))


GIVEN = Handoff(assignment(300), "2026-01-01T00:00:00.000001Z")


def test_unchanged_is_left_alone():
    assert compare(GIVEN, Handoff(assignment(300), GIVEN.assigned_at)) is None
    assert compare(NONE, NONE) is None


def test_an_edited_assignment_is_restored_and_the_event_names_both():
    restore = compare(GIVEN, Handoff(assignment(1000), GIVEN.assigned_at))
    assert restore.annotations == {keys.ASSIGNMENT: GIVEN.assignment}  # assigned-at untouched: not changed
    assert restore.reason == "AssignmentRestored"
    assert restore.message.startswith(f"{keys.ASSIGNMENT} was set to {assignment(1000)[:160]}")
    assert "after binding, not by fgpu's scheduler" in restore.message
    assert restore.message.endswith(f"restored what the scheduler gave: node n, main: 300 milli-GPU, 30% SMs, "
                                    f"{8 * GIB} bytes of GPU-0")
    assert "\n" not in restore.message
    reason, message = restore.failed("403 Forbidden")
    assert reason == "AssignmentNotRestored"
    assert message.endswith(f"; NOT restored (403 Forbidden), the scheduler gave: node n, main: 300 milli-GPU, "
                            f"30% SMs, {8 * GIB} bytes of GPU-0")


def test_removed_or_reordered_keys_are_put_back():
    restore = compare(GIVEN, NONE)
    assert restore.annotations == {keys.ASSIGNMENT: GIVEN.assignment, keys.ASSIGNED_AT: GIVEN.assigned_at}
    assert restore.message.startswith(f"{keys.ASSIGNMENT} was removed; {keys.ASSIGNED_AT} was removed after")
    jumped = compare(GIVEN, Handoff(GIVEN.assignment, "2000-01-01T00:00:00Z"))  # first in line at Allocate
    assert jumped.annotations == {keys.ASSIGNED_AT: GIVEN.assigned_at}


def test_an_assignment_added_to_a_pod_bound_without_one_is_removed():
    forged = Handoff(assignment(1000), None)
    restore = compare(NONE, forged)
    assert restore.annotations == {keys.ASSIGNMENT: None}
    assert restore.message.endswith("restored what the scheduler gave: it was bound without a GPU allocation")
    long = compare(NONE, Handoff("x" * 1000, None))
    assert len(long.message) < 500 and "x" * 160 + "..." in long.message


def test_guard_knows_only_recorded_pods():
    guard = HandoffGuard()
    pod = {"metadata": {"annotations": {keys.ASSIGNMENT: assignment(1000)}}}
    assert guard.check("u", pod) is None  # never recorded: not this guard's to judge
    guard.record("u", GIVEN)
    assert guard.check("u", pod).annotations == {keys.ASSIGNMENT: GIVEN.assignment,
                                                 keys.ASSIGNED_AT: GIVEN.assigned_at}
    guard.forget("u")
    assert guard.check("u", pod) is None and len(guard) == 0


# --- the scheduler writing it back ---------------------------------------------------------------------------
def share_pod(name: str) -> dict:
    req = GpuRequest(containers=[ContainerRequest(container="main", milli_gpu=300)])
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "annotations": {keys.REQUEST: dump_request(req)}},
            "spec": {"schedulerName": keys.SCHEDULER_NAME, "containers": [{"name": "main"}]}}


def test_scheduler_restores_an_edited_assignment_only_while_leading():
    async def scenario():
        api, events, leading = FakeApi(), FakeEvents(), [True]
        s = Scheduler(LiveCluster(policy="binpack"), api, events, is_leader=lambda: leading[0])
        loop = asyncio.create_task(s.run())
        s.on_node("ADDED", {"metadata": {"name": "n", "annotations": {
            keys.INVENTORY: fractional_inventory("n", 1, uuid=lambda i: f"GPU-{i}")}},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}}})
        s.on_pod("ADDED", share_pod("a"))
        await asyncio.sleep(0.05)
        await s.drain()
        (bind,) = [c for c in api.calls if c[1].endswith("/binding")]
        written = bind[2]["metadata"]["annotations"]
        bound = share_pod("a")
        bound["spec"]["nodeName"] = "n"
        bound["metadata"]["annotations"].update(written)
        s.on_pod("MODIFIED", bound)  # the Binding's echo: nothing to do
        await s.drain()
        assert [c[0] for c in api.calls] == ["POST"] and events.emitted[-1][1] == "Scheduled"

        edited = copy.deepcopy(bound)
        mine = json.loads(written[keys.ASSIGNMENT])
        mine["containers"][0]["devices"][0].update(milliGpu=1000, smPct=100)
        edited["metadata"]["annotations"][keys.ASSIGNMENT] = json.dumps(mine)
        leading[0] = False
        s.on_pod("MODIFIED", edited)  # a standby sees it too, and leaves it to the leader
        await s.drain()
        assert len(api.calls) == 1
        leading[0] = True
        s.on_pod("MODIFIED", edited)
        await s.drain()
        method, path, body = api.calls[-1]
        assert (method, path) == ("PATCH", "/api/v1/namespaces/ns/pods/a")
        assert body == {"metadata": {"uid": "a", "annotations": {keys.ASSIGNMENT: written[keys.ASSIGNMENT]}}}
        name, reason, kind, message = events.emitted[-1]
        assert (name, reason, kind) == ("a", "AssignmentRestored", "Warning")
        assert "300 milli-GPU, 30% SMs" in message

        s.on_pod("DELETED", edited)  # forgotten with the pod
        assert len(s.guard) == 0
        loop.cancel()

    asyncio.run(scenario())


def test_a_pod_first_seen_bound_keeps_what_it_carried_then():
    async def scenario():
        api, events = FakeApi(), FakeEvents()
        s = Scheduler(LiveCluster(policy="binpack"), api, events)
        plain = {"metadata": {"name": "cpu", "namespace": "ns", "uid": "cpu"},
                 "spec": {"nodeName": "n", "containers": [{"name": "c"}]}}
        s.on_pod("ADDED", plain)  # bound by kube-scheduler before we started: no GPU allocation
        forged = copy.deepcopy(plain)
        forged["metadata"]["annotations"] = {keys.ASSIGNMENT: assignment(1000)}
        s.on_pod("MODIFIED", forged)
        await s.drain()
        assert api.calls == [("PATCH", "/api/v1/namespaces/ns/pods/cpu",
                              {"metadata": {"uid": "cpu", "annotations": {keys.ASSIGNMENT: None}}})]
        assert events.emitted[-1][1] == "AssignmentRestored"

    asyncio.run(scenario())


def test_a_write_back_the_apiserver_refuses_is_said_in_the_event():
    class Forbidden(FakeApi):
        async def request(self, method, path, **kw):
            await super().request(method, path, **kw)
            return Outcome(Result.DENIED, 403, 'pods "cpu" is forbidden')

    async def scenario():
        api, events = Forbidden(), FakeEvents()
        s = Scheduler(LiveCluster(policy="binpack"), api, events)
        plain = {"metadata": {"name": "cpu", "namespace": "ns", "uid": "cpu"}, "spec": {"nodeName": "n"}}
        s.on_pod("ADDED", plain)
        s.on_pod("MODIFIED", {**plain, "metadata": {**plain["metadata"], "annotations": {
            keys.ASSIGNMENT: assignment(1000)}}})
        await s.drain()
        name, reason, kind, message = events.emitted[-1]
        assert (name, reason, kind) == ("cpu", "AssignmentNotRestored", "Warning")
        assert "; NOT restored (" in message and "403" in message

    asyncio.run(scenario())


# --- signed hand-offs (--handoff-key-file) -------------------------------------------------------------------
KEY = b"k" * 32


def gpu_node(s: Scheduler) -> None:
    s.on_node("ADDED", {"metadata": {"name": "n", "annotations": {
        keys.INVENTORY: fractional_inventory("n", 1, uuid=lambda i: f"GPU-{i}")}},
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}}})


def test_the_binding_carries_the_signature_and_the_guard_keeps_it():
    from fgpu_contracts.signature import problem

    async def scenario():
        api, events = FakeApi(), FakeEvents()
        s = Scheduler(LiveCluster(policy="binpack"), api, events, handoff_key=KEY)
        loop = asyncio.create_task(s.run())
        gpu_node(s)
        s.on_pod("ADDED", share_pod("a"))
        await asyncio.sleep(0.05)
        await s.drain()
        (bind,) = [c for c in api.calls if c[1].endswith("/binding")]
        written = bind[2]["metadata"]["annotations"]
        assert problem(KEY, "a", "n", written) is None  # signed for this pod, this node, this turn
        assert problem(KEY, "b", "n", written) is not None
        bound = share_pod("a")
        bound["spec"]["nodeName"] = "n"
        bound["metadata"]["annotations"].update(written)
        stripped = copy.deepcopy(bound)
        del stripped["metadata"]["annotations"][keys.ASSIGNMENT_SIGNATURE]
        s.on_pod("MODIFIED", stripped)  # the signature removed after binding: written back like the rest
        await s.drain()
        assert api.calls[-1][2] == {"metadata": {"uid": "a", "annotations": {
            keys.ASSIGNMENT_SIGNATURE: written[keys.ASSIGNMENT_SIGNATURE]}}}
        loop.cancel()

    asyncio.run(scenario())


def bound_pod(name: str, milli: int, key: bytes | None = None, allocated: bool = False) -> dict:
    from fgpu_contracts.signature import sign

    pod = share_pod(name)
    pod["spec"]["nodeName"] = "n"
    at = "2026-01-01T00:00:00.000001Z"
    notes = {keys.ASSIGNMENT: assignment(milli), keys.ASSIGNED_AT: at}
    if key is not None:
        notes[keys.ASSIGNMENT_SIGNATURE] = sign(key, name, "n", at, notes[keys.ASSIGNMENT])
    if allocated:
        notes[keys.ALLOCATED] = '["main"]'
    pod["metadata"]["annotations"].update(notes)
    return pod


def test_a_restarted_scheduler_trusts_only_what_verifies():
    async def scenario():
        api, events = FakeApi(), FakeEvents()
        s = Scheduler(LiveCluster(policy="binpack"), api, events, handoff_key=KEY)
        gpu_node(s)
        s.on_pod("ADDED", bound_pod("good", 300, KEY))
        forged = bound_pod("forged", 300, KEY)  # signed for 300, edited to 1000 while no operator watched
        forged["metadata"]["annotations"][keys.ASSIGNMENT] = assignment(1000)
        s.on_pod("ADDED", forged)
        s.on_pod("ADDED", bound_pod("unsigned", 700))
        s.on_pod("ADDED", bound_pod("running", 500, allocated=True))  # its containers already got something
        assert s.live.allocations["good"].gpus == ("GPU-0",)
        assert s.live.allocations["forged"].gpus == () and s.live.allocations["unsigned"].gpus == ()
        assert s.live.allocations["running"].gpus == ("GPU-0",)  # what it claims stays reserved
        unverified = {name: message for name, reason, kind, message in events.emitted
                      if (reason, kind) == ("AssignmentUnverified", "Warning")}
        assert set(unverified) == {"forged", "unsigned", "running"}
        assert "does not match" in unverified["forged"] and "not counted" in unverified["forged"]
        assert "no fgpu.io/assignment-signature" in unverified["unsigned"]
        assert "claim stays reserved" in unverified["running"]
        assert len(s.guard) == 1  # only the verified hand-off is kept: nothing else was given to restore
        s.on_pod("MODIFIED", {**forged, "metadata": {**forged["metadata"], "annotations": {}}})
        await s.drain()
        assert api.calls == []  # no verified value to write back

    asyncio.run(scenario())


def test_a_short_key_file_fails_the_operator_in_one_line(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    short = tmp_path / "key"
    short.write_text("tiny\n")
    fgpu = str(Path(sys.executable).with_name("fgpu"))
    done = subprocess.run([fgpu, "operator", "--handoff-key-file", str(short)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith(f"fgpu operator: error: --handoff-key-file: {short} holds 4 bytes (allowed: ")
    assert done.stderr.count("\n") == 1
