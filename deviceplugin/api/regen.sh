#!/usr/bin/env bash
# Regenerate api_pb2.py / api_pb2_grpc.py from api.proto with grpcio-tools (a test extra).
# Run from anywhere; the proto is compiled relative to the repo root so the generated stubs import each
# other as `deviceplugin.api.api_pb2`.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
cd "$root"
"$py" -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. deviceplugin/api/api.proto
echo "regenerated deviceplugin/api/api_pb2{,_grpc}.py from deviceplugin/api/api.proto"
# The stubs check the runtime at import: protobuf >= the generator's gencode version, grpcio >= the
# grpcio-tools version used here; pyproject.toml pins those minimums.
