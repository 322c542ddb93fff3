"""The device plugin's exporter: its families are exactly the catalogue's device-plugin part (names, types,
label names), Allocate results and latency are counted per resource, the devices gauge follows health, and
`promtool check metrics` passes on the exposition — in process and from a running `fgpu-device-plugin`
(`--metrics-port`)."""
import socket
import urllib.request

import grpc
import pytest
from polling import wait_for
from promcheck import catalogue_shape, matching, promtool_check, registry_shape, sample_labels, series, value
from prometheus_client import generate_latest
from test_cores import FRACTIONAL, pod
from test_inprocess import SECRET, StubPods, _allocate
from test_plugin_process import TWO_H100

from deviceplugin.allocate import AllocContext
from deviceplugin.labels import Health
from deviceplugin.metrics import PluginMetrics
from deviceplugin.resources import discover, node_devices
from deviceplugin.server import PluginManager, make_shared
from fgpu_contracts.metrics import of


def test_families_are_the_catalogues_plugin_part_even_before_any_sample():
    metrics = PluginMetrics()
    assert registry_shape(metrics.registry) == catalogue_shape(of("deviceplugin"))
    promtool_check(generate_latest(metrics.registry).decode())


@pytest.fixture
def manager(kubelet, plugin_dir):
    gpu = FRACTIONAL.gpu_devices("n1")[0].uuid
    pods = StubPods([pod("p", [("main", gpu, 4 << 30, 25)])])
    started = PluginManager(discover(FRACTIONAL, "n1"), make_shared(AllocContext("n1", SECRET),
                                                                    node_devices(FRACTIONAL, "n1"), pods), plugin_dir)
    started.start()
    yield started
    started.stop()


def test_allocations_by_result_latency_and_devices_by_health(kubelet, manager):
    gpu = FRACTIONAL.gpu_devices("n1")[0].uuid
    slots = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 20)
    stub = kubelet.plugin("nvidia.com/gpu")
    _allocate(stub, [slots[0].ID])
    for ids, code in (([slots[1].ID], grpc.StatusCode.FAILED_PRECONDITION), (["nope"], grpc.StatusCode.INVALID_ARGUMENT)):
        with pytest.raises(grpc.RpcError) as err:  # no pod left to match; an unknown device ID
            _allocate(stub, ids)
        assert err.value.code() == code
    manager.shared.board.update({gpu: Health(False, 79)})
    registry = manager.shared.metrics.registry
    text = generate_latest(registry).decode()
    promtool_check(text)
    scraped = series(text)
    for result in ("ok", "refused", "invalid"):
        assert value(scraped, "fgpu_deviceplugin_allocations_total", resource="nvidia.com/gpu", result=result) == 1
    assert value(scraped, "fgpu_deviceplugin_allocations_total", resource="nvidia.com/gpu", result="error") == 0
    assert value(scraped, "fgpu_deviceplugin_allocate_duration_seconds_count", resource="nvidia.com/gpu") == 3
    assert value(scraped, "fgpu_deviceplugin_devices", resource="nvidia.com/gpu", health="Unhealthy") == 10
    assert value(scraped, "fgpu_deviceplugin_devices", resource="nvidia.com/gpu", health="Healthy") == 10
    assert value(scraped, "fgpu_deviceplugin_registrations_total") >= 1
    assert value(scraped, "fgpu_deviceplugin_unwritten_records") == 0  # a stub pod source: no journal
    labels = sample_labels(registry)
    for name, m in of("deviceplugin").items():
        assert labels[name] == {m.labels}, name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_running_plugin_serves_the_catalogue_on_metrics_port(kubelet, run_plugin):
    port = _free_port()
    proc = run_plugin(TWO_H100, "--metrics-port", str(port))
    devices = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 2)
    _allocate(kubelet.plugin("nvidia.com/gpu"), [devices[0].ID])

    def scrape():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                return resp.read().decode()
        except OSError:
            return None

    text = wait_for(scrape, timeout=10, what=f"/metrics on port {port}", interval=0.05, show=proc.stop)
    promtool_check(text)
    scraped = series(text)
    assert {name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum") for name, _ in scraped} \
        == set(of("deviceplugin"))
    assert not any(name.endswith("_created") for name, _ in scraped)
    assert value(scraped, "fgpu_deviceplugin_allocations_total", resource="nvidia.com/gpu", result="ok") == 1
    assert value(scraped, "fgpu_deviceplugin_devices", resource="nvidia.com/gpu", health="Healthy") == 2
    assert matching(scraped, "fgpu_deviceplugin_devices", health="Unhealthy")


def test_a_taken_or_bad_metrics_port_is_one_line_and_exit_2(run_plugin):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        proc = run_plugin(TWO_H100, "--metrics-port", str(taken.getsockname()[1]))
        proc.proc.wait(timeout=30)
    assert proc.proc.returncode == 2
    out = proc.stop().strip()
    assert out.startswith("fgpu-device-plugin: error: --metrics-port: ") and "\n" not in out, out
    bad = run_plugin(TWO_H100, "--metrics-port", "70000")
    bad.proc.wait(timeout=30)
    assert bad.proc.returncode == 2
    assert bad.stop().strip() == ("fgpu-device-plugin: error: argument --metrics-port: '70000' is not allowed "
                                  "(allowed: an integer, 0 <= N <= 65535; 0 picks any free port)")
