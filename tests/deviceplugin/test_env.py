"""The Allocate env contract as a workload reads it."""
import pytest

from simgpu import env
from simgpu.errors import SimgpuError


def test_memory_limit_format_round_trip():
    assert env.format_memory_limit(8 << 30) == "8192m"
    assert env.parse_memory_limit("8192m") == 8 << 30
    assert env.parse_memory_limit("2g") == 2 << 30
    assert env.parse_memory_limit("4096") == 4096


@pytest.mark.parametrize("bad", ["", "m", "12x", "-5m", "1.5g"])
def test_bad_memory_limit_names_variable(bad):
    with pytest.raises(SimgpuError) as err:
        env.parse_memory_limit(bad, field_name="CUDA_DEVICE_MEMORY_LIMIT_0")
    assert err.value.field == "CUDA_DEVICE_MEMORY_LIMIT_0"


def test_read_container_env():
    got = env.read_container_env({
        "NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "1024m",
        "CUDA_DEVICE_SM_LIMIT": "30",
        "CUDA_TASK_PRIORITY": "0",
        "FGPU_CONTEXT_TOKEN": "t0",
        "FGPU_CONTEXT_TOKEN_1": "t1",
        "FGPU_DAEMON_SOCKET": "/var/run/fgpu/daemon.sock",
    })
    assert got.visible_devices == ["GPU-a", "GPU-b"]
    assert got.tokens == ["t0", "t1"]
    assert got.memory_limits == [1 << 30, None]
    assert (got.sm_limit_pct, got.priority, got.daemon_socket) == (30, 0, "/var/run/fgpu/daemon.sock")


@pytest.mark.parametrize(("raw", "expected"), [("1.2", 1.2), ("3", 3.0), ("", None)])
def test_slo_slowdown_is_read(raw, expected):
    assert env.read_container_env({"FGPU_SLO_SLOWDOWN": raw}).slo_slowdown == expected


@pytest.mark.parametrize("bad", ["1", "0.5", "101", "nan", "inf", "fast"])
def test_bad_slo_slowdown_names_variable(bad):
    with pytest.raises(SimgpuError) as err:
        env.read_container_env({"FGPU_SLO_SLOWDOWN": bad})
    assert err.value.field == "FGPU_SLO_SLOWDOWN"


def test_out_of_range_sm_limit_names_variable():
    with pytest.raises(SimgpuError) as err:
        env.read_container_env({"CUDA_DEVICE_SM_LIMIT": "150"})
    assert err.value.field == "CUDA_DEVICE_SM_LIMIT"
