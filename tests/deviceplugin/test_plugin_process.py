"""`fgpu-device-plugin` as a separate process against the stub kubelet: registration, re-registration,
device lists per sharing mode, Allocate's env, bad configs."""
import time
from pathlib import Path

import grpc
import pytest

from deviceplugin.api import api_pb2
from simgpu.token import verify_token

TWO_H100 = "version: v1\ngpus: [{model: H100, count: 2}]\n"
TIMESLICED = """version: v1
gpus: [{model: A100-80GB, count: 2}]
sharing:
  timeSlicing:
    failRequestsGreaterThanOne: true
    resources: [{name: nvidia.com/gpu, replicas: 4}]
"""
MPS_RENAMED = """version: v1
gpus: [{model: L4, count: 2}]
sharing:
  mps:
    renameByDefault: true
    resources: [{name: nvidia.com/gpu, replicas: 2}]
"""
FRACTIONAL = "version: v1\ngpus: [{model: A100-80GB, count: 2, sharing: fractional}]\nfractional: {splitCount: 5}\n"


def allocate(stub, ids):
    return stub.Allocate(api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(
        devices_ids=ids)]), timeout=5).container_responses[0]


def test_registers_and_lists_whole_gpus(kubelet, run_plugin):
    run_plugin(TWO_H100)
    req = kubelet.wait_registered("nvidia.com/gpu")
    assert req.version == "v1beta1"
    assert req.options.get_preferred_allocation_available
    devices = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 2)
    assert all(d.ID.startswith("GPU-") and d.health == "Healthy" for d in devices)


def test_allocate_whole_gpu_env_and_token(kubelet, run_plugin, secret_file):
    run_plugin(TWO_H100, "--daemon-socket", "/run/fgpu/daemon.sock")
    devices = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 2)
    resp = allocate(kubelet.plugin("nvidia.com/gpu"), [devices[1].ID])
    env = dict(resp.envs)
    assert env["NVIDIA_VISIBLE_DEVICES"] == devices[1].ID
    assert env["NODE_NAME"] == "node-1"
    assert env["FGPU_DAEMON_SOCKET"] == "/var/run/fgpu/daemon.sock"
    assert "CUDA_DEVICE_MEMORY_LIMIT_0" not in env
    grant = verify_token(Path(secret_file).read_bytes(), env["FGPU_CONTEXT_TOKEN"])
    assert grant.device_uuid == devices[1].ID and grant.mem_limit_bytes is None
    assert [(m.container_path, m.host_path) for m in resp.mounts] == [("/var/run/fgpu", "/run/fgpu")]


def test_reregisters_within_2s_after_kubelet_restart(kubelet, run_plugin):
    run_plugin(TWO_H100)
    kubelet.wait_registered("nvidia.com/gpu")
    t0 = time.monotonic()
    kubelet.restart()
    kubelet.wait_registered("nvidia.com/gpu", count=2, timeout=2.0)
    assert time.monotonic() - t0 <= 2.0
    kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 2)  # and the new server serves devices


def test_timeslicing_replicas_and_fail_requests_greater_than_one(kubelet, run_plugin):
    run_plugin(TIMESLICED)
    devices = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 8)
    assert {d.ID.split("::")[1] for d in devices} == {"0", "1", "2", "3"}
    stub = kubelet.plugin("nvidia.com/gpu")
    env = dict(allocate(stub, [devices[0].ID]).envs)
    assert env["NVIDIA_VISIBLE_DEVICES"] == devices[0].ID.split("::")[0]
    assert "CUDA_DEVICE_MEMORY_LIMIT_0" not in env  # time-slicing: no memory isolation (as NVIDIA's)
    with pytest.raises(grpc.RpcError) as err:
        allocate(stub, [devices[0].ID, devices[1].ID])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "failRequestsGreaterThanOne" in err.value.details()


