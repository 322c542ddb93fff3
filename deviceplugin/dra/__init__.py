"""fgpu-dra: a Kubernetes DRA driver (resource.k8s.io/v1) for simgpu's emulated GPUs; docs/dra.md."""
