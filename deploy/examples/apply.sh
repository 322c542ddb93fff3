#!/usr/bin/env bash
# Apply every example pod of deploy/examples/pods and check that each meets the webhook as its
# `examples.fgpu.io/expect` annotation says: `admitted` and `unschedulable` pods are created, `denied` ones
# are refused with the webhook's reason. Exit 1 if any pod did otherwise. KUBECTL overrides the client
# (e.g. "kubectl --context kind-fgpu"); the namespace is kubectl's current one.
set -uo pipefail
KUBECTL=${KUBECTL:-kubectl}
DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/pods" && pwd)
status=0
for file in "$DIR"/*.yaml; do
  expect=$(sed -n 's/^ *examples\.fgpu\.io\/expect: *\([a-z]*\).*/\1/p' "$file")
  name=$(basename "$file" .yaml)
  if out=$($KUBECTL apply -f "$file" 2>&1); then
    if [ "$expect" = denied ]; then
      echo "UNEXPECTED $name: admitted, but it should have been denied"; status=1
    else
      echo "ok $name: created ($expect)"
    fi
  elif [ "$expect" = denied ] && grep -q "denied the request" <<<"$out"; then
    echo "ok $name: denied as expected: ${out##*denied the request: }"
  else
    echo "UNEXPECTED $name ($expect): $out"; status=1
  fi
done
exit $status
