"""The node daemon's metrics: what a scrape serves is its part of the catalogue exactly, it passes promtool,
and it stays consistent through startup, idle GPUs, departing pods and a MIG layout change (no stale or
duplicate series, no NaN, no negative value)."""
import re
import shutil
import subprocess
from types import SimpleNamespace

import pytest
from promcheck import matching, promtool_check, series, value
from prometheus_client.parser import text_string_to_metric_families
from test_daemon import GEMM, GIB, Daemon, wait_for

from fgpu_contracts.metrics import of
from simgpu.catalog import get_gpu
from simgpu.client import DaemonClient
from simgpu.daemon.metrics import FAMILIES, SLO_MIN_BUSY_S, Exporter, Snapshot
from simgpu.device import ClientSpec, build_gpu
from simgpu.device.node import EmulatedNode

CONFIG = """version: v1
nodeName: metrics-node
tokenSecretFile: {secret}
gpus:
  - model: H100
    sharing: fractional
  - model: A100-80GB
    mig:
      layout: [3g.40gb, 4g.40gb]
"""
H100, A100 = get_gpu("H100"), get_gpu("A100-80GB")
# dcgm-exporter's own label set has `modelName`, which promtool's lint calls camelCase; it is kept on the
# DCGM_FI_* families because dashboards select on it. Nothing else may be found.
DCGM_MODELNAME_LINT = re.compile(r"^DCGM_FI_\w+ label names should be written in 'snake_case' not 'camelCase'$")


