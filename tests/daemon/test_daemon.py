"""The node daemon as a real subprocess on a temp unix socket, driven through simgpu.client and the CLI."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from simgpu.catalog import get_gpu
from simgpu.client import DaemonClient, DaemonError, pb
from simgpu.device import ContextLostError
from simgpu.errors import OutOfMemoryError, SimgpuError
from simgpu.perf import ElementwiseOp, GemmOp
from simgpu.token import Grant, issue_token, load_or_create_secret

REPO = Path(__file__).resolve().parents[2]
GIB = 1 << 30
GEMM = GemmOp(8192, 8192, 8192)  # ~1.5 ms of emulated (and, at dilation 1, wall) time
CONFIG = """version: v1
nodeName: test-node
tokenSecretFile: {secret}
gpus:
  - model: H100          # gpu0: quotas and pods; gpu1: faults
    count: 2
    sharing: fractional
  - model: H100          # gpu2
    sharing: mps
    replicas: 4
  - model: A100-80GB     # gpu3: MIG instances
    mig:
      layout: [3g.40gb, 4g.40gb]
fractional:
  resources:
    gpu: nvidia.com/vgpu
"""


def simgpu(*args, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "simgpu.cli", *args], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=60, **kw)


def wait_for(predicate, timeout=10.0, step=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


class Daemon:
    """A daemon subprocess on `config` (a node config with a {secret} placeholder), metrics on a free port."""

    def __init__(self, tmp: Path, config: str = CONFIG, args: tuple[str, ...] = ()):
        self.secret_file = tmp / "secret"
        self.config = tmp / "node.yaml"
        self.config.write_text(config.format(secret=self.secret_file))
        self.socket = str(tmp / "run" / "daemon.sock")
        self.log = open(tmp / "daemon.log", "w+")  # noqa: SIM115 - lives as long as the daemon
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "simgpu.cli", "daemon", "--config", str(self.config), "--socket", self.socket,
             "--metrics-port", "0", *args], cwd=REPO, stderr=self.log, text=True)
        assert wait_for(lambda: os.path.exists(self.socket) or self.proc.poll() is not None, 20), "no socket"
        assert self.proc.poll() is None, self.read_log()
        assert wait_for(lambda: "metrics on" in self.read_log(), 10), self.read_log()
        self.metrics_url = re.search(r"metrics on (\S+)", self.read_log()).group(1)
        self.secret = load_or_create_secret(self.secret_file)
        with DaemonClient(self.socket) as client:
            self.devices = client.devices()
        self.gpus = [d["uuid"] for d in self.devices if not d["parent"]]
        self.migs = [d["uuid"] for d in self.devices if d["parent"]]

    def read_log(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def token(self, device: str, **grant) -> str:
        return issue_token(self.secret, Grant(device_uuid=device, **grant))

    def scrape(self) -> str:
        return urllib.request.urlopen(self.metrics_url, timeout=5).read().decode()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("daemon"))
    yield d
    d.stop()
    assert not os.path.exists(d.socket), "the daemon left its socket behind"


@pytest.fixture
def client(daemon):
    with DaemonClient(daemon.socket) as c:
        yield c


def test_device_list_has_gpus_and_mig_instances(daemon):
    assert len(daemon.gpus) == 4 and len(daemon.migs) == 2
    assert all(d["healthy"] and d["xid"] == 0 for d in daemon.devices)
    assert {d["profile"] for d in daemon.devices if d["parent"]} == {"3g.40gb", "4g.40gb"}


def test_over_quota_client_gets_oom_while_its_neighbour_keeps_running(daemon):
    gpu = daemon.gpus[0]
    with DaemonClient(daemon.socket) as a, DaemonClient(daemon.socket) as b:
        greedy = a.open_context(daemon.token(gpu, mem_limit_bytes=8 * GIB, pod_name="greedy"))
        neighbour = b.open_context(daemon.token(gpu, mem_limit_bytes=8 * GIB, pod_name="neighbour"))
        neighbour.malloc(6 * GIB)
        for _ in range(20):
            neighbour.launch(GEMM)
        greedy.malloc(6 * GIB)
        with pytest.raises(OutOfMemoryError) as err:
            greedy.malloc(3 * GIB)
        assert (err.value.quota, err.value.used, err.value.requested) == (8 * GIB, 6 * GIB, 3 * GIB)
        assert "out of memory" in str(err.value)
        done = neighbour.synchronize()
        assert done.completed == 20
        assert neighbour.usage()["device_bytes"] == 6 * GIB and neighbour.usage()["alive"]
        assert greedy.usage()["device_bytes"] == 6 * GIB  # the refused call took nothing


def test_forged_and_foreign_tokens_are_rejected_and_the_daemon_lives_on(daemon, client):
    good = daemon.token(daemon.gpus[0], mem_limit_bytes=GIB)
    payload, mac = good.split(".")
    wider = issue_token(b"x" * 32, Grant(device_uuid=daemon.gpus[0]))  # another secret
    forged = wider.split(".")[0] + "." + mac  # a bigger grant with the real token's signature
    for token in (wider, forged, payload, "garbage", ""):
        with pytest.raises(DaemonError) as err:
            client.open_context(token)
        assert err.value.code == "UNAUTHENTICATED" and err.value.field == "token"
    assert client.devices() == daemon.devices
    unknown = daemon.token("GPU-not-on-this-node")
    with pytest.raises(DaemonError) as err:
        client.open_context(unknown)
    assert err.value.field == "device_uuid"


def test_bad_requests_get_errors_never_a_crash(daemon, client):
    ctx = client.open_context(daemon.token(daemon.gpus[0], mem_limit_bytes=GIB))
    with pytest.raises(DaemonError) as err:
        ctx.malloc(-5)
    assert err.value.field == "bytes"
    with pytest.raises(DaemonError) as err:
        ctx.free(424242)
    assert err.value.field == "handle"
    ctx.launch({"op": "gemm", "m": 64, "n": 64, "k": 64, "dtype": "fp8"})  # H100 has fp8: fine
    ctx.launch(pb.Op(kind="gemm", m=0, n=1, k=1))  # unchecked by the SDK: the daemon must refuse it
    with pytest.raises(DaemonError) as err:  # an asynchronous launch error surfaces at synchronize
        ctx.synchronize()
    assert err.value.field == "m"
    ctx.synchronize()  # and only once
    assert daemon.proc.poll() is None


def test_elementwise_input_counts_cross_the_wire_and_bad_ones_are_refused(daemon, client):
    ctx = client.open_context(daemon.token(daemon.gpus[0], mem_limit_bytes=GIB))
    ctx.launch(ElementwiseOp(2**20, inputs=2))
    ctx.launch({"op": "elementwise", "bytes": 2**20, "inputs": 4})
    assert ctx.synchronize().completed == 2
    ctx.launch(pb.Op(kind="elementwise", bytes=2**20, inputs=7))  # unchecked by the SDK
    with pytest.raises(DaemonError) as err:
        ctx.synchronize()
    assert (err.value.code, err.value.field, err.value.allowed) == ("INVALID_ARGUMENT", "inputs", ["1", "2", "3", "4"])
    assert ctx.synchronize().completed == 2 and daemon.proc.poll() is None


def test_disconnect_frees_the_contexts_memory(daemon):
    gpu = daemon.gpus[0]
    holder = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
from simgpu.catalog import get_gpu
from simgpu.client import DaemonClient
ctx = DaemonClient({daemon.socket!r}).open_context({daemon.token(gpu, pod_name='holder')!r})
ctx.malloc(70 << 30)
print('ready', flush=True)
time.sleep(60)
"""], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with DaemonClient(daemon.socket) as c:
            probe = c.open_context(daemon.token(gpu, pod_name="probe"))
            with pytest.raises(OutOfMemoryError, match="physical"):
                probe.malloc(40 * GIB)
            holder.kill()  # a crash: no goodbye
            holder.wait()

            def fits():
                try:
                    probe.free(probe.malloc(40 * GIB))
                    return True
                except OutOfMemoryError:
                    return False

            assert wait_for(fits, timeout=5, step=0.05)
    finally:
        holder.kill()


