#!/usr/bin/env bash
# Print the interpreter `make` builds .venv with: the operator image's Python (the Dockerfile's PYTHON_IMAGE,
# e.g. python:3.12.x -> python3.12) where this machine has it: built as the image's is by `make python-pgo`, on PATH,
# or under pyenv, so the tests and the benchmarks run what a Helm install deploys (the operator bound ~1.3x the
# pods/s on 3.12 as on 3.11 here: docs/benchmarks.md, "Scheduler throughput"); otherwise python3, with a note on stderr.
# Override: make PYTHON=...
set -euo pipefail
cd "$(dirname "$0")/.."
want=$(sed -n 's/^ARG PYTHON_IMAGE=python:\([0-9]*\.[0-9]*\)\..*/\1/p' Dockerfile)
runs() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1; }
candidates=()
if [[ -n $want ]]; then
    # built as the image's is (PGO + LTO) by `make python-pgo`, where it was run: the interpreter that ships
    while IFS= read -r p; do candidates+=("$p"); done < <(ls -d "${FGPU_CACHE:-$HOME/.cache/fgpu}"/python/"$want".*-pgo/bin/python"$want" 2>/dev/null | sort -Vr)
    candidates+=("python$want")
    if command -v pyenv >/dev/null 2>&1; then
        root=$(pyenv root)
        while IFS= read -r p; do candidates+=("$p"); done < <(ls -d "$root"/versions/"$want".*/bin/python"$want" 2>/dev/null | sort -Vr)
    fi
fi
for c in "${candidates[@]}"; do
    if runs "$c"; then command -v "$c"; exit 0; fi
done
echo "hack/python.sh: no python$want here (the operator image's); building .venv with python3" >&2
echo python3
