#!/usr/bin/env bash
# The quick start: a local cluster with emulated GPUs, fgpu, Prometheus + Grafana and the example pods.
#
#   deploy/quickstart.sh kind up|down         (make kind-up / make kind-down)
#   deploy/quickstart.sh minikube up|down     (make minikube-up / make minikube-down)
#
# Needs docker, kubectl, helm and kind or minikube on PATH; the monitoring chart is fetched from
# prometheus-community. Settings (environment): IMAGE (fgpu:dev), CLUSTER (fgpu), KPS_VERSION (the pinned
# kube-prometheus-stack chart), SKIP_MONITORING=1, SKIP_EXAMPLES=1, SKIP_BUILD=1 (image already built).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE=${IMAGE:-fgpu:dev}
CLUSTER=${CLUSTER:-fgpu}
NAMESPACE=${NAMESPACE:-fgpu-system}
KPS_VERSION=${KPS_VERSION:-65.1.1}
DOCKER=${DOCKER:-docker}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}     # fgpu's venv (`make install`): devcluster.install runs the checks

die() { echo "quickstart: $*" >&2; exit 1; }
step() { echo "==> $*"; }

need() {
  local missing=()
  for tool in "$@"; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
  [ ${#missing[@]} -eq 0 ] || die "needs ${missing[*]} on PATH (see docs/deploy.md, kind or minikube)"
}

build_image() {
  if [ "${SKIP_BUILD:-0}" = 1 ]; then return; fi
  step "building $IMAGE"
  "$DOCKER" info >/dev/null 2>&1 || die "docker is installed but its daemon does not answer ($DOCKER info failed)"
  "$DOCKER" build -t "$IMAGE" "$ROOT"
}

install_stack() {
  local kubectl=(kubectl --context "$1") helm=(helm --kube-context "$1")
  if [ "${SKIP_MONITORING:-0}" != 1 ]; then
    # first: fgpu's ServiceMonitors need its CRDs, and its Grafana picks up fgpu's dashboards
    step "installing kube-prometheus-stack $KPS_VERSION (namespace monitoring)"
    helm repo add prometheus-community https://prometheus-community.github.io/helm-charts --force-update >/dev/null
    "${helm[@]}" upgrade --install monitoring prometheus-community/kube-prometheus-stack --version "$KPS_VERSION" \
      --namespace monitoring --create-namespace -f "$ROOT/deploy/monitoring/kube-prometheus-stack.yaml" --wait --timeout 10m
  fi
  local extra=()
  [ "${SKIP_MONITORING:-0}" = 1 ] && extra=(--set metrics.serviceMonitor.enabled=false)
  # the same install and checks as `make demo` on `make cluster-up`'s cluster (devcluster/install.py): every
  # chart pod Ready, one operator leading, the webhook reached through its Service, each node's plugin registered
  step "installing fgpu (namespace $NAMESPACE) and checking it"
  "$PYTHON" -m devcluster.install --context "$1" --namespace "$NAMESPACE" -f "$ROOT/deploy/values/quickstart.yaml" \
    --image "$IMAGE" --helm "$(command -v helm)" "${extra[@]}"
  "${kubectl[@]}" get gpunodes
  if [ "${SKIP_EXAMPLES:-0}" != 1 ]; then
    step "applying the example pods (deploy/examples/pods)"
    KUBECTL="kubectl --context $1" "$ROOT/deploy/examples/apply.sh"
  fi
  cat <<EOF

fgpu is up on $2. Next:
  kubectl --context $1 get pods -l app.kubernetes.io/part-of=fgpu-examples -o wide
  kubectl --context $1 get pod fgpu-fraction -o jsonpath='{.metadata.annotations.fgpu\\.io/assignment}'
  kubectl --context $1 describe pod cannot-fit        # fgpu's reason in the PodScheduled condition
  kubectl --context $1 -n monitoring port-forward svc/monitoring-grafana 3000:80   # admin / fgpu, folder fgpu
EOF
}

kind_up() {
  need "$DOCKER" kind kubectl helm
  if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    step "kind cluster $CLUSTER exists"
  else
    step "creating kind cluster $CLUSTER (deploy/kind/cluster.yaml)"
    kind create cluster --name "$CLUSTER" --config "$ROOT/deploy/kind/cluster.yaml" --wait 3m
  fi
  build_image
  step "loading $IMAGE into the kind nodes"
  kind load docker-image "$IMAGE" --name "$CLUSTER"
  install_stack "kind-$CLUSTER" "kind cluster $CLUSTER"
}

kind_down() {
  need kind
  kind delete cluster --name "$CLUSTER"
}

minikube_up() {
  need "$DOCKER" minikube kubectl helm
  if minikube -p "$CLUSTER" status >/dev/null 2>&1; then
    step "minikube profile $CLUSTER is running"
  else
    step "starting minikube profile $CLUSTER (4 nodes)"
    minikube start -p "$CLUSTER" --nodes 4 --driver docker --cpus 2 --memory 3g
  fi
  step "labelling the workers with their node pools (deploy/minikube/nodes.txt)"
  while read -r node pool; do
    case "$node" in ''|'#'*) continue ;; esac
    node=${node/#fgpu/$CLUSTER}
    kubectl --context "$CLUSTER" label node "$node" "fgpu.io/node-pool=$pool" --overwrite
  done < "$ROOT/deploy/minikube/nodes.txt"
  build_image
  step "loading $IMAGE into the minikube nodes"
  minikube -p "$CLUSTER" image load "$IMAGE"
  install_stack "$CLUSTER" "minikube profile $CLUSTER"
}

minikube_down() {
  need minikube
  minikube delete -p "$CLUSTER"
}

case "${1:-}/${2:-}" in
  kind/up) kind_up ;;
  kind/down) kind_down ;;
  minikube/up) minikube_up ;;
  minikube/down) minikube_down ;;
  *) die "usage: $0 kind|minikube up|down" ;;
esac
