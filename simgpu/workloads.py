"""Synthetic training/inference loops that demo pods run against the node daemon (`simgpu run`).

Each workload is one iteration's kernels, sized like the real thing: a transformer block's GEMMs
(QKV, attention scores and values, output projection, MLP) plus its elementwise kernels; a ResNet-50-like
mix of convolutions as implicit GEMMs plus batch-norm/ReLU; and a memory-bound copy/elementwise loop.
"""
from __future__ import annotations

from dataclasses import dataclass

from simgpu.errors import SimgpuError
from simgpu.perf import CopyOp, ElementwiseOp, GemmOp, Op


@dataclass(frozen=True)
class Workload:
    name: str
    ops: tuple[Op, ...]  # one iteration
    memory_bytes: int  # what the loop allocates up front (weights + activations)

    @property
    def flops(self) -> float:
        return sum(2.0 * op.m * op.n * op.k for op in self.ops if isinstance(op, GemmOp)) + \
            sum(op.flops for op in self.ops if isinstance(op, ElementwiseOp))

    @property
    def dram_bytes(self) -> int:
        return sum(2 * op.bytes if isinstance(op, CopyOp) else op.bytes for op in self.ops if not isinstance(op, GemmOp))


def transformer(hidden: int = 4096, tokens: int = 4096, dtype: str = "bf16") -> Workload:
    """One transformer block's forward pass on `tokens` tokens (attention as two GEMMs over the sequence).

    Elementwise bytes are DRAM reads + writes: layer norm, softmax and GELU read one tensor and write
    one; the residual adds read two activations and write one (3 x act, `inputs=2`, which is what
    sets how much DRAM they take next to another MPS client)."""
    h, t, b = hidden, tokens, 2  # bf16/fp16 bytes per element
    act = t * h * b
    ops: list[Op] = [
        ElementwiseOp(bytes=2 * act, flops=8 * t * h),  # layer norm
        GemmOp(t, 3 * h, h, dtype),  # QKV projection
        GemmOp(t, t, h, dtype),  # attention scores (all heads together)
        ElementwiseOp(bytes=2 * t * t * b, flops=5 * t * t),  # softmax
        GemmOp(t, h, t, dtype),  # attention x values
        GemmOp(t, h, h, dtype),  # output projection
        ElementwiseOp(bytes=3 * act, inputs=2),  # residual add: read x and the branch output, write x
        ElementwiseOp(bytes=2 * act, flops=8 * t * h),  # layer norm
        GemmOp(t, 4 * h, h, dtype),  # MLP up
        ElementwiseOp(bytes=8 * act, flops=8 * t * 4 * h),  # GELU
        GemmOp(t, h, 4 * h, dtype),  # MLP down
        ElementwiseOp(bytes=3 * act, inputs=2),  # residual add: read x and the branch output, write x
    ]
    weights = 12 * h * h * b
    return Workload("transformer", tuple(ops), weights + 16 * act + t * t * b)


def resnet(batch: int = 64, dtype: str = "fp16") -> Workload:
    """A ResNet-50-like mix: one bottleneck block per stage as implicit GEMMs (M = N*H*W, N = out
    channels, K = in channels x kernel area), each followed by batch-norm + ReLU."""
    ops: list[Op] = []
    memory = 0
    for size, ch in ((56, 64), (28, 128), (14, 256), (7, 512)):
        m = batch * size * size
        for n, k in ((ch, 4 * ch), (ch, 9 * ch), (4 * ch, ch)):  # 1x1 reduce, 3x3, 1x1 expand
            ops.append(GemmOp(m, n, k, dtype))
            ops.append(ElementwiseOp(bytes=2 * m * n * 2, flops=4 * m * n))  # BN + ReLU
            memory += m * n * 2 + n * k * 2
    return Workload("resnet", tuple(ops), memory)


def memory_bound(nbytes: int = 1 << 30) -> Workload:
    """A bandwidth-bound loop: copy a buffer, then an elementwise pass over it."""
    return Workload("memory", (CopyOp(nbytes), ElementwiseOp(bytes=2 * nbytes, flops=nbytes // 2)), 2 * nbytes)


WORKLOADS = {"transformer": transformer, "resnet": resnet, "memory": memory_bound}


def pick_dtype(supported: list[str], preferred: tuple[str, ...] = ("bf16", "fp16", "fp32")) -> str:
    """The first of `preferred` the device runs (bf16 needs Ampere or newer; fp16 runs from Volta)."""
    return next((d for d in preferred if d in supported), "fp32")


def get_workload(name: str, dtype: str | None = None) -> Workload:
    """A workload by name; `dtype` overrides its GEMM dtype (bf16 for transformer, fp16 for resnet)."""
    if name not in WORKLOADS:
        raise SimgpuError(f"unknown workload {name!r}", field="--workload", allowed=sorted(WORKLOADS))
    if dtype is None or name == "memory":
        return WORKLOADS[name]()
    return WORKLOADS[name](dtype=dtype)
