#!/usr/bin/env bash
# Regenerate the Python stubs for simgpu_daemon.proto (needs grpcio-tools, in the [test] extra).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
cd "$root"
"$py" -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. simgpu/daemon/simgpu_daemon.proto
