"""simgpu: a GPU emulator whose numbers match real hardware (pure library; no Kubernetes, no gRPC)."""
