"""Emulated GPU state: contexts with memory quotas, SM limits, compute shares and priorities; sharing
modes (exclusive, time-slicing, MPS, MIG); faults; an event-driven virtual clock. Pure (no gRPC)."""
from simgpu.device.engine import (
    CLIENT_FAULT_XID,
    XID_DEVICE_LOST,
    ClientSpec,
    ContextLostError,
    EmulatedDevice,
)
from simgpu.device.memory import MEMORY_MODES, Allocation, MemoryLedger
from simgpu.device.node import ENGINE_MODE, EmulatedGpu, EmulatedNode, build_gpu, build_node
from simgpu.device.sharing import ENGINE_MODES, PRIORITY_INTERFERENCE

__all__ = [
    "CLIENT_FAULT_XID", "ENGINE_MODE", "ENGINE_MODES", "MEMORY_MODES", "PRIORITY_INTERFERENCE", "XID_DEVICE_LOST",
    "Allocation", "ClientSpec", "ContextLostError", "EmulatedDevice", "EmulatedGpu", "EmulatedNode",
    "MemoryLedger", "build_gpu", "build_node",
]
