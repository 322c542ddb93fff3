"""A hostile workload cannot hurt its neighbours on the daemon: one that opens contexts with another pod's
token, one that asks for more memory than its grant (from one context or many) and one that floods the daemon
with launches each leave a well-behaved neighbour's throughput within 10% of what it is next to a co-runner
that uses its own share normally, and its memory quota whole. NodeRuntime on its virtual clock, so each
figure is simgpu's account of what ran, the same on every machine."""
import asyncio
import statistics

import pytest

from simgpu.catalog import get_gpu
from simgpu.daemon.runtime import NodeRuntime
from simgpu.device import build_gpu
from simgpu.device.node import EmulatedNode
from simgpu.errors import OutOfMemoryError
from simgpu.perf import GemmOp
from simgpu.token import Grant, issue_token

SECRET = b"i" * 32
GEMM = GemmOp(4096, 4096, 4096)
TINY = GemmOp(256, 256, 256)
GIB = 1 << 30


def token(pod: str, sm: int = 50, mem: int = 40 * GIB, priority: int = 1) -> str:
    return issue_token(SECRET, Grant(device_uuid="GPU-0", mem_limit_bytes=mem, sm_limit_pct=sm, priority=priority,
                                     pod_namespace="team", pod_name=pod, container="main"))


async def neighbour_rate(attack) -> float:
    """GEMMs per virtual second of pod `good` (half the GPU) while `attack(rt)` runs beside it."""
    node = EmulatedNode([build_gpu(get_gpu("H100"), uuid="GPU-0", sharing="fractional")], "n")
    rt = NodeRuntime(node, secret=SECRET, time_dilation=4.0)
    rt.start()
    good = rt.open(token("good"))
    tasks = [asyncio.create_task(a) for a in attack(rt)]
    await asyncio.sleep(0.01)
    rt.catch_up()
    start = node.now  # when the kernels are queued, and when the device finished them (not when the loop saw it)
    await rt.launch(good, [GEMM] * 200)
    elapsed = await rt.synchronize(good) - start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    rt.stop()
    return 200 / elapsed


async def busy(rt, ctx, op=GEMM, batch=8):
    while True:
        await rt.launch(ctx, [op] * batch)


def normal(rt):  # the co-runner using its own half of the GPU, all the time
    return [busy(rt, rt.open(token("other")))]


def stolen_token(rt):  # the co-runner, plus a workload running 4 more contexts on the co-runner's token
    return [*normal(rt), *(busy(rt, rt.open(token("other"))) for _ in range(4))]


def launch_flood(rt):  # the co-runner in 4 contexts of its own grant, each keeping a queue of tiny kernels full
    return [busy(rt, rt.open(token("other")), TINY, 256) for _ in range(4)]


@pytest.mark.parametrize("attack", [stolen_token, launch_flood], ids=lambda f: f.__name__)
async def test_a_hostile_co_runner_leaves_its_neighbour_within_ten_percent(attack):
    # the clock is the wall's (dilation 4): when each run's kernels are queued, against the co-runner's time
    # slices, is the wall's doing, so take the median of 5 runs of each
    base = statistics.median([await neighbour_rate(normal) for _ in range(5)])
    hostile = statistics.median([await neighbour_rate(attack) for _ in range(5)])
    assert hostile >= 0.9 * base, f"neighbour at {hostile / base:.0%} of its normal throughput"


async def test_a_stolen_token_shares_the_owners_memory_quota_and_takes_none_of_the_neighbours():
    node = EmulatedNode([build_gpu(get_gpu("H100"), uuid="GPU-0", sharing="fractional")], "n")
    rt = NodeRuntime(node, secret=SECRET)
    rt.start()
    half = node.devices["GPU-0"].memory.total // 2
    owner, thief, neighbour = rt.open(token("a", mem=half)), rt.open(token("a", mem=half)), rt.open(token("b",
                                                                                                        mem=half))
    rt.malloc(owner, half - GIB)
    with pytest.raises(OutOfMemoryError) as over:
        rt.malloc(thief, 2 * GIB)  # the grant's quota is spent, whichever context spent it
    assert over.value.used == half - GIB and over.value.quota == half
    rt.malloc(thief, GIB)  # what is left of it, no more
    assert rt.malloc(neighbour, half).device_bytes == half  # the neighbour's whole quota is there
    rt.close(owner)
    assert rt.malloc(thief, 2 * GIB).device_bytes == 2 * GIB  # freed with the context that held it
    rt.stop()


async def test_contexts_of_different_containers_keep_their_own_quotas():
    node = EmulatedNode([build_gpu(get_gpu("H100"), uuid="GPU-0", sharing="fractional")], "n")
    rt = NodeRuntime(node, secret=SECRET)
    rt.start()
    a = rt.open(issue_token(SECRET, Grant(device_uuid="GPU-0", mem_limit_bytes=GIB, pod_name="p", container="a")))
    b = rt.open(issue_token(SECRET, Grant(device_uuid="GPU-0", mem_limit_bytes=GIB, pod_name="p", container="b")))
    whole = [rt.open(issue_token(SECRET, Grant(device_uuid="GPU-0", mem_limit_bytes=GIB))) for _ in range(2)]
    for ctx in (a, b, *whole):  # one pod's two containers, and two grants naming no pod: one quota each
        assert rt.malloc(ctx, GIB).device_bytes == GIB
    rt.stop()
