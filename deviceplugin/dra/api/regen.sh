#!/usr/bin/env bash
# Regenerate {dra,pluginregistration}_pb2{,_grpc}.py from the .proto files here with grpcio-tools (a test
# extra). The protos are compiled relative to the repo root so the stubs import as deviceplugin.dra.api.*.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
cd "$root"
"$py" -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. \
  deviceplugin/dra/api/dra.proto deviceplugin/dra/api/pluginregistration.proto
echo "regenerated deviceplugin/dra/api/{dra,pluginregistration}_pb2{,_grpc}.py"