def test_mps_renamed_shares_memory_and_sms(kubelet, run_plugin):
    run_plugin(MPS_RENAMED)
    devices = kubelet.wait_devices("nvidia.com/gpu.shared", lambda d: len(d) == 4)
    env = dict(allocate(kubelet.plugin("nvidia.com/gpu.shared"), [devices[0].ID]).envs)
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "50"
    from simgpu.catalog import get_gpu

    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{get_gpu('L4').mem_bytes // 2 // (1 << 20)}m"


def test_preferred_allocation_packs_replicas_on_one_gpu(kubelet, run_plugin):
    run_plugin(TIMESLICED)
    devices = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 8)
    ids = [d.ID for d in devices]
    gpu_a = ids[0].split("::")[0]
    # GPU A has 1 free replica left, GPU B has 4: a request for 2 must come from B alone
    available = [i for i in ids if not i.startswith(gpu_a)] + [ids[0]]
    resp = kubelet.plugin("nvidia.com/gpu").GetPreferredAllocation(api_pb2.PreferredAllocationRequest(
        container_requests=[api_pb2.ContainerPreferredAllocationRequest(
            available_deviceIDs=available, allocation_size=2)]), timeout=5)
    chosen = list(resp.container_responses[0].deviceIDs)
    assert len(chosen) == 2 and len({c.split("::")[0] for c in chosen}) == 1
    assert not chosen[0].startswith(gpu_a)


def test_prestart_and_unknown_device(kubelet, run_plugin):
    run_plugin(TWO_H100)
    devices = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 2)
    stub = kubelet.plugin("nvidia.com/gpu")
    stub.PreStartContainer(api_pb2.PreStartContainerRequest(devices_ids=[devices[0].ID]), timeout=5)
    with pytest.raises(grpc.RpcError) as err:
        allocate(stub, ["GPU-not-here"])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_fractional_standalone_lists_slots_but_cannot_allocate(kubelet, run_plugin):
    run_plugin(FRACTIONAL)
    devices = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 10)
    with pytest.raises(grpc.RpcError) as err:
        allocate(kubelet.plugin("nvidia.com/gpu"), [devices[0].ID])
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "standalone" in err.value.details()


@pytest.mark.parametrize("config,field", [
    ("version: v1\ngpus: [{model: H1000}]\n", "gpus[0].model"),
    ("version: v1\ngpus: [{model: H100}]\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 0}]}}\n",
     "sharing.timeSlicing.resources[0].replicas"),
    ("version: v2\ngpus: [{model: H100}]\n", "version"),
])
def test_bad_config_exits_2_naming_field(run_plugin, config, field):
    proc = run_plugin(config)
    assert proc.proc.wait(timeout=30) == 2
    out = proc.stop()
    assert field in out and "Traceback" not in out


def test_mig_mixed_strategy_resources(kubelet, run_plugin):
    from pathlib import Path

    run_plugin((Path(__file__).parents[2] / "deploy/examples/node-config/mig-mixed.yaml").read_text())
    assert len(kubelet.wait_devices("nvidia.com/mig-1g.10gb", lambda d: len(d) == 9)) == 9
    kubelet.wait_devices("nvidia.com/mig-3g.40gb", lambda d: len(d) == 1)
    kubelet.wait_devices("nvidia.com/mig-2g.20gb", lambda d: len(d) == 1)
    whole = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 1)
    assert whole[0].ID.startswith("GPU-")
    mig = kubelet.wait_devices("nvidia.com/mig-3g.40gb")
    env = dict(allocate(kubelet.plugin("nvidia.com/mig-3g.40gb"), [mig[0].ID]).envs)
    assert env["NVIDIA_VISIBLE_DEVICES"] == mig[0].ID and mig[0].ID.startswith("MIG-")


def test_mig_single_strategy_overloads_gpu(kubelet, run_plugin):
    run_plugin("version: v1\nmigStrategy: single\ngpus: [{model: A100-40GB, count: 2, mig: {layout: all-1g.5gb}}]\n")
    devices = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 14)
    assert all(d.ID.startswith("MIG-") for d in devices)


@pytest.mark.parametrize("extra,field", [
    (["--device-plugin-path", "/proc/fgpu-no-such-dir"], "--device-plugin-path"),
    (["--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig"),
    (["--handoff-key-file", "/nonexistent/handoff.key"], "--handoff-key-file"),
])
def test_bad_flags_exit_2_naming_flag(tmp_path, secret_file, extra, field, capsys):
    from deviceplugin.cli import main

    cfg = tmp_path / "node.yaml"
    cfg.write_text(TWO_H100 + f"tokenSecretFile: {secret_file}\n")
    args = ["--config", str(cfg), "--node-name", "n", "--device-plugin-path", str(tmp_path), *extra]
    assert main(args) == 2
    assert f"error: {field}:" in capsys.readouterr().err
