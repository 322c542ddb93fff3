"""Random alloc/free/launch/exit/fault sequences never leak, over-allocate or touch another's memory."""
from hypothesis import given, settings
from hypothesis import strategies as st

from simgpu.catalog import get_gpu
from simgpu.device import ClientSpec, ContextLostError, EmulatedDevice
from simgpu.errors import OutOfMemoryError, SimgpuError
from simgpu.perf import CopyOp

T4 = get_gpu("T4")
GIB = 1 << 30

actions = st.lists(st.tuples(
    st.sampled_from(["open", "malloc", "free", "launch", "close", "advance", "fault"]),
    st.integers(0, 5),  # which client
    st.integers(1, 6 * GIB),  # bytes
), max_size=60)


@settings(max_examples=60, deadline=None)
@given(actions, st.sampled_from(["hard", "oversubscribe"]), st.sampled_from(["timeslice", "mps"]))
def test_random_sequences_keep_the_books_balanced(steps, memory_mode, mode):
    dev = EmulatedDevice(T4, uuid="GPU-fuzz", mode=mode, memory_mode=memory_mode)
    clients: list[int] = []
    handles: dict[int, list[int]] = {}
    for action, who, nbytes in steps:
        cid = clients[who % len(clients)] if clients else None
        try:
            if action == "open" or cid is None:
                cid = dev.open(ClientSpec(mem_limit_bytes=(who + 1) * 2 * GIB))
                clients.append(cid)
                handles[cid] = []
            elif action == "malloc":
                handles[cid].append(dev.malloc(cid, nbytes).handle)
            elif action == "free" and handles[cid]:
                dev.free(cid, handles[cid].pop())
            elif action == "launch":
                dev.launch(cid, CopyOp(nbytes))
            elif action == "close":
                dev.close(cid)
                clients.remove(cid)
                del handles[cid]
            elif action == "advance":
                dev.advance(nbytes / 1e12)
            elif action == "fault":
                dev.fault(cid)
        except (OutOfMemoryError, ContextLostError):
            pass
        except SimgpuError as err:  # only the expected refusals
            assert err.field in ("context",), err
        # invariants after every step
        mem = dev.memory
        assert 0 <= mem.device_used <= mem.total
        assert 0 <= mem.host_used <= mem.host_total
        for c in clients:
            usage = mem.usage(c)
            assert usage.device_bytes <= usage.quota
            owned = [a for a in mem.allocations() if a.client == c]
            assert sum(a.device_bytes for a in owned) == usage.device_bytes
            assert sum(a.host_bytes for a in owned) == usage.host_bytes
        if memory_mode == "hard":
            assert mem.host_used == 0
        assert {a.client for a in mem.allocations()} <= set(clients)
    for c in list(clients):
        dev.close(c)
    assert dev.memory.device_used == 0 and dev.memory.host_used == 0 and not dev.memory.allocations()
    assert dev.run_until_idle() == dev.now
