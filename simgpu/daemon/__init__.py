"""The simgpu node daemon: serves a node's emulated GPUs (simgpu.device) to workloads over gRPC on a unix
socket, maps virtual time to real time, and exports DCGM-style Prometheus metrics. The runtime
(simgpu.daemon.runtime) holds the logic; service.py and server.py are the gRPC shell."""