def test_mps_fault_kills_co_runners_but_time_slicing_neighbours_survive(daemon):
    with DaemonClient(daemon.socket) as a, DaemonClient(daemon.socket) as b:
        bad = a.open_context(daemon.token(daemon.gpus[2], sm_limit_pct=50))
        victim = b.open_context(daemon.token(daemon.gpus[2], sm_limit_pct=50))
        assert victim.info.sharing == "mps" and victim.info.visible_sms == 66
        for _ in range(50):
            victim.launch(GEMM)
        bad.inject_fault(31)
        with pytest.raises(ContextLostError, match="MPS co-runner"):
            victim.synchronize()
    with DaemonClient(daemon.socket) as a, DaemonClient(daemon.socket) as b:
        bad = a.open_context(daemon.token(daemon.gpus[0]))
        fine = b.open_context(daemon.token(daemon.gpus[0]))
        for _ in range(5):
            fine.launch(GEMM)
        bad.inject_fault(31)
        assert fine.synchronize().completed == 5
        with pytest.raises(ContextLostError):
            bad.malloc(1)


def test_fault_reaches_health_watchers_within_a_second_and_blocks_new_contexts(daemon):
    gpu = daemon.gpus[1]
    events = []
    with DaemonClient(daemon.socket) as watcher:
        stream = watcher.watch_health()

        def follow():
            for devices in stream:
                state = next(d for d in devices if d["uuid"] == gpu)
                events.append((time.monotonic(), state["healthy"], state["xid"]))

        threading.Thread(target=follow, daemon=True).start()
        assert wait_for(lambda: events, 5)
        result = simgpu("fault", "--socket", daemon.socket, "--gpu", gpu, "--xid", "79")
        t_fault = time.monotonic()
        assert result.returncode == 0, result.stderr
        assert '"healthy": false' in result.stdout
        assert wait_for(lambda: any(not healthy for _, healthy, _ in events), 2)
        t_seen = next(t for t, healthy, _ in events if not healthy)
        assert t_seen - t_fault <= 1.0
        assert next(x for _, healthy, x in events if not healthy) == 79
        with DaemonClient(daemon.socket) as c, pytest.raises(DaemonError) as err:
            c.open_context(daemon.token(gpu))
        assert err.value.code == "UNAVAILABLE" and "XID 79" in str(err.value)
        assert simgpu("fault", "--socket", daemon.socket, "--gpu", gpu, "--clear").returncode == 0
        assert wait_for(lambda: events[-1][1], 2)
        with DaemonClient(daemon.socket) as c:
            c.open_context(daemon.token(gpu)).close()


