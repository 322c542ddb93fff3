"""The daemon's gRPC Session, fuzzed with whole message streams (open with good, forged, foreign or garbage
tokens; malloc, free, launch of any op, synchronize, usage, fault, empty bodies; ids of any size), through the
service's handler as gRPC calls it. Every request gets exactly one reply, in order, with its id, and an error is
one of the documented codes (never INTERNAL: that would be a bug); when the stream ends the context and all its
memory are gone (no state leaks into the next workload), and a neighbour's context is untouched."""
from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from simgpu.catalog import get_gpu
from simgpu.daemon import simgpu_daemon_pb2 as pb
from simgpu.daemon.runtime import NodeRuntime
from simgpu.daemon.service import NodeDaemonService
from simgpu.device import build_gpu
from simgpu.device.node import EmulatedNode
from simgpu.token import Grant, issue_token

SECRET = b"f" * 32
GIB = 1 << 30
CODES = {"INVALID_ARGUMENT", "OUT_OF_MEMORY", "UNAUTHENTICATED", "UNAVAILABLE", "CONTEXT_LOST"}
GOOD = issue_token(SECRET, Grant(device_uuid="GPU-0", mem_limit_bytes=GIB, sm_limit_pct=50, pod_name="p",
                                 container="main"))
tokens = st.one_of(
    st.just(GOOD),
    st.just(issue_token(b"x" * 32, Grant(device_uuid="GPU-0"))),  # another node's secret
    st.just(issue_token(SECRET, Grant(device_uuid="GPU-nope"))),  # a device this node does not have
    st.just(GOOD[:-4]), st.just(GOOD.replace(".", "")), st.text(max_size=30))
int64 = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, 1, -1, GIB, 2 * GIB, 2**62]))
ops = st.builds(pb.Op, kind=st.sampled_from(["gemm", "copy", "elementwise", "fft", ""]), m=int64, n=int64, k=int64,
                dtype=st.sampled_from(["", "bf16", "fp16", "fp8", "int4", "tf32", "x"]),
                bytes=int64, flops=int64)
small_ops = st.builds(pb.Op, kind=st.sampled_from(["gemm", "copy", "elementwise"]), m=st.integers(1, 512),
                      n=st.integers(1, 512), k=st.integers(1, 512), bytes=st.integers(1, 1 << 20),
                      flops=st.integers(0, 1 << 20))


def body(draw_op):
    return st.one_of(
        tokens.map(lambda t: {"open": pb.Open(token=t)}),
        int64.map(lambda b: {"malloc": pb.Malloc(bytes=b)}),
        int64.map(lambda h: {"free": pb.Free(handle=h)}),
        st.lists(draw_op, max_size=3).map(lambda o: {"launch": pb.Launch(ops=o)}),
        st.just({"synchronize": pb.Synchronize()}), st.just({"usage": pb.Usage()}),
        st.integers(-5, 100).map(lambda x: {"fault": pb.InjectFault(xid=x)}), st.just({}))


requests = st.lists(st.builds(lambda i, b: pb.SessionRequest(id=i, **b), st.integers(0, 2**64 - 1),
                              st.one_of(body(small_ops), body(ops))), max_size=12)


async def session(steps: list) -> None:
    node = EmulatedNode([build_gpu(get_gpu("H100"), uuid="GPU-0", sharing="fractional")], "n")
    rt = NodeRuntime(node, secret=SECRET, time_dilation=0.001)
    rt.start()
    neighbour = rt.open(GOOD)
    rt.malloc(neighbour, GIB // 2)
    service = NodeDaemonService(rt)

    async def stream():
        for req in steps:
            yield pb.SessionRequest.FromString(req.SerializeToString())  # as it crosses the wire

    replies = []

    async def drain():
        async for reply in service.Session(stream(), None):
            replies.append(reply)

    await asyncio.wait_for(drain(), 30)
    assert [r.id for r in replies] == [s.id for s in steps]
    for reply in replies:
        if reply.HasField("error"):
            assert reply.error.code in CODES, reply.error
            assert reply.error.message and "\n" not in reply.error.message
            event(f"error {reply.error.code}")
        else:
            event(f"ok {reply.WhichOneof('body')}")
    device = node.devices["GPU-0"]
    assert set(rt.contexts) <= {neighbour.cid}  # the stream's context is closed (a fault may take the neighbour)
    if neighbour.cid in rt.contexts:
        assert device.memory.device_used == GIB // 2
    rt.stop()


@settings(max_examples=2000, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests)
def test_every_message_gets_one_reply_and_nothing_outlives_the_stream(steps):
    asyncio.run(session(steps))
