#!/usr/bin/env bash
# Apply every example pod of deploy/examples/pods and check that each meets the webhook as its
# `examples.fgpu.io/expect` annotation says: `admitted` and `unschedulable` pods are created, `denied` ones
# are refused with the webhook's reason (`preempted` ones are created, to be evicted later). A file whose pod
# names others in `examples.fgpu.io/after` is applied once those pods are Ready (a preemptor after its victim).
# Exit 1 if any pod did otherwise. KUBECTL overrides the client (e.g. "kubectl --context kind-fgpu"); the
# namespace is kubectl's current one. The full check (where each pod ends) is devcluster/demo.py's.
set -uo pipefail
KUBECTL=${KUBECTL:-kubectl}
DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/pods" && pwd)
status=0
for file in "$DIR"/*.yaml; do
  expect=$(sed -n 's/^ *examples\.fgpu\.io\/expect: *\([a-z]*\).*/\1/p' "$file")
  name=$(basename "$file" .yaml)
  after=$(sed -n 's/^ *examples\.fgpu\.io\/after: *\([a-z0-9,-]*\).*/\1/p' "$file")
  for dep in ${after//,/ }; do
    $KUBECTL wait --for=condition=Ready "pod/$dep" --timeout=180s >/dev/null || {
      echo "UNEXPECTED $name: $dep, which it comes after, is not Ready"; status=1; }
  done
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