def test_fault_cli_bad_input_exits_2(daemon):
    result = simgpu("fault", "--socket", daemon.socket, "--gpu", "GPU-nope", "--xid", "79")
    assert result.returncode == 2 and "GPU-nope" in result.stderr and "Traceback" not in result.stderr
    result = simgpu("fault", "--socket", daemon.socket, "--gpu", daemon.gpus[1], "--xid", "0")
    assert result.returncode == 2 and "--xid" in result.stderr


def test_mig_fault_only_marks_that_instance(daemon, client):
    mig = daemon.migs[0]
    devices = client.set_fault(mig, 94)
    state = {d["uuid"]: d["healthy"] for d in devices}
    assert state[mig] is False and state[daemon.migs[1]] is True
    ctx = client.open_context(daemon.token(daemon.migs[1]))  # the other instance still works
    assert ctx.info.sms == 56  # A100 4g = 4 compute slices of 14 SMs
    ctx.close()
    client.clear_fault(mig)


def test_metrics_endpoint_exports_dcgm_and_pod_series(daemon):
    gpu = daemon.gpus[0]
    with DaemonClient(daemon.socket) as c:
        ctx = c.open_context(daemon.token(gpu, mem_limit_bytes=4 * GIB, pod_namespace="team-a", pod_name="trainer",
                                          container="main"))
        ctx.malloc(2 * GIB)
        for _ in range(400):
            ctx.launch(GEMM)

        def scrape():
            return urllib.request.urlopen(daemon.metrics_url, timeout=5).read().decode()

        pod = f'UUID="{gpu}",device="nvidia0",gpu="0",modelName="H100-SXM5-80GB",namespace="team-a",pod="trainer"'
        assert wait_for(lambda: re.search(r"fgpu_pod_gpu_memory_used_bytes\{[^}]*pod=\"trainer\"[^}]*\} 2\.147483648e\+09",
                                          scrape()), timeout=5, step=0.2), scrape()
        text = scrape()
        fb = re.search(r'DCGM_FI_DEV_FB_USED\{[^}]*UUID="' + gpu + r'"[^}]*\} (\S+)', text)
        assert fb and float(fb.group(1)) == 2048.0  # MiB, as dcgm-exporter reports it
        assert 'Hostname="test-node"' in text and 'GPU_I_PROFILE="3g.40gb"' in text
        util = re.search(r'DCGM_FI_DEV_GPU_UTIL\{[^}]*UUID="' + gpu + r'"[^}]*\} (\S+)', text)
        assert util and 0.0 < float(util.group(1)) <= 100.0  # the GEMMs kept it busy
        assert re.search(r"fgpu_pod_kernels_total\{[^}]*" + re.escape('container="main"'), text)
        # the only pod on gpu0 right now: dcgm-exporter-style pod labels on the GPU's own series too
        assert re.search(r'DCGM_FI_DEV_FB_USED\{[^}]*UUID="' + gpu + r'"[^}]*pod="trainer"', text)
        assert pod.split(",")[0] in text
        ctx.close()


