"""The operations the performance model prices, and their validation from plain dicts (CLI, daemon)."""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

from simgpu.errors import SimgpuError

# Operand size in bytes per element; the output of integer GEMMs is int32, of the others the input dtype.
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "int8": 1, "fp8": 1}
OUTPUT_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "int8": 4, "fp8": 2}
DTYPES = tuple(DTYPE_BYTES)
OP_KINDS = ("gemm", "copy", "elementwise")


@dataclass(frozen=True)
class GemmOp:
    """C[m,n] = A[m,k] @ B[k,n], row-major like torch's `a @ b`."""

    m: int
    n: int
    k: int
    dtype: str = "bf16"

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k


@dataclass(frozen=True)
class CopyOp:
    """Device-to-device copy of `bytes` bytes (moves 2 x bytes through DRAM: read + write)."""

    bytes: int


# Input tensors an elementwise op may read. 1: unary (relu, scale, cast, layer norm's pass), 2: binary
# (add, mul), 3: ternary (addcmul, where, lerp). The DRAM sharing model scales a kernel's outstanding
# loads with this count (simgpu.perf.memory.inflight_per_sm), which holds while every input's loads fit
# in flight at full occupancy; 4 bounds what is claimed (none above 2 was measured).
ELEMENTWISE_INPUTS = (1, 2, 3, 4)


@dataclass(frozen=True)
class ElementwiseOp:
    """A bandwidth-bound kernel touching `bytes` of DRAM (reads + writes) and doing `flops` FP32 FLOPs.

    `inputs`: how many equally sized tensors it reads (writing one): 1 for a unary op, 2 for `a + b`.
    Each thread loads one element group of every input before computing, so an op with more inputs
    keeps more loads in flight per SM and takes a larger share of DRAM next to other kernels."""

    bytes: int
    flops: int = 0
    inputs: int = 1

    def __post_init__(self):
        check_inputs(self.inputs)


def check_inputs(value: object, field: str = "inputs") -> int:
    """The input-tensor count of an elementwise op, validated (SimgpuError naming `field` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value not in ELEMENTWISE_INPUTS:
        raise SimgpuError(f"got {value!r}", field=field, allowed=list(ELEMENTWISE_INPUTS))
    return int(value)


Op = GemmOp | CopyOp | ElementwiseOp


def _integral(value: object) -> object:
    """2.0 (JSON written by some tools) as 2; anything else unchanged, for the caller to judge."""
    if isinstance(value, Real) and not isinstance(value, bool | Integral) and float(value).is_integer():
        return int(value)
    return value


#: Largest size each op field may have: GEMM dimensions are 32-bit in cuBLAS; no GPU has a petabyte of memory;
#: 2^62 FLOPs is a day of a 50 PFLOPS GPU. Beyond them a size means nothing (1e308 would overflow the model).
SIZE_MAX = {"m": 2**31 - 1, "n": 2**31 - 1, "k": 2**31 - 1, "bytes": 2**50, "flops": 2**62}


def _positive_int(d: dict, key: str, where: str, *, allow_zero: bool = False) -> int:
    top = SIZE_MAX[key]
    want = f"an integer {0 if allow_zero else 1}..{top}"
    if key not in d:
        raise SimgpuError("missing", field=f"{where}{key}", allowed=[want])
    value = d[key]
    ok = isinstance(value, Integral) and not isinstance(value, bool)
    if not ok and isinstance(value, Real) and not isinstance(value, bool) and float(value).is_integer():
        value, ok = int(value), True
    if not ok or not (0 if allow_zero else 1) <= value <= top:
        shown = repr(d[key]) if len(repr(d[key])) <= 40 else repr(d[key])[:37] + "..."
        raise SimgpuError(f"got {shown}", field=f"{where}{key}", allowed=[want])
    return int(value)


def parse_op(d: dict, where: str = "") -> Op:
    """Validate one op given as a dict ({"op": "gemm", "m":.., "n":.., "k":.., "dtype":..} or
    {"op": "copy", "bytes": B} or {"op": "elementwise", "bytes": B, "flops": F, "inputs": N}; flops and
    inputs are optional, 0 and 1).

    `where` prefixes field names in errors (e.g. "clients[1].op.") so callers can say which op was bad.
    Whether the dtype runs on a given GPU is checked later, against that GPU (op_cost)."""
    if not isinstance(d, dict):
        raise SimgpuError(f"expected an object, got {type(d).__name__}", field=where.rstrip(".") or "op",
                          allowed=[f"an object with op: {' | '.join(OP_KINDS)}"])
    kind = d.get("op")
    if kind == "gemm":
        m, n, k = (_positive_int(d, key, where) for key in ("m", "n", "k"))
        dtype = d.get("dtype", "bf16")
        if not isinstance(dtype, str) or dtype.lower() not in DTYPE_BYTES:
            raise SimgpuError(f"unknown dtype {dtype!r}", field=f"{where}dtype", allowed=DTYPES)
        return GemmOp(m, n, k, dtype.lower())
    if kind == "copy":
        return CopyOp(_positive_int(d, "bytes", where))
    if kind == "elementwise":
        flops = _positive_int(d, "flops", where, allow_zero=True) if "flops" in d else 0
        inputs = check_inputs(_integral(d["inputs"]), f"{where}inputs") if "inputs" in d else 1
        return ElementwiseOp(_positive_int(d, "bytes", where), flops, inputs)
    raise SimgpuError(f"unknown op {kind!r}", field=f"{where}op", allowed=list(OP_KINDS))


def op_to_dict(op: Op) -> dict:
    """The inverse of parse_op (for profiles, logs and the daemon's wire format)."""
    if isinstance(op, GemmOp):
        return {"op": "gemm", "m": op.m, "n": op.n, "k": op.k, "dtype": op.dtype}
    if isinstance(op, CopyOp):
        return {"op": "copy", "bytes": op.bytes}
    return {"op": "elementwise", "bytes": op.bytes, "flops": op.flops, "inputs": op.inputs}
