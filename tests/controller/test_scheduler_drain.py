"""`Scheduler.drain` (shutdown, tests) and `Scheduler.settle` (tests) end, and wait for what they say.

The property test of dynamic MIG hung in `drain()`: a finished task stays in the scheduler's task set until
its done callback runs, a loop turn later, and `asyncio.gather` over finished tasks completes without
suspending, so `while tasks: await gather(...)` spun without ever letting that callback run."""
import asyncio

import pytest
from fgpu_operator.controller.scheduler import Scheduler
from fgpu_operator.placement.live import LiveCluster
from scheduler_fakes import FakeApi, FakeEvents
from test_mig_relayout import ALL_1G, gpunode_obj, layout_gpu, mig_pod, node_obj


@pytest.mark.timeout(30)  # the old drain spun here for ever, and no asyncio timeout can fire in a spin
def test_drain_ends_when_a_write_finished_in_this_loop_turn_but_has_not_left_the_set():
    async def scenario():
        s = Scheduler(LiveCluster(policy="binpack"), FakeApi(), FakeEvents())

        async def write():
            return None

        s._spawn(write())
        await asyncio.sleep(0)  # resumed in the turn the write ends, before its done callback runs
        assert [t.done() for t in s._tasks] == [True], "the state that spun drain() was not reached"
        await asyncio.wait_for(s.drain(), 5)
        assert not s._tasks

    asyncio.run(scenario())


@pytest.mark.timeout(30)
def test_settle_waits_for_the_queued_pod_to_be_decided_and_bound_drain_does_not():
    async def scenario():
        api = FakeApi()
        s = Scheduler(LiveCluster(policy="binpack"), api, FakeEvents())
        loop = asyncio.create_task(s.run())
        s.on_gpunode("ADDED", gpunode_obj("p", [layout_gpu("p", 0, ALL_1G)]))
        s.on_node("ADDED", node_obj("p"))
        s.on_pod("ADDED", mig_pod("a", "1g.10gb"))
        await s.drain()  # nothing in flight yet: returns before the run loop has even popped the pod
        assert not any(path.endswith("/binding") for _, path, _ in api.calls)
        await asyncio.wait_for(s.settle(), 5)
        bound = [path for _, path, _ in api.calls if path.endswith("/binding")]
        assert bound == ["/api/v1/namespaces/ns/pods/a/binding"], bound
        loop.cancel()

    asyncio.run(scenario())
