"""The synthetic loops `simgpu run` offers: sized like the real models, valid on the GPUs they target."""
import pytest

from simgpu.catalog import get_gpu
from simgpu.errors import SimgpuError
from simgpu.perf import ElementwiseOp, GemmOp, op_cost
from simgpu.workloads import WORKLOADS, get_workload, pick_dtype, resnet, transformer


def test_transformer_block_flops_match_the_textbook_count():
    h, t = 4096, 2048
    work = transformer(hidden=h, tokens=t)
    gemm = sum(2.0 * op.m * op.n * op.k for op in work.ops if isinstance(op, GemmOp))
    # QKV (3), output projection (1), MLP (4 + 4) -> 24 t h^2; attention scores and values -> 4 t^2 h
    assert gemm == 24 * t * h * h + 4 * t * t * h
    assert work.memory_bytes > 12 * h * h * 2  # at least the block's bf16 weights


@pytest.mark.parametrize("name", sorted(WORKLOADS))
@pytest.mark.parametrize("gpu", ["H100", "A100-80GB", "T4"])
def test_every_workload_runs_on_tensor_core_gpus(name, gpu):
    spec = get_gpu(gpu)
    work = get_workload(name, pick_dtype(spec.supported_dtypes()))
    seconds = sum(op_cost(spec, op).kernel_seconds for op in work.ops)
    assert seconds > 0
    if work.flops:
        assert work.flops / seconds < spec.peak_flops("fp16") * 1.05  # never faster than the hardware


def test_transformer_residual_adds_read_two_activations():
    h, t = 1024, 512
    elementwise = [op for op in transformer(hidden=h, tokens=t).ops if isinstance(op, ElementwiseOp)]
    adds = [op for op in elementwise if op.inputs == 2]
    assert len(adds) == 2 and all(op.bytes == 3 * t * h * 2 for op in adds)  # x + branch -> x, bf16
    assert all(op.inputs == 1 for op in elementwise if op not in adds)  # norms, softmax, GELU: one tensor in


def test_resnet_is_a_mix_of_compute_and_memory_bound_kernels():
    spec = get_gpu("H100")
    active = [op_cost(spec, op).dram_active for op in resnet().ops]
    assert max(active) > 0.5 and min(active) < 0.5


def test_unknown_workload_names_the_choices():
    with pytest.raises(SimgpuError) as err:
        get_workload("bert")
    assert err.value.field == "--workload" and set(err.value.allowed) == set(WORKLOADS)


def test_dtype_falls_back_on_gpus_without_bf16():
    assert pick_dtype(get_gpu("T4").supported_dtypes()) == "fp16"
    assert pick_dtype(get_gpu("H100").supported_dtypes()) == "bf16"
    assert pick_dtype(get_gpu("P100").supported_dtypes()) == "fp32"  # no tensor cores