def test_simgpu_run_reads_the_allocate_env(daemon):
    env = dict(os.environ, FGPU_DAEMON_SOCKET=daemon.socket,
               FGPU_CONTEXT_TOKEN=daemon.token(daemon.gpus[0], mem_limit_bytes=16 * GIB),
               NVIDIA_VISIBLE_DEVICES=daemon.gpus[0], CUDA_DEVICE_MEMORY_LIMIT_0="16384m")
    result = simgpu("run", "--workload", "transformer", "--iterations", "3", "--json", env=env)
    assert result.returncode == 0, result.stderr
    last = json.loads(result.stdout.strip().splitlines()[-1])
    assert last["iterations"] == 3
    # emulated time includes this process's own host overhead (as on a real GPU), so only bound it:
    # never faster than the H100's bf16 peak, and the kernels ran at full speed while they had the GPU
    assert 0 < last["tflops"] <= get_gpu("H100").peak_flops("bf16") / 1e12
    assert last["progress_rate"] == pytest.approx(1.0, abs=0.02)
    no_token = {k: v for k, v in env.items() if k != "FGPU_CONTEXT_TOKEN"}
    result = simgpu("run", "--iterations", "1", env=no_token)
    assert result.returncode == 2 and "FGPU_CONTEXT_TOKEN" in result.stderr


def test_daemon_rejects_a_bad_config_with_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v1\ngpus: [{model: H900}]\n")
    result = simgpu("daemon", "--config", str(bad), "--socket", str(tmp_path / "s.sock"))
    assert result.returncode == 2 and "gpus[0].model" in result.stderr and "Traceback" not in result.stderr


def test_client_reports_a_missing_daemon_clearly(tmp_path):
    with pytest.raises(SimgpuError) as err:
        DaemonClient(str(tmp_path / "none.sock"), timeout=0.5).open_context("x.y")
    assert err.value.field == "socket"


def test_simgpu_run_reconnects_when_its_daemon_restarts(tmp_path):
    """A DaemonSet roll restarts the node daemon under running workloads: every context is gone, the signed
    grant is not. The workload says so in one line, waits for the new daemon, opens a new context with the
    same grant and carries on; its iteration count and emulated time continue."""
    first = Daemon(tmp_path)
    env = dict(os.environ, FGPU_DAEMON_SOCKET=first.socket,
               FGPU_CONTEXT_TOKEN=first.token(first.gpus[0], mem_limit_bytes=8 * GIB))
    run = subprocess.Popen([sys.executable, "-m", "simgpu.cli", "run", "--workload", "resnet", "--duration", "8",
                            "--report-every", "0.3", "--json"], cwd=REPO, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert run.stdout.readline().startswith("{")  # running against the first daemon
        first.stop()
        second = Daemon(tmp_path)  # same config, same token secret: the same devices and the grant verifies
        try:
            out, err = run.communicate(timeout=60)
        finally:
            second.stop()
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err
    assert "lost the node daemon" in err and "reconnected after" in err, err
    assert "Traceback" not in err
    reports = [json.loads(line) for line in out.splitlines()]
    assert [r["iterations"] for r in reports] == sorted(r["iterations"] for r in reports)
    assert reports[-1]["virtual_s"] > reports[0]["virtual_s"]


def test_simgpu_run_no_reconnect_exits_with_one_line(tmp_path):
    daemon = Daemon(tmp_path)
    env = dict(os.environ, FGPU_DAEMON_SOCKET=daemon.socket,
               FGPU_CONTEXT_TOKEN=daemon.token(daemon.gpus[0], mem_limit_bytes=8 * GIB))
    run = subprocess.Popen([sys.executable, "-m", "simgpu.cli", "run", "--workload", "resnet", "--duration", "30",
                            "--report-every", "0.3", "--json", "--no-reconnect"], cwd=REPO, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert run.stdout.readline().startswith("{")
        daemon.stop()
        _, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode != 0 and "socket" in err and "Traceback" not in err, err
