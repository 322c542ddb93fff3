"""DCGM-style counters from the engine: ratios in 0..1, framebuffer adds up, slowdown vs solo."""
import pytest

from simgpu.catalog import get_gpu
from simgpu.counters import Activity, combine, total_activity
from simgpu.device import ClientSpec, EmulatedDevice, build_gpu
from simgpu.perf import ElementwiseOp, GemmOp

H100 = get_gpu("H100")
GIB = 1 << 30
GEMM = GemmOp(8192, 8192, 8192)
STREAM = ElementwiseOp(bytes=4 * GIB)
RATIOS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active", "gr_engine_active")


def busy_device(mode):
    dev = EmulatedDevice(H100, uuid="GPU-c", mode=mode)
    a, b = dev.open(ClientSpec(name="a")), dev.open(ClientSpec(name="b"))
    dev.malloc(a, 10 * GIB)
    dev.malloc(b, 3 * GIB)
    t0 = dev.totals()
    for _ in range(30):
        dev.launch(a, GEMM)
        dev.launch(b, STREAM)
    dev.run_until(0.03)
    return dev, a, b, dev.counters(t0)


@pytest.mark.parametrize("mode", ["timeslice", "mps"])
def test_counters_are_ratios_and_framebuffer_adds_up(mode):
    dev, a, b, c = busy_device(mode)
    for name in RATIOS:
        assert 0.0 <= getattr(c, name) <= 1.0, name
        for client in c.clients.values():
            assert 0.0 <= getattr(client, name) <= 1.0, name
    assert c.fb_used + c.fb_free == c.fb_total == H100.mem_bytes
    assert c.fb_used == 13 * GIB == sum(cl.fb_used for cl in c.clients.values())
    assert c.gr_engine_active > 0.95  # always something running
    assert c.tensor_active > 0.2 and c.dram_active > 0.2  # a GEMM and a stream both ran


@pytest.mark.parametrize("mode", ["timeslice", "mps"])
def test_per_client_progress_and_slowdown_against_running_alone(mode):
    _, a, b, c = busy_device(mode)
    for cid in (a, b):
        client = c.clients[cid]
        assert 0.3 < client.progress_rate < 0.7  # two co-runners: roughly half speed each
        assert client.slowdown == pytest.approx(1 / client.progress_rate)


def test_idle_device_reads_zero_and_idle_client_has_no_rate():
    dev = EmulatedDevice(H100, uuid="GPU-idle", mode="timeslice")
    cid = dev.open()
    t0 = dev.totals()
    dev.advance(1.0)
    c = dev.counters(t0)
    assert all(getattr(c, name) == 0.0 for name in RATIOS)
    assert c.clients[cid].progress_rate is None and c.clients[cid].slowdown is None


def test_solo_client_has_slowdown_one_and_duty_cycle_shows_in_utilisation():
    dev = EmulatedDevice(H100, uuid="GPU-solo", mode="exclusive")
    cid = dev.open()
    t0 = dev.totals()
    for _ in range(10):
        dev.launch(cid, GEMM)
        dev.run_until_idle()
        dev.advance(dev.perf.cost(GEMM).kernel_seconds)  # idle as long as a GEMM runs
    c = dev.counters(t0)
    assert c.clients[cid].slowdown == pytest.approx(1.0)
    assert 0.4 < c.gr_engine_active < 0.6


def test_mig_gpu_counters_combine_instances_by_sms():
    gpu = build_gpu(H100, uuid="GPU-m", mig_instances=[("MIG-1", "3g.40gb"), ("MIG-2", "4g.40gb")])
    busy, idle = gpu.devices
    cid = busy.open()
    t_busy, t_idle = busy.totals(), idle.totals()
    for _ in range(20):
        busy.launch(cid, GEMM)
    busy.run_until(0.01)
    idle.run_until(0.01)
    parts = [(busy.counters(t_busy), busy.spec.sms), (idle.counters(t_idle), idle.spec.sms)]
    whole = combine(parts)
    # the board's power is its instances' (each at its share of the limit), its clock their SM-weighted mean
    assert whole.power_w == pytest.approx(parts[0][0].power_w) and 0 < whole.power_w < H100.power_w
    assert parts[0][0].sm_clock_mhz < whole.sm_clock_mhz < H100.boost_mhz  # the idle instance at full clock
    assert whole.gr_engine_active == pytest.approx(busy.spec.sms / (busy.spec.sms + idle.spec.sms), rel=0.01)
    assert whole.fb_total == busy.spec.mem_bytes + idle.spec.mem_bytes


def test_activity_sum_is_clipped():
    assert total_activity([Activity(sm_active=0.7), Activity(sm_active=0.6)]).sm_active == 1.0


def loop_alone(op, kernels, seconds):
    dev = EmulatedDevice(H100, uuid="GPU-p", mode="exclusive")
    cid = dev.open()
    t0 = dev.totals()
    for _ in range(kernels):
        dev.launch(cid, op)
    dev.run_until(seconds)
    return dev, dev.counters(t0)


def test_sm_clock_and_power_follow_the_perf_models_power_limit():
    idle = EmulatedDevice(H100, uuid="GPU-i", mode="exclusive")
    now = idle.counters(idle.totals())  # an empty window (a scrape at startup): the current state
    assert (now.sm_clock_mhz, now.power_w) == (H100.boost_mhz, 0.0)
    dev, busy = loop_alone(GEMM, 100, 0.1)
    # a bf16 GEMM loop is power-limited: the board sits at its limit and the clock drops below boost
    assert busy.power_w == pytest.approx(H100.power_w, rel=0.01)
    assert H100.peak_mhz * 0.6 < busy.sm_clock_mhz < H100.boost_mhz
    t1 = dev.totals()
    dev.run_until_idle()
    dev.advance(0.1)
    after = dev.counters(t1)
    assert after.power_w < busy.power_w and after.sm_clock_mhz > busy.sm_clock_mhz  # averages over the window
    _, window = loop_alone(STREAM, 20, 0.02)
    # the model gives bandwidth-bound kernels no power demand: full clock, no modelled power (a stated limit)
    assert window.sm_clock_mhz == pytest.approx(H100.boost_mhz) and window.power_w == 0.0
