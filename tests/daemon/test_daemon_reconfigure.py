"""The node daemon's dynamic-MIG re-layout (NodeRuntime.reconfigure): the dropped idle instances vanish at
once, the new ones appear after the GPU's reconfiguration time, an instance with a live context is never
destroyed (and a workload on a kept instance keeps running), two changes of one GPU never overlap, and an
invalid layout or a static GPU is refused with one line."""
import asyncio
import time

import pytest

from simgpu.daemon.runtime import NodeRuntime
from simgpu.device import build_node
from simgpu.errors import RelayoutRefused, SimgpuError
from simgpu.nodeconfig import mig_uuid, parse_node_config
from simgpu.perf import GemmOp
from simgpu.token import Grant, issue_token

SECRET = b"s" * 32
RECONFIGURE_S = 0.3


def runtime(dynamic=True) -> NodeRuntime:
    cfg = parse_node_config({"version": "v1", "nodeName": "n", "gpus": [
        {"model": "A100-80GB", "mig": {"layout": "all-1g.10gb", "dynamic": dynamic,
                                       "reconfigureSeconds": RECONFIGURE_S}}]})
    rt = NodeRuntime(build_node(cfg, "n"), secret=SECRET, time_dilation=1.0)
    rt.start()
    return rt


def layout(rt) -> list[tuple[str, int]]:
    return sorted(((d["profile"], d["start"]) for d in rt.devices() if d["parent"]), key=lambda x: x[1])


ALL_1G = [("1g.10gb", s) for s in range(7)]
WITH_3G = ALL_1G[:4] + [("3g.40gb", 4)]


def gpu_uuid(rt) -> str:
    return next(d["uuid"] for d in rt.devices() if not d["parent"])


async def test_dropped_instances_vanish_at_once_and_the_new_one_appears_after_the_reconfiguration_time():
    rt = runtime()
    seen = []
    t0 = time.monotonic()
    task = asyncio.create_task(rt.reconfigure(gpu_uuid(rt), WITH_3G, "c1"))
    await asyncio.sleep(RECONFIGURE_S / 3)
    seen.append(layout(rt))
    await task
    took = time.monotonic() - t0
    assert seen[0] == ALL_1G[:4]  # meanwhile: destroyed, nothing new yet
    assert layout(rt) == WITH_3G and took >= RECONFIGURE_S
    new = next(d["uuid"] for d in rt.devices() if d["profile"] == "3g.40gb")
    assert new == mig_uuid("n", 0, "3g.40gb", 4)  # the name a node config with that layout would give it
    ctx = rt.open(issue_token(SECRET, Grant(device_uuid=new)))
    assert ctx.device.spec.sms == 42


async def test_an_instance_with_a_live_context_is_never_destroyed_and_a_kept_one_keeps_running():
    rt = runtime()
    busy = rt.open(issue_token(SECRET, Grant(device_uuid=mig_uuid("n", 0, "1g.10gb", 5))))
    with pytest.raises(RelayoutRefused, match=r"1g.10gb@5 .* in use would be destroyed"):
        await rt.reconfigure(gpu_uuid(rt), WITH_3G)
    assert layout(rt) == ALL_1G  # nothing was touched
    rt.close(busy)
    kept = rt.open(issue_token(SECRET, Grant(device_uuid=mig_uuid("n", 0, "1g.10gb", 0))))
    await rt.launch(kept, [GemmOp(2048, 2048, 2048)] * 4)
    await rt.reconfigure(gpu_uuid(rt), WITH_3G)
    await rt.synchronize(kept)
    assert kept.device.clients[kept.cid].totals.kernels_done == 4 and not kept.device.clients[kept.cid].lost


async def test_two_changes_of_one_gpu_never_overlap():
    rt = runtime()
    first = asyncio.create_task(rt.reconfigure(gpu_uuid(rt), WITH_3G))
    await asyncio.sleep(0.01)
    with pytest.raises(RelayoutRefused, match="in progress"):
        await rt.reconfigure(gpu_uuid(rt), ALL_1G)
    await first
    assert layout(rt) == WITH_3G


@pytest.mark.parametrize(("dynamic", "wanted", "message"), [
    (True, [("3g.40gb", 2)], "not valid"),
    (True, [("4g.40gb", 0), ("3g.40gb", 4), ("1g.10gb", 6)], "not valid"),
    (False, WITH_3G, "not a dynamic-MIG GPU"),
])
async def test_invalid_layouts_and_static_gpus_are_refused(dynamic, wanted, message):
    rt = runtime(dynamic)
    with pytest.raises(SimgpuError, match=message) as err:
        await rt.reconfigure(gpu_uuid(rt), wanted)
    assert not isinstance(err.value, RelayoutRefused)
    assert layout(rt) == ALL_1G
