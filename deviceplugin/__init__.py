"""fgpu's kubelet device plugin (v1beta1 gRPC) that advertises simgpu's emulated GPUs."""
