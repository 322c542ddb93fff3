"""Every dashboard panel against a real Prometheus: the operator (scheduler and webhook), a node's device plugin
and its node daemon run as real processes on the real control plane, scraped every second through the shipped
scrape configs. Pods go through the whole path — admitted (one denied), placed (one parked), Allocate'd by the
stub kubelet — and the two placed pods then run on the emulated GPU with the token Allocate gave them: a
high-priority "serve" loop beside a low-priority "train" hog on the same GPU. Then every query of every panel,
with the template variables at All, must return data (a value that is a number, not only NaN), every
variable must have values, and `fgpu report` must draw each dashboard's key panels into a real PNG.

FGPU_KEEP_REPORT=DIR copies the PNGs there (how docs/monitoring/*.png were made)."""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from fgpu_operator.observe import promql
from fgpu_operator.observe.boards import BOARDS
from fgpu_operator.observe.prom import Prometheus
from fgpu_operator.observe.report import ALL
from operator_proc import start_operator, stop, wait_webhook_live
from plugin_proc import running_plugin
from polling import wait_for
from promserver import running_prometheus, static_scrape_configs

from devcluster.kubeplane import free_port
from deviceplugin.api import api_pb2
from fgpu_contracts import keys
from simgpu.client import DaemonClient
from simgpu.perf import GemmOp
from simgpu.token import verify_token

pytestmark = pytest.mark.e2e
NODE = "dash-node"
SECRET = b"dashboards-secret-0123456789abcd"
# two fractional H100s and an A100 split into two MIG instances (the MIG panels read those series)
CONFIG = """version: v1
gpus:
  - {model: H100, count: 2, sharing: fractional}
  - {model: A100-80GB, mig: {layout: [3g.40gb, 4g.40gb]}}
fractional: {splitCount: 4}
"""
RESOURCES = {"nvidia.com/gpu": 8, "nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-4g.40gb": 1}  # what it advertises
GEMM = GemmOp(8192, 8192, 8192)  # ~1.5 ms on an H100 (emulated, at wall-clock speed)
GIB = 1 << 30
RUN_S = 20.0  # workload time under scrape: rates and 4 s rate windows fill, and the report has a story
FGPU = str(Path(sys.executable).with_name("fgpu"))
REPO = Path(__file__).resolve().parents[2]


def _pod(name: str, fraction: str | None = None, memory: str | None = None, priority: str | None = None,
         mig: str | None = None) -> dict:
    asked = {keys.FGPU_FRACTION: fraction, keys.FGPU_MEMORY: memory, keys.FGPU_PRIORITY: priority,
             keys.FGPU_MIG_PROFILE: mig}
    annotations = {k: v for k, v in asked.items() if v}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
            "spec": {"nodeSelector": {"fgpu-e2e": "dashboards"}, "containers": [{"name": "main", "image": "busybox"}]}}


def _node_ready(core, kubelet) -> None:
    """What the node's kubelet and lifecycle controller would do: Ready, capacity from ListAndWatch, no taint."""
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    for resource, count in RESOURCES.items():
        capacity[resource] = str(len(kubelet.wait_devices(resource, lambda d, n=count: len(d) == n, timeout=20)))
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "stub kubelet"}
    core.patch_node_status(NODE, {"status": {"capacity": capacity, "allocatable": capacity, "conditions": [ready]}})
    core.patch_node(NODE, {"spec": {"taints": None}})