def promtool_check_with_dcgm_labels(text: str) -> None:
    """Every family but the DCGM ones passes `promtool check metrics` as is; the whole exposition parses and
    its lint finds nothing but `modelName` on DCGM families."""
    own = "\n".join(line for line in text.splitlines() if "DCGM_FI_" not in line) + "\n"
    promtool_check(own)  # skips (or fails in CI) without promtool
    done = subprocess.run([shutil.which("promtool"), "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60)
    problems = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode in (0, 3), problems  # 3: lint findings only (1 would be a parse error)
    assert [p for p in problems if not DCGM_MODELNAME_LINT.match(p)] == []


def served_shape(text: str) -> dict[str, tuple[str, set[tuple[str, ...]]]]:
    """Family (catalogue name) -> (type, the label-name sets its samples carry)."""
    out = {}
    for family in text_string_to_metric_families(text):
        name = family.name + ("_total" if family.type == "counter" else "")
        out[name] = (family.type, {tuple(sorted(s.labels)) for s in family.samples})
    return out


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("metrics"), CONFIG, ("--metrics-interval", "0.25"))
    d.first_scrape = d.scrape()  # as early as a Prometheus could: right after the port opened
    yield d
    d.stop()


def test_a_scrape_at_startup_serves_every_family_and_nothing_inconsistent(daemon):
    text = daemon.first_scrape
    assert set(served_shape(text)) == set(of("daemon"))
    scraped = series(text)  # no duplicate, NaN or negative
    assert not matching(scraped, "fgpu_pod_gpu_memory_used_bytes")  # no pods yet
    assert len(matching(scraped, "DCGM_FI_DEV_FB_FREE")) == 3  # the H100 and two MIG instances
    promtool_check_with_dcgm_labels(text)


def test_the_scrape_is_the_catalogue_passes_promtool_and_forgets_departed_pods(daemon):
    gpu = next(d["uuid"] for d in daemon.devices if not d["parent"] and d["model"].startswith("H100"))
    mig = next(d["uuid"] for d in daemon.devices if d["parent"])
    pods = []

    def open_context(device, **grant):
        client = DaemonClient(daemon.socket)
        pods.append(client)
        return client.open_context(daemon.token(device, pod_namespace="team", **grant))

    # a high-priority pod with two contexts in one container (one series), a low-priority hog, a MIG pod
    hi = [open_context(gpu, pod_name="serve", container="main", priority=0, slo_slowdown=1.5) for _ in range(2)]
    lo = open_context(gpu, pod_name="train", container="main", priority=1, mem_limit_bytes=8 * GIB)
    on_mig = open_context(mig, pod_name="mig", container="main", vdevice_index=0)
    lo.malloc(2 * GIB)
    for ctx, kernels in ((lo, 600), (on_mig, 600), (hi[0], 100), (hi[1], 100)):
        for _ in range(kernels):
            ctx.launch(GEMM)
        ctx.usage()  # sends the buffered launches without waiting for them

    def evaluated():
        s = series(daemon.scrape())
        return s if matching(s, "fgpu_qos_slo_attainment_ratio", pod="serve") else None
    assert wait_for(evaluated, timeout=10, step=0.1), daemon.scrape()
    text = daemon.scrape()
    shape = served_shape(text)
    catalogue = of("daemon")
    assert set(shape) == set(catalogue)
    for name, metric in catalogue.items():
        kind, labels = shape[name]
        assert kind == metric.type, name
        assert labels == {tuple(sorted(metric.labels))}, name  # every family has samples, with its labels
    promtool_check_with_dcgm_labels(text)
    scraped = series(text)
    assert len(matching(scraped, "fgpu_pod_kernels_total", pod="serve")) == 1  # two contexts, one series
    assert value(scraped, "hami_vgpu_memory_used_bytes", namespace="team", pod="train", container="main",
                 vdevice_index="0", device_uuid=gpu) == 2 * GIB
    assert value(scraped, "hami_vgpu_memory_limit_bytes", namespace="team", pod="train", container="main",
                 vdevice_index="0", device_uuid=gpu) == 8 * GIB
    [bound] = matching(scraped, "fgpu_qos_slo_slowdown_bound", pod="serve", priority="high").values()
    assert bound == 1.5  # the grant's bound, not the node's default
    assert not matching(scraped, "fgpu_qos_slo_slowdown_bound", pod="train")  # low priority: no SLO
    # dcgm-exporter's pod mapping: the shared H100 names no pod, the MIG instance its only one
    assert matching(scraped, "DCGM_FI_DEV_GPU_UTIL", UUID=gpu, GPU_I_PROFILE="", pod="")
    assert matching(scraped, "DCGM_FI_DEV_GPU_UTIL", GPU_I_PROFILE="3g.40gb", pod="mig")
    [watts] = matching(scraped, "DCGM_FI_DEV_POWER_USAGE", UUID=gpu).values()
    assert 0 < watts <= H100.power_w

    for client in pods:  # the pods go away (deleted: their contexts close)
        client.close()

    def forgotten():
        s = series(daemon.scrape())
        return not any(dict(k[1]).get("pod") for k in s) and not matching(s, "hami_vgpu_memory_used_bytes")
    assert wait_for(forgotten, timeout=5, step=0.1), daemon.scrape()


# --- the exporter on a node driven directly (no daemon, no wall clock) -----------------------------------------
def runtime(*gpus):
    return SimpleNamespace(node=EmulatedNode(list(gpus), "n"), contexts={}, catch_up=lambda: None)


def samples(snap: Snapshot, name: str, **labels: str) -> list[float]:
    names = FAMILIES[name].labels
    return [v for values, v in snap.samples[name] if labels.items() <= dict(zip(names, values, strict=True)).items()]


def advance(rt, dt: float) -> None:
    rt.node.run_until(rt.node.now + dt)


def test_a_gpu_with_no_clients_reads_idle():
    rt = runtime(build_gpu(H100, uuid="GPU-0", sharing="fractional"))
    exporter = Exporter(rt)
    advance(rt, 1.0)
    snap = exporter.step()
    assert samples(snap, "DCGM_FI_DEV_GPU_UTIL") == [0.0] and samples(snap, "DCGM_FI_DEV_POWER_USAGE") == [0.0]
    assert samples(snap, "DCGM_FI_DEV_SM_CLOCK") == [H100.boost_mhz]
    assert samples(snap, "DCGM_FI_DEV_FB_FREE") == [H100.mem_bytes / (1 << 20)]
    assert samples(snap, "hami_host_gpu_utilization_ratio") == [0.0]
    assert not any(snap.samples[name] for name in FAMILIES if name.startswith(("fgpu_pod", "hami_vgpu", "hami_container")))


def test_a_containers_kernel_counter_survives_one_of_its_contexts_and_goes_with_the_last():
    rt = runtime(build_gpu(H100, uuid="GPU-0", sharing="fractional"))
    device = rt.node.devices["GPU-0"]
    pod = {"namespace": "ns", "pod": "p", "container": "c"}
    a, b = device.open(ClientSpec(labels=pod)), device.open(ClientSpec(labels=pod))
    exporter = Exporter(rt)
    for cid in (a, b):
        for _ in range(10):
            device.launch(cid, GEMM)
    advance(rt, 1.0)
    first = samples(exporter.step(), "fgpu_pod_kernels_total", pod="p")
    assert first == [20.0]
    device.close(a)
    device.launch(b, GEMM)
    advance(rt, 1.0)
    assert samples(exporter.step(), "fgpu_pod_kernels_total", pod="p") == [21.0]  # never goes down
    device.close(b)
    advance(rt, 1.0)
    snap = exporter.step()
    assert not samples(snap, "fgpu_pod_kernels_total") and not exporter._series  # no stale series or state


def test_a_mig_layout_change_leaves_no_series_of_the_old_instances():
    rt = runtime(build_gpu(A100, uuid="GPU-0", mig_instances=[("MIG-a", "3g.40gb"), ("MIG-b", "4g.40gb")]))
    device = rt.node.devices["MIG-a"]
    cid = device.open(ClientSpec(labels={"namespace": "ns", "pod": "p", "container": "c"}))
    device.launch(cid, GEMM)
    exporter = Exporter(rt)
    advance(rt, 0.5)
    assert samples(exporter.step(), "fgpu_pod_kernels_total", GPU_I_PROFILE="3g.40gb") == [1.0]
    # the MIG manager re-partitions the GPU (its pods are gone by then): one 7g instance now
    rt.node = EmulatedNode([build_gpu(A100, uuid="GPU-0", mig_instances=[("MIG-c", "7g.80gb")])], "n")
    advance(rt, 0.5)
    snap = exporter.step()
    names = FAMILIES["DCGM_FI_DEV_FB_FREE"].labels
    assert [dict(zip(names, k, strict=True))["GPU_I_PROFILE"] for k, _ in snap.samples["DCGM_FI_DEV_FB_FREE"]] == [
        "7g.80gb"]
    assert not samples(snap, "fgpu_pod_kernels_total") and not exporter._series
    assert len(snap.samples["hami_host_gpu_memory_used_bytes"]) == 1


def test_slo_is_evaluated_over_enough_work_and_a_short_window_carries_over():
    rt = runtime(build_gpu(H100, uuid="GPU-0", sharing="fractional"))
    device = rt.node.devices["GPU-0"]
    hi = device.open(ClientSpec(priority=0, labels={"namespace": "ns", "pod": "hi", "container": "c"}))
    exporter = Exporter(rt, slo_slowdown=1.2)
    kernel = device.perf.cost(GEMM).kernel_seconds
    short = max(1, int(0.4 * SLO_MIN_BUSY_S / kernel))  # less work than one evaluation needs
    for _ in range(short):
        device.launch(hi, GEMM)
    advance(rt, 1.0)
    snap = exporter.step()
    assert samples(snap, "fgpu_qos_slo_evaluations_total") == [0.0]
    assert not samples(snap, "fgpu_qos_slo_attainment_ratio")  # nothing evaluated yet: no 0/0
    assert samples(snap, "fgpu_qos_slo_slowdown_bound", priority="high") == [1.2]  # the node's default
    for _ in range(2 * short):
        device.launch(hi, GEMM)
    advance(rt, 1.0)
    snap = exporter.step()
    assert samples(snap, "fgpu_qos_slo_evaluations_total") == [1.0]
    assert samples(snap, "fgpu_qos_slo_violations_total") == [0.0]  # alone: slowdown 1
    assert samples(snap, "fgpu_qos_slo_attainment_ratio") == [1.0]
    assert samples(snap, "fgpu_pod_slowdown", pod="hi") == [pytest.approx(1.0)]
