"""The operator's custom-resource state without a cluster: GPUNode allocations and conditions, the coalesced
status writer, and the SchedulingPolicy watch (which object applies, what its status says)."""
import asyncio
import dataclasses

from fgpu_operator.controller.gpunodes import (
    NodeAllocations,
    StatusWriter,
    allocation_rows,
    schedulable_condition,
)
from fgpu_operator.controller.policy import PolicyWatch
from fgpu_operator.kube.outcome import Outcome, Result
from fgpu_operator.placement.model import GpuInfo, NodeSpec

from fgpu_contracts.assignment import Assignment, ContainerAssignment, DeviceShare
from fgpu_contracts.policy import SchedulingPolicySpec


def assignment(uuid: str, milli: int) -> Assignment:
    return Assignment(node="n", containers=[ContainerAssignment(name="main", devices=[
        DeviceShare(uuid=uuid, milli_gpu=milli, mem_bytes=8 << 30, sm_pct=30)])])


class FakeApi:
    def __init__(self, status: int = 200):
        self.calls, self.status = [], status

    async def request(self, method, path, **kw):
        self.calls.append((method, path, kw.get("body"), kw.get("content_type")))
        return Outcome(Result.OK if self.status < 300 else Result.GONE, self.status)


def test_allocations_are_indexed_by_node_and_mark_what_changed():
    held = NodeAllocations()
    held.hold("u1", "n", allocation_rows("ns", "a", "u1", assignment("GPU-0", 300)))
    held.hold("u2", "n", allocation_rows("ns", "b", "u2", assignment("GPU-1", 500)))
    assert held.rows("n") == [
        {"uuid": "GPU-0", "milliGpu": 300, "memBytes": 8 << 30, "smPct": 30, "namespace": "ns", "pod": "a",
         "podUid": "u1", "container": "main"},
        {"uuid": "GPU-1", "milliGpu": 500, "memBytes": 8 << 30, "smPct": 30, "namespace": "ns", "pod": "b",
         "podUid": "u2", "container": "main"}]
    held.dirty.clear()
    held.hold("u1", "m", allocation_rows("ns", "a", "u1", assignment("GPU-9", 300)))  # re-held elsewhere
    assert held.dirty == {"n", "m"} and [r["pod"] for r in held.rows("n")] == ["b"]
    held.drop("u2")
    held.drop("u2")  # twice is harmless
    assert held.rows("n") == [] and len(held) == 1


def test_schedulable_condition_says_why_not():
    gpu = GpuInfo("GPU-0", "H100", 81920, 132, "fractional", True)
    node = NodeSpec(name="n", cpu_milli=1000, memory_mib=1024, num_gpu=1, model="H100", gpus=(gpu,))
    assert schedulable_condition(node) == ("True", "GPUsAvailable", "1 of 1 GPUs healthy")
    assert schedulable_condition(None)[1] == "NodeMissing"
    assert schedulable_condition(dataclasses.replace(node, unschedulable=True))[1] == "Cordoned"
    sick = dataclasses.replace(node, gpus=(dataclasses.replace(gpu, healthy=False),))
    assert schedulable_condition(sick) == ("False", "NoHealthyGPU", "none of its 1 GPUs is healthy")


def test_status_writer_writes_each_marked_known_node_once_and_only_when_leading():
    async def scenario():
        api, held = FakeApi(), NodeAllocations()
        writer = StatusWriter(api, held, lambda name: None, is_leader=lambda: True)
        held.hold("u1", "n", allocation_rows("ns", "a", "u1", assignment("GPU-0", 300)))
        held.hold("u2", "x", allocation_rows("ns", "b", "u2", assignment("GPU-0", 300)))  # no GPUNode for x
        writer.seen("n", exists=True)
        await writer.flush()
        ((method, path, body, ctype),) = api.calls
        assert (method, path, ctype) == ("PATCH", "/apis/fgpu.io/v1alpha1/gpunodes/n/status",
                                         "application/merge-patch+json")
        assert body["status"]["allocatedPods"] == 1 and body["status"]["allocations"][0]["pod"] == "a"
        assert body["status"]["conditions"][0]["reason"] == "NodeMissing"
        await writer.flush()
        assert len(api.calls) == 1  # nothing changed: nothing written
        assert held.dirty == {"x"}  # waits for its GPUNode

    asyncio.run(scenario())


def test_only_the_policy_named_default_applies_and_deleting_it_restores_the_flags():
    applied = []
    watch = PolicyWatch(SchedulingPolicySpec(node_policy="binpack"), applied.append)

    def obj(name, generation=1, **spec):
        return {"metadata": {"name": name, "generation": generation}, "spec": spec}

    watch.on_event("ADDED", obj("other", nodePolicy="spread"))
    assert applied == [] and watch._verdicts["other"][1:3] == ("False", "NotDefault")
    watch.on_event("ADDED", obj("default", nodePolicy="spread", gpuPolicy="spread"))
    assert [(s.node_policy, s.gpu_policy) for s in applied] == [("spread", "spread")]
    watch.on_event("MODIFIED", obj("default", 2, nodePolicy="nonsense"))
    generation, status, reason, message = watch._verdicts["default"]
    assert (generation, status, reason) == (2, "False", "Invalid") and "spec" in message and "\n" not in message
    assert len(applied) == 1  # the previous defaults stay
    watch.on_event("DELETED", obj("default", 2))
    assert applied[-1].node_policy == "binpack"

    async def status():
        api = FakeApi()
        await watch.write_status(api)
        await watch.write_status(api)  # written once
        return api.calls

    (call,) = asyncio.run(status())
    assert call[1].endswith("/schedulingpolicies/other/status")
    assert call[2]["status"]["conditions"][0]["reason"] == "NotDefault"