@pytest.fixture
def node_daemon(tmp_path):
    """`simgpu daemon` for NODE on CONFIG with the plugin's secret, metrics every 0.5 s; yields (socket, port)."""
    workdir = Path(tempfile.mkdtemp(prefix="dash", dir="/tmp"))  # unix socket paths are limited to 108 bytes
    (workdir / "secret").write_bytes(SECRET)
    (workdir / "node.yaml").write_text(CONFIG + f"tokenSecretFile: {workdir}/secret\n")
    sock, port = str(workdir / "daemon.sock"), free_port()
    log = tmp_path / "daemon.log"
    proc = subprocess.Popen([sys.executable, "-m", "simgpu.cli", "daemon", "--config", str(workdir / "node.yaml"),
                             "--socket", sock, "--node-name", NODE, "--metrics-port", str(port),
                             "--metrics-interval", "0.5"], cwd=REPO, stdout=open(log, "wb"),  # noqa: SIM115
                            stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: os.path.exists(sock) or proc.poll() is not None, 30, "the daemon's socket")
        assert proc.poll() is None, log.read_text()
        yield sock, port
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def _allocate(core, kubelet, namespace: str, name: str, resource: str = "nvidia.com/gpu") -> str:
    """The kubelet's Allocate for pod `name` once bound to NODE; the context token the plugin hands its container."""
    wait_for(lambda: core.read_namespaced_pod(name, namespace).spec.node_name, what=f"{name} bound")
    pod = core.read_namespaced_pod(name, namespace)
    count = int(pod.spec.containers[0].resources.limits[resource])
    slots = kubelet.wait_devices(resource, lambda d: len(d) >= count, timeout=10)
    response = kubelet.plugin(resource).Allocate(api_pb2.AllocateRequest(container_requests=[
        api_pb2.ContainerAllocateRequest(devices_ids=[s.ID for s in slots[:count]])]), timeout=10)
    token = dict(response.container_responses[0].envs)["FGPU_CONTEXT_TOKEN"]
    if resource != "nvidia.com/gpu":  # a MIG instance is handed out by device ID, as NVIDIA's plugin does
        return token
    assert verify_token(SECRET, token).pod_name == name  # the oldest pending pod: the one asked for
    wait_for(lambda: core.read_namespaced_pod(name, namespace).metadata.annotations.get(keys.ALLOCATED),
             what=f"{name}'s allocation record")
    return token


def _workload(socket: str, tokens: dict[str, str], stop_event: threading.Event) -> list[threading.Thread]:
    """`train` keeps its GPU busy, and `mig` its MIG instance; `serve` sends requests of 4 GEMMs with 4 ms of
    host work between them."""
    def busy(name: str, nbytes: int):
        with DaemonClient(socket) as client:
            ctx = client.open_context(tokens[name])
            ctx.malloc(nbytes)
            while not stop_event.is_set():
                for _ in range(64):
                    ctx.launch(GEMM)
                ctx.usage()  # sends the buffered launches; a launch waits while the queue is full

    def serve():
        with DaemonClient(socket) as client:
            ctx = client.open_context(tokens["serve"])
            ctx.malloc(2 * GIB)
            while not stop_event.is_set():
                for _ in range(4):
                    ctx.launch(GEMM)
                ctx.synchronize()
                time.sleep(0.004)

    threads = [threading.Thread(target=busy, args=("train", 6 * GIB), daemon=True),
               threading.Thread(target=busy, args=("mig", 10 * GIB), daemon=True),
               threading.Thread(target=serve, daemon=True)]
    for t in threads:
        t.start()
    return threads


def _has_numbers(series) -> bool:
    return any(not math.isnan(v) for s in series for _, v in s.points)


