"""simgpu's performance model (pure functions): GEMM, copy and elementwise kernel times from spec-sheet
facts plus a few fitted constants per architecture, the clock under power, MPS SM shares, and co-location
under time-slicing and MPS. The equations and constants are documented in simgpu/README.md."""
from simgpu.perf.colocation import (
    ClientLoad,
    colocate,
    timeslice_params,
)
from simgpu.perf.cost import OpCost, kernel_seconds, mps_visible_sms, op_cost, power_demand
from simgpu.perf.ops import DTYPES, CopyOp, ElementwiseOp, GemmOp, Op, op_to_dict, parse_op
from simgpu.perf.params import PerfParams, arch_params, params_for
from simgpu.perf.power import board_power

TIMESLICE_S = arch_params("hopper").timeslice_s
CONTEXT_SWITCH_S = arch_params("hopper").context_switch_s

__all__ = [
    "CONTEXT_SWITCH_S", "DTYPES", "TIMESLICE_S", "ClientLoad", "CopyOp", "ElementwiseOp", "GemmOp", "Op",
    "OpCost", "PerfParams", "arch_params", "board_power", "colocate", "kernel_seconds", "mps_visible_sms", "op_cost",
    "op_to_dict", "params_for", "parse_op", "power_demand", "timeslice_params",
]
