"""The grant, not the context, is what the device schedules and charges: a co-runner that opens more contexts on
its grant (or on a stolen token) takes no more of the GPU from its neighbour, under time-slicing with compute
shares and under MPS. Pure virtual time: exact, the same on every machine."""
import pytest

from simgpu.catalog import get_gpu
from simgpu.device import ClientSpec, EmulatedDevice
from simgpu.device.engine import MAX_PENDING_LAUNCHES
from simgpu.perf import GemmOp

GEMM = GemmOp(4096, 4096, 4096)
TINY = GemmOp(256, 256, 256)


def spec(mode: str, group: str) -> ClientSpec:
    half = {"mps_pct": 50} if mode == "mps" else {"compute_share": 0.5}
    return ClientSpec(name=group, quota_group=group, **half)


def neighbour_rate(mode: str, others: list[tuple[GemmOp, int]]) -> float:
    """GEMMs per second of a half-GPU grant next to grant `other`'s contexts, each (op, kernels it keeps queued)."""
    dev = EmulatedDevice(get_gpu("H100"), uuid="GPU-0", mode=mode)
    good = dev.open(spec(mode, "good"))
    rivals = [(dev.open(spec(mode, "other")), op, depth) for op, depth in others]

    def top_up():
        for cid, op, depth in rivals:
            for _ in range(depth - dev.clients[cid].pending):
                dev.launch(cid, op)

    top_up()
    dev.advance(0.01)
    for _ in range(200):
        dev.launch(good, GEMM)
    start = dev.now
    while dev.clients[good].stream:
        top_up()
        dev.run_until(min(dev.next_event(), dev.now + 1e-4))
    return 200 / (dev.now - start)


@pytest.mark.parametrize("mode", ["timeslice", "mps"])
@pytest.mark.parametrize("attack", [[(GEMM, 64)] * 5, [(TINY, 1024)] * 4, [(GEMM, 4), (GEMM, 64)]],
                         ids=["stolen_token", "launch_flood", "short_bursts"])
def test_more_contexts_on_the_co_runners_grant_leave_the_neighbour_as_fast_as_one(mode, attack):
    # short_bursts: one context's stream runs dry within its grant's slice; the grant's other context has the rest
    normal = neighbour_rate(mode, [(GEMM, 64)])
    assert neighbour_rate(mode, attack) == pytest.approx(normal, rel=0.01)


def test_a_grants_contexts_share_one_launch_queue():
    dev = EmulatedDevice(get_gpu("H100"), uuid="GPU-0", mode="timeslice")
    a, b = dev.open(spec("timeslice", "g")), dev.open(spec("timeslice", "g"))
    alone = dev.open(ClientSpec())
    for _ in range(MAX_PENDING_LAUNCHES - 10):
        dev.launch(a, TINY)
    assert dev.room(b) == dev.room(a) == 10  # a second context buys no second backlog
    assert dev.room(alone) == MAX_PENDING_LAUNCHES  # a context of no grant has its own
