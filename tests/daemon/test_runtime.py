"""NodeRuntime without gRPC: time dilation, waiters, fault fan-out, and fuzzed requests never escape as
anything but SimgpuError."""
import asyncio
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simgpu.catalog import get_gpu
from simgpu.daemon.runtime import NodeRuntime
from simgpu.device import ContextLostError, build_gpu
from simgpu.device.node import EmulatedNode
from simgpu.errors import SimgpuError
from simgpu.perf import GemmOp, op_cost, parse_op
from simgpu.token import Grant, issue_token

SECRET = b"s" * 32
H100 = get_gpu("H100")
GEMM = GemmOp(8192, 8192, 8192)


def runtime(sharing="fractional", dilation=1.0):
    node = EmulatedNode([build_gpu(H100, uuid="GPU-0", sharing=sharing)], "n")
    return NodeRuntime(node, secret=SECRET, time_dilation=dilation)


def token(**grant):
    return issue_token(SECRET, Grant(device_uuid="GPU-0", **grant))


@pytest.mark.parametrize("dilation", [0.05, 0.5])
async def test_wall_time_is_virtual_time_times_dilation(dilation):
    rt = runtime(dilation=dilation)
    rt.start()
    ctx = rt.open(token())
    n = 40
    kernel = op_cost(H100, GEMM).kernel_seconds
    t0 = time.monotonic()
    await rt.launch(ctx, [GEMM] * n)
    await rt.synchronize(ctx)
    wall = time.monotonic() - t0
    assert wall >= n * kernel * dilation * 0.98
    assert wall <= n * kernel * dilation + 0.05  # event-driven: no drift beyond timer latency


async def test_fault_wakes_waiters_of_every_mps_co_runner():
    rt = runtime("mps")
    rt.start()
    a, b = rt.open(token()), rt.open(token())
    await rt.launch(b, [GEMM] * 100)
    waiter = asyncio.create_task(rt.synchronize(b))
    await asyncio.sleep(0.01)
    assert rt.inject_fault(a, 31) == [a.cid, b.cid]
    with pytest.raises(ContextLostError, match="co-runner"):
        await asyncio.wait_for(waiter, 1)


async def test_health_watchers_see_every_change():
    rt = runtime()
    rt.start()
    seen = []

    async def watch():
        async for devices in rt.watch():
            seen.append(devices[0]["healthy"])
            if len(seen) == 3:
                return

    task = asyncio.create_task(watch())
    await asyncio.sleep(0)
    rt.set_fault("GPU-0", 79)
    rt.clear_fault("GPU-0")
    await asyncio.wait_for(task, 1)
    assert seen == [True, False, True]


requests = st.lists(st.one_of(
    st.tuples(st.just("malloc"), st.integers(-2**70, 2**70)),
    st.tuples(st.just("free"), st.integers(-5, 2**64)),
    st.tuples(st.just("launch"), st.dictionaries(st.sampled_from(["op", "m", "n", "k", "dtype", "bytes", "flops"]),
                                                 st.one_of(st.integers(-3, 5000), st.text(max_size=6),
                                                           st.sampled_from(["gemm", "copy", "elementwise", "fp8"])))),
    st.tuples(st.just("open"), st.text(max_size=40)),
), max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests)
def test_fuzzed_requests_only_ever_fail_with_simgpu_errors(steps):
    async def run():
        rt = runtime()
        rt.start()
        ctx = rt.open(token(mem_limit_bytes=1 << 30))
        for kind, arg in steps:
            try:
                if kind == "malloc":
                    rt.malloc(ctx, arg)
                elif kind == "free":
                    rt.free(ctx, arg)
                elif kind == "launch":
                    await rt.launch(ctx, [parse_op(arg)])
                else:
                    rt.open(arg)
            except SimgpuError:
                pass
        usage = rt.usage(ctx)
        assert usage["device_bytes"] <= 1 << 30
        rt.close(ctx)
        assert rt.node.devices["GPU-0"].memory.device_used == 0
        rt.stop()

    asyncio.run(run())


async def test_oversubscribe_config_spills_and_slows_but_never_fails():
    from simgpu.device import build_node
    from simgpu.nodeconfig import parse_node_config
    from simgpu.perf import ElementwiseOp

    cfg = parse_node_config({"version": "v1", "memoryQuota": "oversubscribe", "gpus": [{"model": "L4"}]})
    node = build_node(cfg, "n")
    uuid = next(iter(node.devices))
    rt = NodeRuntime(node, secret=SECRET, time_dilation=0.01)
    rt.start()
    stream = ElementwiseOp(bytes=1 << 30)

    async def seconds_per_kernel(ctx):  # emulated time the kernels were in flight (no host overhead)
        await rt.launch(ctx, [stream] * 5)
        await rt.synchronize(ctx)
        return ctx.device.clients[ctx.cid].totals.busy_s / 5

    fits = rt.open(issue_token(SECRET, Grant(device_uuid=uuid, mem_limit_bytes=8 << 30)))
    rt.malloc(fits, 6 << 30)
    fast = await seconds_per_kernel(fits)
    rt.close(fits)
    spills = rt.open(issue_token(SECRET, Grant(device_uuid=uuid, mem_limit_bytes=4 << 30)))
    alloc = rt.malloc(spills, 6 << 30)
    assert (alloc.device_bytes, alloc.host_bytes) == (4 << 30, 2 << 30)
    slow = await seconds_per_kernel(spills)
    assert slow > 3 * fast  # a third of its traffic over PCIe instead of GDDR6
