"""Ops on the wire: what simgpu.client sends is the op the daemon runs, the elementwise input count
included; a message without the count (an older client) means 1 input; bad counts are INVALID_ARGUMENT."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simgpu.catalog import get_gpu
from simgpu.client import op_message, pb
from simgpu.daemon.runtime import NodeRuntime
from simgpu.daemon.service import NodeDaemonService, error_reply
from simgpu.device import build_gpu
from simgpu.device.node import EmulatedNode
from simgpu.errors import SimgpuError
from simgpu.perf import CopyOp, ElementwiseOp, GemmOp
from simgpu.perf.ops import ELEMENTWISE_INPUTS, SIZE_MAX
from simgpu.token import Grant, issue_token

SECRET = b"w" * 32
ADD = ElementwiseOp(3 * 2**30, 2**28, inputs=2)


def wire(msg):
    """The message as the other end parses it from bytes."""
    return type(msg).FromString(msg.SerializeToString())


def op_parser() -> NodeDaemonService:
    return NodeDaemonService(runtime=None)  # parsing an op never touches the runtime


@given(nbytes=st.integers(1, SIZE_MAX["bytes"]), flops=st.integers(0, SIZE_MAX["flops"]), inputs=st.sampled_from(ELEMENTWISE_INPUTS))
def test_an_elementwise_op_arrives_as_sent(nbytes, flops, inputs):
    op = ElementwiseOp(nbytes, flops, inputs=inputs)
    assert op_parser()._op(wire(op_message(op))) == op


def test_the_dict_form_keeps_its_input_count():
    msg = op_message({"op": "elementwise", "bytes": 96, "inputs": 3})
    assert op_parser()._op(wire(msg)) == ElementwiseOp(96, 0, inputs=3)


def test_a_message_without_the_field_is_one_input():
    msg = wire(pb.Op(kind="elementwise", bytes=64, flops=8))  # what a client older than the field sends
    assert not msg.HasField("inputs")
    assert op_parser()._op(msg) == ElementwiseOp(64, 8, inputs=1)


def test_the_op_cache_keeps_input_counts_apart():
    parser = op_parser()
    two = parser._op(wire(op_message(ElementwiseOp(64, inputs=2))))
    absent = parser._op(wire(pb.Op(kind="elementwise", bytes=64)))
    one = parser._op(wire(op_message(ElementwiseOp(64, inputs=1))))
    assert (two.inputs, absent.inputs, one.inputs) == (2, 1, 1)


@pytest.mark.parametrize("bad", [0, 5, -1, 2**31 - 1])
def test_an_out_of_range_count_is_invalid_argument_naming_the_field(bad):
    with pytest.raises(SimgpuError) as err:
        op_parser()._op(wire(pb.Op(kind="elementwise", bytes=64, inputs=bad)))
    reply = error_reply(err.value)
    assert (reply.code, reply.field) == ("INVALID_ARGUMENT", "inputs")
    assert list(reply.allowed) == [str(k) for k in ELEMENTWISE_INPUTS]


@pytest.mark.parametrize("msg", [pb.Op(kind="gemm", m=64, n=64, k=64, dtype="bf16", inputs=2),
                                 pb.Op(kind="copy", bytes=64, inputs=1)])
def test_a_count_on_a_gemm_or_copy_is_refused(msg):
    with pytest.raises(SimgpuError) as err:
        op_parser()._op(wire(msg))
    assert error_reply(err.value).code == "INVALID_ARGUMENT" and err.value.field == "inputs"


def test_gemm_and_copy_still_round_trip():
    for op in (GemmOp(128, 256, 512, "fp16"), CopyOp(4096)):
        assert op_parser()._op(wire(op_message(op))) == op


async def test_a_session_hands_the_runtime_the_ops_input_count():
    node = EmulatedNode([build_gpu(get_gpu("H100"), uuid="GPU-0", sharing="mps")], "n")
    rt = NodeRuntime(node, secret=SECRET, time_dilation=0.001)
    rt.start()
    launched = []
    run = rt.launch

    async def recording_launch(ctx, ops):
        launched.extend(ops)
        return await run(ctx, ops)

    rt.launch = recording_launch
    token = issue_token(SECRET, Grant(device_uuid="GPU-0"))
    sent = [ADD, ElementwiseOp(2**20)]

    async def requests():
        yield wire(pb.SessionRequest(id=1, open=pb.Open(token=token)))
        yield wire(pb.SessionRequest(id=2, launch=pb.Launch(ops=[op_message(op) for op in sent])))
        yield wire(pb.SessionRequest(id=3, launch=pb.Launch(ops=[pb.Op(kind="elementwise", bytes=64, inputs=9)])))

    replies = [wire(r) async for r in NodeDaemonService(rt).Session(requests(), context=None)]
    rt.stop()
    assert [r.WhichOneof("body") for r in replies[:2]] == ["opened", "launched"]
    assert replies[1].launched.accepted == 2 and launched == sent
    assert (replies[2].error.code, replies[2].error.field) == ("INVALID_ARGUMENT", "inputs")