def test_every_panel_query_returns_data_and_report_draws_them(k8s, namespace, tmp_path, node_daemon):
    from kubernetes.client.rest import ApiException

    daemon_socket, daemon_port = node_daemon
    plugin_port, operator_port, prom_port = free_port(), free_port(), free_port()
    with running_plugin(k8s, NODE, CONFIG, SECRET, labels={"fgpu-e2e": "dashboards"},
                        args=("--metrics-port", str(plugin_port))) as (core, kubelet, cfg):
        wait_for(lambda: keys.INVENTORY in (core.read_node(NODE).metadata.annotations or {}), 30,
                 "the plugin to publish the inventory")
        _node_ready(core, kubelet)
        operator = start_operator(k8s, tmp_path, "--webhook-port", str(free_port()), "--webhook-host", "127.0.0.1",
                                  "--manage-webhook-config", "--trusted-user", "admin",
                                  "--metrics-port", str(operator_port))
        jobs = static_scrape_configs({"fgpu-operator": (f"127.0.0.1:{operator_port}", "control-plane"),
                                      "fgpu-device-plugin": (f"127.0.0.1:{plugin_port}", NODE),
                                      "fgpu-node-daemon": (f"127.0.0.1:{daemon_port}", NODE)})
        stop_event = threading.Event()
        threads: list[threading.Thread] = []
        try:
            with running_prometheus(tmp_path, jobs, prom_port) as url:
                prom = Prometheus(url)
                # Prometheus hands discovered targets to its scrapers up to 5 s after start: wait for the first
                # scrape of all three, so what happens from now on is seen from before it happened
                wait_for(lambda: len(prom.query("up == 1")) == len(jobs), 30, "every target scraped once",
                         show=lambda: prom.query("up"))
                started = time.time()
                wait_webhook_live(core, namespace)
                core.create_namespaced_pod(namespace, _pod("serve", "0.5", "4Gi", "high"))
                with pytest.raises(ApiException) as denied:  # the webhook refuses a fraction above 1
                    core.create_namespaced_pod(namespace, _pod("bad", "1.5", "4Gi"))
                assert denied.value.status == 400
                tokens = {"serve": _allocate(core, kubelet, namespace, "serve")}
                core.create_namespaced_pod(namespace, _pod("train", "0.5", "8Gi", "low"))
                tokens["train"] = _allocate(core, kubelet, namespace, "train")
                core.create_namespaced_pod(namespace, _pod("mig", mig="3g.40gb"))
                tokens["mig"] = _allocate(core, kubelet, namespace, "mig", "nvidia.com/mig-3g.40gb")
                # two whole GPUs, while serve and train fill one of the node's two: parked as unschedulable
                core.create_namespaced_pod(namespace, _pod("big", "2"))
                assert verify_token(SECRET, tokens["serve"]).device_uuid == \
                    verify_token(SECRET, tokens["train"]).device_uuid  # binpack: both on one GPU
                threads = _workload(daemon_socket, tokens, stop_event)
                time.sleep(RUN_S)
                end = time.time()
                rate = promql.rate_interval(1, prom.scrape_interval_s())
                assert rate == "4s"
                empty, proven = [], 0
                for board in BOARDS:
                    values = {v.name: ALL for v in board.variables}
                    for v in board.variables:
                        selector, label = promql.label_values_query(promql.substitute(v.query, values))
                        got = prom.label_values(selector, label, started, end)
                        if not got:
                            empty.append(f"{board.uid} variable {v.name}: {v.query}")
                    for panel in board.panels:
                        for target in panel.targets:
                            expr = promql.substitute(target.expr, values, rate)
                            if _has_numbers(prom.query_range(expr, started, end, 1)):
                                proven += 1
                            else:
                                empty.append(f"{board.uid} / {panel.title}: {expr}")
                assert not empty, "no data:\n" + "\n".join(empty)
                queries = sum(len(p.targets) for b in BOARDS for p in b.panels)
                assert proven == queries
                print(f"{proven} queries of {sum(len(b.panels) for b in BOARDS)} panels returned data")
                # the variables name what ran: this node, its GPUs, the test's namespace
                gpus = {g.uuid for g in cfg.gpu_devices(NODE)}
                assert NODE in prom.label_values("hami_gpu_memory_limit_bytes", "node", started, end)
                assert gpus == set(prom.label_values("hami_gpu_memory_limit_bytes", "device_uuid", started, end))
                assert namespace in prom.label_values("hami_vgpu_memory_allocated_bytes", "namespace", started, end)
                # and the values tell what happened: one denial, one parked pod, the MIG instance "mig" keeps busy
                def last(expr: str) -> list[tuple[dict, float]]:
                    return [(s.labels, s.points[-1][1]) for s in prom.query(expr, end)]

                assert last('sum(fgpu_webhook_admissions_total{outcome="denied"})')[0][1] == 1
                assert last('sum(fgpu_scheduler_pending_pods{queue="unschedulable"})')[0][1] == 1
                [(labels, util)] = last('max_over_time(DCGM_FI_DEV_GPU_UTIL{GPU_I_PROFILE="3g.40gb"}[10s])')
                assert util > 50, labels  # the 4g.40gb instance beside it idles

                out = tmp_path / "report"
                done = subprocess.run([FGPU, "report", "--prometheus", url, "--out", str(out), "--since", "30s"],
                                      capture_output=True, text=True, timeout=180)
                assert done.returncode == 0, done.stderr
                assert "wrote" in done.stderr and "Prometheus" in done.stderr  # progress on stderr
                assert ": 0 series" not in done.stderr  # every key panel drew something
        finally:
            stop_event.set()
            for t in threads:
                t.join(10)
            stop(operator)
    pngs = sorted(out.glob("*.png"))
    assert [p.name for p in pngs] == sorted(f"{b.uid}.png" for b in BOARDS)
    assert done.stdout.split() == [str(out / f"{b.uid}.png") for b in BOARDS]
    for png in pngs:
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) > 30_000, png
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert width >= 1000 and height >= 500, (png, width, height)
    if os.environ.get("FGPU_KEEP_REPORT"):
        keep = Path(os.environ["FGPU_KEEP_REPORT"])
        keep.mkdir(parents=True, exist_ok=True)
        for png in pngs:
            shutil.copy(png, keep / png.name)
