"""GEMM kernel time on n SMs at a given clock: CTA tiles, waves, split-K, a DRAM reuse model and the
alignment slow path. The library's heuristic is modelled as "pick the fastest configuration"."""
from __future__ import annotations

import math
from dataclasses import dataclass

from simgpu.perf.memory import bandwidth
from simgpu.perf.ops import DTYPE_BYTES, OUTPUT_BYTES, GemmOp
from simgpu.perf.params import PerfParams

# CTA tiles (rows x cols of C), most to least efficient (NVIDIA DL performance guide, "tile quantization").
# The 192-wide ones are cuBLAS's Hopper kernels' (nvjet, seen in the profiler on H100 and H200: 192x176 for
# 4104^3, 192x192 for 4160^3 and 16384^3, 192x128 for 4352^3): a tile that makes whole waves just past a
# size where the power-of-two tiles spill into one more (4104^3: 528 = 4 x 132 tiles instead of 561).
TILES: tuple[tuple[int, int], ...] = ((128, 256), (256, 128), (192, 192), (192, 176), (176, 192), (192, 128),
                                      (128, 192), (128, 128), (128, 64), (64, 128), (64, 64))
# fp32 runs on the CUDA cores: cuBLAS's SIMT kernels (sm80_xmma_gemm_f32f32..._ffma, cutlass simt_sgemm;
# profiler on H100 and H200) go down to 32x32 tiles (256^3: 32x32 with split-K; 512^3: 64x64; 1024^3:
# 128x64), and their pipeline is 3 stages of 8 elements of K ("tilesize32x32x8_stage3"): a fill of
# 3 x 8 x 4 bytes = 0.75 of the model's 128-byte k-steps, where the tensor-core kernels' deep prologue
# and epilogue cost `tile_fill_ksteps` (~9). Giving fp32 the tensor-core tiles and fill is what made
# small fp32 GEMMs ~26% too slow.
SIMT_TILES: tuple[tuple[int, int], ...] = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64),
                                           (64, 32), (32, 64), (32, 32))
SIMT_FILL_KSTEPS = 3 * 8 * 4 / 128
SPLIT_K: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16)
K_STEP_BYTES = 128  # one main-loop step loads 128 bytes of K per row (64 fp16, 32 tf32, 128 int8)
FULL_ALIGNMENT = 16  # bytes: TMA / vectorised loads need 16-byte aligned rows


@dataclass(frozen=True)
class GemmTime:
    seconds: float        # GPU time including launch
    compute_s: float      # tensor/FP pipe busy time
    memory_s: float       # DRAM time
    dram_bytes: float
    tile: tuple[int, int]
    split_k: int
    waves: int
    ctas: int = 0         # CTAs (tiles x split-K) of the chosen configuration


def alignment_bytes(op: GemmOp) -> int:
    """Byte alignment of the rows torch hands cuBLAS: A is m x k (rows of k), B is k x n and C is m x n
    (rows of n). m does not matter (it is never contiguous)."""
    esize = DTYPE_BYTES[op.dtype]
    best = FULL_ALIGNMENT
    for dim in (op.k, op.n):
        row = dim * esize
        best = min(best, row & -row)
    return best


def tile_efficiency(params: PerfParams, tm: float, tn: float) -> float:
    """Steady-state share of the best tile's rate; tiles at least as large as 128x256 reach it (capped)."""
    return 1.0 / (1.0 + params.small_tile_penalty * max(0.0, 128 / tm + 128 / tn - 1.5))


def tile_options(params: PerfParams, dtype: str) -> tuple[tuple[tuple[int, int], ...], float]:
    """The tiles the library may pick for `dtype`, and their per-tile fill in k-steps."""
    if dtype == "fp32":
        return SIMT_TILES, SIMT_FILL_KSTEPS
    return TILES, params.tile_fill_ksteps


def flops_per_clk_per_sm(gpu, dtype: str) -> float:
    if dtype == "fp32":
        return float(gpu.fp32_flops_per_clk_per_sm)
    return float(gpu.tensor_flops_per_clk_per_sm[dtype])


def gemm_time(gpu, params: PerfParams, op: GemmOp, sms: int, mhz: float) -> GemmTime:
    """Fastest tile/split-K configuration's time for `op` on `sms` SMs at `mhz`."""
    esize, osize = DTYPE_BYTES[op.dtype], OUTPUT_BYTES[op.dtype]
    bk = K_STEP_BYTES // esize
    per_sm = flops_per_clk_per_sm(gpu, op.dtype) * mhz * 1e6 * params.efficiency(op.dtype)
    align = alignment_bytes(op)
    slow = 1.0 if align >= FULL_ALIGNMENT else params.misaligned_efficiency.get(align, min(params.misaligned_efficiency.values()))
    bw = bandwidth(gpu.mem_bw_bytes_per_s, params.gemm_dram_efficiency, sms, params.sm_bandwidth_bytes_per_s)
    compulsory = (op.m * op.k + op.k * op.n) * esize + op.m * op.n * osize
    launch = params.launch_seconds(mhz)
    best: GemmTime | None = None
    tiles_of, fill = tile_options(params, op.dtype)
    for tm, tn in tiles_of:
        base_tiles = math.ceil(op.m / tm) * math.ceil(op.n / tn)
        step_s = 2.0 * tm * tn * bk / (per_sm * tile_efficiency(params, tm, tn) * slow)
        for split in SPLIT_K:
            if split > 1 and (base_tiles * split > 4 * sms or math.ceil(op.k / split) < 4 * bk):
                break
            tiles = base_tiles * split
            waves = math.ceil(tiles / sms)
            ksteps = math.ceil(math.ceil(op.k / split) / bk)
            compute_s = waves * (ksteps + fill) * step_s
            # Reuse: one wave's tiles share A row-panels and B column-panels through L2.
            per_wave = min(tiles, sms)
            reuse = math.sqrt(per_wave / split)
            panels = (min(reuse * tm, op.m) + min(reuse * tn, op.n)) * op.k * esize
            dram = max(compulsory, waves * panels / split + op.m * op.n * osize)
            if split > 1:
                dram += 2.0 * split * op.m * op.n * 4  # fp32 partial sums written and read back
            memory_s = dram / bw
            seconds = max(compute_s, memory_s) + launch * (2 if split > 1 else 1)
            if best is None or seconds < best.seconds:
                best = GemmTime(seconds, compute_s, memory_s, dram, (tm, tn), split, waves, tiles)
    assert best is not None
    return best
